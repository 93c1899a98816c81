package proxy

import (
	"context"
	"database/sql"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestReplaySnapshotBeforeHeldStatements: three sessions of the rw listener
// when the primary is killed — A in a transaction that read rows 1 and 2
// (its next read waits for the failover, so it is replayed), B outside any
// transaction (its UPDATE of row 1 is held), C in a transaction that
// updated row 2 (its COMMIT is held, so it is replayed and committed). A's
// replay runs a SELECT SLEEP(0.3) before its reads, so that anything
// committed on the new primary in those 300 ms would be in its snapshot
// if that were taken at its first read. The replay of A opens its
// transaction WITH CONSISTENT SNAPSHOT and B's UPDATE and C's COMMIT wait
// until it has: A reads what it read before the crash (10, 20) and
// commits, B's and C's writes land after it. Before, B's UPDATE committed
// while A's replay slept and A was rolled back as a mismatch. D, in a
// transaction that read row 1, sends nothing until 150 ms after the new
// primary is published: B's UPDATE waits for it too (it was counted as a
// transaction open on the lost node), and its replay reads 10. With a
// write in A's transaction (after its reads) the replay cannot take its
// snapshot at its opener: B and C then wait until it has run again.
func TestReplaySnapshotBeforeHeldStatements(t *testing.T) {
	t.Run("reads only", func(t *testing.T) { replaySnapshotScenario(t, false) })
	t.Run("with a write", func(t *testing.T) { replaySnapshotScenario(t, true) })
}

func replaySnapshotScenario(t *testing.T, write bool) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(20 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = true
		c.Clusters[0].Failover.CommitOutcome = config.CommitOutcomeUnknown
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	db := h.db("rw", "sbtest", nil)
	for _, q := range []string{"CREATE TABLE rs_t (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO rs_t VALUES (1, 10), (2, 20), (3, 30)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	node2 := replicaWithTable(t, h, 1, "sbtest.rs_t")
	waitRows(t, node2, "SELECT COUNT(*) FROM sbtest.rs_t", 3)
	conns := make([]*sql.Conn, 4)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	a, b, c, d := conns[0], conns[1], conns[2], conns[3]
	read := func(conn *sql.Conn, q string) (int, error) {
		var v int
		err := conn.QueryRowContext(ctx, q).Scan(&v)
		return v, err
	}
	mustExec(t, a, "BEGIN")
	if _, err := read(a, "SELECT SLEEP(0.3)"); err != nil {
		t.Fatal(err)
	}
	v1, err1 := read(a, "SELECT v FROM rs_t WHERE id = 1")
	v2, err2 := read(a, "SELECT v FROM rs_t WHERE id = 2")
	if err1 != nil || err2 != nil || v1 != 10 || v2 != 20 {
		t.Fatalf("A's reads before the kill: %d, %d (%v, %v)", v1, v2, err1, err2)
	}
	if write {
		mustExec(t, a, "UPDATE rs_t SET v = v + 1 WHERE id = 3")
	}
	if _, err := read(b, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, "BEGIN")
	mustExec(t, c, "UPDATE rs_t SET v = 21 WHERE id = 2")
	mustExec(t, d, "BEGIN")
	if v, err := read(d, "SELECT v FROM rs_t WHERE id = 1"); err != nil || v != 10 {
		t.Fatalf("D's read before the kill: %d, %v", v, err)
	}
	waitRows(t, node2, "SELECT COUNT(*) FROM sbtest.rs_t WHERE v IN (10, 20)", 2)

	held := ctrValue(h.srv.metrics.primaryLostHeld.WithLabelValues("main"))
	mismatches := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayMismatch))
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		v1, v2 int
		err    error
	}
	aDone := make(chan answer, 1)
	go func() {
		var r answer
		if r.v1, r.err = read(a, "SELECT v FROM rs_t WHERE id = 1"); r.err == nil {
			r.v2, r.err = read(a, "SELECT v FROM rs_t WHERE id = 2")
		}
		if r.err == nil {
			_, r.err = a.ExecContext(ctx, "COMMIT")
		}
		aDone <- r
	}()
	// A first: its replay is counted before B's and C's statements are
	// held, as in a crash (its next statement came first).
	waitForWithin(t, 10*time.Second, "A's statement held", func() bool {
		return ctrValue(h.srv.metrics.primaryLostHeld.WithLabelValues("main")) >= held+1
	})
	bDone, cDone := make(chan error, 1), make(chan error, 1)
	go func() { _, err := b.ExecContext(ctx, "UPDATE rs_t SET v = 11 WHERE id = 1"); bDone <- err }()
	go func() { _, err := c.ExecContext(ctx, "COMMIT"); cDone <- err }()
	waitForWithin(t, 10*time.Second, "B's and C's statements held", func() bool {
		return ctrValue(h.srv.metrics.primaryLostHeld.WithLabelValues("main")) >= held+3
	})
	makeWritable(t, node2)
	failing, published := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(published)
	// D sends nothing until after the new primary is published: it
	// learns of the loss only then, but it was counted from the start.
	time.Sleep(150 * time.Millisecond)
	dv, derr := read(d, "SELECT v FROM rs_t WHERE id = 1")
	if derr == nil {
		_, derr = d.ExecContext(ctx, "COMMIT")
	}
	if derr != nil || dv != 10 {
		t.Fatalf("D after the failover: row 1 = %d, %v; want 10 (its replay's snapshot taken before B's UPDATE committed)", dv, derr)
	}

	wait := func(ch <-chan error, what string) error {
		select {
		case err := <-ch:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s still waiting 20 s after the new primary was published", what)
			return nil
		}
	}
	var ra answer
	select {
	case ra = <-aDone:
	case <-time.After(20 * time.Second):
		t.Fatal("A still waiting 20 s after the new primary was published")
	}
	if ra.err != nil || ra.v1 != 10 || ra.v2 != 20 {
		t.Fatalf("A after the failover: rows 1, 2 = %d, %d, %v; want 10, 20 and its COMMIT (replayed on its snapshot taken before B and C wrote)", ra.v1, ra.v2, ra.err)
	}
	if err := wait(bDone, "B's UPDATE"); err != nil {
		t.Fatalf("B's held UPDATE: %v", err)
	}
	if err := wait(cDone, "C's COMMIT"); err != nil {
		t.Fatalf("C's COMMIT after its replay: %v", err)
	}
	if d := ctrValue(h.srv.metrics.replays.WithLabelValues("rw", replayMismatch)) - mismatches; d != 0 {
		t.Fatalf("%v replays rolled back as mismatches, want 0", d)
	}
	want := "SELECT COUNT(*) FROM sbtest.rs_t WHERE (id, v) IN ((1, 11), (2, 21), (3, 30))"
	if write {
		want = "SELECT COUNT(*) FROM sbtest.rs_t WHERE (id, v) IN ((1, 11), (2, 21), (3, 31))"
	}
	waitRows(t, node2, want, 3)
}

// TestSnapshotOpener: which replays take their snapshot at their opener,
// and with what text.
func TestSnapshotOpener(t *testing.T) {
	begin := &stmtInfo{text: []byte("BEGIN")}
	sel := &stmtInfo{text: []byte("SELECT c FROM sbtest1 WHERE id=?"), params: 1}
	for _, c := range []struct {
		name  string
		stmts []any // string: COM_QUERY text; *stmtInfo: an execute
		idx   int
		text  string
		found bool
		cs    bool
	}{
		{"text BEGIN, reads", []any{"begin", "SELECT 1", "select v from t where id = 2"}, 0, "START TRANSACTION WITH CONSISTENT SNAPSHOT", true, true},
		{"prepared BEGIN, prepared read", []any{begin, sel}, 0, "START TRANSACTION WITH CONSISTENT SNAPSHOT", true, true},
		{"SET TRANSACTION first", []any{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION READ ONLY", "SELECT 1"}, 1, "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT", true, true},
		{"a write", []any{"BEGIN", "SELECT 1", "UPDATE t SET v = 1"}, 0, "", true, false},
		{"a locking read", []any{"BEGIN", "SELECT v FROM t WHERE id = 1 FOR  UPDATE"}, 0, "", true, false},
		{"lock in share mode", []any{"BEGIN", "select v from t lock in share mode"}, 0, "", true, false},
		{"autocommit=0 start", []any{"SELECT 1", "SELECT 2"}, 0, "", false, false},
		{"BEGIN with a clause", []any{"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", "SELECT 1"}, 0, "", false, false},
	} {
		r := newReplayLog(1<<20, 256)
		for _, x := range c.stmts {
			switch v := x.(type) {
			case string:
				r.add(append([]byte{mysql.COM_QUERY}, v...), 0, nil)
			case *stmtInfo:
				p := make([]byte, 10)
				p[0] = mysql.COM_STMT_EXECUTE
				r.add(p, 1, v)
			}
		}
		idx, text, found, cs := r.snapshotOpener(len(r.entries))
		if idx != c.idx || string(text) != c.text || found != c.found || cs != c.cs {
			t.Errorf("%s: snapshotOpener = %d, %q, found %v, cs %v; want %d, %q, %v, %v", c.name, idx, text, found, cs, c.idx, c.text, c.found, c.cs)
		}
	}
}

// TestDescribeArgs: the parameters of a recorded execute, for the log of
// a mismatch.
func TestDescribeArgs(t *testing.T) {
	st := &stmtInfo{text: []byte("SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? AND c = ? AND k = ?"), params: 4}
	p := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0}
	p = append(p, 0x08) // null bitmap: the 4th is NULL
	p = append(p, 1)    // types follow
	p = append(p, mysql.MYSQL_TYPE_LONG, 0, mysql.MYSQL_TYPE_LONGLONG, 0x80, mysql.MYSQL_TYPE_VAR_STRING, 0, mysql.MYSQL_TYPE_LONG, 0)
	p = binary.LittleEndian.AppendUint32(p, uint32(0xffffffff)) // -1
	p = binary.LittleEndian.AppendUint64(p, 9004)
	p = append(p, 3, 'a', 'b', 'c')
	r := newReplayLog(1<<20, 256)
	r.add(p, 1, st)
	if got, want := r.describeArgs(&r.entries[0]), `(-1, 9004, "abc", NULL)`; got != want {
		t.Fatalf("describeArgs = %s, want %s", got, want)
	}
}
