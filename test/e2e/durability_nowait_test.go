package e2e

import (
	"context"
	"database/sql"
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
