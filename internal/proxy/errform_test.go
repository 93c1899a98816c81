package proxy

import (
	"context"
	"database/sql"
	"io"
	"net"
	"testing"
	"time"
)

// fillServer holds raw TCP connections to addr (sending nothing, so the
// server keeps their threads until its connect_timeout) until the server
// refuses one before its greeting (its first packet is an ERR), and
// returns them; the caller closes them.
func fillServer(t *testing.T, addr string, most int) []net.Conn {
	t.Helper()
	var held []net.Conn
	for range most {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("first packet from %s: %v", addr, err)
		}
		if hdr[4] == 0xff {
			_ = c.Close()
			return held
		}
		held = append(held, c)
	}
	t.Fatalf("%s still greets after %d connections", addr, most)
	return nil
}

// TestBackendRefusalRelayedAsSent: a server past max_connections + 1
// refuses a connection before its greeting with ERR 1040 and no SQLSTATE
// marker; go-sql-driver then reports "Error 1040: Too many connections".
// A client of the proxy whose backend login the server refuses that way
// gets the very same error text, with the greeting not yet cached and
// with it cached.
func TestBackendRefusalRelayedAsSent(t *testing.T) {
	h := newHarness(t, nil)
	root := h.direct(0)
	if _, err := root.Exec("SET GLOBAL max_connections = 10"); err != nil {
		t.Fatal(err)
	}
	root.SetMaxIdleConns(0)
	_ = root.Close()
	ctx := context.Background()
	ping := func(dsn string) string {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := db.PingContext(cctx); err != nil {
			return err.Error()
		}
		return "<no error>"
	}
	const want = "Error 1040: Too many connections"
	check := func(what string) {
		t.Helper()
		held := fillServer(t, h.c.Nodes[0].Address, 40)
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		direct := ping(h.c.DSN(0, h.c.AppUser, h.c.AppPassword, ""))
		proxied := ping(h.dsn("rw", "", nil))
		if direct != want || proxied != direct {
			t.Fatalf("%s: direct %q, through the proxy %q; want both %q", what, direct, proxied, want)
		}
	}
	check("greeting not cached")
	// A login through the replica listener caches the cluster's greeting
	// (its pooled connection is on a replica, not on the full primary).
	_ = h.db("ro", "", nil)
	check("greeting cached")
}
