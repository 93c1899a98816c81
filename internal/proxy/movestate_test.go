package proxy

import (
	"context"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// First-use finding: an idle session with autocommit=0 came back from a
// switchover with autocommit=1, so its ROLLBACK undid nothing. After a real
// reparent the session keeps autocommit=0 (no transaction was open yet),
// time_zone, a user variable and sql_mode, and INSERT + ROLLBACK leaves no
// row. A session holding GET_LOCK is not moved silently: one clear error,
// then it is closed.
func TestMoveKeepsAutocommitOffAndRefusesUserLocks(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	mustExec(t, db, "CREATE TABLE rb (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET autocommit=0", "SET time_zone='+05:00'", "SET @x=42", "SET sql_mode='ANSI'"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	locker, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if rows := locker.query("SELECT GET_LOCK('switchyard_test_lock', 0)"); rows[0][0] != "1" {
		t.Fatalf("GET_LOCK: %v", rows)
	}
	h.waitReplicated(1, 2)
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))

	var sid, ac, x int
	var tz, mode string
	if err := conn.QueryRowContext(ctx, "SELECT @@server_id, @@autocommit, @@time_zone, @x, @@sql_mode").Scan(&sid, &ac, &tz, &x, &mode); err != nil {
		t.Fatal(err)
	}
	if sid != 2 || ac != 0 || tz != "+05:00" || x != 42 || !strings.Contains(mode, "ANSI_QUOTES") {
		t.Fatalf("after the move: server_id=%d autocommit=%d time_zone=%s @x=%d sql_mode=%s", sid, ac, tz, x, mode)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO rb (v) VALUES ('must-roll-back')"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := h.direct(1).QueryRowContext(ctx, "SELECT COUNT(*) FROM sbtest.rb").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after INSERT + ROLLBACK with autocommit=0: %d (%v)", n, err)
	}

	locker.cmd(gomysql.COM_QUERY, []byte("SELECT IS_USED_LOCK('switchyard_test_lock')")...)
	p := locker.next()
	if e := describe(p); p[0] != gomysql.ERR_HEADER || !strings.Contains(e, "cannot be moved") || !strings.Contains(e, "GET_LOCK") {
		t.Fatalf("session holding GET_LOCK after the move: %s", e)
	}
	expectClosed(t, locker.c, "session holding GET_LOCK")
}

// An idle session moved by a switchover answers LAST_INSERT_ID(),
// ROW_COUNT() and FOUND_ROWS() as it did before the move (they were 0 and
// 1 on the new connection), and where the proxy cannot know the answer
// (FOUND_ROWS() after SQL_CALC_FOUND_ROWS, the previous statement's
// warnings) the statement gets a clear error, never the new connection's
// answer.
func TestMoveKeepsDiagnostics(t *testing.T) {
	h := newHarness(t, nil)
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.md (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	mustExec(t, root, "INSERT INTO sbtest.md (v) SELECT seq FROM sbtest.seq_1_to_50")

	dial := func() *rawConn {
		rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	ins, found, count, calc, warn := dial(), dial(), dial(), dial(), dial()
	ins.query("INSERT INTO md (v) VALUES (100)")
	ins.query("INSERT INTO md (v) VALUES (101)")
	want := ins.query("SELECT LAST_INSERT_ID()")[0][0]
	ins.query("UPDATE md SET v = v WHERE id = 1") // generates no id: LAST_INSERT_ID() stays
	if rows := found.query("SELECT id FROM md WHERE id <= 50"); len(rows) != 50 {
		t.Fatalf("%d rows", len(rows))
	}
	found.query("DO 1") // an OK keeps FOUND_ROWS()
	count.query("UPDATE md SET v = v + 1 WHERE id <= 3")
	calc.query("SELECT SQL_CALC_FOUND_ROWS id FROM md LIMIT 1")
	warn.query("SELECT CAST('12abc' AS INT)")

	h.waitReplicated(1, 2)
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))

	if got := ins.query("SELECT LAST_INSERT_ID(), @@server_id"); got[0][0] != want || got[0][1] != "2" {
		t.Fatalf("after the move: LAST_INSERT_ID(), @@server_id = %v, want %s, 2", got[0], want)
	}
	if got := found.query("SELECT FOUND_ROWS() AS n"); got[0][0] != "50" {
		t.Fatalf("after the move: FOUND_ROWS() = %v, want 50", got)
	}
	if got := count.query("SELECT ROW_COUNT()"); got[0][0] != "3" {
		t.Fatalf("after the move: ROW_COUNT() = %v, want 3", got)
	}
	for name, rc := range map[string]*rawConn{"FOUND_ROWS() after SQL_CALC_FOUND_ROWS": calc, "SHOW WARNINGS": warn} {
		q := "SELECT FOUND_ROWS()"
		if rc == warn {
			q = "SHOW WARNINGS"
		}
		rc.cmd(gomysql.COM_QUERY, []byte(q)...)
		p := rc.next()
		if e := describe(p); p[0] != gomysql.ERR_HEADER || !strings.Contains(e, "moved") {
			t.Fatalf("%s after the move: %s, want an error saying the session moved", name, e)
		}
		// The session goes on.
		if got := rc.query("SELECT @@server_id"); got[0][0] != "2" {
			t.Fatalf("%s: next statement on server %v", name, got)
		}
	}
}
