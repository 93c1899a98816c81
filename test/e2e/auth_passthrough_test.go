package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
)

// TestSwitchoverPassThroughAccount: an account that exists only on the
// servers (proxy.backend_accounts, not in users) writes through the rw
// listener from a pool of 4 writers, and a new login of it every 50 ms,
// while a switchover moves the primary to node2: 0 client errors, every
// acknowledged row on the new primary.
func TestSwitchoverPassThroughAccount(t *testing.T) {
	s := startSwitchStack(t, 1, func(c *config.Config) {
		c.Proxy.BackendAccounts = config.BackendAccounts{Enabled: true, Refresh: config.Duration(5 * time.Second)}
	})
	root := s.direct(0)
	for _, q := range []string{
		"CREATE USER ptw@'%' IDENTIFIED BY 'ptw-secret'",
		"GRANT SELECT, INSERT, CREATE ON sbtest.* TO ptw@'%'",
		"CREATE TABLE IF NOT EXISTS sbtest.pt_ledger (id BIGINT PRIMARY KEY, writer INT)",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dsn := fmt.Sprintf("ptw:ptw-secret@tcp(%s)/sbtest?timeout=2s&readTimeout=30s&writeTimeout=30s", s.listener("primary"))
	// The account is not in the proxy's table yet: the first login
	// reads the accounts (at most once a second).
	var db *sql.DB
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if db, err = sql.Open("mysql", dsn); err != nil {
			t.Fatal(err)
		}
		if err = db.Ping(); err == nil {
			break
		}
		db.Close()
		if time.Now().After(deadline) {
			t.Fatalf("pass-through account never logged in: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg           sync.WaitGroup
		next         atomic.Int64
		errs, logins atomic.Int64
		mu           sync.Mutex
		acked        []int64
		firstErr     error
	)
	record := func(err error) {
		errs.Add(1)
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				id := next.Add(1)
				if _, err := db.ExecContext(context.Background(), "INSERT INTO pt_ledger VALUES (?, ?)", id, w); err != nil {
					record(err)
					continue
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			nd, err := sql.Open("mysql", dsn)
			if err == nil {
				var one int
				if err = nd.QueryRow("SELECT 1").Scan(&one); err == nil {
					logins.Add(1)
				}
				nd.Close()
			}
			if err != nil {
				record(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	start := time.Now()
	out, err := s.switchover("node2")
	took := time.Since(start)
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("switchover: %v\n%s", err, out)
	}
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d client errors during the switchover (first: %v)", n, firstErr)
	}
	var sid int
	if err := db.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("after the switchover the pass-through session is on server_id %d (%v), want 2", sid, err)
	}
	var rows int
	if err := s.direct(1).QueryRow("SELECT COUNT(*) FROM sbtest.pt_ledger").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if rows < n {
		t.Fatalf("node2 has %d rows, %d were acknowledged", rows, n)
	}
	t.Logf("switchover took %s; %d acknowledged writes and %d new logins of the pass-through account, 0 errors; node2 has all %d rows", took.Round(time.Millisecond), n, logins.Load(), rows)
}
