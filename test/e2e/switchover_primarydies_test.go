package e2e

import (
	"context"
	"database/sql"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

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
	for _, frozen := range []bool{false, true} {
		name := "kill"
		if frozen {
			name = "sigstop"
		}
		t.Run(name, func(t *testing.T) { primaryDiesWhileDraining(t, frozen) })
	}
}

// primaryDiesWhileDraining: kill -9 of the primary during the drain, or
// (frozen) SIGSTOP: then the autocommit writers' statements held by the
// switchover must not be released onto the frozen node when it rolls
// back (they would commit there alone, after their clients gave up), but
// wait for the failover: no writer gets an error.
func primaryDiesWhileDraining(t *testing.T, frozen bool) {
	s := startFO(t, foOpts{Mutate: func(c *config.Config) {
		c.Switchover.DrainTimeout = config.Duration(30 * time.Second)
		c.Switchover.MaxDuration = config.Duration(60 * time.Second)
		c.Switchover.MaxHold = config.Duration(40 * time.Second)
	}})
	ctx := context.Background()
	// Text statements: with prepared ones the command held is a
	// COM_STMT_PREPARE, which is prepared again on the new primary anyway.
	mc, err := mysql.ParseDSN(s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	mc.InterpolateParams = true
	db, err := sql.Open("mysql", mc.FormatDSN())
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
	writers := startWriters(t, db, "sbtest.pd_w", 4)
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
	if frozen {
		pid := s.sb.PID(0)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	} else if err := s.sb.KillNode(0); err != nil {
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
	time.Sleep(time.Second)
	writers.end()
	if n := writers.errs.Load(); n > 0 {
		t.Errorf("%d writer errors (first: %v), want 0: the statements held by the switchover wait for the failover", n, writers.first.Load())
	}
	t.Logf("writers: %d acknowledged, %d errors", writers.ok.Load(), writers.errs.Load())
	t.Logf("switchover gave up %s after the kill (started %s before it); failover to %s (epoch %d) %s after that:\n%s",
		gaveUp.Round(time.Millisecond), killed.Sub(start).Round(time.Millisecond), st.Primary, st.Epoch, took.Round(time.Millisecond), r.out)
}
