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
