package proxy

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Idle pooled connections hold server slots. When the server is at its
// max_connections and a login needs a connection of a pool key nobody left
// idle (here another character set; go-sql-driver's suite hits it with
// multiStatements after its 1,000-connection TestConcurrent), the server's
// refusal (error 1040) makes the proxy close idle connections of other keys
// and dial again, instead of passing on a refusal a direct client would not
// get.
func TestServerFullClosesIdlePooledConnections(t *testing.T) {
	h := newHarness(t, nil)
	direct := h.direct(0)
	direct.SetMaxOpenConns(1)
	var before int
	if err := direct.QueryRow("SELECT @@global.max_connections").Scan(&before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.Exec("SET GLOBAL max_connections = ?", before) })
	limit := globalStatus(t, direct, "Threads_connected") + 4
	if _, err := direct.Exec("SET GLOBAL max_connections = ?", limit); err != nil {
		t.Fatal(err)
	}

	latin1 := func(c *mysql.Config) { c.Collation = "latin1_swedish_ci" }
	ctx := context.Background()
	var held []*sql.DB
	for range 20 {
		db, err := sql.Open("mysql", h.dsn("rw", "sbtest", latin1))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			if code, _ := mysqlErr(err); code != 1040 {
				t.Fatalf("latin1 client %d: %v (want error 1040 once the server is full)", len(held)+1, err)
			}
			break
		}
		held = append(held, db)
	}
	if len(held) == 0 || len(held) == 20 {
		t.Fatalf("%d latin1 clients logged in under max_connections %d: the test does not fill the server", len(held), limit)
	}
	for _, db := range held {
		_ = db.Close()
	}
	h.waitIdle("node1", len(held))
	t.Logf("%d idle latin1 connections fill the server (max_connections %d)", len(held), limit)

	db, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var cs string
	if err := db.QueryRowContext(ctx, "SELECT @@character_set_client").Scan(&cs); err != nil {
		t.Fatalf("utf8mb4 client with the server full of idle latin1 connections: %v", err)
	}
	if cs != "utf8mb4" {
		t.Fatalf("character_set_client %q, want utf8mb4", cs)
	}
	if n := h.metric("switchyard_backend_pool_server_evictions_total", "node", "node1"); n < 1 {
		t.Fatalf("switchyard_backend_pool_server_evictions_total %v, want at least 1", n)
	}
}
