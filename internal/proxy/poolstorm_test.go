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

	"github.com/switchyard-db/switchyard/internal/config"
)

// A flood of clients through the proxy must not take every connection
// the server allows: the pool's ceiling leaves the server's reserve
// (proxy.pool.server_reserve_percent of max_connections) to others, so a
// direct login as another user, without SUPER (which MariaDB lets past
// max_connections once), with three sessions at once, succeeds during the
// flood and right after it;
// the flood's clients past the ceiling wait and get 1040 "Too many
// connections", as from a full server, and the listener keeps serving;
// after the flood the idle connections are given back within seconds,
// not after proxy.pool.idle_timeout.
func TestPoolStormLeavesRoomForDirectLogins(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Proxy.Pool.WaitTimeout = config.Duration(2 * time.Second)
	})
	root := h.direct(0)
	root.SetMaxOpenConns(1)
	mustExec(t, root, "CREATE USER 'storm_dba'@'%' IDENTIFIED BY 'dba-pw'")
	mustExec(t, root, "GRANT SELECT ON *.* TO 'storm_dba'@'%'")
	t.Cleanup(func() { _, _ = root.Exec("DROP USER 'storm_dba'@'%'") })
	var before int
	if err := root.QueryRow("SELECT @@global.max_connections").Scan(&before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = root.Exec("SET GLOBAL max_connections = ?", before) })
	base := globalStatus(t, root, "Threads_connected")
	limit := base + 40
	mustExec(t, root, fmt.Sprintf("SET GLOBAL max_connections = %d", limit))

	dba := mysql.NewConfig()
	dba.User, dba.Passwd, dba.Net, dba.Addr = "storm_dba", "dba-pw", "tcp", h.c.Nodes[0].Address
	dba.Timeout = 5 * time.Second
	// Three sessions at once, as an administrator, a monitoring agent and
	// a backup would hold them.
	const directSessions = 3
	dbaLogin := func() error {
		db, err := sql.Open("mysql", dba.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		db.SetMaxOpenConns(directSessions)
		ctx := context.Background()
		var conns []*sql.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for range directSessions {
			c, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			conns = append(conns, c)
			var one int
			if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
		}
		return nil
	}

	// Direct logins all along.
	var directOK, directFailed atomic.Int64
	var directErr atomic.Value
	stopDirect := make(chan struct{})
	directDone := make(chan struct{})
	go func() {
		defer close(directDone)
		for {
			select {
			case <-stopDirect:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := dbaLogin(); err != nil {
				directFailed.Add(1)
				directErr.CompareAndSwap(nil, err.Error())
			} else {
				directOK.Add(1)
			}
		}
	}()

	const flood = 90
	var held, refused, other atomic.Int64
	var otherErr atomic.Value
	var ready, wg sync.WaitGroup
	release := make(chan struct{})
	ready.Add(flood)
	wg.Add(flood)
	for range flood {
		go func() {
			defer wg.Done()
			db, err := sql.Open("mysql", h.dsn("rw", "sbtest", func(c *mysql.Config) { c.Timeout = 20 * time.Second }))
			if err != nil {
				t.Error(err)
				ready.Done()
				return
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			conn, err := db.Conn(context.Background())
			if err == nil {
				var one int
				err = conn.QueryRowContext(context.Background(), "SELECT 1").Scan(&one)
			}
			switch code, msg := mysqlErr(err); {
			case err == nil:
				held.Add(1)
			case code == 1040 && strings.Contains(msg, "Too many connections"):
				refused.Add(1)
			default:
				other.Add(1)
				otherErr.CompareAndSwap(nil, err.Error())
			}
			ready.Done()
			<-release
			if conn != nil {
				_ = conn.Close()
			}
		}()
	}
	ready.Wait()
	peak := globalStatus(t, root, "Threads_connected")
	okDuring, failedDuring := directOK.Load(), directFailed.Load()
	// One more direct login while the flood's connections are held.
	heldErr := dbaLogin()
	close(release)
	wg.Wait()
	t.Logf("flood of %d: %d held, %d refused with 1040, %d other errors; server max_connections %d (%d connected before), Threads_connected %d while held; direct logins during the flood %d ok, %d failed",
		flood, held.Load(), refused.Load(), other.Load(), limit, base, peak, okDuring, failedDuring)
	if heldErr != nil {
		t.Errorf("direct login as another user while the flood holds its connections: %v", heldErr)
	}
	if other.Load() > 0 {
		t.Errorf("%d flood clients got another error than 1040; first: %v", other.Load(), otherErr.Load())
	}
	if held.Load() == 0 || refused.Load() == 0 {
		t.Errorf("the flood did not reach the pool's ceiling: %d held, %d refused", held.Load(), refused.Load())
	}

	// Right after the flood: direct logins keep working and the idle
	// connections go back to the server within seconds.
	afterStart := time.Now()
	if n := h.inUse(0); n != 0 {
		t.Fatalf("%d pooled connections still in use after the flood's clients left", n)
	}
	t.Logf("%d idle pooled connections once the flood's clients left", h.poolGauge("node1", "idle"))
	deadline := afterStart.Add(15 * time.Second)
	for h.poolGauge("node1", "idle") > trimFloor && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	trimmed := time.Since(afterStart)
	idle := h.poolGauge("node1", "idle")
	time.Sleep(300 * time.Millisecond)
	close(stopDirect)
	<-directDone
	t.Logf("idle pooled connections down to %d %s after the flood; direct logins in all %d ok, %d failed", idle, trimmed.Round(10*time.Millisecond), directOK.Load(), directFailed.Load())
	if n := directFailed.Load(); n > 0 {
		t.Errorf("%d direct logins as another user failed during or after the flood; first: %v", n, directErr.Load())
	}
	if idle > trimFloor {
		t.Errorf("%d idle pooled connections 15 s after the flood (idle_timeout 1m): want at most %d", idle, trimFloor)
	}
	// The listener still serves.
	c := h.db("rw", "sbtest", nil)
	var one int
	if err := c.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatalf("a login through the proxy after the flood: %v", err)
	}
}
