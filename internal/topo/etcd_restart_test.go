package topo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestCampaignDropsOwnStaleKey: a process that restarts with the identity of
// one that died leading (its election key still held by a live lease of
// 60 s) becomes leader at once instead of waiting for that lease to expire;
// a stale key of another identity still blocks it.
func TestCampaignDropsOwnStaleKey(t *testing.T) {
	endpoints := topotest.StartEtcd(t)
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	const el = "/restart/election"
	// What a leader killed with -9 leaves behind: its key, as
	// concurrency.Election writes it (prefix/lease-id), on a live lease.
	stale := func(id string) clientv3.LeaseID {
		g, err := admin.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Put(ctx, fmt.Sprintf("%s/%x", el, g.ID), id, clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		return g.ID
	}

	other := stale("ctl-other")
	st := topotest.Connect(t, endpoints)
	cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	if l, err := st.Campaign(cctx, el, "ctl-1"); err == nil {
		cancel()
		l.Resign(ctx)
		t.Fatal("won an election whose key belongs to another live identity")
	}
	cancel()
	if _, err := admin.Revoke(ctx, other); err != nil {
		t.Fatal(err)
	}

	own := stale("ctl-1")
	start := time.Now()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := st.Campaign(cctx, el, "ctl-1")
	if err != nil {
		t.Fatalf("campaign with a stale key of the same identity: %v", err)
	}
	defer l.Resign(ctx)
	took := time.Since(start)
	t.Logf("restarted identity leads %s after campaigning (stale lease had 60 s left)", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("leading took %s: the stale key was waited out", took)
	}
	if ttl, err := admin.TimeToLive(ctx, own); err != nil || ttl.TTL > 0 {
		t.Fatalf("stale lease still alive (ttl %d s, %v); want it revoked", ttl.TTL, err)
	}
	leader, err := st.Leader(ctx, el)
	if err != nil || leader != "ctl-1" {
		t.Fatalf("leader %q, %v; want ctl-1", leader, err)
	}
}
