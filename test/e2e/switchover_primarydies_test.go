package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestSwitchoverPrimaryDiesWhileDraining: auto mode, a switchover whose
// drain cannot finish (a session idle in an open transaction, drain bound
// 30 s), and the primary is killed during the drain. The switchover gives
// up as soon as a probe round finds the primary dead, says that the old
// primary is down (not "writable again"), and the automatic failover
// follows, well before the drain bound.
func TestSwitchoverPrimaryDiesWhileDraining(t *testing.T) {
	s := startFO(t, foOpts{Mutate: func(c *config.Config) {
		c.Switchover.DrainTimeout = config.Duration(30 * time.Second)
		c.Switchover.MaxDuration = config.Duration(60 * time.Second)
		c.Switchover.MaxHold = config.Duration(40 * time.Second)
	}})
	ctx := context.Background()
	db, err := sql.Open("mysql", s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS sbtest.pd (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO sbtest.pd VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	type res struct {
		out string
		err error
	}
	done := make(chan res, 1)
	start := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		out, err := runCLI(cctx, s.endpoints[0], "switchover", "--cluster", "main", "--to", "node2")
		done <- res{out, err}
	}()
	s.waitState("switchover draining", 20*time.Second, func(st topo.ClusterState) bool { return st.Phase == topo.PhaseSwitching })
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("switchover still running 60 s after the primary was killed")
	}
	gaveUp := time.Since(killed)
	if r.err == nil || !strings.Contains(r.out, "node1 is down") || strings.Contains(r.out, "writable again") {
		t.Fatalf("switchover after the primary died while draining: err %v, want it rolled back saying node1 is down:\n%s", r.err, r.out)
	}
	if gaveUp > 20*time.Second {
		t.Fatalf("the switchover gave up %s after the kill: it waited for the drain bound", gaveUp)
	}
	st, took := s.waitState("failover to a replica", 30*time.Second, func(st topo.ClusterState) bool {
		return st.Phase == topo.PhaseStable && st.Primary != "node1" && st.Primary != "" && st.Epoch > 1
	})
	t.Logf("switchover gave up %s after the kill (started %s before it); failover to %s (epoch %d) %s after that:\n%s",
		gaveUp.Round(time.Millisecond), killed.Sub(start).Round(time.Millisecond), st.Primary, st.Epoch, took.Round(time.Millisecond), r.out)
}
