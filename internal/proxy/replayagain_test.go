package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestReplayLostAgainRunsAgain: a replay whose own connection is lost while
// it runs (here killed during the transaction's SELECT SLEEP(0.6); after a
// crash, the dying primary can still accept the replay's connection for a
// few milliseconds) committed nothing, so it runs again: the client's
// statement and COMMIT succeed and the transaction's rows are there once.
func TestReplayLostAgainRunsAgain(t *testing.T) {
	rh := newReplayHarness(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := rh.db("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = false })
	rh.reset(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := threadID(t, conn)
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO rp_t VALUES (7, 70)")
	mustExec(t, conn, "SELECT SLEEP(0.6)")
	again0 := rh.replays(replayOK)
	rh.killBackend(id)
	killed := make(chan error, 1)
	go func() {
		// Kill the replay's connection while it sleeps.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var rid int64
			err := rh.root.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(0.6)' AND ID <> ? LIMIT 1", id).Scan(&rid)
			if err == nil {
				_, err = rh.root.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", rid))
				killed <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		killed <- fmt.Errorf("no replay seen running SELECT SLEEP(0.6)")
	}()
	if _, err := conn.ExecContext(ctx, "INSERT INTO rp_t VALUES (8, 80)"); err != nil {
		t.Fatalf("statement after a replay whose connection was lost: %v, want the transaction replayed again", err)
	}
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	if got, want := rh.rows(), "1=10 7=70 8=80"; got != want {
		t.Fatalf("rows: %s, want %s", got, want)
	}
	if n := rh.replays(replayOK) - again0; n != 1 {
		t.Fatalf("%v replays counted as replayed, want 1", n)
	}
}
