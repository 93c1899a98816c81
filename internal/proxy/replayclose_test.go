package proxy

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestLostTxUnmovableSessionCloses: a session whose state cannot move to
// another connection (a temporary table) and that has a transaction open
// when its backend connection is lost gets one error naming why and is
// closed, as it is outside a transaction: it never goes on without its
// temporary table.
func TestLostTxUnmovableSessionCloses(t *testing.T) {
	t.Run("replay", func(t *testing.T) { lostTxUnmovable(t, newReplayHarness(t, 8)) })
	t.Run("no_replay", func(t *testing.T) {
		h := newHarness(t, nil)
		lostTxUnmovable(t, &replayHarness{harness: h, root: h.direct(0)})
	})
}

func lostTxUnmovable(t *testing.T, rh *replayHarness) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := rh.db("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = true })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := threadID(t, conn)
	mustExec(t, conn, "SET @u=42")
	mustExec(t, conn, "CREATE TEMPORARY TABLE tt (a INT)")
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO tt VALUES (1)")
	rh.killBackend(id)
	_, err = conn.ExecContext(ctx, "COMMIT")
	if err == nil || !strings.Contains(err.Error(), "temporary tables") || !strings.Contains(err.Error(), "the session is closed, reconnect") {
		t.Fatalf("COMMIT after the backend was lost: %v, want the session-closed error naming the temporary tables", err)
	}
	t.Logf("COMMIT: %v", err)
	var n int
	err = conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM tt").Scan(&n)
	if err == nil || strings.Contains(err.Error(), "1146") {
		t.Fatalf("statement after the error: %v (rows %d), want the session closed", err, n)
	}
}

// TestIdleTimeoutInTransactionCloses: a server that closes an idle
// session's connection for its wait_timeout while a transaction is open
// has the client's socket closed, as connected directly (2006 at the next
// statement), never a replay of the transaction on the same node.
func TestIdleTimeoutInTransactionCloses(t *testing.T) {
	rh := newReplayHarness(t, 8)
	for _, useTLS := range []bool{false, true} {
		name := "plaintext"
		if useTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rh.reset(0)
			cfg, err := mysql.ParseDSN(rh.dsn("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = true }))
			if err != nil {
				t.Fatal(err)
			}
			if useTLS {
				cfg.TLS = tlsClientConfig(t, rh.c.TLS().CA, nil)
			}
			cn, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(cn)
			defer db.Close()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			mustExec(t, conn, "SET SESSION wait_timeout=2")
			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "INSERT INTO rp_t VALUES (1, 10)")
			threadID(t, conn)
			before := rh.replays(replayMismatch) + rh.replays(replayOK) + rh.replays(replayNotReplayable)
			time.Sleep(3 * time.Second)
			_, err = conn.ExecContext(ctx, "COMMIT")
			if err == nil || strings.Contains(err.Error(), "switchyard") {
				t.Fatalf("COMMIT after the server closed the idle connection: %v, want the connection closed", err)
			}
			if n := rh.replays(replayMismatch) + rh.replays(replayOK) + rh.replays(replayNotReplayable) - before; n != 0 {
				t.Fatalf("%v replays, want none", n)
			}
			if got := rh.rows(); got != "" {
				t.Fatalf("rows %q, want none", got)
			}
		})
	}
}
