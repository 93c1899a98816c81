package e2e

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// coldRestart restarts node i with an empty buffer pool (no dump at
// shutdown, no dump file to load at startup).
func (s *swStack) coldRestart(i int) {
	s.t.Helper()
	if _, err := s.direct(i).Exec("SET GLOBAL innodb_buffer_pool_dump_at_shutdown = OFF"); err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.sb.StopNode(ctx, i); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.sb.Nodes[i].DataDir, "ib_buffer_pool")); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.t.Fatal(err)
	}
	if err := s.sb.StartNode(ctx, i); err != nil {
		s.t.Fatal(err)
	}
}

// TestSwitchoverWarmCandidate: a replica restarted with an empty buffer
// pool is refused by `switchover --require-warm` with a clear message (and
// nothing is held or changed); with `--warm` the controller replays the hot
// read set the proxy sampled, the candidate reaches the warmth threshold
// and the switchover goes through.
func TestSwitchoverWarmCandidate(t *testing.T) {
	s := startSwitchStack(t, 1, nil)
	db := s.open("primary", "sbtest")
	for _, q := range []string{
		"CREATE TABLE warm_e (id INT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60))",
		"INSERT INTO warm_e SELECT seq, seq, REPEAT('c', 120), REPEAT('p', 60) FROM seq_1_to_150000",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// Reads through rw so the proxy samples them and publishes its hot
	// read set (every 5 s).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c string
			for ctx.Err() == nil {
				_ = db.QueryRowContext(ctx, "SELECT c FROM warm_e WHERE id = ?", 1+rand.IntN(150000)).Scan(&c)
			}
		}()
	}
	defer wg.Wait()
	defer cancel()
	s.waitServing("node1")
	var pos string
	if err := s.direct(0).QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var r int
	if err := s.direct(1).QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", pos).Scan(&r); err != nil || r != 0 {
		t.Fatalf("node2 did not apply %s: %v %d", pos, err, r)
	}
	s.coldRestart(1)
	s.waitServing("node1")

	out, err := s.switchover("node2", "--require-warm")
	if err == nil || !strings.Contains(out, "is cold") || !strings.Contains(out, "--warm") {
		t.Fatalf("switchover --require-warm to a cold candidate: %v\n%s", err, out)
	}
	t.Logf("cold candidate refused:\n%s", out)
	if st := s.state(); st.Primary != "node1" || st.Phase != topo.PhaseStable {
		t.Fatalf("after the refusal: primary %s phase %s", st.Primary, st.Phase)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		kvs, err := s.store.List(context.Background(), s.keys.HotReadSets())
		if err == nil && len(kvs) > 0 && strings.Contains(string(kvs[0].Value), "warm_e") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hot read set with warm_e published: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, err = s.switchover("node2", "--warm", "--require-warm")
	if err != nil || !strings.Contains(out, "warmed from") {
		t.Fatalf("switchover --warm: %v\n%s", err, out)
	}
	t.Logf("warmed candidate promoted:\n%s", out)
	var n sql.NullInt64
	if err := s.direct(1).QueryRow("SELECT COUNT(*) FROM sbtest.warm_e").Scan(&n); err != nil || n.Int64 != 150000 {
		t.Fatalf("node2 rows %v %v", n, err)
	}
}
