package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestReplayIdleTransactionBeforeItsNextStatement: with transaction
// replay on, a session idle in a transaction when its primary goes away
// (its connection closed, the node refuses connections) has its
// transaction replayed on the new primary as soon as the failover
// publishes it, before its client sends anything: the auto-increment ids
// its client was told are taken on the new primary before another
// session's INSERT there could get them, and the COMMIT that follows keeps
// every row once. Without the early replay the other session's INSERT
// takes the first of those ids and the replay, which must give the client
// its ids again, fails. A second subtest: the same with the new primary
// published only after the old one's connections closed (the session
// waits for the failover while idle).
func TestReplayIdleTransactionBeforeItsNextStatement(t *testing.T) {
	for _, tc := range []struct {
		name          string
		promoteBefore bool // the new primary is published before the close is seen
	}{{"closed, then failover", false}, {"failover, then closed", true}} {
		t.Run(tc.name, func(t *testing.T) { replayIdleBeforeNext(t, tc.promoteBefore) })
	}
}

func replayIdleBeforeNext(t *testing.T, promoteBefore bool) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = true
		c.Clusters[0].Failover.CommitOutcome = config.CommitOutcomeUnknown
	})
	relay := newHoldRelay(t, h.c.Nodes[0].Address)
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.Nodes[0].Address = relay.ln.Addr().String()
	h.srv.SetClusterState(st)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.ri (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)")
	mustExec(t, root, "INSERT INTO sbtest.ri (v) VALUES (0)")
	h.waitReplicated(1, 2)
	db := h.db("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = false })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	insert := func(q execer, v int) int64 { t.Helper(); return insertRI(t, ctx, q, v) }
	mustExec(t, conn, "BEGIN")
	a := insert(conn, 1)
	b := insert(conn, 2)
	before := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK))

	promote := func() {
		n2 := h.direct(1)
		mustExec(t, n2, "STOP SLAVE")
		mustExec(t, n2, "SET GLOBAL read_only = 0")
		h.srv.SetClusterState(sandboxState(h.c, 2, 1, 0, 2))
	}
	if promoteBefore {
		promote()
	}
	// The old primary goes away: its connections close and it refuses
	// new ones (the relay stops listening).
	_ = relay.ln.Close()
	relay.cut()
	if !promoteBefore {
		time.Sleep(300 * time.Millisecond)
		promote()
	}
	// The client sends nothing: the replay comes by itself.
	waitForWithin(t, 10*time.Second, "the idle transaction to be replayed before its next statement", func() bool {
		return ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK))-before >= 1
	})
	// Another session on the new primary: a fresh id, not one of the
	// replayed transaction's.
	other := insert(db, 100)
	if other == a || other == b {
		t.Fatalf("another session's INSERT on the new primary got id %d, one the idle transaction's client was told (%d, %d)", other, a, b)
	}
	c := insert(conn, 3)
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT after the replay: %v", err)
	}
	if id := serverID(t, conn); id != 2 {
		t.Fatalf("session after the replay answered by server_id %d, want 2", id)
	}
	rs, err := h.direct(1).QueryContext(ctx, "SELECT id, v FROM sbtest.ri WHERE v > 0 ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	got := map[int64]int{}
	for rs.Next() {
		var id int64
		var v int
		if err := rs.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got[id] = v
	}
	want := map[int64]int{a: 1, b: 2, c: 3, other: 100}
	if len(got) != len(want) {
		t.Fatalf("rows on the new primary %v, want %v", got, want)
	}
	for id, v := range want {
		if got[id] != v {
			t.Fatalf("rows on the new primary %v, want %v", got, want)
		}
	}
	if n := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK)) - before; n != 1 {
		t.Fatalf("%v replays counted, want 1", n)
	}
}

// TestReplayedTransactionWaitsForOtherReplays: a statement of a
// transaction already replayed waits, as an autocommit one does, until the
// cluster's other replays have taken their snapshots. B inserted id 2 and
// A, after a SELECT SLEEP(0.5), id 3 on the old primary; both sessions are
// idle in their transactions when the new primary is published and replay
// at once: B's replay is quick (the new primary's counter moves to 3), A's
// sleeps 0.5 s before it gives its client id 3 again. B's next INSERT,
// sent as soon as B's replay is counted, must not take id 3: it waits for
// A's replay and gets a fresh id, and both transactions commit all their
// rows. Without the wait B's INSERT takes 3 and A's replay, whose insert
// of 3 then waits on B's row lock, is rolled back.
func TestReplayedTransactionWaitsForOtherReplays(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = true
		c.Clusters[0].Failover.CommitOutcome = config.CommitOutcomeUnknown
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.ri (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)")
	mustExec(t, root, "INSERT INTO sbtest.ri (v) VALUES (0)")
	h.waitReplicated(1, 2)
	db := h.db("rw", "sbtest", nil)
	open := func() *sql.Conn {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	insert := func(c *sql.Conn, v int) int64 { t.Helper(); return insertRI(t, ctx, c, v) }
	a, b := open(), open()
	mustExec(t, b, "BEGIN")
	b1 := insert(b, 21)
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "SELECT SLEEP(0.5)")
	a1 := insert(a, 11)
	if a1 <= b1 {
		t.Fatalf("ids %d (A) and %d (B): want A's after B's", a1, b1)
	}
	before := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK))
	n2 := h.direct(1)
	mustExec(t, n2, "STOP SLAVE")
	mustExec(t, n2, "SET GLOBAL read_only = 0")
	h.srv.SetClusterState(sandboxState(h.c, 2, 1, 0, 2))
	waitForWithin(t, 10*time.Second, "B's replay", func() bool {
		return ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK))-before >= 1
	})
	b2 := insert(b, 22)
	if b2 == a1 {
		t.Fatalf("B's INSERT after its replay got id %d, the one A's client was told and A's replay gives again", b2)
	}
	for name, c := range map[string]*sql.Conn{"A": a, "B": b} {
		if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatalf("COMMIT of %s after the replays: %v", name, err)
		}
	}
	var n int
	if err := n2.QueryRowContext(ctx, "SELECT COUNT(*) FROM sbtest.ri WHERE (id, v) IN ((?, 11), (?, 21), (?, 22))", a1, b1, b2).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows of A and B on the new primary: %d of 3 (%v)", n, err)
	}
}

type execer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

// insertRI inserts a row with v into ri and returns its id. A text
// statement: a prepared one's COM_STMT_CLOSE, which has no answer, could
// reach the proxy after the primary's connection closed and replay the
// transaction as a command would.
func insertRI(t *testing.T, ctx context.Context, q execer, v int) int64 {
	t.Helper()
	res, err := q.ExecContext(ctx, fmt.Sprintf("INSERT INTO ri (v) VALUES (%d)", v))
	if err != nil {
		t.Fatalf("INSERT %d: %v", v, err)
	}
	id, _ := res.LastInsertId()
	return id
}

// TestStatementSentAgainWaitsForReplays: an autocommit INSERT in flight
// when the primary died, which the server provably never ran (forwarded
// to a frozen server whose kernel then resets the connection when it is
// killed), is sent again on the new primary only after the cluster's
// replays have taken their snapshots. Session A's transaction, idle when
// the primary dies, made a SELECT SLEEP(0.5) and then an INSERT that got
// id a1 on the old primary; its replay sleeps 0.5 s before it takes a1
// again. C's INSERT, sent again at once, would take a1 in that time and
// A's replay would then fail (its client was told a1). With the wait C
// gets a fresh id and A commits its row with a1.
func TestStatementSentAgainWaitsForReplays(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = true
		c.Clusters[0].Failover.CommitOutcome = config.CommitOutcomeUnknown
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.ri (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)")
	mustExec(t, root, "INSERT INTO sbtest.ri (v) VALUES (0)")
	h.waitReplicated(1, 2)
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	db := h.db("rw", "sbtest", nil)
	open := func() *sql.Conn {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, c := open(), open()
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "SELECT SLEEP(0.5)")
	a1 := insertRI(t, ctx, a, 11)

	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	type result struct {
		id  int64
		err error
	}
	cDone := make(chan result, 1)
	go func() {
		// Forwarded to the frozen server: it stays in the socket, unread.
		res, err := c.ExecContext(ctx, "INSERT INTO ri (v) VALUES (31)")
		var id int64
		if err == nil {
			id, _ = res.LastInsertId()
		}
		cDone <- result{id, err}
	}()
	time.Sleep(300 * time.Millisecond)
	reruns := ctrValue(h.srv.metrics.primaryLostRerun.WithLabelValues("main"))
	replays := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK))
	held := ctrValue(h.srv.metrics.primaryLostHeld.WithLabelValues("main"))
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	// A controller publishes the failover only after its probes found
	// the node dead; by then C's session has seen the reset of its
	// connection (published before it, the route change would cut the
	// command as one whose outcome is unknown).
	waitForWithin(t, 10*time.Second, "C's statement held for the failover", func() bool {
		return ctrValue(h.srv.metrics.primaryLostHeld.WithLabelValues("main"))-held >= 1
	})
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(done)
	var cr result
	select {
	case cr = <-cDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the INSERT the lost primary never read did not finish")
	}
	if cr.err != nil {
		t.Fatalf("the INSERT the lost primary never read: %v, want it sent to the new primary", cr.err)
	}
	if n := ctrValue(h.srv.metrics.primaryLostRerun.WithLabelValues("main")) - reruns; n != 1 {
		t.Fatalf("statements sent again: %v, want 1 (the test did not exercise the path)", n)
	}
	if cr.id == a1 {
		t.Fatalf("the INSERT sent again got id %d, the one A's client was told and A's replay must give again", cr.id)
	}
	if _, err := a.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT of A after its replay: %v", err)
	}
	if n := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayOK)) - replays; n != 1 {
		t.Fatalf("replays: %v, want 1", n)
	}
	var n int
	if err := h.direct(1).QueryRowContext(ctx, "SELECT COUNT(*) FROM sbtest.ri WHERE (id, v) IN ((?, 11), (?, 31))", a1, cr.id).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows of A and C on the new primary: %d of 2 (%v)", n, err)
	}
}
