package topo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestPutJSON(t *testing.T) {
	ctx := context.Background()
	s := topo.NewMemory()
	defer s.Close()
	k := topo.Keys{Prefix: "/sy"}
	st := topo.ClusterState{Cluster: "main", Primary: "db1", Epoch: 1, Phase: topo.PhaseStable}
	v, err := topo.PutJSON(ctx, s, k.ClusterState("main"), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.PutJSON(ctx, s, k.ClusterState("main"), st, 0); !errors.Is(err, topo.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	st.Epoch = 2
	v2, err := topo.PutJSON(ctx, s, k.ClusterState("main"), st, v)
	if err != nil {
		t.Fatal(err)
	}
	var got topo.ClusterState
	gv, err := topo.GetJSON(ctx, s, k.ClusterState("main"), &got)
	if err != nil || gv != v2 || got.Epoch != 2 || got.Primary != "db1" {
		t.Fatalf("GetJSON = %+v v%d %v", got, gv, err)
	}
	if _, err := topo.PutJSON(ctx, s, k.ClusterState("main"), st, v); !errors.Is(err, topo.ErrBadVersion) {
		t.Fatalf("stale put: %v, want ErrBadVersion", err)
	}
	if _, err := topo.PutJSON(ctx, s, k.ClusterState("x"), func() {}, 0); err == nil {
		t.Fatal("encoded a func")
	}

	// Through a leader that has lost leadership.
	l, err := s.Campaign(ctx, k.Election(), "ctl-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.PutJSON(ctx, l, k.ClusterState("main"), st, v2); err != nil {
		t.Fatalf("leader put: %v", err)
	}
	s.(*topo.Memory).ExpireLeases()
	if _, err := topo.PutJSON(ctx, l, k.ClusterState("other"), st, 0); !errors.Is(err, topo.ErrNotLeader) {
		t.Fatalf("put by lost leader: %v, want ErrNotLeader", err)
	}
}

func TestWatchClusterStates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := topo.NewMemory()
	defer s.Close()
	k := topo.Keys{Prefix: "/sy"}
	put := func(key string, v any) {
		t.Helper()
		if _, err := topo.PutJSON(ctx, s, key, v, 0); err != nil {
			t.Fatal(err)
		}
	}
	put(k.ClusterState("b"), topo.ClusterState{Cluster: "b", Primary: "b1", Epoch: 3})
	put(k.ClusterState("a"), topo.ClusterState{Cluster: "a", Primary: "a1", Epoch: 1})
	put(k.Request("a", "r1"), topo.Request{ID: "r1"})

	initial, ch, err := topo.WatchClusterStates(ctx, s, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(initial) != 2 || initial[0].Cluster != "a" || initial[1].Cluster != "b" ||
		initial[0].State.Primary != "a1" || initial[1].State.Epoch != 3 {
		t.Fatalf("initial = %+v, want a then b (requests ignored)", initial)
	}

	put(k.Request("a", "r2"), topo.Request{ID: "r2"})
	if _, err := s.Create(ctx, k.ClusterState("bad"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	put(k.ClusterState("c"), topo.ClusterState{Cluster: "c", Primary: "c1"})
	if err := s.Delete(ctx, k.ClusterState("b"), 0); err != nil {
		t.Fatal(err)
	}

	next := func() topo.ClusterStateEvent {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return topo.ClusterStateEvent{}
	}
	if ev := next(); ev.Cluster != "bad" || ev.Err == nil || ev.State != nil {
		t.Fatalf("event = %+v, want a decode error for cluster bad", ev)
	}
	if ev := next(); ev.Cluster != "c" || ev.Err != nil || ev.State == nil || ev.State.Primary != "c1" {
		t.Fatalf("event = %+v, want state of c (the watch goes on after a bad document)", ev)
	}
	if ev := next(); ev.Cluster != "b" || ev.State != nil || ev.Err != nil || ev.Version == 0 {
		t.Fatalf("event = %+v, want deletion of b", ev)
	}
	cancel()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}
