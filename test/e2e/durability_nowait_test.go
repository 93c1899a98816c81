package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestSemiSyncNoReplicaNoWait: durability semi_sync, and every replica of
// the primary goes away (shut down). The controller switches the
// primary's rpl_semi_sync_master_wait_no_slave off, so that writes do not
// each wait rpl_semi_sync_master_timeout for a replica that is not there,
// and on again when a replica is back and attached.
func TestSemiSyncNoReplicaNoWait(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true, Mode: config.FailoverManual, Mutate: func(c *config.Config) {
		c.Clusters[0].Durability = config.DurabilitySemiSync
	}})
	ctx := context.Background()
	waitNoSlave := func() int64 { return s.rootInt(0, "SELECT @@GLOBAL.rpl_semi_sync_master_wait_no_slave") }
	// Applied at the first rounds: ON while the replicas are attached.
	deadline := time.Now().Add(20 * time.Second)
	for waitNoSlave() != 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if v := waitNoSlave(); v != 1 {
		t.Fatalf("wait_no_slave %d with both replicas attached, want 1", v)
	}
	timeoutMS := s.rootInt(0, "SELECT @@GLOBAL.rpl_semi_sync_master_timeout")
	for _, i := range []int{1, 2} {
		if err := s.sb.StopNode(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(20 * time.Second)
	for waitNoSlave() != 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if v := waitNoSlave(); v != 0 {
		t.Fatalf("wait_no_slave %d with no replica left, want 0\n%s", v, s.eventText())
	}
	db, err := sql.Open("mysql", s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS sbtest.nw (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 5 {
		if _, err := db.Exec("INSERT INTO sbtest.nw VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	if took > time.Duration(timeoutMS)*time.Millisecond/2 {
		t.Fatalf("5 writes with no replica took %s (rpl_semi_sync_master_timeout %d ms): they waited for a replica", took, timeoutMS)
	}
	// A primary whose semi-sync primary side is off and wait_no_slave ON
	// (a replica's settings, as on a node just promoted with no replica
	// left): the controller switches it on without making a commit wait
	// for nobody — wait_no_slave goes off first. Writes run throughout.
	for _, q := range []string{"SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON", "SET GLOBAL rpl_semi_sync_master_enabled = OFF"} {
		if _, err := s.root(0).Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	stop := make(chan struct{})
	slowest := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for i := 100; ; i++ {
			select {
			case <-stop:
				slowest <- worst
				return
			default:
			}
			st := time.Now()
			if _, err := db.Exec("INSERT INTO sbtest.nw VALUES (?)", i); err != nil {
				t.Error(err)
			}
			worst = max(worst, time.Since(st))
		}
	}()
	master := func() int64 { return s.rootInt(0, "SELECT @@GLOBAL.rpl_semi_sync_master_enabled") }
	deadline = time.Now().Add(20 * time.Second)
	for master() != 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stop)
	worst := <-slowest
	if v := master(); v != 1 {
		t.Fatalf("rpl_semi_sync_master_enabled %d, want the controller to switch it on\n%s", v, s.eventText())
	}
	if worst > time.Duration(timeoutMS)*time.Millisecond/2 {
		t.Fatalf("a write took %s while the controller switched semi-sync on with no replica (timeout %d ms): it waited for nobody", worst, timeoutMS)
	}
	t.Logf("slowest write while semi-sync was switched on with no replica: %s", worst.Round(time.Millisecond))
	if err := s.sb.StartNode(ctx, 1); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for waitNoSlave() != 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if v := waitNoSlave(); v != 1 {
		t.Fatalf("wait_no_slave %d after node2 came back, want 1\n%s", v, s.eventText())
	}
	st := s.state()
	if st.Primary != "node1" || st.Phase != topo.PhaseStable {
		t.Fatalf("primary %s phase %s", st.Primary, st.Phase)
	}
	t.Logf("5 writes with no replica attached took %s (timeout %d ms)", took.Round(time.Millisecond), timeoutMS)
}

// TestSemiSyncPrimaryStillShowingReplication: durability semi_sync, and
// the published primary also shows a replication connection (as a node
// just promoted by a failover does until its old replication is reset,
// or after an operator's stray CHANGE MASTER). The controller never
// treats the primary as a replica: its semi-sync primary side stays on
// and its replica side is not switched on, round after round.
func TestSemiSyncPrimaryStillShowingReplication(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true, Mode: config.FailoverManual, Mutate: func(c *config.Config) {
		c.Clusters[0].Durability = config.DurabilitySemiSync
	}})
	master := func() int64 { return s.rootInt(0, "SELECT @@GLOBAL.rpl_semi_sync_master_enabled") }
	slave := func() int64 { return s.rootInt(0, "SELECT @@GLOBAL.rpl_semi_sync_slave_enabled") }
	deadline := time.Now().Add(20 * time.Second)
	for master() != 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if v := master(); v != 1 {
		t.Fatalf("rpl_semi_sync_master_enabled %d on the primary, want the controller to keep it on", v)
	}
	slave0 := slave()
	// A replication connection to a port nothing listens on, never
	// started: SHOW SLAVE STATUS has a row (the probe sees a replica),
	// nothing is applied.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.exec(0, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='nobody'", port))
	t.Cleanup(func() { _, _ = s.root(0).Exec("RESET SLAVE ALL") })
	s.waitState("node1 probed with a replication connection", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Node("node1").Probe.Replicating
	})
	// Many probe rounds: every one would have "fixed" node1 as a replica.
	end := time.Now().Add(20 * foInterval)
	for time.Now().Before(end) {
		if v := master(); v != 1 {
			t.Fatalf("rpl_semi_sync_master_enabled %d on the primary showing a replication connection: it was treated as a replica\n%s", v, s.eventText())
		}
		if v := slave(); v != slave0 {
			t.Fatalf("rpl_semi_sync_slave_enabled %d on the primary, %d before: it was treated as a replica\n%s", v, slave0, s.eventText())
		}
		time.Sleep(foInterval / 4)
	}
	if st := s.state(); st.Primary != "node1" {
		t.Fatalf("primary %q, want node1 (manual mode, nothing failed)", st.Primary)
	}
}
