package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
)

// startBare starts another proxy on cfg's clusters with fresh listener
// ports and no routing state, as a proxy is right after `switchyard up`
// (re)starts, until it read the store.
func startBare(t *testing.T, h *harness, maxHold time.Duration) *Server {
	t.Helper()
	cfg := *h.cfg
	cfg.Listeners = append([]config.Listener(nil), h.cfg.Listeners...)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	cfg.Clusters = append([]config.Cluster(nil), h.cfg.Clusters...)
	for i := range cfg.Clusters {
		cfg.Clusters[i].Failover.MaxHold = config.Duration(maxHold)
	}
	srv, err := New(Options{Config: &cfg, ID: "test-proxy-2", Log: testLogger(t), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// A proxy that has just started serves its listeners before it has
// read the routing state: clients that connect meanwhile wait for the
// state (up to failover.max_hold) instead of getting 1105 "no routing
// state yet"; past the bound they get that error, clearly worded.
func TestLoginWaitsForRoutingState(t *testing.T) {
	h := newHarness(t, nil)
	srv := startBare(t, h, 5*time.Second)
	dsn := func(s *Server, listener string) string {
		c := mysql.NewConfig()
		c.User, c.Passwd, c.Net, c.Addr, c.DBName = h.c.AppUser, h.c.AppPassword, "tcp", s.ListenerAddr(listener), "sbtest"
		c.Timeout, c.ReadTimeout = 15*time.Second, 15*time.Second
		return c.FormatDSN()
	}
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 6 {
		listener := "rw"
		if i%2 == 1 {
			listener = "ro"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				db, err := sql.Open("mysql", dsn(srv, listener))
				if err == nil {
					db.SetMaxOpenConns(1)
					var one int
					err = db.QueryRowContext(context.Background(), "SELECT 1").Scan(&one)
					_ = db.Close()
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v", listener, err))
				} else {
					ok.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond) // the store's state arrives late
	if n := ok.Load(); n != 0 {
		t.Fatalf("%d logins succeeded before the proxy had any routing state", n)
	}
	srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
	deadline := time.Now().Add(10 * time.Second)
	for ok.Load() < 30 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d logins, %d failed, through a proxy whose routing state arrived 1.5 s after its start", ok.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d logins failed while the state arrived within failover.max_hold; first: %v", failed.Load(), firstErr.Load())
	}
	if ok.Load() < 30 {
		t.Fatalf("only %d logins in 10 s after the state arrived", ok.Load())
	}

	// No state within the bound: a clear error after it.
	bare := startBare(t, h, time.Second)
	db, err := sql.Open("mysql", dsn(bare, "rw"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	err = db.Ping()
	waited := time.Since(start)
	code, msg := mysqlErr(err)
	if code != 1105 || !containsAll(msg, "no routing state", "failover.max_hold") {
		t.Fatalf("login without routing state: %v; want 1105 naming the missing state and failover.max_hold", err)
	}
	if waited < 900*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("login without routing state answered after %s; want about failover.max_hold (1s)", waited)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
