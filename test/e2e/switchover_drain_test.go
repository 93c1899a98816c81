package e2e

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// writerLoop inserts rows through db until stop is closed and counts
// successes and errors.
type writerLoop struct {
	ok, errs atomic.Int64
	first    atomic.Value
	wg       sync.WaitGroup
	stop     chan struct{}
}

func startWriters(t *testing.T, db *sql.DB, table string, n int) *writerLoop {
	w := &writerLoop{stop: make(chan struct{})}
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS " + table + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, w INT)"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				if _, err := db.Exec("INSERT INTO "+table+" (w) VALUES (?)", i); err != nil {
					w.errs.Add(1)
					w.first.CompareAndSwap(nil, err.Error())
				} else {
					w.ok.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return w
}

func (w *writerLoop) end() {
	close(w.stop)
	w.wg.Wait()
}

// TestSwitchoverDrainBound: a transaction left open across
// switchover.drain_timeout makes the switchover abort cleanly by default —
// the old primary was never fenced and is writable, the transaction and the
// other clients go on; with drain_mode fail the switchover goes on and only
// that transaction fails, with a clear error.
func TestSwitchoverDrainBound(t *testing.T) {
	s := startSwitchStack(t, 1, func(c *config.Config) {
		c.Switchover.DrainTimeout = config.Duration(time.Second)
		c.Switchover.MaxHold = config.Duration(4 * time.Second)
	})
	ctx := context.Background()
	db := s.open("primary", "sbtest")
	db.SetMaxOpenConns(8)
	writers := startWriters(t, db, "drain_w", 4)

	// abort (default)
	txConn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txConn.Close()
	tx, err := txConn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO drain_w (w) VALUES (100)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := s.switchover("node2")
	took := time.Since(start)
	if err == nil || !strings.Contains(out, "drain_timeout") || !strings.Contains(out, "rolled back") {
		t.Fatalf("switchover with a transaction open across the drain bound: err %v\n%s", err, out)
	}
	t.Logf("abort at the drain bound after %s:\n%s", took.Round(time.Millisecond), out)
	st := s.state()
	if st.Primary != "node1" || st.Phase != topo.PhaseStable || st.Epoch != 1 {
		t.Fatalf("after the abort: primary %s phase %s epoch %d", st.Primary, st.Phase, st.Epoch)
	}
	var ro int
	if err := s.direct(0).QueryRow("SELECT @@global.read_only").Scan(&ro); err != nil || ro != 0 {
		t.Fatalf("old primary read_only=%d (%v) after the abort: it must stay writable", ro, err)
	}
	if _, err := tx.Exec("INSERT INTO drain_w (w) VALUES (101)"); err != nil {
		t.Fatalf("the open transaction after the abort: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after the abort: %v", err)
	}
	before := writers.ok.Load()
	time.Sleep(300 * time.Millisecond)
	if writers.ok.Load() == before {
		t.Fatal("writers do not continue after the abort")
	}

	// fail
	cfg := *s.cfg
	cfg.Switchover.DrainMode = config.DrainFail
	s.ctrl.SetConfig(&cfg)
	tx2, err := txConn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx2.Exec("INSERT INTO drain_w (w) VALUES (200)"); err != nil {
		t.Fatal(err)
	}
	out, err = s.switchover("node2")
	if err != nil {
		t.Fatalf("switchover with drain_mode fail: %v\n%s", err, out)
	}
	t.Logf("drain_mode fail:\n%s", out)
	_, err = tx2.Exec("INSERT INTO drain_w (w) VALUES (201)")
	if err == nil || !strings.Contains(err.Error(), "transaction was rolled back") {
		t.Fatalf("the transaction open across the bound: %v", err)
	}
	t.Logf("the transaction open across the bound got: %v", err)
	_ = tx2.Rollback()
	var sid int
	if err := txConn.QueryRowContext(ctx, "SELECT @@server_id").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("that session afterwards: server_id %d, %v", sid, err)
	}
	time.Sleep(300 * time.Millisecond)
	writers.end()
	if n := writers.errs.Load(); n != 0 {
		t.Fatalf("other clients saw %d errors (first: %v)", n, writers.first.Load())
	}
	var n200 int
	if err := s.direct(1).QueryRow("SELECT COUNT(*) FROM sbtest.drain_w WHERE w IN (200, 201)").Scan(&n200); err != nil || n200 != 0 {
		t.Fatalf("rows of the failed transaction on node2: %d (%v)", n200, err)
	}
	t.Logf("writers: %d inserts, 0 errors, across an aborted and a completed switchover", writers.ok.Load())
}

// TestSwitchoverWaitsForEveryProxy: a registered proxy that never
// acknowledges makes the switchover roll back at the drain bound (the old
// primary stays writable); once its lease is gone it no longer counts.
func TestSwitchoverWaitsForEveryProxy(t *testing.T) {
	s := startSwitchStack(t, 1, func(c *config.Config) {
		c.Switchover.DrainTimeout = config.Duration(500 * time.Millisecond)
	})
	ctx := context.Background()
	lease, err := s.store.Register(ctx, s.keys.Proxy("stuck"), []byte(`{"id":"stuck","epochs":{"main":1}}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.switchover("node2")
	if err == nil || !strings.Contains(out, "had not acknowledged holding: stuck") || !strings.Contains(out, "rolled back") {
		t.Fatalf("switchover with a proxy that does not acknowledge: %v\n%s", err, out)
	}
	t.Logf("a proxy that does not acknowledge:\n%s", out)
	var ro int
	if err := s.direct(0).QueryRow("SELECT @@global.read_only").Scan(&ro); err != nil || ro != 0 {
		t.Fatalf("old primary read_only=%d (%v)", ro, err)
	}
	if err := lease.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := s.switchover("node2"); err != nil {
		t.Fatalf("switchover once the silent proxy's lease is gone: %v\n%s", err, out)
	}
}

// TestDrainFailBusyTransactions: with drain_mode fail, transactions that
// keep running statements through the drain bound are ended by the proxy
// with its rolled-back error, never by the fence: the leader fences only
// after every proxy acknowledged the fence step with nothing in flight on
// the old primary, so no statement of theirs reaches it once it is
// read_only (1290) or has its connections killed. Autocommit clients see
// no error. Two switchovers, there and back.
func TestDrainFailBusyTransactions(t *testing.T) {
	s := startSwitchStack(t, 2, func(c *config.Config) {
		c.Switchover.DrainTimeout = config.Duration(400 * time.Millisecond)
		c.Switchover.DrainMode = config.DrainFail
		c.Switchover.MaxHold = config.Duration(4 * time.Second)
	})
	ctx := context.Background()
	var dbs []*sql.DB
	for i := range 2 {
		db, err := sql.Open("mysql", s.proxyDSN(i, "primary", "sbtest"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(16)
		dbs = append(dbs, db)
	}
	writers := startWriters(t, dbs[0], "drain_busy", 2)
	writers2 := startWriters(t, dbs[1], "drain_busy", 2)

	const txClients = 6
	type txResult struct {
		mu   sync.Mutex
		errs []string
	}
	var res txResult
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range txClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := dbs[i%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				conn, err := db.Conn(ctx)
				if err != nil {
					res.mu.Lock()
					res.errs = append(res.errs, "conn: "+err.Error())
					res.mu.Unlock()
					return
				}
				tx, err := conn.BeginTx(ctx, nil)
				for err == nil {
					select {
					case <-stop:
						_ = tx.Rollback()
						_ = conn.Close()
						return
					default:
					}
					_, err = tx.Exec("INSERT INTO drain_busy (w) VALUES (?)", 1000+i)
				}
				res.mu.Lock()
				res.errs = append(res.errs, err.Error())
				res.mu.Unlock()
				if tx != nil {
					_ = tx.Rollback()
				}
				_ = conn.Close()
			}
		}()
	}
	for _, to := range []string{"node2", "node1"} {
		time.Sleep(300 * time.Millisecond)
		out, err := s.switchover(to)
		if err != nil {
			t.Fatalf("switchover to %s with drain_mode fail: %v\n%s", to, err, out)
		}
		if !strings.Contains(out, "2 of 2 proxies acknowledged the fence step") {
			t.Errorf("switchover to %s: the proxies' fence acknowledgement is not reported:\n%s", to, out)
		}
		t.Logf("switchover to %s:\n%s", to, out)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	writers.end()
	writers2.end()
	if n := writers.errs.Load() + writers2.errs.Load(); n != 0 {
		t.Errorf("autocommit writers saw %d errors (first: %v %v)", n, writers.first.Load(), writers2.first.Load())
	}
	if len(res.errs) < txClients {
		t.Fatalf("only %d transaction errors for %d clients busy across 2 switchovers: %q", len(res.errs), txClients, res.errs)
	}
	bad := 0
	for _, e := range res.errs {
		if !strings.Contains(e, "transaction was rolled back") || !strings.Contains(e, "drain bound") {
			bad++
			t.Errorf("a transaction busy at the drain bound got: %s", e)
		}
	}
	t.Logf("%d transactions ended at the drain bound, %d with another error; autocommit writers: %d inserts",
		len(res.errs), bad, writers.ok.Load()+writers2.ok.Load())
}
