package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

func readFloor(t *testing.T, st topo.Store) (topo.PromotionFloor, bool) {
	t.Helper()
	var f topo.PromotionFloor
	_, err := topo.GetJSON(context.Background(), st, testKeys.Floor(sandbox.ClusterName), &f)
	if err != nil {
		return f, false
	}
	return f, true
}

// TestFloorSurvivesControllerRestart: the promotion floor follows the
// primary's position, lives in the store, and protects a failover decided
// by a controller that never saw the old primary: node3 is shut down, the
// primary writes on, the controller stops; node1 and node2 die, node3
// comes back alone and a new controller (auto mode, empty memory) starts.
// It must refuse to promote node3, naming the floor.
func TestFloorSurvivesControllerRestart(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	_, stopA := runController(t, autoConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	p := rootDB(t, c, 0)
	mustExec(t, p, "CREATE TABLE sbtest.floor_t (id INT PRIMARY KEY)")
	ctx := context.Background()
	if err := c.StopNode(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 200; i++ {
		mustExec(t, p, "INSERT INTO sbtest.floor_t VALUES (?)", i)
	}
	var pos string
	if err := p.QueryRow("SELECT @@gtid_current_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, ok := readFloor(t, st)
		if ok && f.GTID == pos {
			t.Logf("floor %s recorded (primary %s, epoch %d, leader %s)", f.GTID, f.Primary, f.Epoch, f.Leader)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("floor %+v never reached the primary's position %s", f, pos)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopA()
	if err := c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	if err := c.KillNode(1); err != nil {
		t.Fatal(err)
	}
	if err := c.StartNode(ctx, 2); err != nil {
		t.Fatal(err)
	}
	runController(t, autoConfig(c), st, "ctl-b")
	ev := waitEvent(t, st, 20*time.Second, "behind the promotion floor "+pos)
	t.Logf("new controller refused: %s", firstLine(ev.Message))
	time.Sleep(10 * testInterval)
	if s, _ := readState(t, st, sandbox.ClusterName); s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("stale node3 promoted by a controller that never saw node1: primary %s epoch %d", s.Primary, s.Epoch)
	}
	var n3 string
	if err := rootDB(t, c, 2).QueryRow("SELECT @@gtid_current_pos").Scan(&n3); err != nil {
		t.Fatal(err)
	}
	have, _ := gtid.ParseMariaDB(n3)
	floor, _ := gtid.ParseMariaDB(pos)
	_, missing := analysis.BehindFloor("mariadb", have, floor)
	t.Logf("node3 at %s, floor %s: %d transactions behind, not promoted", n3, pos, missing)
	if missing < 200 {
		t.Errorf("node3 %d behind, want at least the 200 inserts", missing)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// TestFloorReset: a floor standing above anything the cluster holds (the
// cluster was rebuilt; here written straight into the store) refuses every
// failover candidate; `ack --reset-floor --reason` sets it to the live
// primary's position, recording what it replaced, and it follows the
// primary again.
func TestFloorReset(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := readFloor(t, st); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no floor recorded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := st.Get(ctx, testKeys.Floor(sandbox.ClusterName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.PutJSON(ctx, st, testKeys.Floor(sandbox.ClusterName), topo.PromotionFloor{Cluster: sandbox.ClusterName, GTID: "0-1-999999"}, kv.Version); err != nil {
		t.Fatal(err)
	}
	req, err := RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{PlanOnly: true, By: "test"})
	if req.Plan == nil || req.Plan.Candidate != "" || !strings.Contains(analysisText(req), "behind the promotion floor 0-1-999999") {
		t.Fatalf("plan under a floor above everything: err %v plan %+v", err, req.Plan)
	}
	if _, err := RequestFloorReset(ctx, st, testKeys, sandbox.ClusterName, "", "test"); err == nil {
		t.Fatal("floor reset without a reason accepted")
	}
	req, err = RequestFloorReset(ctx, st, testKeys, sandbox.ClusterName, "test: cluster rebuilt", "test")
	if err != nil {
		t.Fatalf("floor reset: %v (%s)", err, req.Message)
	}
	t.Logf("reset: %s", req.Message)
	f, _ := readFloor(t, st)
	var pos string
	if err := rootDB(t, c, 0).QueryRow("SELECT @@gtid_current_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if f.Lowered != "0-1-999999" || f.ResetAt == nil || !strings.Contains(f.ResetReason, "cluster rebuilt") {
		t.Fatalf("floor after reset: %+v", f)
	}
	mustExec(t, rootDB(t, c, 0), "CREATE TABLE sbtest.reset_t (id INT PRIMARY KEY)")
	if err := rootDB(t, c, 0).QueryRow("SELECT @@gtid_current_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	// The floor follows the primary: it reaches pos (the primary may have
	// committed more since, heartbeats included, so at least pos).
	want, err := gtid.ParseMariaDB(pos)
	if err != nil {
		t.Fatal(err)
	}
	follows := func(f topo.PromotionFloor) bool {
		got, err := gtid.ParseMariaDB(f.GTID)
		return err == nil && got.Contains(want) && f.GTID != "0-1-999999"
	}
	for f, _ = readFloor(t, st); !follows(f); f, _ = readFloor(t, st) {
		if time.Now().After(deadline) {
			t.Fatalf("floor %s does not follow the primary's %s after the reset", f.GTID, pos)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitEvent(t, st, 5*time.Second, "promotion floor of main reset from 0-1-999999")
}

func analysisText(req topo.Request) string {
	var b strings.Builder
	for _, c := range req.Plan.Candidates {
		b.WriteString(c.Node + ": " + c.Rejected + "\n")
	}
	return b.String()
}
