package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// TestTxPoolWaitTimeout: a client of a transaction-pooled listener, which
// holds no backend connection while idle, is closed after its session's
// wait_timeout as the server closes it connected directly: the value set
// with SET SESSION or SET @@wait_timeout, interactive_timeout at an
// interactive login, the global wait_timeout after COM_RESET_CONNECTION
// (also for an interactive client), never while it sends statements. Each
// sequence runs against the server and through the listener with the same
// expectation.
func TestTxPoolWaitTimeout(t *testing.T) {
	h := txHarness(t, 0)
	root := h.direct(0)
	targets := []struct{ name, addr, user, password string }{
		{"direct", h.c.Nodes[0].Address, "root", h.c.RootPassword},
		{"proxy", h.srv.ListenerAddr("rwtx"), h.c.AppUser, h.c.AppPassword},
	}
	type step func(t *testing.T, rc *rawConn)
	query := func(q string) step { return func(t *testing.T, rc *rawConn) { rc.query(q) } }
	reset := func(t *testing.T, rc *rawConn) {
		rc.cmd(mysql.COM_RESET_CONNECTION)
		rc.expectOK()
	}
	// closedAfter: the client's socket is closed between min and min + 4 s
	// (one sweep period and a margin for the loaded machine) after the
	// last step; 0: still open 3 s after it.
	cases := []struct {
		name        string
		caps        uint32
		steps       []step
		closedAfter time.Duration
	}{
		{"set_session", 0, []step{query("SET SESSION wait_timeout = 1")}, time.Second},
		{"set_at_at", 0, []step{query("SET @@wait_timeout = 2")}, 2 * time.Second},
		{"busy_then_idle", 0, []step{query("SET SESSION wait_timeout = 2"),
			func(t *testing.T, rc *rawConn) {
				for range 4 { // 4 s in all, each pause shorter than the limit
					time.Sleep(time.Second)
					if got := rc.query("SELECT 1"); len(got) != 1 {
						t.Fatalf("SELECT 1: %v", got)
					}
				}
			}}, 2 * time.Second},
		{"reset_to_global", 0, []step{query("SET SESSION wait_timeout = 1"), reset}, 0},
		{"interactive", mysql.CLIENT_INTERACTIVE, nil, 2 * time.Second},
		{"interactive_reset_to_wait_timeout", mysql.CLIENT_INTERACTIVE, []step{reset}, 0},
		{"interactive_set_session", mysql.CLIENT_INTERACTIVE, []step{query("SET SESSION wait_timeout = 1")}, time.Second},
		// Pinned to its connection: the server's own close of it reaches
		// the client (idleclose.go).
		{"in_transaction", 0, []step{query("SET SESSION wait_timeout = 1"), query("BEGIN")}, time.Second},
		{"user_lock", 0, []step{query("SET SESSION wait_timeout = 1"), query("SELECT GET_LOCK('idle_timeout_test', 0)")}, time.Second},
	}
	// closed by the server's close of the pinned connection
	// (backend_idle_closed), not by the proxy's own timeout
	pinnedCase := map[string]bool{"in_transaction": true, "user_lock": true}
	if _, err := root.Exec("SET GLOBAL interactive_timeout = 2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = root.Exec("SET GLOBAL interactive_timeout = DEFAULT") })
	h.srv.waitDefaults.m.Clear() // logins read the global value again
	closed0 := h.metric("switchyard_proxy_sessions_closed_total", "reason", closeIdleTimeout)
	closes := 0
	t.Run("sequences", func(t *testing.T) {
		for _, at := range targets {
			for _, tc := range cases {
				if at.name == "proxy" && tc.closedAfter > 0 && !pinnedCase[tc.name] {
					closes++
				}
				t.Run(at.name+"/"+tc.name, func(t *testing.T) {
					t.Parallel()
					rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", tc.caps, "")
					if err != nil {
						t.Fatal(err)
					}
					defer rc.Close()
					for _, st := range tc.steps {
						st(t, rc)
					}
					last := time.Now()
					if tc.closedAfter == 0 {
						time.Sleep(3 * time.Second)
						if got := rc.query("SELECT 41+1"); len(got) != 1 || got[0][0] != "42" {
							t.Fatalf("after 3 s idle: %v", got)
						}
						return
					}
					waitClosed(t, rc, tc.closedAfter+4*time.Second)
					took := time.Since(last)
					if took < tc.closedAfter-100*time.Millisecond {
						t.Fatalf("closed %v after the last statement, before its wait_timeout %v", took, tc.closedAfter)
					}
					t.Logf("closed %v after the last statement (wait_timeout %v)", took, tc.closedAfter)
				})
			}
		}
	})
	if got := h.metric("switchyard_proxy_sessions_closed_total", "reason", closeIdleTimeout) - closed0; int(got) != closes {
		t.Errorf("sessions closed with reason %s: %v, want %d", closeIdleTimeout, got, closes)
	}

	t.Run("global_wait_timeout", func(t *testing.T) {
		if _, err := root.Exec("SET GLOBAL wait_timeout = 2"); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = root.Exec("SET GLOBAL wait_timeout = DEFAULT") }()
		h.srv.waitDefaults.m.Clear()
		for _, at := range targets {
			t.Run(at.name, func(t *testing.T) {
				rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", 0, "")
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				start := time.Now()
				waitClosed(t, rc, 6*time.Second)
				if took := time.Since(start); took < 1900*time.Millisecond {
					t.Fatalf("closed %v after login, before the global wait_timeout (2 s)", took)
				}
			})
		}
	})
}

// TestTxPoolWaitTimeoutTLS: a TLS session, which never parks, is closed
// after its wait_timeout too (the read deadline of its wait).
func TestTxPoolWaitTimeoutTLS(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction, TLS: c.Listeners[0].TLS})
	})
	if !h.cfg.Listeners[0].TLS.Enabled() {
		t.Fatal("the sandbox's rw listener has no TLS")
	}
	db, err := h.tlsDB("rwtx", tlsClientConfig(t, h.c.TLS().CA, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SET SESSION wait_timeout = 2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	var n int
	if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
		t.Fatalf("1 s idle, below wait_timeout: %v", err)
	}
	time.Sleep(3500 * time.Millisecond)
	if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&n); err == nil {
		t.Fatal("the TLS session still answers 3.5 s after its wait_timeout (2 s)")
	}
	if got := h.metric("switchyard_proxy_sessions_closed_total", "reason", closeIdleTimeout); got != 1 {
		t.Fatalf("sessions closed with reason %s: %v, want 1", closeIdleTimeout, got)
	}
}
