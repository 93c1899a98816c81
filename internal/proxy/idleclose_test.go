package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// waitClosed reads from the raw client until its socket is closed (EOF or
// reset) and fails the test if it is still open after within.
func waitClosed(t *testing.T, rc *rawConn, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = rc.c.SetReadDeadline(start.Add(within))
	p, _, err := mysqlproto.ReadPacket(rc.r, nil, 0)
	var ne net.Error
	switch {
	case err == nil:
		// A packet the server sent before closing: the close follows.
		_, _, err = mysqlproto.ReadPacket(rc.r, nil, 0)
		if err == nil {
			t.Fatalf("two unasked packets, the first %s", describe(p))
		}
		fallthrough
	case errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset"):
		return time.Since(start)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the client's socket is still open %v after the server closed the session's connection", within)
	default:
		t.Fatalf("read: %v", err)
	}
	return 0
}

// TestIdleTimeoutClosesClient: a session whose server closes its idle
// connection (wait_timeout set by the client, a KILL from another session)
// sees its own socket closed, as it does connected directly, and
// go-sql-driver's check before reusing the connection opens a new one
// without an error (its TestStaleConnectionChecks).
func TestIdleTimeoutClosesClient(t *testing.T) {
	h := txHarness(t, 0)
	root := h.direct(0)
	for _, at := range []struct{ name, addr, user, password string }{
		{"direct", h.c.Nodes[0].Address, "root", h.c.RootPassword},
		{"proxy", h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword},
	} {
		t.Run(at.name+"/wait_timeout", func(t *testing.T) {
			rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", 0, "")
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			rc.query("SET SESSION wait_timeout=1")
			// 1 s of wait_timeout, plus the idle sweep (1 s) and margin.
			t.Logf("closed %v after the last statement", waitClosed(t, rc, 6*time.Second))
		})
		t.Run(at.name+"/wait_timeout_state_republished", func(t *testing.T) {
			// The topology is published again, unchanged (a new snapshot
			// of the same route), while the session is idle: the server's
			// close still reaches the client.
			rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", 0, "")
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			rc.query("SET SESSION wait_timeout=2")
			if at.name == "proxy" {
				time.Sleep(500 * time.Millisecond)
				h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
			}
			t.Logf("closed %v after the last statement", waitClosed(t, rc, 7*time.Second))
		})
		t.Run(at.name+"/kill", func(t *testing.T) {
			rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", 0, "")
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			id := rc.query("SELECT CONNECTION_ID()")[0][0]
			if at.name == "proxy" {
				time.Sleep(2500 * time.Millisecond) // parked (idlepark.go)
			}
			if _, err := root.Exec("KILL " + id); err != nil {
				t.Fatal(err)
			}
			t.Logf("closed %v after the KILL", waitClosed(t, rc, 3*time.Second))
		})
	}

	t.Run("go-sql-driver", func(t *testing.T) {
		db := h.db("rw", "sbtest", nil)
		db.SetMaxOpenConns(1)
		ctx := context.Background()
		var before, after int64
		if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "SET @@SESSION.wait_timeout = 2"); err != nil {
			t.Fatal(err)
		}
		if err := db.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("begin after the server closed the idle connection: %v", err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if after == before {
			t.Fatalf("still on backend thread %d", before)
		}
	})

	t.Run("transaction_pooling", func(t *testing.T) {
		// An idle client holds no backend: the proxy closes it after its
		// wait_timeout itself (idletimeout.go, TestTxPoolWaitTimeout).
		rc, err := dialRaw(t, h.srv.ListenerAddr("rwtx"), h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		rc.query("SET SESSION wait_timeout=1")
		t.Logf("closed %v after the last statement", waitClosed(t, rc, 6*time.Second))
	})
}
