package proxy

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// TestTxEndedAtStmtCloseFailsCommit: the proxy ends a transaction while
// the client's pending command is a COM_STMT_CLOSE, which has no response
// to carry the error (Go's driver sends one after every prepared
// statement in a transaction: PREPARE, EXECUTE, CLOSE). The error goes to
// the client's next command, its COMMIT, which must fail: run on a fresh
// backend outside any transaction it would return OK for writes that were
// rolled back. Two ways in: the server closed the primary connection
// while the session was idle in the transaction (the fence of a
// switchover kills client connections; idle peek → primaryLostInTx), and
// the primary changed while the transaction was open (abortTx).
func TestTxEndedAtStmtCloseFailsCommit(t *testing.T) {
	h := newHarness(t, nil)
	root1 := h.direct(0)
	mustExec(t, root1, "CREATE TABLE sbtest.txended (id INT PRIMARY KEY, server_id INT NOT NULL) ENGINE=InnoDB")
	h.waitReplicated(1, 2)

	// openTx logs in on the rw listener and leaves a transaction open
	// with one row inserted by a prepared statement not yet closed.
	openTx := func(id int) (*rawConn, uint32) {
		t.Helper()
		rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		rc.query("BEGIN")
		stmt, _ := rc.prepare("INSERT INTO txended (id, server_id) VALUES (" + strconv.Itoa(id) + ", @@server_id)")
		rc.cmd(mysql.COM_STMT_EXECUTE, executeArgs(stmt, 0)...)
		if st := rc.expectOK(); st&mysql.SERVER_STATUS_IN_TRANS == 0 {
			t.Fatalf("INSERT in the transaction: status %#x without SERVER_STATUS_IN_TRANS", st)
		}
		return rc, stmt
	}
	// closeAndCommit sends COM_STMT_CLOSE then COMMIT and checks that the
	// COMMIT fails with the rolled-back error and that the row is not on
	// the primary that ran the INSERT.
	closeAndCommit := func(what string, rc *rawConn, stmt uint32, id int, why string) {
		t.Helper()
		rc.cmd(mysql.COM_STMT_CLOSE, binary.LittleEndian.AppendUint32(nil, stmt)...)
		rc.cmd(mysql.COM_QUERY, []byte("COMMIT")...)
		p := rc.next()
		var n int
		deadline := time.Now().Add(5 * time.Second)
		for {
			if err := root1.QueryRow("SELECT COUNT(*) FROM sbtest.txended WHERE id = ?", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if p[0] != mysql.ERR_HEADER {
			t.Fatalf("%s: COMMIT after COM_STMT_CLOSE answered %s (row present on node1: %d); want the rolled-back error", what, describe(p), n)
		}
		e := mysqlproto.ParseERR(p)
		if e.Code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(e.Message, why) {
			t.Fatalf("%s: COMMIT failed with %d %q; want 1105 containing %q", what, e.Code, e.Message, why)
		}
		if n != 0 {
			t.Fatalf("%s: row %d of the rolled-back transaction present on node1", what, id)
		}
		// The error is given once: the session goes on.
		rows := rc.query("SELECT 1")
		if len(rows) != 1 || rows[0][0] != "1" {
			t.Fatalf("%s: SELECT 1 after the error: %v", what, rows)
		}
	}

	// The server closes the idle primary connection (KILL, as the fence
	// of a switchover does).
	rc, stmt := openTx(1)
	thread := rc.query("SELECT CONNECTION_ID()")[0][0]
	mustExec(t, root1, "KILL CONNECTION "+thread)
	time.Sleep(100 * time.Millisecond)
	closeAndCommit("backend killed", rc, stmt, 1, "your transaction was rolled back by the loss of primary node1")

	// The primary changes while the transaction is open.
	rc, stmt = openTx(2)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1, 0, 2))
	time.Sleep(100 * time.Millisecond)
	closeAndCommit("primary changed", rc, stmt, 2, "your transaction was rolled back: the primary of cluster")
}
