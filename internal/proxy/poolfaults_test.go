package proxy

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// A logged-in transaction-pooled session that finds no connection free
// within proxy.pool.wait_timeout (session-pooled clients hold them all)
// gets error 1040 for that command and keeps its session and its state;
// the warning is rate limited.
func TestTxPoolWaitTimeoutKeepsSession(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Proxy.MaxConnectionsPerBackend = 2
		c.Proxy.Pool.WaitTimeout = config.Duration(300 * time.Millisecond)
	})
	tx := h.client("rwtx", "sbtest")
	tx.exec(t, "SET @kept = 41")
	if n := h.inUse(0); n != 0 {
		t.Fatalf("%d connections in use after the transaction-pooled statement, want 0", n)
	}
	a := h.client("rw", "sbtest")
	b := h.client("rw", "sbtest")
	_, err := tx.conn.ExecContext(context.Background(), "DO 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 || !strings.Contains(me.Message, "proxy.pool.wait_timeout") {
		t.Fatalf("statement at the cap: %v, want error 1040 naming proxy.pool.wait_timeout", err)
	}
	// The session stays: again, and the warning is logged once (the
	// others counted as suppressed, one line per 10 s).
	for range 2 {
		if _, err := tx.conn.ExecContext(context.Background(), "DO 1"); !errors.As(err, &me) || me.Number != 1040 {
			t.Fatalf("statement at the cap again: %v, want error 1040", err)
		}
	}
	if n := h.srv.limit.poolLimitLog.suppressed.Load(); n != 2 {
		t.Fatalf("%d pool-limit warnings suppressed after three timeouts, want 2 (the first logged)", n)
	}
	a.close()
	if v := tx.int(t, "SELECT @kept + 1"); v != 42 {
		t.Fatalf("@kept + 1 after the 1040 = %d, want 42 (the session and its state kept)", v)
	}
	b.close()
}

// A transaction-pooled session waiting for a connection of the primary's
// pool is woken by a primary change and takes a connection of the new
// primary at once, its state re-created there, instead of waiting out
// proxy.pool.wait_timeout on the old node and getting 1040 naming it: a
// switchover's new primary, or a crash failover's (the waiter then holds
// while the failover runs, as statements do, failoverhold.go).
func TestTxPoolWaiterFollowsPrimaryChange(t *testing.T) {
	t.Run("switchover", func(t *testing.T) { txPoolWaiterFollows(t, false) })
	t.Run("failover", func(t *testing.T) { txPoolWaiterFollows(t, true) })
}

func txPoolWaiterFollows(t *testing.T, failover bool) {
	const wait = 5 * time.Second
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Proxy.MaxConnectionsPerBackend = 1
		c.Proxy.Pool.WaitTimeout = config.Duration(wait)
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	tx := h.client("rwtx", "sbtest")
	tx.exec(t, "SET @kept = 7")
	if n := h.inUse(0); n != 0 {
		t.Fatalf("%d connections in use after the transaction-pooled statement, want 0", n)
	}
	a := h.client("rw", "sbtest") // holds node1's only connection
	defer a.close()
	type res struct {
		sid, kept int64
		err       error
	}
	got := make(chan res, 1)
	start := time.Now()
	go func() {
		var r res
		r.err = tx.conn.QueryRowContext(context.Background(), "SELECT @@server_id, @kept").Scan(&r.sid, &r.kept)
		got <- r
	}()
	deadline := time.Now().Add(2 * time.Second)
	for h.metric("switchyard_backend_pool_waits_total", "node", "node1") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the transaction-pooled statement never waited for node1's pool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if failover {
		failing, done := failoverStates(h)
		h.srv.SetClusterState(failing)
		time.Sleep(300 * time.Millisecond)
		select {
		case r := <-got:
			t.Fatalf("answered while the failover ran (%v, server %d): it was not held", r.err, r.sid)
		default:
		}
		if n := h.metric("switchyard_proxy_primary_lost_held_total"); n < 1 {
			t.Fatalf("%v statements held for the failover, want the waiter's", n)
		}
		h.srv.SetClusterState(done)
	} else {
		h.srv.SetClusterState(sandboxState(h.c, 2, 1, 0, 2))
	}
	r := <-got
	took := time.Since(start)
	if r.err != nil {
		t.Fatalf("statement waiting on node1's pool across the primary change: %v", r.err)
	}
	if r.sid != 2 || r.kept != 7 {
		t.Fatalf("statement ran on server %d with @kept %d, want server 2 with 7", r.sid, r.kept)
	}
	if took >= wait {
		t.Fatalf("answered after %s: the waiter was not woken by the primary change", took)
	}
	t.Logf("answered on the new primary %s after the statement began", took.Round(time.Millisecond))
}

// The primary freezes (SIGSTOP) while every connection of its pool is
// held: a transaction-pooled statement waiting for one past
// proxy.pool.wait_timeout, with the controller reporting the primary
// unreachable, holds for the failover and runs on the new primary with its
// session state, instead of getting 1040 naming the frozen node.
func TestTxPoolWaiterHoldsWhenPrimaryFreezes(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Proxy.MaxConnectionsPerBackend = 1
		c.Proxy.Pool.WaitTimeout = config.Duration(400 * time.Millisecond)
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	tx := h.client("rwtx", "sbtest")
	tx.exec(t, "SET @kept = 9")
	if n := h.inUse(0); n != 0 {
		t.Fatalf("%d connections in use after the transaction-pooled statement, want 0", n)
	}
	a := h.client("rw", "sbtest") // holds node1's only connection
	defer a.close()
	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	waitStopped(t, pid)
	// What the controller publishes once its probes of node1 time out.
	trouble := sandboxState(h.c, 1, 0, 1, 2)
	trouble.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	trouble.Analysis = []topo.AnalysisEntry{{Code: "UnreachablePrimary", Node: "node1"}}
	h.srv.SetClusterState(trouble)
	type res struct {
		sid, kept int64
		err       error
	}
	got := make(chan res, 1)
	go func() {
		var r res
		r.err = tx.conn.QueryRowContext(context.Background(), "SELECT @@server_id, @kept").Scan(&r.sid, &r.kept)
		got <- r
	}()
	time.Sleep(time.Second) // past proxy.pool.wait_timeout
	select {
	case r := <-got:
		t.Fatalf("answered before the failover (%v): it was not held", r.err)
	default:
	}
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	time.Sleep(100 * time.Millisecond)
	h.srv.SetClusterState(done)
	r := <-got
	if r.err != nil {
		t.Fatalf("statement waiting on the frozen primary's pool: %v", r.err)
	}
	if r.sid != 2 || r.kept != 9 {
		t.Fatalf("statement ran on server %d with @kept %d, want server 2 with 9", r.sid, r.kept)
	}
}

// A connect that fails for want of this proxy's own file descriptors
// (EMFILE) is not a lost primary: no hold, no "unreachable", error 1040
// naming RLIMIT_NOFILE, and the logged-in session keeps its state.
func TestDescriptorExhaustionIsNotPrimaryLoss(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
	})
	tx := h.client("rwtx", "sbtest")
	tx.exec(t, "SET @kept = 5")
	if n := h.inUse(0); n != 0 {
		t.Fatalf("%d connections in use after the transaction-pooled statement, want 0", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.srv.checkBackends(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.srv.backendReport()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reachability verdict within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.srv.closeIdle(func(*backend) bool { return true }) // the next statement dials
	release := exhaustDescriptors(t)
	start := time.Now()
	_, err := tx.conn.ExecContext(context.Background(), "DO 1")
	took := time.Since(start)
	h.srv.backendTrouble() // this proxy's own check runs short of descriptors too
	time.Sleep(300 * time.Millisecond)
	release()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 || !strings.Contains(me.Message, "RLIMIT_NOFILE") || strings.Contains(me.Message, "unreachable") {
		t.Fatalf("statement without descriptors: %v, want error 1040 naming RLIMIT_NOFILE", err)
	}
	if took > time.Second {
		t.Fatalf("answered after %s: the statement was held", took)
	}
	if n := h.metric("switchyard_proxy_primary_lost_held_total"); n != 0 {
		t.Fatalf("%v statements held for a failover, want 0", n)
	}
	for _, b := range h.srv.backendReport() {
		if !b.Reachable {
			t.Fatalf("node %s reported unreachable (%s) after a local descriptor shortage", b.Node, b.Error)
		}
	}
	if v := tx.int(t, "SELECT @kept * 2"); v != 10 {
		t.Fatalf("@kept * 2 after the 1040 = %d, want 10 (the session and its state kept)", v)
	}
	t.Logf("refused in %s: %s", took.Round(time.Millisecond), me.Message)
}

// exhaustDescriptors lowers this process's RLIMIT_NOFILE soft limit to
// what is open now plus a few and opens /dev/null until EMFILE; release
// closes them and restores the limit.
func exhaustDescriptors(t *testing.T) (release func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(len(ents) + 16)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var fds []int
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, unix.EMFILE) {
				t.Fatalf("filling the descriptor table: %v", err)
			}
			break
		}
		fds = append(fds, fd)
	}
	return func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
		fds = nil
	}
}

// A login waiting at the cap of a node that stopped being the primary
// meanwhile is not refused with 1040 naming that node at
// proxy.pool.wait_timeout: it logs in on the new primary.
func TestLoginWaiterFollowsPrimaryChange(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Proxy.MaxConnectionsPerBackend = 1
		c.Proxy.Pool.WaitTimeout = config.Duration(400 * time.Millisecond)
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	a := h.client("rw", "sbtest") // holds node1's only connection
	defer a.close()
	got := make(chan error, 1)
	var sid int64
	go func() {
		db, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
		if err != nil {
			got <- err
			return
		}
		defer db.Close()
		got <- db.QueryRow("SELECT @@server_id").Scan(&sid)
	}()
	deadline := time.Now().Add(2 * time.Second)
	for h.metric("switchyard_backend_pool_waits_total", "node", "node1") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the login never waited for node1's pool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	next := sandboxState(h.c, 2, 1, 0, 2)
	next.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node1"}
	h.srv.SetClusterState(next)
	if err := <-got; err != nil {
		t.Fatalf("login waiting on node1's pool across the primary change: %v", err)
	}
	if sid != 2 {
		t.Fatalf("login ran on server %d, want 2 (the new primary)", sid)
	}
}
