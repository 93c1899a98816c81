package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// TestReplayConsistentReadsNotCompared: with failover.replay_checksum
// no_consistent_reads, a transaction whose plain reads (text and prepared)
// would now see a row another session changed after they ran is replayed
// and commits its own writes, with the other session's change kept; a
// replayed write, a locking read, a read in a SERIALIZABLE transaction
// (SET TRANSACTION or the session's level) and a read calling a stored
// function are still compared, and the transaction is rolled back when
// they differ.
func TestReplayConsistentReadsNotCompared(t *testing.T) {
	rh := newReplayHarness(t, 16, func(c *config.Config) {
		c.Clusters[0].Failover.ReplayChecksum = config.ReplayChecksumNoConsistentReads
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db := rh.db("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = false })
	differed := func() float64 { return ctrValue(rh.srv.metrics.replayReadsDiffered.WithLabelValues("rw")) }

	t.Run("plain reads differ, replayed", func(t *testing.T) {
		rh.reset(3)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		id := threadID(t, conn)
		mustExec(t, conn, "BEGIN")
		mustExec(t, conn, "UPDATE rp_t SET v = 99 WHERE id = 1")
		var v, sum int
		if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = ?", 2).Scan(&v); err != nil || v != 20 {
			t.Fatalf("prepared select in tx: %d %v", v, err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT SUM(v) FROM rp_t WHERE id BETWEEN 1 AND 3").Scan(&sum); err != nil || sum != 149 {
			t.Fatalf("text select in tx: %d %v", sum, err)
		}
		ok0, diff0 := rh.replays(replayOK), differed()
		rh.killBackend(id)
		mustExec(t, rh.root, "UPDATE sbtest.rp_t SET v = 21 WHERE id = 2") // another session, meanwhile
		if _, err := conn.ExecContext(ctx, "INSERT INTO rp_t VALUES (7, 70)"); err != nil {
			t.Fatalf("statement after the replay: %v, want the transaction replayed (its reads not compared)", err)
		}
		// Reads after the failover see the replay's snapshot.
		if err := conn.QueryRowContext(ctx, "SELECT v FROM rp_t WHERE id = ?", 2).Scan(&v); err != nil || v != 21 {
			t.Fatalf("select after the replay: %d %v, want 21", v, err)
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatalf("COMMIT after the replay: %v", err)
		}
		if got, want := rh.rows(), "1=99 2=21 3=30 7=70"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
		if n := rh.replays(replayOK) - ok0; n != 1 {
			t.Fatalf("%v replays counted, want 1", n)
		}
		if n := differed() - diff0; n != 2 {
			t.Fatalf("%v replayed reads counted as differing, want 2", n)
		}
	})

	refused := []struct {
		name   string
		setup  []string // before the kill
		other  string   // another session's statement after the kill
		nth    string   // the statement named in the error
		result string   // the replay result counted ("": mismatch)
	}{
		{"a write differs", []string{"BEGIN", "SELECT v FROM rp_t WHERE id = 3", "UPDATE rp_t SET v = v + 1 WHERE id = 2"},
			"DELETE FROM sbtest.rp_t WHERE id = 2", "statement 3", ""},
		{"a locking read differs", []string{"BEGIN", "SELECT v FROM rp_t WHERE id = 2 FOR UPDATE"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 2", ""},
		{"SET TRANSACTION SERIALIZABLE", []string{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "BEGIN", "SELECT v FROM rp_t WHERE id = 2"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 3", ""},
		// SET TRANSACTION holds over statements that open no
		// transaction (here SET autocommit = 0).
		{"SET TRANSACTION SERIALIZABLE, then autocommit=0", []string{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET autocommit = 0", "SELECT v FROM rp_t WHERE id = 2"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 2", ""},
		{"session SERIALIZABLE", []string{"SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE", "BEGIN", "SELECT v FROM rp_t WHERE id = 2"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 2", ""},
		{"a stored function", []string{"BEGIN", "SELECT rp_get(2)"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 2", ""},
		// Unscoped, it sets the next transaction's level only.
		{"SET @@tx_isolation SERIALIZABLE", []string{"SET @@tx_isolation = 'SERIALIZABLE'", "BEGIN", "SELECT v FROM rp_t WHERE id = 2"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 3", ""},
		// Under READ COMMITTED INSERT … SELECT reads without locks: run
		// again it would copy the other session's value.
		{"READ COMMITTED INSERT SELECT", []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "BEGIN", "INSERT INTO rp_copy SELECT id, v FROM rp_t WHERE id = 2"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 3", replayNotReplayable},
		// A view hides a stored function that writes: the replayed read
		// wrote rows (Handler_write), so it is compared.
		{"a view calling a writing function", []string{"BEGIN", "SELECT wv FROM rp_view WHERE id = 2"},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 2", ""},
		{"ANSI_QUOTES function name", []string{"SET SESSION sql_mode = 'ANSI_QUOTES'", "BEGIN", `SELECT "rp_w"(2)`},
			"UPDATE sbtest.rp_t SET v = 21 WHERE id = 2", "statement 2", ""},
	}
	mustExec(t, rh.root, "CREATE TABLE sbtest.rp_log (v INT)")
	mustExec(t, rh.root, "CREATE FUNCTION sbtest.rp_w(x INT) RETURNS INT DETERMINISTIC BEGIN DECLARE r INT; "+
		"SELECT v INTO r FROM sbtest.rp_t WHERE id = x; INSERT INTO sbtest.rp_log VALUES (r); RETURN r; END")
	mustExec(t, rh.root, "CREATE VIEW sbtest.rp_view AS SELECT id, sbtest.rp_w(id) AS wv FROM sbtest.rp_t")
	mustExec(t, rh.root, "CREATE TABLE sbtest.rp_copy (id INT PRIMARY KEY, v INT NOT NULL)")
	mustExec(t, rh.root, "CREATE FUNCTION sbtest.rp_get(i INT) RETURNS INT READS SQL DATA RETURN (SELECT v FROM sbtest.rp_t WHERE id = i)")
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			rh.reset(3)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			id := threadID(t, conn)
			for _, q := range tc.setup {
				mustExec(t, conn, q)
			}
			result := tc.result
			if result == "" {
				result = replayMismatch
			}
			mis0 := rh.replays(result)
			rh.killBackend(id)
			mustExec(t, rh.root, tc.other)
			_, err = conn.ExecContext(ctx, "INSERT INTO rp_t VALUES (7, 70)")
			code, msg := mysqlErr(err)
			if code != 1105 || !strings.Contains(msg, "your transaction was rolled back") || !strings.Contains(msg, tc.nth) {
				t.Fatalf("statement after the replay: %v, want 1105 saying the transaction was rolled back because %s differed", err, tc.nth)
			}
			if n := rh.replays(result) - mis0; n != 1 {
				t.Fatalf("%v replays counted as %s, want 1", n, result)
			}
			if strings.Contains(rh.rows(), "7=70") {
				t.Fatalf("rows %s: the refused transaction's INSERT is there", rh.rows())
			}
			t.Logf("refused: %s", msg)
			// The session goes on at its default level.
			mustExec(t, conn, "SET autocommit = 1")
			mustExec(t, conn, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
		})
	}
}
