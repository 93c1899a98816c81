package proxy

import (
	"context"
	"database/sql"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// A pinned go-sql-driver connection (no CLIENT_SESSION_TRACK) sets session
// variables, a user variable, a default schema and prepared statements
// (with a gap in the ids, so the new backend numbers them otherwise); after
// a real reparent it finds all of it on node2 without an error.
func TestMigrationKeepsSessionState(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"SET @@session.sql_mode='ANSI_QUOTES,NO_ENGINE_SUBSTITUTION'",
		"USE otherdb",
		"SET time_zone='+03:00'",
		"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
		"SET NAMES latin1 COLLATE latin1_bin",
		"SET SESSION max_statement_time=30, wait_timeout=1234",
		"SET @u = 'hello', @n = 42",
		"SET autocommit=0",
		"COMMIT",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	p1, err := conn.PrepareContext(ctx, "SELECT ? + 1")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := conn.PrepareContext(ctx, "SELECT @@server_id")
	if err != nil {
		t.Fatal(err)
	}
	p1.Close() // leaves a gap: p2 keeps id 2, the new backend will call it 1
	p3, err := conn.PrepareContext(ctx, "SELECT CONCAT(?, 'x')")
	if err != nil {
		t.Fatal(err)
	}

	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))

	var sid int
	if err := p2.QueryRowContext(ctx).Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("prepared statement after the move: server_id %d, %v", sid, err)
	}
	var s3 string
	if err := p3.QueryRowContext(ctx, "a").Scan(&s3); err != nil || s3 != "ax" {
		t.Fatalf("second prepared statement after the move: %q, %v", s3, err)
	}
	var mode, schema, tz, iso, cs, coll, u string
	var maxTime float64
	var wait, ac, n int
	err = conn.QueryRowContext(ctx, `SELECT @@session.sql_mode, DATABASE(), @@session.time_zone, @@session.tx_isolation,
		@@session.character_set_client, @@session.collation_connection, @@session.max_statement_time, @@session.wait_timeout,
		@@session.autocommit, @u, @n`).Scan(&mode, &schema, &tz, &iso, &cs, &coll, &maxTime, &wait, &ac, &u, &n)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mode, "ANSI_QUOTES") || schema != "otherdb" || tz != "+03:00" || iso != "READ-COMMITTED" ||
		cs != "latin1" || coll != "latin1_bin" || maxTime != 30 || wait != 1234 || ac != 0 || u != "hello" || n != 42 {
		t.Fatalf("session state after the move: sql_mode=%s schema=%s time_zone=%s isolation=%s charset=%s collation=%s max_statement_time=%v wait_timeout=%d autocommit=%d @u=%s @n=%d",
			mode, schema, tz, iso, cs, coll, maxTime, wait, ac, u, n)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil { // autocommit=0 opened a transaction
		t.Fatal(err)
	}
	// A statement prepared after the move gets an id of its own.
	p4, err := conn.PrepareContext(ctx, "SELECT ? * 2")
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := p4.QueryRowContext(ctx, 21).Scan(&v); err != nil || v != 42 {
		t.Fatalf("statement prepared after the move: %d, %v", v, err)
	}
	if err := p2.QueryRowContext(ctx).Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("old statement after a new prepare: %d, %v", sid, err)
	}
	p2.Close()
	p3.Close()
	p4.Close()
	if got := counterValue(t, h, "switchyard_proxy_session_migrations_total"); got < 1 {
		t.Fatalf("migrations counted: %v", got)
	}
}

// A client that negotiated CLIENT_SESSION_TRACK sees in its OK packets the
// state its own settings track (time_zone by default, not sql_mode); a
// session with a temporary table cannot be rebuilt: it
// gets one clear error and is closed, and that is counted.
func TestMigrationTrackingClientAndUnmovable(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	tracking, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", mysql.CLIENT_SESSION_TRACK|mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		t.Fatal(err)
	}
	defer tracking.Close()
	tracking.cmd(mysql.COM_QUERY, []byte("SET @@session.time_zone='+03:00', @@session.sql_mode='ANSI_QUOTES'")...)
	p := tracking.next()
	if p[0] != mysql.OK_HEADER || !strings.Contains(string(p), "time_zone") {
		t.Fatalf("tracking client: OK without session state: %s", describe(p))
	}
	if strings.Contains(string(p), "sql_mode") {
		t.Fatalf("tracking client: OK reports sql_mode, which its settings do not track: %q", p)
	}
	plain, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.cmd(mysql.COM_QUERY, []byte("SET @@session.sql_mode='ANSI_QUOTES'")...)
	if p := plain.next(); p[0] != mysql.OK_HEADER || strings.Contains(string(p), "sql_mode") {
		t.Fatalf("plain client got session state it did not ask for: %x", p)
	}
	temp, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer temp.Close()
	temp.query("CREATE TEMPORARY TABLE tt (a INT)")

	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))

	if rows := tracking.query("SELECT @@server_id, @@session.sql_mode"); rows[0][0] != "2" || !strings.Contains(rows[0][1], "ANSI_QUOTES") {
		t.Fatalf("tracking client after the move: %v", rows)
	}
	if rows := plain.query("SELECT @@server_id, @@session.sql_mode"); rows[0][0] != "2" || !strings.Contains(rows[0][1], "ANSI_QUOTES") {
		t.Fatalf("plain client after the move: %v", rows)
	}
	temp.cmd(mysql.COM_QUERY, []byte("SELECT * FROM tt")...)
	p = temp.next()
	if e := describe(p); p[0] != mysql.ERR_HEADER || !strings.Contains(e, "cannot be moved") || !strings.Contains(e, "temporary tables") {
		t.Fatalf("unmovable session: %s", e)
	}
	expectClosed(t, temp.c, "unmovable session")
	if got := counterValue(t, h, "switchyard_proxy_session_migrations_failed_total"); got != 1 {
		t.Fatalf("failed migrations counted %v, want 1", got)
	}
}

// A session that used LOCK TABLES moves once it ran UNLOCK TABLES, and a
// statement longer than the read buffer does not pin it.
func TestMigrationLockTables(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	mustExec(t, db, "CREATE TABLE lk (id INT PRIMARY KEY)")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES lk WRITE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	// A statement longer than the proxy's read buffer does not pin the
	// session either.
	if _, err := conn.ExecContext(ctx, "SELECT '"+strings.Repeat("x", 20000)+"'"); err != nil {
		t.Fatal(err)
	}
	h.waitReplicated(1, 2)
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	if id := serverID(t, conn); id != 2 {
		t.Fatalf("after UNLOCK TABLES the session moves: server_id %d", id)
	}
	var one sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM lk").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

// A client that sends parameter types only with its first execute (as
// libmariadb does) keeps working after a move: the proxy puts the types
// back into the first execute on the new backend.
func TestMigrationRebindsParameterTypes(t *testing.T) {
	h := newHarness(t, nil)
	rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "sbtest", mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	id, _ := rc.prepare("SELECT ? + 1, @@server_id")
	exec := func(bound bool, v byte) []byte {
		p := binary.LittleEndian.AppendUint32(nil, id)
		p = append(p, 0)
		p = binary.LittleEndian.AppendUint32(p, 1)
		p = append(p, 0) // NULL bitmap
		if bound {
			p = append(p, 1, mysql.MYSQL_TYPE_LONGLONG, 0)
		} else {
			p = append(p, 0)
		}
		p = binary.LittleEndian.AppendUint64(p, uint64(v))
		rc.cmd(mysql.COM_STMT_EXECUTE, p...)
		first := rc.next()
		if first[0] == mysql.ERR_HEADER {
			return first
		}
		for {
			if p := rc.next(); p[0] == mysql.EOF_HEADER && len(p) < 0xffffff {
				return first
			}
		}
	}
	if p := exec(true, 5); p[0] == mysql.ERR_HEADER {
		t.Fatalf("first execute: %s", describe(p))
	}
	if p := exec(false, 6); p[0] == mysql.ERR_HEADER {
		t.Fatalf("execute without types: %s", describe(p))
	}
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	if p := exec(false, 7); p[0] == mysql.ERR_HEADER {
		t.Fatalf("execute without types after the move: %s", describe(p))
	}
	if rows := rc.query("SELECT @@server_id"); rows[0][0] != "2" {
		t.Fatalf("session after the move on server_id %s", rows[0][0])
	}
}
