package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestSignedRequests: with an integrity keyring, requests written through
// the controller's builders are signed and executed; a request put straight
// into etcd without the key (a forged failover or maintenance off), a
// signed one changed after signing, or a signed one copied under another id
// is refused without being acted on: result refused, an event
// request_integrity, and the document signed by the leader.
func TestSignedRequests(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("request-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	st := topotest.NewStore(t)
	cfg := unreachableConfig(t)
	s0 := withNodes(cfg, topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Phase: topo.PhaseStable})
	b, err := topo.EncodeState(&s0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(context.Background(), testKeys.ClusterState("main"), b); err != nil {
		t.Fatal(err)
	}
	start(t, cfg, st, "ctl-a")
	waitMem(t, st, "the leader's state", func(s topo.ClusterState) bool { return s.Leader == "ctl-a" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Signed, through the builder: executed.
	if _, err := RequestMaintenance(ctx, st, testKeys, "main", MaintenanceOptions{On: true, Reason: "kernel upgrade", By: "op@test"}); err != nil {
		t.Fatalf("signed maintenance on: %v", err)
	}
	waitMem(t, st, "maintenance on", func(s topo.ClusterState) bool { return s.Maintenance != nil })

	put := func(id string, doc []byte) {
		t.Helper()
		if _, err := st.Create(ctx, testKeys.Request("main", id), doc); err != nil {
			t.Fatal(err)
		}
	}
	refusedWith := func(what, id string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := LookupRequest(ctx, st, testKeys, "main", id)
			if err == nil && r.State == topo.RequestFailed {
				if r.Result != topo.RequestResultRefused || !strings.Contains(r.Message, "did not verify, so it was not acted on") {
					t.Fatalf("%s: finished %+v; want refused, the MAC did not verify", what, r)
				}
				return
			}
			if err == nil && r.State != topo.RequestPending {
				t.Fatalf("%s: request %+v was acted on", what, r)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not refused within 20s: %+v %v", what, r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	now := time.Now().UTC()

	// Forged: written without the key.
	off := topo.Request{ID: newRequestID(now), Kind: topo.RequestMaintenance, Cluster: "main", Action: "off", By: "mallory",
		State: topo.RequestPending, CreatedAt: now, UpdatedAt: now}
	raw, _ := json.Marshal(off)
	put(off.ID, raw)
	refusedWith("forged maintenance off", off.ID)
	fo := topo.Request{ID: newRequestID(now), Kind: topo.RequestFailover, Cluster: "main", Target: "node2", Force: true, Reason: "x",
		By: "mallory", State: topo.RequestPending, CreatedAt: now, UpdatedAt: now}
	raw, _ = json.Marshal(fo)
	put(fo.ID, raw)
	refusedWith("forged failover", fo.ID)

	// Signed, then changed: the MAC does not match.
	off.ID = newRequestID(now)
	signed, err := topo.EncodeRequest(&off)
	if err != nil {
		t.Fatal(err)
	}
	put(off.ID, bytes.Replace(signed, []byte(`"mallory"`), []byte(`"op@test"`), 1))
	refusedWith("signed then changed", off.ID)

	// Signed, copied under another id.
	put(newRequestID(now), signed)
	kvs, err := st.List(ctx, testKeys.Requests("main"))
	if err != nil {
		t.Fatal(err)
	}
	copied := ""
	for _, kv := range kvs {
		if bytes.Equal(kv.Value, signed) {
			copied = kv.Key[strings.LastIndex(kv.Key, "/")+1:]
		}
	}
	refusedWith("signed copy under another id", copied)

	// Nothing was acted on: the maintenance is still on, there is no
	// failover, and every refusal has its event.
	s := waitMem(t, st, "the state", func(topo.ClusterState) bool { return true })
	if s.Maintenance == nil || s.Primary != "node1" || s.Epoch != 3 {
		t.Fatalf("state after the refused requests: maintenance %+v primary %s epoch %d", s.Maintenance, s.Primary, s.Epoch)
	}
	evs, err := st.List(ctx, testKeys.Events("main"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range evs {
		var e topo.Event
		if json.Unmarshal(kv.Value, &e) == nil && e.Code == "request_integrity" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d request_integrity events; want 4", n)
	}

	// The leader's answer is signed: it verifies.
	kv, err := st.Get(ctx, testKeys.Request("main", fo.ID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Verify(topo.IntegrityOperatorRequest, kv.Value); err != nil {
		t.Fatalf("the refusal is not signed: %v", err)
	}

	// Signed maintenance off, through the builder: executed.
	if _, err := RequestMaintenance(ctx, st, testKeys, "main", MaintenanceOptions{By: "op@test"}); err != nil {
		t.Fatalf("signed maintenance off: %v", err)
	}
	waitMem(t, st, "maintenance off", func(s topo.ClusterState) bool { return s.Maintenance == nil })
}
