package controller

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestRestartedPrimaryMadeWritable: in manual mode (no failover) the primary
// is restarted; it comes back read-only (the restart-safe default) and the
// controller makes it writable again because it is still the primary of the
// epoch and no other node is writable. A primary an operator sets read-only
// while it stays up is left alone in manual mode.
func TestRestartedPrimaryMadeWritable(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)

	ctx := context.Background()
	if err := c.StopNode(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, st, 10*time.Second, "primary unreachable", func(s topo.ClusterState) bool {
		n := s.Node("node1")
		return n != nil && !n.Probe.Reachable
	})
	if err := c.StartNode(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, st, 10*time.Second, "came back read-only after a restart")
	deadline := time.Now().Add(5 * time.Second)
	for queryInt(t, rootDB(t, c, 0), "SELECT @@read_only") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("restarted primary still read_only=1")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := waitState(t, st, 5*time.Second, "stable", func(s topo.ClusterState) bool { return s.Phase == topo.PhaseStable })
	if s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("after restart: primary %q epoch %d, want node1 at epoch 1", s.Primary, s.Epoch)
	}

	// An operator's read_only=ON on a live primary is not undone in manual mode.
	mustExec(t, rootDB(t, c, 0), "SET GLOBAL read_only=1")
	time.Sleep(6 * testInterval)
	if ro := queryInt(t, rootDB(t, c, 0), "SELECT @@read_only"); ro != 1 {
		t.Fatalf("read_only set by an operator on the live primary was undone (read_only=%d)", ro)
	}
}

// TestWritableReplicaFenced: a replica made writable (read_only=OFF while
// replicating) is not served and is fenced back to read-only.
func TestWritableReplicaFenced(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	mustExec(t, rootDB(t, c, 1), "SET GLOBAL read_only=0")
	waitEvent(t, st, 10*time.Second, "fenced node2")
	deadline := time.Now().Add(5 * time.Second)
	for queryInt(t, rootDB(t, c, 1), "SELECT @@read_only") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("writable replica node2 was not fenced")
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitState(t, st, 10*time.Second, "node2 serving again", func(s topo.ClusterState) bool {
		n := s.Node("node2")
		return n != nil && n.Serving
	})
}

// TestSwitchoverLeavesStoppedReplicaStopped: a replica an operator stopped
// is repointed to the new primary by a switchover but its replication stays
// stopped (the switchover does not undo STOP SLAVE).
func TestSwitchoverLeavesStoppedReplicaStopped(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	mustExec(t, rootDB(t, c, 2), "STOP SLAVE")
	waitState(t, st, 20*testInterval, "node3 not serving", func(s topo.ClusterState) bool { return !s.Node("node3").Serving })

	req := doSwitchover(t, st, "node2")
	if req.State != topo.RequestDone {
		t.Fatalf("switchover: %s: %s", req.State, req.Message)
	}
	var port, io, sqlRun string
	rows, err := rootDB(t, c, 2).Query("SHOW ALL SLAVES STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for j := range vals {
		ptrs[j] = &vals[j]
	}
	if !rows.Next() {
		rows.Close()
		t.Fatal("node3 has no replication configured after the switchover")
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for j, col := range cols {
		switch col {
		case "Master_Port":
			port = vals[j].String
		case "Slave_IO_Running":
			io = vals[j].String
		case "Slave_SQL_Running":
			sqlRun = vals[j].String
		}
	}
	if port != fmt.Sprint(c.Nodes[1].Port) || io != "No" || sqlRun != "No" {
		t.Fatalf("node3 after switchover: source port %s IO %s SQL %s; want port %d with replication still stopped", port, io, sqlRun, c.Nodes[1].Port)
	}
	mustExec(t, rootDB(t, c, 2), "START SLAVE")
	waitReplicating(t, c, 2, 1)
}
