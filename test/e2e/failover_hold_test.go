package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// holdWriter inserts rows with unique ids through the rw listener on one
// connection and records each statement's send time and outcome.
type holdWriter struct {
	mu      sync.Mutex
	acked   []int64
	errs    []holdErr
	running sync.WaitGroup
}

type holdErr struct {
	sent time.Time
	err  error
}

func (w *holdWriter) run(ctx context.Context, t *testing.T, dsn string, base int64) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	w.running.Go(func() {
		defer db.Close()
		for seq := int64(1); ctx.Err() == nil; seq++ {
			id := base + seq
			sent := time.Now()
			_, err := db.ExecContext(ctx, "INSERT INTO held (id, server_id) VALUES (?, @@server_id)", id)
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, id)
			} else if ctx.Err() == nil {
				w.errs = append(w.errs, holdErr{sent, err})
			}
			w.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	})
}

// TestCrashFailoverHoldsStatements (crash failover, auto mode, semi-sync):
// the primary is killed with -9 under four writers and three idle
// sessions. No statement sent after the kill gets an error (each writer may
// lose the one statement it had in flight, with the outcome-unknown
// error); the idle sessions survive on the new primary with their session
// variable and prepared statement; logins during the failover succeed;
// every acknowledged write is on the new primary.
// killTakesEffect bounds how long after kill(SIGKILL) returns the dying
// server may still read a statement from its sockets.
const killTakesEffect = 20 * time.Millisecond

func TestCrashFailoverHoldsStatements(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true})
	dsn := s.dsn(0, "primary")
	setup, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	if _, err := setup.Exec("CREATE TABLE held (id BIGINT PRIMARY KEY, server_id INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	s.waitState("failover readiness published", 10*time.Second, func(st topo.ClusterState) bool {
		return st.AutoFailover != nil && st.AutoFailover.Ready
	})
	ctx := context.Background()
	type idle struct {
		conn *sql.Conn
		stmt *sql.Stmt
	}
	idlePool, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer idlePool.Close()
	var idles []idle
	for i := range 3 {
		c, err := idlePool.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, fmt.Sprintf("SET @mark := %d", 100+i)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(ctx, "SET SESSION sql_mode = 'ANSI_QUOTES'"); err != nil {
			t.Fatal(err)
		}
		st, err := c.PrepareContext(ctx, "SELECT ? * 2")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		idles = append(idles, idle{c, st})
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var w holdWriter
	for i := range 4 {
		w.run(wctx, t, dsn, int64(i+1)*1_000_000_000)
	}
	time.Sleep(time.Second)

	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Logins while the failover runs.
	var logins, loginErrs int
	var loginErr error
	loginsDone := make(chan struct{})
	go func() {
		defer close(loginsDone)
		for time.Since(killed) < 3*time.Second {
			d, err := sql.Open("mysql", dsn)
			if err == nil {
				var one int
				err = d.QueryRow("SELECT 1").Scan(&one)
				d.Close()
			}
			logins++
			if err != nil {
				loginErrs++
				loginErr = err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	st, took := s.waitState("new primary", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("kill -9 node1 → %s published %s later (loaded machine)", st.Primary, took.Round(time.Millisecond))
	<-loginsDone
	time.Sleep(500 * time.Millisecond)
	stop()
	w.running.Wait()

	after := 0
	for _, e := range w.errs {
		// kill(2) returns once SIGKILL is queued: until the dying
		// server's threads are gone and its sockets closed (a few ms
		// for mariadbd) a statement sent meanwhile can still be read by
		// it, and its outcome is as unknown as one sent before.
		if e.sent.After(killed.Add(killTakesEffect)) {
			after++
			t.Errorf("statement sent %s after the kill failed: %v", e.sent.Sub(killed).Round(time.Millisecond), e.err)
		} else {
			t.Logf("statement in flight at the kill: %v", e.err)
		}
	}
	if len(w.errs)-after > 4 {
		t.Errorf("%d errors for statements in flight at the kill, want at most one per writer (4)", len(w.errs)-after)
	}
	if loginErrs > 0 {
		t.Errorf("%d of %d logins during the failover failed, e.g. %v", loginErrs, logins, loginErr)
	}
	t.Logf("%d logins during the failover, %d failed; %d writes acknowledged", logins, loginErrs, len(w.acked))

	newID := 0
	if err := s.root(nodeIdx(st.Primary)).QueryRow("SELECT @@server_id").Scan(&newID); err != nil {
		t.Fatal(err)
	}
	for i, id := range idles {
		var mark, server int
		var mode string
		if err := id.conn.QueryRowContext(ctx, "SELECT @mark, @@server_id, @@sql_mode").Scan(&mark, &server, &mode); err != nil {
			t.Fatalf("idle session %d after the failover: %v", i, err)
		}
		if mark != 100+i || server != newID || !strings.Contains(mode, "ANSI_QUOTES") {
			t.Fatalf("idle session %d: @mark %d, server_id %d, sql_mode %q; want %d, %d (the new primary), ANSI_QUOTES", i, mark, server, mode, 100+i, newID)
		}
		var n int
		if err := id.stmt.QueryRowContext(ctx, 21).Scan(&n); err != nil || n != 42 {
			t.Fatalf("idle session %d: prepared statement after the failover: %d, %v", i, n, err)
		}
	}
	// No acknowledged write lost.
	check := s.root(nodeIdx(st.Primary))
	missing := 0
	for _, id := range w.acked {
		var x int64
		if err := check.QueryRow("SELECT id FROM sbtest.held WHERE id = ?", id).Scan(&x); err != nil {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged writes missing on the new primary %s", missing, len(w.acked), st.Primary)
	}
}

// lostPrimaryRefusedAtOnce kills the primary of s and checks that an idle
// session's next statement and a new login both get error 1105 containing
// want within 500 ms (not after failover.max_hold), and that the session
// stays open.
func lostPrimaryRefusedAtOnce(t *testing.T, s *foStack, want ...string) {
	t.Helper()
	ctx := context.Background()
	dsn := s.dsn(0, "primary")
	pool, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	check := func(what string, err error, took time.Duration) {
		t.Helper()
		code := mysqlErrNo(err)
		msg := fmt.Sprint(err)
		if code != 1105 {
			t.Fatalf("%s: %v, want error 1105", what, err)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Fatalf("%s: %q does not say %q", what, msg, w)
			}
		}
		if took > 500*time.Millisecond {
			t.Fatalf("%s: the error came after %v, want < 500ms (at once, not after failover.max_hold)", what, took)
		}
		t.Logf("%s: error after %v: %s", what, took.Round(time.Millisecond), msg)
	}
	for i := range 2 {
		start := time.Now()
		_, err := conn.ExecContext(ctx, "INSERT INTO nothing VALUES (1)")
		check(fmt.Sprintf("idle session, statement %d", i+1), err, time.Since(start))
	}
	start := time.Now()
	d, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	check("new login", d.Ping(), time.Since(start))
}

// TestManualModeLostPrimaryFailsAtOnce: in failover.mode manual nothing is
// held: a statement on a session whose primary was killed, and a new
// login, fail at once with the error saying an operator must fail over.
func TestManualModeLostPrimaryFailsAtOnce(t *testing.T) {
	s := startFO(t, foOpts{Mode: config.FailoverManual})
	s.waitState("failover readiness published", 10*time.Second, func(st topo.ClusterState) bool {
		return st.AutoFailover != nil && st.AutoFailover.Class == topo.AutoNotAuto
	})
	lostPrimaryRefusedAtOnce(t, s, "primary node1 of cluster main is unreachable", "failover.mode is manual",
		"an operator must run `switchyard failover --cluster main`")
}

// TestBlockedFailoverLostPrimaryFailsAtOnce: in auto mode with maintenance
// on (automatic failover blocked) the lost primary's statements fail at
// once with the reason, as in manual mode.
func TestBlockedFailoverLostPrimaryFailsAtOnce(t *testing.T) {
	s := startFO(t, foOpts{})
	out := s.cli("maintenance", "on", "--cluster", "main", "--reason", "hold test")
	t.Logf("maintenance on: %s", strings.TrimSpace(out))
	s.waitState("readiness says maintenance", 10*time.Second, func(st topo.ClusterState) bool {
		return st.AutoFailover != nil && st.AutoFailover.Class == topo.AutoMaintenance
	})
	// The proxy applies the state from its watch.
	time.Sleep(200 * time.Millisecond)
	lostPrimaryRefusedAtOnce(t, s, "primary node1 of cluster main is unreachable", "maintenance mode is on",
		"switchyard failover --cluster main")
}
