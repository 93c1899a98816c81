package proxy

import (
	"context"
	"testing"
)

// TestLockWaitClauseMoves: SELECT … FOR UPDATE NOWAIT / WAIT n (text and
// prepared) make MariaDB report lock_wait_timeout and
// innodb_lock_wait_timeout at the statement's own value with a session
// state change, as SET STATEMENT … FOR does. The session's values did not
// change: the session still moves to a new primary, with its own values.
// Before, it was closed at the move ("cannot be moved"), and the
// statement's values were recorded as the session's; so was a session
// whose UPDATE followed such a SELECT (MariaDB reports the session's own
// values again with the next statement).
func TestLockWaitClauseMoves(t *testing.T) {
	rh := newReplayHarness(t, 16)
	ctx := context.Background()
	rh.reset(2)
	conn, err := rh.db("rw", "sbtest", nil).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "SET SESSION lock_wait_timeout = 77, innodb_lock_wait_timeout = 7")
	for _, q := range []string{
		"SELECT v FROM rp_t WHERE id = 1 FOR UPDATE NOWAIT",
		"SELECT v FROM rp_t WHERE id = 1 FOR UPDATE WAIT 3",
		"SELECT v FROM rp_t WHERE id = 1 LOCK IN SHARE MODE NOWAIT",
	} {
		var v int
		if err := conn.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatal(q, err)
		}
	}
	// Prepared, with a parameter.
	var v int
	if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = ? FOR UPDATE WAIT 2", 2).Scan(&v); err != nil || v != 20 {
		t.Fatalf("prepared WAIT 2: %d %v", v, err)
	}
	// The job-queue pattern: a locking read without waiting, then a write.
	mustExec(t, conn, "BEGIN")
	if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = 1 FOR UPDATE NOWAIT").Scan(&v); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "UPDATE rp_t SET v = v + 1 WHERE id = 1")
	mustExec(t, conn, "COMMIT")
	rh.promote(1, 2)
	var lwt, ilwt int
	if err := conn.QueryRowContext(ctx, "SELECT @@lock_wait_timeout, @@innodb_lock_wait_timeout").Scan(&lwt, &ilwt); err != nil {
		t.Fatalf("after the move: %v", err)
	}
	if lwt != 77 || ilwt != 7 {
		t.Fatalf("after the move lock_wait_timeout %d, innodb_lock_wait_timeout %d; want the session's 77 and 7", lwt, ilwt)
	}
	var node uint32
	if err := conn.QueryRowContext(ctx, "SELECT @@server_id").Scan(&node); err != nil || node != rh.c.Nodes[1].ServerID {
		t.Fatalf("server_id %d (%v) after the move, want node2's %d", node, err, rh.c.Nodes[1].ServerID)
	}
}
