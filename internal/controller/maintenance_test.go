package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestMaintenance: cluster and node maintenance through the leader — a
// second on with another reason is refused unless replaced, off when off
// fails with "maintenance is not on", the primary cannot be put in node
// maintenance, a node in maintenance is in the drained document, both
// expire by themselves with an event, and the history lists every change.
func TestMaintenance(t *testing.T) {
	st := topo.NewMemory()
	cfg := unreachableConfig(t)
	putState(t, st, withNodes(cfg, topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Phase: topo.PhaseStable}))
	start(t, cfg, st, "ctl-a")
	waitMem(t, st, "the leader's state", func(s topo.ClusterState) bool { return s.Leader == "ctl-a" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := func(o MaintenanceOptions) (topo.Request, error) {
		o.By = "op@test"
		return RequestMaintenance(ctx, st, testKeys, "main", o)
	}
	refused := func(what string, o MaintenanceOptions, want string) {
		t.Helper()
		r, err := req(o)
		if !errors.Is(err, ErrRequestFailed) || !strings.Contains(r.Message, want) {
			t.Fatalf("%s: %v %q; want refused with %q", what, err, r.Message, want)
		}
	}

	// Cluster scope.
	if _, err := req(MaintenanceOptions{On: true, Reason: "kernel upgrade"}); err != nil {
		t.Fatal(err)
	}
	refused("second on, other reason", MaintenanceOptions{On: true, Reason: "other"}, `maintenance is already on for cluster main`)
	if r, err := req(MaintenanceOptions{On: true, Reason: "other", Replace: true, For: 300 * time.Millisecond}); err != nil || !strings.Contains(r.Message, "until ") {
		t.Fatalf("--replace --for: %v %q", err, r.Message)
	}
	s := waitMem(t, st, "maintenance expired", func(s topo.ClusterState) bool { return s.Maintenance == nil })
	if s.Maintenance != nil {
		t.Fatal("cluster maintenance did not expire")
	}
	// The expiry's event is written after the state: wait for it, so the
	// history below has a known order.
	for until := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if evs, err := MaintenanceHistory(ctx, st, testKeys, "main", 0); err == nil && len(evs) == 3 {
			break
		}
		if time.Now().After(until) {
			t.Fatal("the cluster maintenance expiry was not recorded within 10s")
		}
	}
	refused("off when off", MaintenanceOptions{}, "maintenance is not on for cluster main")

	// Node scope.
	refused("the primary", MaintenanceOptions{On: true, Node: "node1", Reason: "disk"}, "node1 is the primary of cluster main: move the primary role away first")
	refused("an unknown node", MaintenanceOptions{On: true, Node: "node9", Reason: "disk"}, "node9 is not a node of cluster main (its nodes: node1, node2, node3)")
	refused("node off when off", MaintenanceOptions{Node: "node2"}, "maintenance is not on for node node2")
	if _, err := req(MaintenanceOptions{On: true, Node: "node2", Reason: "disk swap"}); err != nil {
		t.Fatal(err)
	}
	d, _, err := drainedNodes(ctx, st, testKeys, "main")
	if rec, ok := d.Nodes["node2"]; err != nil || !ok || !rec.Maintenance || rec.Reason != "disk swap" || rec.Until != nil {
		t.Fatalf("drained document: %+v %v", d, err)
	}
	refused("node second on", MaintenanceOptions{On: true, Node: "node2", Reason: "other"}, "node node2 of cluster main is already in maintenance")
	if _, err := req(MaintenanceOptions{Node: "node2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := req(MaintenanceOptions{On: true, Node: "node3", Reason: "memory test", For: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, _, _ := drainedNodes(ctx, st, testKeys, "main")
		if _, ok := d.Nodes["node3"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node maintenance did not expire within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The history, oldest first.
	var evs []topo.Event
	for time.Now().Before(deadline) {
		if evs, err = MaintenanceHistory(ctx, st, testKeys, "main", 0); err == nil && len(evs) == 7 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Code+" "+e.Node)
	}
	want := []string{"maintenance_on ", "maintenance_on ", "maintenance_expired ", "maintenance_on node2", "maintenance_off node2",
		"maintenance_on node3", "maintenance_expired node3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("history:\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(evs[0].Message, "op@test") || !strings.Contains(evs[0].Message, "kernel upgrade") {
		t.Fatalf("first history entry: %+v", evs[0])
	}
	if _, err := MaintenanceHistory(ctx, st, testKeys, "mian", 0); !errors.Is(err, ErrUnknownCluster) {
		t.Fatalf("history of a mistyped cluster: %v", err)
	}

	// An explicit drain replaces a node maintenance: it no longer expires.
	if _, err := req(MaintenanceOptions{On: true, Node: "node3", Reason: "bios", For: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := Drain(ctx, st, testKeys, "main", "node3", DrainOptions{By: "op@test", Reason: "retire"}); err != nil {
		t.Fatal(err)
	}
	d, _, err = drainedNodes(ctx, st, testKeys, "main")
	if rec := d.Nodes["node3"]; err != nil || rec.Maintenance || rec.Until != nil || rec.Reason != "retire" {
		t.Fatalf("node3 after drain over maintenance: %+v %v", rec, err)
	}
}
