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

// TestTxPoolSwitchover: 400 clients, each on its own connection to a
// transaction-pooled rw listener, run short transactions (insert a ledger
// row, commit) over at most 32 backend connections per node while the
// primary is switched over to node2. No client sees an error, every
// committed row is on the new primary, neither primary ever has more
// connections of the application user than the pool limit
// (Threads_connected: the limit plus monitoring and replication
// connections), and the old primary keeps none of them.
// (The full size, 2,000 clients over 64 connections, is bench/txpool.)
func TestTxPoolSwitchover(t *testing.T) {
	const clients, limit = 400, 32
	s := startSwitchStack(t, 1, func(c *config.Config) {
		for i := range c.Listeners {
			c.Listeners[i].Pooling = config.PoolingTransaction
		}
		c.Proxy.MaxConnectionsPerBackend = limit
	})
	ctx := context.Background()
	if _, err := s.direct(0).Exec("CREATE TABLE sbtest.txpool_ledger (client INT, n INT, PRIMARY KEY (client, n))"); err != nil {
		t.Fatal(err)
	}
	// Monitoring connections (controller probes, proxy checks) with no
	// client: the baseline of Threads_connected on each node.
	samplers := []*sql.DB{s.direct(0), s.direct(1)}
	base := make([]int, 2)
	for i, d := range samplers {
		d.SetMaxOpenConns(1)
		base[i] = int(threadsConnected(t, d))
	}
	conns := make([]*sql.Conn, clients)
	for i := range conns {
		db := s.open("primary", "sbtest")
		db.SetMaxOpenConns(1)
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns[i] = c
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures, commits atomic.Int64
	var firstErr atomic.Value
	acked := make([][]int, clients)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := c.BeginTx(ctx, nil)
				if err == nil {
					_, err = tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO txpool_ledger VALUES (%d, %d)", i, n))
					if err == nil {
						err = tx.Commit()
					} else {
						_ = tx.Rollback()
					}
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("client %d transaction %d: %w", i, n, err))
					return
				}
				acked[i] = append(acked[i], n)
				commits.Add(1)
			}
		}()
	}
	maxThreads, maxApp := make([]int, 2), make([]int, 2)
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for i, d := range samplers {
				var name string
				var v int
				if err := d.QueryRow("SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &v); err == nil {
					maxThreads[i] = max(maxThreads[i], v)
				}
				if err := d.QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE user = ?", s.sb.AppUser).Scan(&v); err == nil {
					maxApp[i] = max(maxApp[i], v)
				}
			}
		}
	}()
	time.Sleep(2 * time.Second)
	before := commits.Load()
	start := time.Now()
	out, err := s.switchover("node2")
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("switchover: %v\n%s", err, out)
	}
	took := time.Since(start)
	s.waitServing("node2")
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	<-sampleDone
	t.Logf("%d clients, limit %d: %d transactions committed (%d before the switchover), switchover %s; application connections at most node1 %d, node2 %d; Threads_connected at most node1 %d (baseline %d), node2 %d (baseline %d, +2 replicas once primary) (loaded machine)",
		clients, limit, commits.Load(), before, took.Round(time.Millisecond), maxApp[0], maxApp[1], maxThreads[0], base[0], maxThreads[1], base[1])
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d clients got an error; first: %v", n, firstErr.Load())
	}
	// Probes and checks may open a connection or two more at any moment,
	// and the new primary gains its replicas' connections.
	const monitor = 3
	for i := range 2 {
		// The proxy's backend check (reachability.go) logs in as the
		// application user too: one more at most.
		if maxApp[i] > limit+1 {
			t.Errorf("node%d: %d connections of the application user at once, limit %d + 1 backend check", i+1, maxApp[i], limit)
		}
		if maxThreads[i] > base[i]+limit+monitor+2 {
			t.Errorf("node%d: Threads_connected reached %d, more than baseline %d + %d pooled + %d + 2 replicas", i+1, maxThreads[i], base[i], limit, monitor)
		}
	}
	var rows int
	if err := s.direct(1).QueryRow("SELECT COUNT(*) FROM sbtest.txpool_ledger").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if int64(rows) != commits.Load() {
		t.Fatalf("the new primary has %d ledger rows, %d transactions were committed", rows, commits.Load())
	}
	present := make(map[[2]int]bool, rows)
	rs, err := s.direct(1).Query("SELECT client, n FROM sbtest.txpool_ledger")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var c, n int
		if err := rs.Scan(&c, &n); err != nil {
			t.Fatal(err)
		}
		present[[2]int{c, n}] = true
	}
	rs.Close()
	for i, ns := range acked {
		for _, n := range ns {
			if !present[[2]int{i, n}] {
				t.Fatalf("committed row (%d, %d) missing on the new primary", i, n)
			}
		}
	}
	var app int
	if err := s.direct(0).QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE user = ?", s.sb.AppUser).Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != 0 {
		t.Fatalf("the old primary still has %d connections of the application user", app)
	}
}
