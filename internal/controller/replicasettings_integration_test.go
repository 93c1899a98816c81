package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestReplicaParallelThreadsAligned: with failover.replica_parallel_threads
// set, the controller gives each replica of the healthy primary that many
// optimistic parallel appliers (one replica per round, an event each), and
// replication goes on from the same source and position.
func TestReplicaParallelThreadsAligned(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	for i := 1; i < 3; i++ {
		if n := queryInt(t, rootDB(t, c, i), "SELECT @@GLOBAL.slave_parallel_threads"); n != 4 {
			t.Fatalf("%s starts with slave_parallel_threads=%d, want the sandbox's 4", c.Nodes[i].Name, n)
		}
	}
	st := topotest.NewStore(t)
	cfg := testConfig(c)
	two := 2
	cfg.Clusters[0].Failover.ReplicaParallelThreads = &two
	start := time.Now()
	runController(t, cfg, st, "ctl-a")
	s := waitState(t, st, 30*time.Second, "replicas with 2 optimistic parallel appliers", func(s topo.ClusterState) bool {
		for _, n := range []string{"node2", "node3"} {
			p := s.Node(n).Probe
			if p.ParallelThreads != 2 || !strings.EqualFold(p.ParallelMode, "optimistic") || p.IORunning != "Yes" || !p.SQLRunning {
				return false
			}
		}
		return s.Primary == "node1"
	})
	t.Logf("both replicas aligned %s after the start (probe interval %s)", time.Since(start).Round(time.Millisecond), testInterval)
	if s.Epoch != 1 {
		t.Errorf("epoch %d after aligning the replicas, want 1 (nothing failed over)", s.Epoch)
	}
	for i := 1; i < 3; i++ {
		db := rootDB(t, c, i)
		if n := queryInt(t, db, "SELECT @@GLOBAL.slave_parallel_threads"); n != 2 {
			t.Errorf("%s slave_parallel_threads=%d, want 2", c.Nodes[i].Name, n)
		}
		checkReplicates(t, c, i, 0)
	}
	evs, err := ListEvents(context.Background(), st, testKeys, sandbox.ClusterName, 0)
	if err != nil {
		t.Fatal(err)
	}
	aligned := 0
	for _, ev := range evs {
		if ev.Code == "replica_settings" && strings.Contains(ev.Message, "slave_parallel_threads 4 (") && strings.Contains(ev.Message, "→ 2 (optimistic)") {
			aligned++
			t.Logf("event: %s", ev.Message)
		}
	}
	if aligned != 2 {
		t.Errorf("%d alignment events naming slave_parallel_threads, want 2 (one per replica)", aligned)
	}
	// Writes on the primary still reach both replicas.
	p := rootDB(t, c, 0)
	mustExec(t, p, "CREATE TABLE IF NOT EXISTS sbtest.ctl_t (id INT PRIMARY KEY)")
	mustExec(t, p, "INSERT INTO sbtest.ctl_t VALUES (41)")
	waitRow(t, c, 1, 41)
	waitRow(t, c, 2, 41)
}
