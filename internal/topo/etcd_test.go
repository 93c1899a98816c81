package topo_test

import (
	"context"
	"errors"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/storetest"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestEtcd runs the conformance suite against a real embedded etcd; every
// subtest gets its own client, as separate processes would have.
func TestEtcd(t *testing.T) {
	endpoints := topotest.StartEtcd(t)
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	storetest.Run(t, func(t *testing.T) topo.Store {
		return expiringStore{Store: topotest.Connect(t, endpoints), admin: admin, t: t}
	})
	t.Run("GuardRefusesOldLeader", func(t *testing.T) {
		// The leader's writes are refused by etcd itself once its election
		// key is gone, before it has noticed (Done not yet checked).
		ctx := context.Background()
		a, b := topotest.Connect(t, endpoints), topotest.Connect(t, endpoints)
		const el = "/guard/election"
		la, err := a.Campaign(ctx, el, "ctl-a")
		if err != nil {
			t.Fatal(err)
		}
		v, err := la.Create(ctx, "/guard/state", []byte("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Delete(ctx, el+"/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Campaign(ctx, el, "ctl-b")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Resign(ctx)
		_, err = topo.UpdateSkippingDone(ctx, la, "/guard/state", []byte("stale leader"), v)
		if !errors.Is(err, topo.ErrNotLeader) {
			t.Fatalf("old leader's guarded update: %v, want ErrNotLeader", err)
		}
		if _, err := lb.Update(ctx, "/guard/state", []byte("b"), v); err != nil {
			t.Fatalf("new leader's update: %v", err)
		}
		kv, err := b.Get(ctx, "/guard/state")
		if err != nil || string(kv.Value) != "b" {
			t.Fatalf("state = %q, %v; want the new leader's write only", kv.Value, err)
		}
		select {
		case <-la.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("old leader's Done not closed")
		}
	})
	t.Run("ErrorsAreWrapped", func(t *testing.T) {
		s := topotest.Connect(t, endpoints)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.Get(ctx, "/x/key")
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "/x/key") {
			t.Fatalf("error = %v, want context.Canceled naming the key", err)
		}
	})
}

// expiringStore makes every lease on the server expire by revoking it from
// another client, which is what the server does when keepalives stop.
// Revocation is one lease at a time, newest first: a campaigner then never
// sees an older campaigner's key go while its own key still exists, as it
// could not if all leases expired at once.
type expiringStore struct {
	topo.Store
	admin *clientv3.Client
	t     *testing.T
}

func (s expiringStore) ExpireLeases() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.admin.Leases(ctx)
	if err != nil {
		s.t.Fatalf("list leases: %v", err)
	}
	leases := resp.Leases
	sort.Slice(leases, func(i, j int) bool { return leases[i].ID > leases[j].ID })
	for _, l := range leases {
		if _, err := s.admin.Revoke(ctx, l.ID); err != nil {
			s.t.Logf("revoke lease %x: %v", l.ID, err)
		}
	}
}

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		in      []string
		want    string
		wantErr string
	}{
		{in: []string{"127.0.0.1:2379"}, want: "http://127.0.0.1:2379"},
		{in: []string{"http://etcd-1:2379", " etcd-2:2379 "}, want: "http://etcd-1:2379 http://etcd-2:2379"},
		{in: []string{"a:1,b:2", ""}, want: "http://a:1 http://b:2"},
		{in: []string{"http://[::1]:2379/"}, want: "http://[::1]:2379"},
		{in: nil, want: ""},
		{in: []string{"etcd-1"}, wantErr: "want host:port"},
		{in: []string{"https://etcd-1:2379"}, want: "https://etcd-1:2379"},
		{in: []string{"unix://etcd-1:2379"}, wantErr: `scheme "unix" not supported`},
		{in: []string{"http://etcd-1:2379/v3"}, wantErr: "unexpected path"},
		{in: []string{":2379"}, wantErr: "want host:port"},
	}
	for _, tc := range tests {
		got, err := topo.ParseEndpoints(tc.in...)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseEndpoints(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("ParseEndpoints(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestStartEmbeddedPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peer := free.Addr().String()
	free.Close()
	_, err = topo.StartEmbedded(topo.EmbeddedOptions{
		DataDir:       t.TempDir(),
		ClientAddress: ln.Addr().String(),
		PeerAddress:   peer,
	})
	if err == nil {
		t.Fatal("started on a port in use")
	}
	for _, want := range []string{"etcd.embedded.client_address", ln.Addr().String(), "in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStartEmbeddedRejectsNonLoopback(t *testing.T) {
	_, err := topo.StartEmbedded(topo.EmbeddedOptions{
		DataDir:       t.TempDir(),
		ClientAddress: "0.0.0.0:2379",
		PeerAddress:   "127.0.0.1:2380",
	})
	if err == nil || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "etcd.embedded.client_address") {
		t.Fatalf("error = %v, want a loopback error naming etcd.embedded.client_address", err)
	}
}

func TestNewEtcdUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	start := time.Now()
	_, err = topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{addr}, DialTimeout: 500 * time.Millisecond})
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "etcd.dial_timeout") {
		t.Errorf("error %q should name the endpoint and etcd.dial_timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("NewEtcd took %s with a 500ms dial timeout", d)
	}
}
