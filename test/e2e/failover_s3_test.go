package e2e

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// replicaSource returns node i's Master_Port and thread states.
func (s *foStack) replicaSource(i int) (port, io, sqlRun string) {
	s.t.Helper()
	db := s.root(i)
	defer db.Close()
	rows, err := db.Query("SHOW ALL SLAVES STATUS")
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for j := range vals {
		ptrs[j] = &vals[j]
	}
	if !rows.Next() {
		return "", "", ""
	}
	if err := rows.Scan(ptrs...); err != nil {
		s.t.Fatal(err)
	}
	for j, c := range cols {
		switch c {
		case "Master_Port":
			port = string(vals[j])
		case "Slave_IO_Running":
			io = string(vals[j])
		case "Slave_SQL_Running":
			sqlRun = string(vals[j])
		}
	}
	return port, io, sqlRun
}

// waitReplicatesFrom waits until node i replicates from node from with both
// threads running.
func (s *foStack) waitReplicatesFrom(i, from int, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	want := fmt.Sprint(s.sb.Nodes[from].Port)
	for {
		port, io, sqlRun := s.replicaSource(i)
		if port == want && io == "Yes" && sqlRun == "Yes" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s replicates from port %s (IO %s, SQL %s), want %s (%s)", s.sb.Nodes[i].Name, port, io, sqlRun, want, s.sb.Nodes[from].Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestS3MaintenanceStopsAutomationNotRepair (SCENARIOS.md S3): with
// maintenance on, a manual switchover still runs and repoints the replicas;
// a replica whose replication is broken by hand leaves the ro listener
// within two probe intervals; a replica pointed at the wrong source is
// repointed; a dead primary is not failed over automatically until
// maintenance is turned off.
func TestS3MaintenanceStopsAutomationNotRepair(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true})
	w := s.startWorkload(2)
	out := s.cli("maintenance", "on", "--cluster", "main", "--reason", "S3 scenario: planned work")
	t.Logf("maintenance on: %s", strings.TrimSpace(out))
	st := s.state()
	if st.Maintenance == nil || st.Maintenance.Reason != "S3 scenario: planned work" {
		t.Fatalf("maintenance not recorded: %+v", st.Maintenance)
	}

	// A manual switchover works in maintenance and repoints the replicas.
	out = s.cli("switchover", "--cluster", "main", "--to", "node2")
	t.Logf("switchover:\n%s", out)
	s.waitState("node2 primary", 10*time.Second, func(st topo.ClusterState) bool { return st.Primary == "node2" && st.Phase == topo.PhaseStable })
	s.waitReplicatesFrom(0, 1, 10*time.Second)
	s.waitReplicatesFrom(2, 1, 10*time.Second)
	t.Log("after the switchover node1 and node3 replicate from node2")
	s.waitState("replicas serving", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Node("node1").Serving && st.Node("node3").Serving
	})

	// Replication broken by hand: out of the ro listener within two probe
	// intervals (asserted with a 10x margin; the figure is printed).
	start := time.Now()
	s.exec(2, "STOP SLAVE")
	_, took := s.waitState("node3 not serving", 20*foInterval, func(st topo.ClusterState) bool { return !st.Node("node3").Serving })
	took = time.Since(start)
	t.Logf("STOP SLAVE on node3 → out of the ro listener after %s (%.1f probe intervals of %s)", took.Round(time.Millisecond), float64(took)/float64(foInterval), foInterval)
	time.Sleep(100 * time.Millisecond) // watch → proxy
	for i := 0; i < 6; i++ {
		db, err := sql.Open("mysql", s.dsn(0, "replica"))
		if err != nil {
			t.Fatal(err)
		}
		var sid int
		if err := db.QueryRow("SELECT @@server_id").Scan(&sid); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if sid == 3 {
			t.Fatalf("ro connection %d answered by node3 after its replication was stopped", i)
		}
	}
	if port, io, _ := s.replicaSource(2); io != "No" || port != fmt.Sprint(s.sb.Nodes[1].Port) {
		t.Fatalf("node3's stopped replication was touched: port %s IO %s", port, io)
	}

	// Pointed at the wrong source by hand: repair repoints it to node2 even
	// in maintenance.
	s.exec(2, fmt.Sprintf("CHANGE MASTER TO MASTER_PORT=%d", s.sb.Nodes[0].Port))
	s.exec(2, "START SLAVE")
	start = time.Now()
	s.waitEvent("repointed node3 as a replica of primary node2", 20*time.Second)
	s.waitReplicatesFrom(2, 1, 10*time.Second)
	t.Logf("node3 pointed at node1 by hand → repointed to node2 after %s", time.Since(start).Round(time.Millisecond))

	// The primary dies: no automatic failover while in maintenance.
	if err := s.sb.KillNode(1); err != nil {
		t.Fatal(err)
	}
	ev := s.waitEvent("not failing over: maintenance mode is on", 10*time.Second)
	t.Logf("event: %s", ev.Message)
	time.Sleep(12 * foInterval)
	if st := s.state(); st.Primary != "node2" || s.failovers() != 0 {
		t.Fatalf("failed over in maintenance: primary %s, %d failovers", st.Primary, s.failovers())
	}
	out = s.cli("status")
	if !strings.Contains(out, "MAINTENANCE on") {
		t.Fatalf("status does not show maintenance:\n%s", out)
	}
	t.Logf("status in maintenance:\n%s", out)

	// Maintenance off: automation applies again and fails over.
	s.cli("maintenance", "off", "--cluster", "main")
	st, took = s.waitState("failover after maintenance off", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node2" && st.Phase == topo.PhaseStable
	})
	t.Logf("maintenance off → failover to %s after %s (the failover itself: %dms)", st.Primary, took.Round(time.Millisecond), st.LastFailover.DurationMS)
	time.Sleep(time.Second)
	w.stop(nodeIdx(st.Primary))
	if n := s.failovers(); n != 1 {
		t.Errorf("%d failovers, want 1 (after maintenance off)", n)
	}
	t.Logf("events:\n%s", s.eventText())
}
