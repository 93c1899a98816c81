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
