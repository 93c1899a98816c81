package e2e

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// TLS on both sides through a planned switchover: the rw listener requires
// TLS (tls.require), the monitor and application accounts are altered to
// REQUIRE SSL on the servers, so the controller's probes, fencing and
// promotion and the proxy's backend logins work only over clusters[].tls
// (their existing connections are killed first, so every one of them logs
// in again). TLS clients (go-sql-driver, verifying the proxy against the
// sandbox CA) write through the switchover node1 → node2: 0 errors, every
// acknowledged row on the new primary.
func TestTLSSwitchoverBothSides(t *testing.T) {
	s := startSwitchStack(t, 1, func(c *config.Config) {
		ca := c.Listeners[0].TLS.CAFile // the sandbox CA (sandbox.Config)
		c.Clusters[0].TLS = config.ClusterTLS{Enabled: true, CAFile: ca, Verify: config.VerifyFull}
		for i := range c.Listeners {
			c.Listeners[i].TLS.Require = true
		}
	})
	ctx := context.Background()
	for _, u := range []string{s.sb.MonitorUser, s.sb.AppUser} {
		if _, err := s.direct(0).ExecContext(ctx, fmt.Sprintf("ALTER USER '%s'@'%%' REQUIRE SSL", u)); err != nil {
			t.Fatal(err)
		}
	}
	var pos string
	if err := s.direct(0).QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var r int
		if i > 0 {
			if err := s.direct(i).QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 20)", pos).Scan(&r); err != nil || r != 0 {
				t.Fatalf("node%d did not apply the ALTER USER: %v %d", i+1, err, r)
			}
		}
		// Every monitor and application connection logs in again.
		rows, err := s.direct(i).QueryContext(ctx, "SELECT id FROM information_schema.PROCESSLIST WHERE user IN (?, ?)", s.sb.MonitorUser, s.sb.AppUser)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			_, _ = s.direct(i).ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		}
	}

	pool, err := config.LoadCAPool(s.cfg.Listeners[0].TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := mysql.RegisterTLSConfig("e2e-sandbox-ca", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mysql.DeregisterTLSConfig("e2e-sandbox-ca") })
	plain, err := sql.Open("mysql", s.proxyDSN(0, "primary", "sbtest"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.PingContext(ctx); err == nil || !strings.Contains(err.Error(), "1045") {
		t.Fatalf("plaintext client on rw with tls.require: %v, want 1045", err)
	}
	db, err := sql.Open("mysql", s.proxyDSN(0, "primary", "sbtest")+"&tls=e2e-sandbox-ca")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE tls_sw (id INT PRIMARY KEY, sid INT)"); err != nil {
		t.Fatalf("TLS client, TLS backend, account REQUIRE SSL: %v", err)
	}
	// The controller still probes every node (over TLS: its plaintext
	// logins would now be refused).
	s.waitServing("node1")

	var next atomic.Int64
	var mu sync.Mutex
	var acked []int64
	var errs []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := next.Add(1)
				_, err := db.ExecContext(ctx, "INSERT INTO tls_sw VALUES (?, @@server_id)", id)
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else {
					acked = append(acked, id)
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	out, err := s.switchover("node2")
	if err != nil {
		t.Fatalf("switchover over TLS: %v\n%s", err, out)
	}
	s.waitServing("node2")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d client errors during the switchover, first: %s", len(errs), errs[0])
	}
	var onNode2 int
	if err := s.direct(1).QueryRowContext(ctx, "SELECT COUNT(*) FROM sbtest.tls_sw").Scan(&onNode2); err != nil {
		t.Fatal(err)
	}
	if onNode2 < len(acked) {
		t.Fatalf("new primary has %d rows, %d writes were acknowledged", onNode2, len(acked))
	}
	var sid int
	if err := db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("rw after the switchover: server_id %d, %v", sid, err)
	}
	t.Logf("%d writes acknowledged over TLS through the switchover, 0 errors", len(acked))
}
