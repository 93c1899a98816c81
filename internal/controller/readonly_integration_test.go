package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// Every node read_only (as after a restart of everything) and a fresh
// controller: it finds no primary and names node1, the source of both
// replicas, with what to run. In manual mode it leaves node1 read_only and
// says so; in auto mode it makes node1 writable (every node answered, no
// errant GTIDs) and discovery publishes it with epoch 1.
func TestAllReadOnlyClusterGetsItsPrimaryBack(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	db := rootDB(t, c, 0)
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS sbtest")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS sbtest.ctl_t (id INT PRIMARY KEY)")
	mustExec(t, db, "INSERT INTO sbtest.ctl_t VALUES (1)")
	waitRow(t, c, 1, 1)
	waitRow(t, c, 2, 1)
	mustExec(t, db, "SET GLOBAL read_only=1")
	st := topotest.NewStore(t)

	cfg := testConfig(c)
	cfg.Clusters[0].Failover.Mode = config.FailoverManual
	_, stop := runController(t, cfg, st, "ctl-manual")
	s := waitState(t, st, 15*time.Second, "the NoWritablePrimary finding", func(s topo.ClusterState) bool {
		for _, a := range s.Analysis {
			if a.Code == "NoWritablePrimary" && a.Node == "node1" {
				return true
			}
		}
		return false
	})
	if s.Primary != "" {
		t.Fatalf("manual mode published primary %s while every node is read_only", s.Primary)
	}
	ev := waitEvent(t, st, 10*time.Second, "not making node1 writable: failover.mode is manual")
	t.Logf("manual mode event: %s", ev.Message)
	time.Sleep(4 * testInterval)
	if ro := queryInt(t, db, "SELECT @@read_only"); ro != 1 {
		t.Fatalf("manual mode changed read_only on node1 to %d", ro)
	}
	stop()

	cfg = testConfig(c)
	cfg.Clusters[0].Failover.Mode = config.FailoverAuto
	runController(t, cfg, st, "ctl-auto")
	s = waitState(t, st, 20*time.Second, "node1 published", func(s topo.ClusterState) bool { return s.Primary == "node1" })
	if s.Epoch != 1 || s.Phase != topo.PhaseStable {
		t.Fatalf("published node1 with epoch %d phase %s, want 1 stable", s.Epoch, s.Phase)
	}
	ev = waitEvent(t, st, 10*time.Second, "made node1 writable")
	t.Logf("auto mode event: %s", ev.Message)
	if ro := queryInt(t, db, "SELECT @@read_only"); ro != 0 {
		t.Fatalf("node1 read_only=%d after the auto mode controller published it", ro)
	}
	for _, i := range []int{1, 2} {
		if ro := queryInt(t, rootDB(t, c, i), "SELECT @@read_only"); ro != 1 {
			t.Fatalf("replica %d read_only=%d: two writable nodes", i, ro)
		}
	}
}

// A published primary set read-only while it stays up: in manual mode the
// event names the command and read_only stays ON; in auto mode the
// controller sets read_only=OFF with an event, and keeps the epoch.
func TestReadOnlyPrimaryMadeWritableInAutoMode(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	db := rootDB(t, c, 0)
	st := topotest.NewStore(t)

	cfg := testConfig(c)
	cfg.Clusters[0].Failover.Mode = config.FailoverManual
	_, stop := runController(t, cfg, st, "ctl-manual")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	mustExec(t, db, "SET GLOBAL read_only=1")
	ev := waitEvent(t, st, 10*time.Second, "not making it writable: failover.mode is manual")
	if !strings.Contains(ev.Message, "mariadb -e 'SET GLOBAL read_only=OFF'") {
		t.Fatalf("manual mode event does not name the command: %s", ev.Message)
	}
	time.Sleep(4 * testInterval)
	if ro := queryInt(t, db, "SELECT @@read_only"); ro != 1 {
		t.Fatalf("manual mode changed read_only on the primary to %d", ro)
	}
	stop()

	cfg = testConfig(c)
	cfg.Clusters[0].Failover.Mode = config.FailoverAuto
	runController(t, cfg, st, "ctl-auto")
	ev = waitEvent(t, st, 15*time.Second, "had read_only=ON and is still the primary")
	t.Logf("auto mode event: %s", ev.Message)
	deadline := time.Now().Add(5 * time.Second)
	for queryInt(t, db, "SELECT @@read_only") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("auto mode left the primary read_only=1")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := waitState(t, st, 5*time.Second, "stable", func(s topo.ClusterState) bool { return s.Phase == topo.PhaseStable })
	if s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("after repair: primary %q epoch %d, want node1 at epoch 1", s.Primary, s.Epoch)
	}
	for _, i := range []int{1, 2} {
		if ro := queryInt(t, rootDB(t, c, i), "SELECT @@read_only"); ro != 1 {
			t.Fatalf("replica %d read_only=%d: two writable nodes", i, ro)
		}
	}
}
