package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-db/switchyard/internal/config"
)

// replayHarness is a sandbox and proxy with transaction replay on, a table
// sbtest.rp_t (id, v) and helpers to break a session's backend connection.
type replayHarness struct {
	*harness
	root *sql.DB // root on the current primary
}

func newReplayHarness(t *testing.T, maxStmts int, mut ...func(*config.Config)) *replayHarness {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.TransactionReplay = true
		c.Clusters[0].Failover.ReplayMaxStatements = maxStmts
		// No commit marker: a COMMIT in flight keeps the outcome-unknown
		// error (TestCommitOutcomeResolved resolves it).
		c.Clusters[0].Failover.CommitOutcome = config.CommitOutcomeUnknown
		for _, m := range mut {
			m(c)
		}
	})
	rh := &replayHarness{harness: h, root: h.direct(0)}
	mustExec(t, rh.root, "CREATE TABLE sbtest.rp_t (id INT PRIMARY KEY, v INT NOT NULL)")
	return rh
}

// promote makes node i the primary by hand, as a failover would (its
// replication stopped, writable), and publishes it at epoch.
func (rh *replayHarness) promote(i int, epoch int64) {
	rh.t.Helper()
	d := rh.direct(i)
	mustExec(rh.t, d, "STOP SLAVE")
	mustExec(rh.t, d, "SET GLOBAL read_only = 0")
	var serving []int
	for j := range rh.c.Nodes {
		if j != i {
			serving = append(serving, j)
		}
	}
	rh.srv.SetClusterState(sandboxState(rh.c, epoch, i, serving...))
	rh.root = d
}

// reset empties rp_t and fills it with rows (id, 10*id) for id in 1..n.
func (rh *replayHarness) reset(n int) {
	rh.t.Helper()
	mustExec(rh.t, rh.root, "DELETE FROM sbtest.rp_t")
	for i := 1; i <= n; i++ {
		mustExec(rh.t, rh.root, "INSERT INTO sbtest.rp_t VALUES (?, ?)", i, 10*i)
	}
}

// rows returns rp_t as "id=v" pairs read on the primary directly.
func (rh *replayHarness) rows() string {
	rh.t.Helper()
	rs, err := rh.root.Query("SELECT id, v FROM sbtest.rp_t ORDER BY id")
	if err != nil {
		rh.t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id, v int
		if err := rs.Scan(&id, &v); err != nil {
			rh.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d=%d", id, v))
	}
	return strings.Join(out, " ")
}

// threadID returns the backend thread id of conn (a session through the
// proxy).
func threadID(t *testing.T, conn *sql.Conn) int64 {
	t.Helper()
	var id int64
	if err := conn.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// killBackend kills backend thread id from a root connection and waits
// until the server has dropped it.
func (rh *replayHarness) killBackend(id int64) {
	rh.t.Helper()
	mustExec(rh.t, rh.root, fmt.Sprintf("KILL CONNECTION %d", id))
	for i := 0; i < 100; i++ {
		var n int
		if err := rh.root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
			rh.t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	rh.t.Fatalf("backend thread %d still there after KILL", id)
}

func (rh *replayHarness) replays(result string) float64 {
	return ctrValue(rh.srv.metrics.replays.WithLabelValues("rw", result))
}

// TestTransactionReplay: with failover.transaction_replay on, a transaction
// whose backend connection is killed while it is open (text and prepared
// statements, a prepared statement closed inside it, a SET TRANSACTION
// before it) is replayed on the primary and commits exactly its rows with
// no client error, as does one idle when the primary changes (replayed on
// the new primary); one whose replayed SELECT reads rows another session
// changed meanwhile gets the rolled-back error naming that statement and
// leaves nothing behind; one longer than replay_max_statements gets the
// rolled-back error naming the bound; and, with failover.commit_outcome
// unknown, a COMMIT in flight when the primary changes gets the
// outcome-unknown error, never a replay.
func TestTransactionReplay(t *testing.T) {
	rh := newReplayHarness(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := rh.db("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = false })

	t.Run("replayed", func(t *testing.T) {
		rh.reset(3)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		id := threadID(t, conn)
		mustExec(t, conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
		mustExec(t, conn, "START TRANSACTION")
		var v int
		if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = ?", 1).Scan(&v); err != nil || v != 10 {
			t.Fatalf("select in tx: %d %v", v, err)
		}
		mustExec(t, conn, "UPDATE rp_t SET v = v + 1 WHERE id = ?", 2) // prepared, executed, closed
		mustExec(t, conn, "INSERT INTO rp_t VALUES (4, 40)")
		// Longer than the client read buffer (4 KiB): recorded whole.
		mustExec(t, conn, "UPDATE rp_t SET v = v + 5 + 0 * LENGTH('"+strings.Repeat("x", 6000)+"') WHERE id = 3")
		ins, err := conn.PrepareContext(ctx, "INSERT INTO rp_t VALUES (?, ?)")
		if err != nil {
			t.Fatal(err)
		}
		defer ins.Close()
		if _, err := ins.ExecContext(ctx, 5, 50); err != nil {
			t.Fatal(err)
		}
		before := rh.replays(replayOK)
		rh.killBackend(id)
		// The next statement finds the connection gone: the transaction
		// is replayed on a new connection and the statement runs there.
		if _, err := ins.ExecContext(ctx, 6, 60); err != nil {
			t.Fatalf("statement after the backend was killed: %v (want it replayed)", err)
		}
		mustExec(t, conn, "UPDATE rp_t SET v = v + 1 WHERE id = 3")
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatalf("COMMIT after the replay: %v", err)
		}
		if got, want := rh.rows(), "1=10 2=21 3=36 4=40 5=50 6=60"; got != want {
			t.Fatalf("rows after the replayed transaction: %s, want %s", got, want)
		}
		if n := rh.replays(replayOK) - before; n != 1 {
			t.Fatalf("%v replays counted, want 1", n)
		}
		// The session goes on normally afterwards.
		mustExec(t, conn, "UPDATE rp_t SET v = 0 WHERE id = 1")
		if got := rh.rows(); !strings.HasPrefix(got, "1=0 ") {
			t.Fatalf("autocommit write after the replay: rows %s", got)
		}
	})

	t.Run("auto-increment ids kept", func(t *testing.T) {
		mustExec(t, rh.root, "CREATE TABLE IF NOT EXISTS sbtest.rp_ai (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)")
		mustExec(t, rh.root, "DELETE FROM sbtest.rp_ai")
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// A failure below must not hand the next subtest a connection
		// inside this transaction.
		defer func() { _, _ = conn.ExecContext(ctx, "ROLLBACK") }()
		id := threadID(t, conn)
		mustExec(t, conn, "BEGIN")
		lastID := func(r sql.Result, err error) int64 {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			n, err := r.LastInsertId()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		a := lastID(conn.ExecContext(ctx, "INSERT INTO rp_ai (v) VALUES (1)"))           // text, generated
		b := lastID(conn.ExecContext(ctx, "INSERT INTO rp_ai (v) VALUES (?)", 2))        // prepared, generated
		c := lastID(conn.ExecContext(ctx, "INSERT INTO rp_ai (v) VALUES (3), (4)"))      // several rows: the first id
		lastID(conn.ExecContext(ctx, "INSERT INTO rp_ai (id, v) VALUES (?, 5)", a+1000)) // named, not generated
		mustExec(t, conn, "UPDATE rp_ai SET v = v + 10 WHERE id = ?", b)                 // uses an id the client was told
		// The killed transaction is rolled back; its ids are not given back.
		// The replay may come before the next INSERT: the COM_STMT_CLOSE
		// the driver sent after the UPDATE (no answer) can reach the
		// proxy after the KILL and find the connection gone.
		before := rh.replays(replayOK)
		rh.killBackend(id)
		other := lastID(rh.root.Exec("INSERT INTO sbtest.rp_ai (v) VALUES (100)")) // another session, meanwhile
		d := lastID(conn.ExecContext(ctx, "INSERT INTO rp_ai (v) VALUES (6)"))
		// Counted once the statement in flight ran again and its answer
		// was relayed: it may trail the client's answer a little.
		for deadline := time.Now().Add(2 * time.Second); rh.replays(replayOK)-before < 1 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := rh.replays(replayOK) - before; n != 1 {
			t.Fatalf("%v replays counted, want 1 (the ids the client was told were not given again)", n)
		}
		if d == a+1000 || d == a || d == b || d == c || d == c+1 || d == other {
			t.Fatalf("insert after the replay got id %d, one already used (a %d, b %d, c %d, other %d)", d, a, b, c, other)
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatalf("COMMIT after the replay: %v", err)
		}
		rs, err := rh.root.Query("SELECT id, v FROM sbtest.rp_ai ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		got := map[int64]int{}
		for rs.Next() {
			var i int64
			var v int
			if err := rs.Scan(&i, &v); err != nil {
				t.Fatal(err)
			}
			got[i] = v
		}
		want := map[int64]int{a: 1, b: 12, c: 3, c + 1: 4, a + 1000: 5, other: 100, d: 6}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rows after the replayed transaction %v, want %v", got, want)
		}
		// Nothing forced is left on the session: a new autocommit insert
		// gets a fresh id.
		if e := lastID(conn.ExecContext(ctx, "INSERT INTO rp_ai (v) VALUES (7)")); want[e] != 0 {
			t.Fatalf("autocommit insert after the replay got id %d, already used", e)
		}
	})

	t.Run("different result", func(t *testing.T) {
		rh.reset(3)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		id := threadID(t, conn)
		mustExec(t, conn, "BEGIN")
		mustExec(t, conn, "UPDATE rp_t SET v = 99 WHERE id = 1")
		var v int
		if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = 2").Scan(&v); err != nil || v != 20 {
			t.Fatalf("select in tx: %d %v", v, err)
		}
		before := rh.replays(replayMismatch)
		rh.killBackend(id)
		mustExec(t, rh.root, "UPDATE sbtest.rp_t SET v = 21 WHERE id = 2") // another session, meanwhile
		_, err = conn.ExecContext(ctx, "INSERT INTO rp_t VALUES (7, 70)")
		code, msg := mysqlErr(err)
		if code != 1105 || !strings.Contains(msg, "your transaction was rolled back") ||
			!strings.Contains(msg, "could not be replayed") || !strings.Contains(msg, "statement 3") ||
			!strings.Contains(msg, "SELECT v FROM rp_t WHERE id = 2") {
			t.Fatalf("statement after a replay that differs: %v, want 1105 saying the transaction was rolled back because statement 3 differed", err)
		}
		if n := rh.replays(replayMismatch) - before; n != 1 {
			t.Fatalf("%v mismatches counted, want 1", n)
		}
		if got, want := rh.rows(), "1=10 2=21 3=30"; got != want {
			t.Fatalf("rows after the failed replay: %s, want %s (nothing of the transaction kept)", got, want)
		}
		// The session continues on the primary, out of any transaction.
		mustExec(t, conn, "INSERT INTO rp_t VALUES (8, 80)")
		if got := rh.rows(); !strings.HasSuffix(got, " 8=80") {
			t.Fatalf("autocommit write after the failed replay: rows %s", got)
		}
	})

	t.Run("over replay_max_statements", func(t *testing.T) {
		rh.reset(3)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		id := threadID(t, conn)
		mustExec(t, conn, "BEGIN")
		for i := 0; i < 9; i++ {
			mustExec(t, conn, "UPDATE rp_t SET v = v + 1 WHERE id = 3")
		}
		before := rh.replays(replayLimit)
		rh.killBackend(id)
		_, err = conn.ExecContext(ctx, "UPDATE rp_t SET v = v + 1 WHERE id = 3")
		code, msg := mysqlErr(err)
		if code != 1105 || !strings.Contains(msg, "your transaction was rolled back") || !strings.Contains(msg, "failover.replay_max_statements") {
			t.Fatalf("statement after a transaction over the bound lost its backend: %v, want 1105 naming failover.replay_max_statements", err)
		}
		if n := rh.replays(replayLimit) - before; n != 1 {
			t.Fatalf("%v limit refusals counted, want 1", n)
		}
		if got, want := rh.rows(), "1=10 2=20 3=30"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
	})

	t.Run("primary changed while idle in a transaction", func(t *testing.T) {
		rh.reset(3)
		rh.waitReplicated(1, 2)
		old := rh.root
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		mustExec(t, conn, "BEGIN")
		mustExec(t, conn, "UPDATE rp_t SET v = 11 WHERE id = 1")
		var v int
		if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = 2").Scan(&v); err != nil || v != 20 {
			t.Fatalf("select in tx: %d %v", v, err)
		}
		before := rh.replays(replayOK)
		rh.promote(1, 2)
		mustExec(t, conn, "INSERT INTO rp_t VALUES (4, 40)")
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatalf("COMMIT after the replay on the new primary: %v", err)
		}
		if id := serverID(t, conn); id != 2 {
			t.Fatalf("session after the replay answered by server_id %d, want 2", id)
		}
		if got, want := rh.rows(), "1=11 2=20 3=30 4=40"; got != want {
			t.Fatalf("rows on the new primary: %s, want %s", got, want)
		}
		if n := rh.replays(replayOK) - before; n != 1 {
			t.Fatalf("%v replays counted, want 1", n)
		}
		rh.root = old
		if got, want := rh.rows(), "1=10 2=20 3=30"; got != want {
			t.Fatalf("rows on the old primary: %s, want %s (its transaction rolled back)", got, want)
		}
		rh.root = rh.direct(1)
	})

	t.Run("COMMIT in flight", func(t *testing.T) {
		rh.reset(3)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		mustExec(t, conn, "BEGIN")
		mustExec(t, conn, "UPDATE rp_t SET v = 0 WHERE id = 1")
		// A global read lock makes the COMMIT wait on the server.
		lock, err := rh.root.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		mustExec(t, lock, "FLUSH TABLES WITH READ LOCK")
		done := make(chan error, 1)
		go func() {
			_, err := conn.ExecContext(ctx, "COMMIT")
			done <- err
		}()
		waitForWithin(t, 10*time.Second, "the COMMIT waiting for the global read lock", func() bool {
			var n int
			_ = rh.root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'COMMIT'").Scan(&n)
			return n == 1
		})
		unknown := ctrValue(rh.srv.metrics.outcomeUnknown.WithLabelValues("rw"))
		attempts := ctrValue(rh.srv.metrics.replayAttempts.WithLabelValues("rw"))
		// The primary changes (a failover by hand: node3 is promoted).
		rh.promote(2, 3)
		var cerr error
		select {
		case cerr = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("COMMIT still waiting 10 s after the primary changed")
		}
		mustExec(t, lock, "UNLOCK TABLES")
		code, msg := mysqlErr(cerr)
		if code != 1105 || !strings.Contains(msg, "the outcome of COMMIT is unknown (it may or may not have been committed): the connection to primary") {
			t.Fatalf("COMMIT in flight when the primary changed: %v, want 1105 saying its outcome is unknown", cerr)
		}
		if d := ctrValue(rh.srv.metrics.outcomeUnknown.WithLabelValues("rw")) - unknown; d != 1 {
			t.Fatalf("outcome-unknown counted %v times, want 1", d)
		}
		if d := ctrValue(rh.srv.metrics.replayAttempts.WithLabelValues("rw")) - attempts; d != 0 {
			t.Fatalf("%v replays attempted for a COMMIT in flight, want 0", d)
		}
		// The session continues on the new primary.
		if id := serverID(t, conn); id != 3 {
			t.Fatalf("session after the outcome-unknown error answered by server_id %d, want 3", id)
		}
	})
}

// ctrValue reads a counter's value.
func ctrValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// waitForWithin polls cond every 20 ms until it holds or d passes.
func waitForWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTxKind: what a statement does to the transaction around it decides
// whether it may run again after its primary was lost.
func TestTxKind(t *testing.T) {
	for _, c := range []struct {
		q    string
		want stmtKind
		word string
	}{
		{"SELECT 1", kindRead, "SELECT"},
		{"  /* c */ (SELECT 1)", kindRead, ""},
		{"with x as (select 1) select * from x", kindRead, "with"},
		{"INSERT INTO t VALUES (1)", kindWrite, "INSERT"},
		{"update t set v=1", kindWrite, "update"},
		{"SAVEPOINT a", kindWrite, "SAVEPOINT"},
		{"ROLLBACK TO SAVEPOINT a", kindWrite, "ROLLBACK"},
		{"rollback work to a", kindWrite, "rollback"},
		{"ROLLBACK", kindRollback, "ROLLBACK"},
		{"ROLLBACK AND CHAIN", kindEnds, "ROLLBACK"},
		{"BEGIN", kindBegin, "BEGIN"},
		{"begin work", kindBegin, "begin"},
		{"BEGIN NOT ATOMIC SELECT 1; END", kindEnds, "BEGIN"},
		{"START TRANSACTION READ ONLY", kindBegin, "START"},
		{"START TRANSACTION WITH CONSISTENT SNAPSHOT", kindBegin, "START"},
		{"START SLAVE", kindEnds, "START"},
		{"COMMIT", kindEnds, "COMMIT"},
		{"commit work", kindEnds, "commit"},
		{"XA END 'x'", kindEnds, "XA"},
		{"CREATE TABLE t (a INT)", kindEnds, "CREATE"},
		{"SET autocommit=1", kindEnds, "SET"},
		{"LOCK TABLES t WRITE", kindEnds, "LOCK"},
		{"CALL p()", kindEnds, "CALL"},
		{"", kindEnds, ""},
	} {
		var fl flight
		if got := txKind([]byte(c.q), &fl); got != c.want || string(fl.word[:fl.wlen]) != c.word {
			t.Errorf("txKind(%q) = %d, word %q; want %d, %q", c.q, got, fl.word[:fl.wlen], c.want, c.word)
		}
	}
}
