package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestCrashFailoverKeepsIdleSessions: kill -9 of the primary while many
// client sessions sit idle — some parked (idle for seconds), some used a
// moment before the kill, some with session state, some inside an open
// transaction that wrote. The server's reset of their backend connections
// is a primary loss, not an idle timeout: no client connection may be
// closed by the proxy. Every session runs its next statement on the new
// primary (state kept) and every open transaction is replayed there and
// commits (failover.transaction_replay). A killed server resets its client
// connections while the kernel may still complete connects to its
// listening socket, so the proxy's "is the node alive" check of an idle
// close must wait for a greeting, not a connect.
func TestCrashFailoverKeepsIdleSessions(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true, Mutate: func(c *config.Config) {
		c.Clusters[0].Durability = config.DurabilitySemiSync
		c.Clusters[0].Failover.TransactionReplay = true
	}})
	dsn := s.dsn(0, "primary")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE idle_tx (id BIGINT PRIMARY KEY, s INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	s.waitState("failover readiness published", 10*time.Second, func(st topo.ClusterState) bool {
		return st.AutoFailover != nil && st.AutoFailover.Ready
	})
	ctx := context.Background()
	const n = 30
	type idle struct {
		kind string // plain, state, tx
		conn *sql.Conn
		tx   *sql.Tx
	}
	var idles []*idle
	for i := range n {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		it := &idle{conn: c}
		switch i % 3 {
		case 0:
			it.kind = "plain"
			if err := c.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
		case 1:
			it.kind = "state"
			if _, err := c.ExecContext(ctx, fmt.Sprintf("SET @mark := %d", i)); err != nil {
				t.Fatal(err)
			}
		case 2:
			it.kind = "tx"
			if it.tx, err = c.BeginTx(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := it.tx.ExecContext(ctx, "INSERT INTO idle_tx VALUES (?, 1)", i); err != nil {
				t.Fatal(err)
			}
		}
		idles = append(idles, it)
	}
	// Parked: idle for seconds; then a third of them used just before the
	// kill (not parked yet).
	time.Sleep(3 * time.Second)
	for i, it := range idles {
		if i%2 == 0 && it.kind != "tx" {
			if err := it.conn.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	st, took := s.waitState("new primary", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("kill -9 node1 → %s published %s later", st.Primary, took.Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)

	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for i, it := range idles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch it.kind {
			case "plain":
				var one int
				err = it.conn.QueryRowContext(ctx, "SELECT 1").Scan(&one)
			case "state":
				var mark sql.NullInt64
				if err = it.conn.QueryRowContext(ctx, "SELECT @mark").Scan(&mark); err == nil && (!mark.Valid || mark.Int64 != int64(i)) {
					err = fmt.Errorf("@mark is %v after the failover, want %d", mark, i)
				}
			case "tx":
				if _, err = it.tx.ExecContext(ctx, "UPDATE idle_tx SET s = 2 WHERE id = ?", i); err == nil {
					err = it.tx.Commit()
				} else {
					_ = it.tx.Rollback()
				}
			}
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("session %d (%s): %v", i, it.kind, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range failed {
		t.Error(f)
	}
	var committed int
	if err := db.QueryRow("SELECT COUNT(*) FROM idle_tx WHERE s = 2").Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed != n/3 {
		t.Errorf("%d of %d open transactions committed on the new primary", committed, n/3)
	}
	t.Logf("%d idle sessions across the crash failover: %d failed; %d of %d open transactions replayed and committed",
		n, len(failed), committed, n/3)
}
