package proxy

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// charsetVars reads, on one connection of dsn, the database character set
// variables, then runs SET CHARACTER SET utf8mb4 (which gives
// character_set_connection the value of character_set_database) and reads
// character_set_connection.
func charsetVars(t *testing.T, dsn string) [3]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var v [3]string
	if err := conn.QueryRowContext(ctx, "SELECT @@character_set_database, @@collation_database").Scan(&v[0], &v[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT @@character_set_connection").Scan(&v[2]); err != nil {
		t.Fatal(err)
	}
	return v
}

// A pooled backend connection that was reset (COM_RESET_CONNECTION, at
// logout or for another session's checkout) keeps its default schema but
// takes character_set_database from the global value: the proxy selects
// the schema again, so a session that gets the connection sees its
// schema's character set, as a new connection to the server does, in
// character_set_database, collation_database and in what SET CHARACTER SET
// gives character_set_connection. Session pooling (a connection given back
// at logout) and transaction pooling (a connection another session left
// with session state, reset for the next one), one backend connection per
// node so that each login takes the pooled one.
func TestPooledConnectionSchemaCharset(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 1})
	cfg := c.Config()
	cfg.Proxy.MaxConnectionsPerBackend = 1
	var rw config.Listener
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
		if cfg.Listeners[i].Name == "rw" {
			cfg.Listeners[i].Pooling = config.PoolingSession
			rw = cfg.Listeners[i]
		}
	}
	rw.Name, rw.Pooling = "rw-tx", config.PoolingTransaction
	cfg.Listeners = append(cfg.Listeners, rw)
	h := &harness{t: t, c: c, cfg: cfg}
	h.srv = h.startProxy(cfg)
	h.srv.SetClusterState(sandboxState(c, 1, 0))
	node := c.Nodes[0].Name

	// A schema whose character set is not the server's global
	// character_set_database (what a reset connection falls back to).
	root := h.direct(0)
	var global string
	if err := root.QueryRow("SELECT @@global.character_set_database").Scan(&global); err != nil {
		t.Fatal(err)
	}
	cs, coll := "latin1", "latin1_swedish_ci"
	if global == "latin1" {
		cs, coll = "utf8mb4", "utf8mb4_general_ci"
	}
	for _, q := range []string{"DROP DATABASE IF EXISTS csdb", "CREATE DATABASE csdb CHARACTER SET " + cs,
		"GRANT ALL ON csdb.* TO '" + c.AppUser + "'@'%'"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rootCfg, err := mysql.ParseDSN(c.RootDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	rootCfg.DBName = "csdb"
	want := [3]string{cs, coll, cs}
	if got := charsetVars(t, rootCfg.FormatDSN()); got != want {
		t.Fatalf("direct: character_set_database, collation_database, character_set_connection after SET CHARACTER SET = %q, want %q", got, want)
	}

	check := func(what, listener string, kinds ...string) {
		t.Helper()
		before := 0
		for _, k := range kinds {
			before += h.checkouts(node, k)
		}
		if got := charsetVars(t, h.dsn(listener, "csdb", nil)); got != want {
			t.Fatalf("%s: character_set_database, collation_database, character_set_connection after SET CHARACTER SET = %q, want %q (direct)", what, got, want)
		}
		after := 0
		for _, k := range kinds {
			after += h.checkouts(node, k)
		}
		if len(kinds) > 0 && after == before {
			t.Fatalf("%s: no %v checkout of a pooled connection: the case was not exercised", what, kinds)
		}
	}

	// Session pooling: the first login dials; at its logout the
	// connection is reset and pooled; the second login takes it clean.
	check("first session", "rw")
	h.waitIdle(node, 1)
	check("session on a connection reset at logout", "rw", checkoutClean)
	h.waitIdle(node, 1)

	// Transaction pooling: a session that changed a variable leaves the
	// only connection with its state; the next session's checkout resets
	// it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := h.db("rw-tx", "csdb", nil)
	oc, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	if _, err := oc.ExecContext(ctx, "SET @@session.sql_mode = 'ANSI_QUOTES'"); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(node, 1)
	check("transaction-pooled session on a connection reset for it", "rw-tx", checkoutReset)

	// The schema is dropped while sessions have it selected: a reset
	// for one of them selects it again, the server refuses, and the
	// session goes on as it would direct (its statements that need no
	// schema run).
	h.waitIdle(node, 1)
	third := h.db("rw-tx", "csdb", nil)
	tc, err := third.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := tc.ExecContext(ctx, "SET @@session.sql_mode = 'ANSI_QUOTES'"); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(node, 1)
	if _, err := root.Exec("DROP DATABASE csdb"); err != nil {
		t.Fatal(err)
	}
	resets := h.checkouts(node, checkoutReset)
	var mode string
	if err := oc.QueryRowContext(ctx, "SELECT @@session.sql_mode").Scan(&mode); err != nil {
		t.Fatalf("a statement of a session whose schema was dropped, on a connection reset for it: %v", err)
	}
	if mode != "ANSI_QUOTES" || h.checkouts(node, checkoutReset) == resets {
		t.Fatalf("sql_mode %q (want ANSI_QUOTES), reset checkouts %d before, %d after", mode, resets, h.checkouts(node, checkoutReset))
	}
}
