package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// With an integrity keyring, a cluster state written straight into etcd —
// a well-formed switch of the primary to a replica at a higher epoch, but
// unsigned or signed with another key — is not adopted: writes keep going
// to the signed primary, the alarm names the integrity failure. A state
// signed with the keyring is adopted.
func TestFollowRefusesForgedRoute(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("route-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })

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
	waitFor(t, "signed epoch 3 applied", func() bool { return h.srv.Epochs()["main"] == 3 })
	rw := h.db("rw", "", nil)
	if id := serverID(t, rw); id != 1 {
		t.Fatalf("rw on server_id %d, want 1", id)
	}

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
	forged := sandboxState(h.c, 4, 1, 0, 2) // node2 primary, epoch 4
	unsigned, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := topo.NewKeyring([]byte("attacker-key-0123456789abc"))
	foreign, err := other.Sign(topo.IntegrityClusterState, unsigned)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []struct {
		name, want string
		raw        []byte
	}{
		{"unsigned", "carries no MAC", unsigned},
		{"foreign key", "not in this process's keyring", foreign},
	} {
		putRaw(b.raw)
		waitFor(t, b.name+": alarm in the registration", func() bool {
			reg, ok := readRegistration(t, st, keys.Proxy("test-proxy"))
			return ok && strings.Contains(reg.StateAlarms["main"], "integrity check failed") && strings.Contains(reg.StateAlarms["main"], b.want)
		})
		if e := h.srv.Epochs()["main"]; e != 3 {
			t.Fatalf("%s: epoch %d adopted, want 3 (the signed state)", b.name, e)
		}
		if id := serverID(t, rw); id != 1 {
			t.Fatalf("%s: rw routed to server_id %d, want 1: the forged primary was adopted", b.name, id)
		}
		if n := counterValue(t, h, "switchyard_cluster_state_rejected_total"); n < float64(i+1) {
			t.Fatalf("%s: switchyard_cluster_state_rejected_total = %v, want ≥ %d", b.name, n, i+1)
		}
	}

	putState(t, st, key, forged) // the same state, signed with the keyring
	waitFor(t, "signed epoch 4 adopted", func() bool { return h.srv.Epochs()["main"] == 4 })
	waitFor(t, "rw on the new primary", func() bool { return serverID(t, h.db("rw", "", nil)) == 2 })
}
