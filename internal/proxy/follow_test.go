package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

func putState(t *testing.T, st topo.Store, key string, cs topo.ClusterState) {
	t.Helper()
	b, err := topo.EncodeState(&cs) // as the controller writes it (signed when a keyring is set)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := st.Get(ctx, key)
	switch {
	case errors.Is(err, topo.ErrNotFound):
		_, err = st.Create(ctx, key, b)
	case err == nil:
		_, err = st.Update(ctx, key, b, kv.Version)
	}
	if err != nil {
		t.Fatalf("write %s: %v", key, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readRegistration(t *testing.T, st topo.Store, key string) (topo.ProxyRegistration, bool) {
	var reg topo.ProxyRegistration
	_, err := topo.GetJSON(context.Background(), st, key, &reg)
	return reg, err == nil
}

// Follow against a real (embedded) etcd and a real sandbox: state documents
// drive routing, other keys are ignored, a bad document keeps the last good
// routing, the registration carries the applied epochs and disappears when
// Follow ends.
func TestFollowEtcd(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.route("main").snap.Store(nil) // routing must come from the store
	st := topotest.NewStore(t)
	keys := topo.Keys{Prefix: "/switchyard"}
	putState(t, st, keys.ClusterState("main"), sandboxState(h.c, 1, 0, 1, 2))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, st, keys, h.srv) }()
	defer func() {
		cancel()
		<-done
	}()

	waitFor(t, "epoch 1 applied", func() bool { return h.srv.Epochs()["main"] == 1 })
	if id := newSessionServerID(t, h, "rw"); id != 1 {
		t.Fatalf("rw on server_id %d", id)
	}
	waitFor(t, "registration with epoch 1", func() bool {
		reg, ok := readRegistration(t, st, keys.Proxy("test-proxy"))
		return ok && reg.Epochs["main"] == 1 && len(reg.Listeners) == 2
	})
	// The registration counts open sessions per listener (every listener
	// named, idle ones with 0), refreshed while sessions come and go.
	held, err := h.db("rw", "", nil).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "registration with one rw session", func() bool {
		reg, ok := readRegistration(t, st, keys.Proxy("test-proxy"))
		n, named := reg.Sessions["ro"]
		return ok && reg.Sessions["rw"] >= 1 && named && n == 0
	})
	_ = held.Close()

	// Unrelated keys under the clusters prefix are ignored.
	if _, err := st.Create(ctx, keys.Request("main", "r1"), []byte(`{"kind":"switchover"}`)); err != nil {
		t.Fatal(err)
	}
	// A new state moves the primary.
	putState(t, st, keys.ClusterState("main"), sandboxState(h.c, 2, 1, 2))
	waitFor(t, "epoch 2 applied", func() bool { return h.srv.Epochs()["main"] == 2 })
	if id := newSessionServerID(t, h, "rw"); id != 2 {
		t.Fatalf("rw on server_id %d after epoch 2, want 2", id)
	}
	waitFor(t, "registration with epoch 2", func() bool {
		reg, ok := readRegistration(t, st, keys.Proxy("test-proxy"))
		return ok && reg.Epochs["main"] == 2
	})
	// A document that does not decode keeps the last good routing.
	kv, err := st.Get(ctx, keys.ClusterState("main"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(ctx, keys.ClusterState("main"), []byte("{not json"), kv.Version); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if e := h.srv.Epochs()["main"]; e != 2 {
		t.Fatalf("epoch %d after a bad document", e)
	}
	if id := newSessionServerID(t, h, "rw"); id != 2 {
		t.Fatalf("rw on server_id %d after a bad document", id)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after cancel")
	}
	done <- nil
	if _, ok := readRegistration(t, st, keys.Proxy("test-proxy")); ok {
		t.Fatal("registration still present after Follow ended")
	}
}

// A lost lease (process cut off longer than the TTL) is registered again.
func TestFollowReRegistersAfterLeaseLoss(t *testing.T) {
	cfg := &config.Config{
		Clusters:  []config.Cluster{{Name: "c", Nodes: []config.Node{{Name: "n1", Address: "127.0.0.1:1"}}}},
		Listeners: []config.Listener{{Name: "rw", Address: "127.0.0.1:0", Cluster: "c", Role: "primary"}},
	}
	cfg.ApplyDefaults()
	srv, err := New(Options{Config: cfg, ID: "p1", Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st := topo.NewMemory()
	mem := st.(*topo.Memory)
	keys := topo.Keys{Prefix: "/sy"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = Follow(ctx, st, keys, srv); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "registration", func() bool { _, ok := readRegistration(t, st, keys.Proxy("p1")); return ok })
	mem.ExpireLeases()
	putState(t, st, keys.ClusterState("c"), topo.ClusterState{Cluster: "c", Primary: "n1", Epoch: 7,
		Nodes: []topo.NodeState{{Name: "n1", Address: "127.0.0.1:1"}}})
	waitFor(t, "re-registration with epoch 7", func() bool {
		reg, ok := readRegistration(t, st, keys.Proxy("p1"))
		return ok && reg.Epochs["c"] == 7
	})
}

// Cluster states written straight into the store that fail validation —
// empty, garbage, an epoch going back, the primary dropped without a
// failover, an unknown primary — are not applied: sessions keep working on
// the last good routing, the registration carries the alarm and the metrics
// count it; a valid state clears the alarm.
func TestFollowRefusesInvalidStates(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.route("main").snap.Store(nil)
	st := topotest.NewStore(t)
	keys := topo.Keys{Prefix: "/switchyard"}
	key := keys.ClusterState("main")
	putState(t, st, key, sandboxState(h.c, 3, 0, 1, 2))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, st, keys, h.srv) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "epoch 3 applied", func() bool { return h.srv.Epochs()["main"] == 3 })
	rw := h.db("rw", "", nil)
	ro := h.db("ro", "", nil)

	putRaw := func(b []byte) {
		t.Helper()
		kv, err := st.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Update(ctx, key, b, kv.Version); err != nil {
			t.Fatal(err)
		}
	}
	enc := func(cs topo.ClusterState) []byte {
		b, err := json.Marshal(cs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	regress := sandboxState(h.c, 2, 0, 1, 2)
	drop := sandboxState(h.c, 4, 0, 1, 2)
	drop.Primary = ""
	unknown := sandboxState(h.c, 4, 0, 1, 2)
	unknown.Primary = "node9"
	bad := []struct {
		name, want string
		raw        []byte
	}{
		{"empty", "empty", nil},
		{"garbage", "does not decode", []byte("{not json")},
		{"a primary-dropping write", "no nodes", []byte(`{"cluster":"main","primary":"","epoch":4,"phase":"stable","nodes":[]}`)},
		{"epoch regress", "lower than the applied epoch", enc(regress)},
		{"primary dropped", "drops primary node1", enc(drop)},
		{"unknown primary", "node9", enc(unknown)},
	}
	for i, b := range bad {
		putRaw(b.raw)
		waitFor(t, b.name+": alarm in the registration", func() bool {
			reg, ok := readRegistration(t, st, keys.Proxy("test-proxy"))
			return ok && strings.Contains(reg.StateAlarms["main"], b.want)
		})
		if e := h.srv.Epochs()["main"]; e != 3 {
			t.Fatalf("%s: epoch %d applied, want 3 (last good)", b.name, e)
		}
		if id := serverID(t, rw); id != 1 {
			t.Fatalf("%s: rw on server_id %d, want 1", b.name, id)
		}
		if id := serverID(t, ro); id != 2 && id != 3 {
			t.Fatalf("%s: ro on server_id %d, want a replica", b.name, id)
		}
		if n := counterValue(t, h, "switchyard_cluster_state_rejected_total"); n < float64(i+1) {
			t.Fatalf("%s: switchyard_cluster_state_rejected_total = %v, want ≥ %d", b.name, n, i+1)
		}
	}
	if g := counterValue(t, h, "switchyard_cluster_state_alarm"); g != 1 {
		t.Fatalf("switchyard_cluster_state_alarm = %v while refused, want 1", g)
	}
	putState(t, st, key, sandboxState(h.c, 4, 1, 2))
	// The alarm stays visible (stateAlarmHold) and says it was superseded.
	waitFor(t, "epoch 4 applied and the alarm superseded", func() bool {
		reg, ok := readRegistration(t, st, keys.Proxy("test-proxy"))
		return ok && reg.Epochs["main"] == 4 && strings.Contains(reg.StateAlarms["main"], "a valid state has been applied since")
	})
	if g := counterValue(t, h, "switchyard_cluster_state_alarm"); g != 1 {
		t.Fatalf("switchyard_cluster_state_alarm = %v right after a valid state, want 1 (held)", g)
	}
}
