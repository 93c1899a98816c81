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

// TestReplayedRequestRefused: with an integrity keyring, a signed request
// that was carried out and is written back as pending (over its finished
// document, or after it was deleted) is refused as a replay, also by a new
// leader after the first one stopped; a signed request older than
// RequestMaxAge is refused; a fresh signed request is still carried out.
func TestReplayedRequestRefused(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("replay-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	eps := topotest.StartEtcd(t)
	st := topotest.Connect(t, eps)
	cfg := unreachableConfig(t)
	s0 := withNodes(cfg, topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Phase: topo.PhaseStable})
	b, err := topo.EncodeState(&s0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := st.Create(ctx, testKeys.ClusterState("main"), b); err != nil {
		t.Fatal(err)
	}
	_, stopA := start(t, cfg, st, "ctl-a")
	waitMem(t, st, "the leader's state", func(s topo.ClusterState) bool { return s.Leader == "ctl-a" })

	on := func() {
		t.Helper()
		if _, err := RequestMaintenance(ctx, st, testKeys, "main", MaintenanceOptions{On: true, Reason: "kernel upgrade", By: "op@test"}); err != nil {
			t.Fatalf("signed maintenance on: %v", err)
		}
		waitMem(t, st, "maintenance on", func(s topo.ClusterState) bool { return s.Maintenance != nil })
	}
	finishedAs := func(what, id string, want func(topo.Request) bool) topo.Request {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := LookupRequest(ctx, st, testKeys, "main", id)
			if err == nil && (r.State == topo.RequestDone || r.State == topo.RequestFailed) && r.UpdatedAt.After(r.CreatedAt) {
				if !want(r) {
					t.Fatalf("%s: finished %+v", what, r)
				}
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not finished within 20s: %+v %v", what, r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	refusedAsReplay := func(r topo.Request) bool {
		return r.State == topo.RequestFailed && r.Result == topo.RequestResultRefused &&
			strings.Contains(r.Message, "is a replay, so it was not acted on")
	}
	on()

	// The CLI's signed "maintenance off", carried out.
	now := time.Now().UTC()
	off := topo.Request{ID: newRequestID(now), Kind: topo.RequestMaintenance, Cluster: "main", Action: "off", By: "op@test",
		State: topo.RequestPending, CreatedAt: now, UpdatedAt: now}
	offDoc, err := topo.EncodeRequest(&off)
	if err != nil {
		t.Fatal(err)
	}
	key := testKeys.Request("main", off.ID)
	if _, err := st.Create(ctx, key, offDoc); err != nil {
		t.Fatal(err)
	}
	finishedAs("signed maintenance off", off.ID, func(r topo.Request) bool { return r.State == topo.RequestDone })
	waitMem(t, st, "maintenance off", func(s topo.ClusterState) bool { return s.Maintenance == nil })
	on()

	// Written back over its finished document.
	kv, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(ctx, key, offDoc, kv.Version); err != nil {
		t.Fatal(err)
	}
	finishedAs("replay over the finished request", off.ID, refusedAsReplay)
	// Written back after it was deleted.
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, key, offDoc); err != nil {
		t.Fatal(err)
	}
	finishedAs("replay after the delete", off.ID, refusedAsReplay)

	// A new leader (a fresh process memory) knows it from the store's record.
	stopA()
	start(t, cfg, st, "ctl-b")
	waitMem(t, st, "the new leader's state", func(s topo.ClusterState) bool { return s.Leader == "ctl-b" })
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, key, offDoc); err != nil {
		t.Fatal(err)
	}
	r := finishedAs("replay to a new leader", off.ID, refusedAsReplay)
	if !strings.Contains(r.Message, "already handled by controller ctl-a") {
		t.Fatalf("replay to a new leader: %q; want it named as handled by ctl-a", r.Message)
	}

	// Signed but older than the bound.
	old := now.Add(-2 * RequestMaxAge)
	stale := topo.Request{ID: newRequestID(old), Kind: topo.RequestMaintenance, Cluster: "main", Action: "off", By: "op@test",
		State: topo.RequestPending, CreatedAt: old, UpdatedAt: old}
	staleDoc, err := topo.EncodeRequest(&stale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, testKeys.Request("main", stale.ID), staleDoc); err != nil {
		t.Fatal(err)
	}
	r = finishedAs("an old signed request", stale.ID, refusedAsReplay)
	if !strings.Contains(r.Message, "older than 5m0s are refused") {
		t.Fatalf("an old signed request: %q; want the age bound named", r.Message)
	}

	// Nothing was acted on; each refusal has its event and the record verifies.
	s := waitMem(t, st, "the state", func(topo.ClusterState) bool { return true })
	if s.Maintenance == nil {
		t.Fatal("a replayed maintenance off was carried out")
	}
	evs, err := st.List(ctx, testKeys.Events("main"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range evs {
		var e topo.Event
		if json.Unmarshal(kv.Value, &e) == nil && e.Code == "request_integrity" && strings.Contains(e.Message, "replay") {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d request_integrity events for replays; want 4", n)
	}
	hkv, err := st.Get(ctx, testKeys.HandledRequests())
	if err != nil {
		t.Fatal(err)
	}
	h, err := topo.DecodeHandledRequests(hkv.Value)
	if err != nil {
		t.Fatalf("the record of handled requests: %v", err)
	}
	if _, ok := h.IDs[off.ID]; !ok || h.Counter < 3 {
		t.Fatalf("the record of handled requests: %+v", h)
	}

	// A fresh signed request is carried out.
	if _, err := RequestMaintenance(ctx, st, testKeys, "main", MaintenanceOptions{By: "op@test"}); err != nil {
		t.Fatalf("fresh signed maintenance off: %v", err)
	}
	waitMem(t, st, "maintenance off", func(s topo.ClusterState) bool { return s.Maintenance == nil })
}
