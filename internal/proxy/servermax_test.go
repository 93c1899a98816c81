package proxy

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// A burst of clients through the proxy against a primary with a small
// max_connections: the proxy's connections to it stay below
// max_connections less the reserve, so a direct login (not SUPER) still
// gets in during the burst, and after it the idle connections fall to
// proxy.pool.max_idle within seconds, not idle_timeout.
func TestPoolCappedByServerMaxConnections(t *testing.T) {
	const maxConns, maxIdle, clients = 60, 5, 90
	h := newHarness(t, func(c *config.Config) {
		c.Proxy.Pool.WaitTimeout = config.Duration(20 * time.Second)
		c.Proxy.Pool.MaxIdle = maxIdle
	})
	root := h.direct(0)
	var old int
	if err := root.QueryRow("SELECT @@max_connections").Scan(&old); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Exec(fmt.Sprintf("SET GLOBAL max_connections = %d", maxConns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("SET GLOBAL max_connections = %d", old)) })
	limit := maxConns - serverReserve(maxConns)

	appDirect := func() error {
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = h.c.AppUser, h.c.AppPassword, "tcp", h.c.Nodes[0].Address
		cfg.Timeout = 5 * time.Second
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		var one int
		return db.QueryRow("SELECT 1").Scan(&one)
	}

	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := make(chan struct{})
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			db, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			var v int
			if err := db.QueryRow("SELECT SLEEP(1)").Scan(&v); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	peak, directOK, sampled := 0, 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(200 * time.Millisecond):
			h.srv.mu.Lock()
			bc := h.srv.backends[h.c.Nodes[0].Address]
			h.srv.mu.Unlock()
			if bc != nil {
				bc.mu.Lock()
				peak = max(peak, bc.total)
				bc.mu.Unlock()
			}
			sampled++
			if err := appDirect(); err != nil {
				t.Errorf("direct login to the primary during the burst: %v", err)
			} else {
				directOK++
			}
		}
	}
	close(errs)
	refused := 0
	for err := range errs {
		if code, _ := mysqlErr(err); code == 1040 && err.Error() == "Error 1040: Too many connections" {
			// The server's own refusal before its greeting: the reserve
			// also holds this test's direct logins, the proxy's checks and
			// threads still ending, and the machine is loaded.
			refused++
			continue
		}
		t.Errorf("client through the proxy: %v", err)
	}
	if refused > clients/10 {
		t.Errorf("%d of %d clients through the proxy refused by the server with 1040", refused, clients)
	}
	t.Logf("burst of %d clients: peak %d proxy connections to node1 (limit %d = max_connections %d less %d), %d/%d direct logins during it succeeded, %d clients refused by the server",
		clients, peak, limit, maxConns, serverReserve(maxConns), directOK, sampled, refused)
	if peak > limit {
		t.Fatalf("peak %d proxy connections to node1, above the limit %d", peak, limit)
	}
	if peak < limit/2 {
		t.Fatalf("peak %d proxy connections: the burst did not load the pool", peak)
	}
	// Idle connections fall back to the low-water mark within seconds.
	began := time.Now()
	for h.poolGauge("node1", "idle") > maxIdle {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("%d idle connections 10s after the burst, want at most %d (proxy.pool.max_idle)", h.poolGauge("node1", "idle"), maxIdle)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("idle connections at %d (max_idle %d) %s after the burst", h.poolGauge("node1", "idle"), maxIdle, time.Since(began).Round(10*time.Millisecond))
	if n := h.poolGauge("node1", "idle"); n != maxIdle {
		t.Fatalf("%d idle connections kept, want the low-water mark %d", n, maxIdle)
	}
	if err := appDirect(); err != nil {
		t.Fatalf("direct login to the primary after the burst: %v", err)
	}
}
