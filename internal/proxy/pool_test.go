package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// metric returns the value of the series of name whose labels include
// labels (0 when there is none), gathered from the harness's registry.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// poolGauge reads switchyard_backend_pool_connections of node for state.
func (h *harness) poolGauge(node, state string) int {
	return int(h.metric("switchyard_backend_pool_connections", "node", node, "state", state))
}

// poolConnects reads switchyard_backend_pool_connects_total of node.
func (h *harness) poolConnects(node string) int {
	return int(h.metric("switchyard_backend_pool_connects_total", "node", node))
}

// checkouts reads switchyard_backend_pool_checkouts_total of node by kind.
func (h *harness) checkouts(node, kind string) int {
	return int(h.metric("switchyard_backend_pool_checkouts_total", "node", node, "kind", kind))
}

// waitIdle waits until node's pool has at least n idle connections.
func (h *harness) waitIdle(node string, n int) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.poolGauge(node, "idle") < n {
		if time.Now().After(deadline) {
			h.t.Fatalf("pool of %s: %d idle connections, want %d", node, h.poolGauge(node, "idle"), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// client is one client connection (its own database/sql pool of one).
type client struct {
	db   *sql.DB
	conn *sql.Conn
}

func (h *harness) client(listener, schema string) *client {
	h.t.Helper()
	db, err := sql.Open("mysql", h.dsn(listener, schema, nil))
	if err != nil {
		h.t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(context.Background())
	if err != nil {
		_ = db.Close()
		h.t.Fatalf("connect through %s: %v", listener, err)
	}
	h.t.Cleanup(func() { _ = db.Close() })
	return &client{db: db, conn: conn}
}

func (c *client) close() {
	_ = c.conn.Close()
	_ = c.db.Close()
}

func (c *client) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := c.conn.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (c *client) str(t testing.TB, q string) sql.NullString {
	t.Helper()
	var v sql.NullString
	if err := c.conn.QueryRowContext(context.Background(), q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func globalStatus(t testing.TB, db *sql.DB, name string) int {
	t.Helper()
	var n string
	var v int
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&n, &v); err != nil {
		t.Fatalf("SHOW GLOBAL STATUS %s: %v", name, err)
	}
	return v
}

// Session pooling: a client's backend connection goes back to the pool at
// logout, reset, and the next client gets it without any of the first
// client's state: user variables, session variables, character set,
// default schema, temporary tables, SQL and protocol prepared statements,
// user locks and an open transaction.
func TestSessionPoolNoStateLeak(t *testing.T) {
	h := newHarness(t, nil)
	direct := h.direct(0)
	a := h.client("rw", "sbtest")
	a.exec(t, "CREATE TABLE leak_t (id INT PRIMARY KEY)")
	idA := a.str(t, "SELECT CONNECTION_ID()").String
	a.exec(t, "SET @x = 42")
	a.exec(t, "SET SESSION sql_mode = 'ANSI_QUOTES'")
	a.exec(t, "SET NAMES latin1")
	a.exec(t, "USE otherdb")
	a.exec(t, "CREATE TEMPORARY TABLE tmp_a (x INT)")
	a.exec(t, "PREPARE sql_stmt FROM 'SELECT 1'")
	st, err := a.conn.PrepareContext(context.Background(), "SELECT ? + 1")
	if err != nil {
		t.Fatal(err)
	}
	_ = st // left open: the reset must deallocate it
	if got := a.str(t, "SELECT GET_LOCK('pool_lock_a', 0)").String; got != "1" {
		t.Fatalf("GET_LOCK: %s", got)
	}
	a.exec(t, "BEGIN")
	a.exec(t, "INSERT INTO sbtest.leak_t VALUES (1)")
	if n := globalStatus(t, direct, "Prepared_stmt_count"); n < 2 {
		t.Fatalf("Prepared_stmt_count %d with client A's two statements", n)
	}
	a.close()
	h.waitIdle("node1", 1)

	b := h.client("rw", "sbtest")
	if idB := b.str(t, "SELECT CONNECTION_ID()").String; idB != idA {
		t.Fatalf("client B is on backend connection %s, not client A's %s: the test does not exercise reuse", idB, idA)
	}
	checks := []struct{ q, want string }{
		{"SELECT @x", "NULL"},
		{"SELECT @@session.sql_mode = @@global.sql_mode", "1"},
		{"SELECT @@character_set_client", "utf8mb4"},
		{"SELECT DATABASE()", "sbtest"},
		{"SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'tmp_a'", "0"},
		{"SELECT IS_USED_LOCK('pool_lock_a') IS NULL", "1"},
		{"SELECT COUNT(*) FROM sbtest.leak_t", "0"},
		// The client sees its own tracking settings (the server's
		// defaults); the proxy's are on again underneath.
		{"SELECT @@session.session_track_system_variables = @@global.session_track_system_variables", "1"},
		{"SELECT VARIABLE_VALUE FROM information_schema.SESSION_VARIABLES WHERE VARIABLE_NAME = 'SESSION_TRACK_SYSTEM_VARIABLES'", "*"},
	}
	for _, c := range checks {
		v := b.str(t, c.q)
		got := "NULL"
		if v.Valid {
			got = v.String
		}
		if got != c.want {
			t.Errorf("client B: %s = %s, want %s (client A's state leaked)", c.q, got, c.want)
		}
	}
	if _, err := b.conn.ExecContext(context.Background(), "EXECUTE sql_stmt"); err == nil {
		t.Errorf("client B can EXECUTE client A's SQL prepared statement")
	} else if n, _ := mysqlErr(err); n != 1243 {
		t.Errorf("EXECUTE sql_stmt: %v, want error 1243", err)
	}
	if n := globalStatus(t, direct, "Prepared_stmt_count"); n != 0 {
		t.Errorf("Prepared_stmt_count %d after client A left: its statements were not deallocated", n)
	}
	if _, err := b.conn.ExecContext(context.Background(), "SELECT * FROM tmp_a"); err == nil {
		t.Errorf("client B sees client A's temporary table")
	}
	// B's own session still works as usual: a switchover-proof variable.
	b.exec(t, "SET SESSION sql_mode = 'TRADITIONAL'")
	if v := b.str(t, "SELECT @@session.sql_mode").String; !strings.Contains(v, "STRICT_TRANS_TABLES") {
		t.Errorf("client B's own sql_mode %q", v)
	}
	b.close()

	// A client without a default schema never gets a connection that has
	// one (a schema cannot be unselected).
	h.waitIdle("node1", 1)
	c := h.client("rw", "")
	if v := c.str(t, "SELECT DATABASE()"); v.Valid {
		t.Errorf("client without a schema sees DATABASE() = %q", v.String)
	}
	c.close()
}

// Session pooling: clients that connect and disconnect over and over are
// served by a few backend connections.
func TestSessionPoolReusesConnections(t *testing.T) {
	h := newHarness(t, nil)
	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				db, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
				if err != nil {
					errs <- err
					return
				}
				var sid int
				err = db.QueryRow("SELECT @@server_id").Scan(&sid)
				_ = db.Close()
				if err != nil || sid != 1 {
					errs <- fmt.Errorf("worker %d round %d: server_id %d: %v", w, i, sid, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	connects := h.poolConnects("node1")
	t.Logf("%d client logins in %s: %d backend connections opened, checkouts: %d clean, %d reset (loaded machine)",
		workers*rounds, time.Since(start).Round(time.Millisecond), connects, h.checkouts("node1", checkoutClean), h.checkouts("node1", checkoutReset))
	if connects > workers*rounds/4 {
		t.Fatalf("%d backend connections opened for %d client logins: the pool is not reused", connects, workers*rounds)
	}
	if connects < 1 {
		t.Fatal("no backend connection counted")
	}
}

// proxy.max_connections_per_backend counts connections open and being
// opened; a session at the cap waits for one (proxy.pool.wait_timeout) and
// then gets 1040 as a server at max_connections sends it after the
// handshake ("Too many connections", SQLSTATE 08004), or the connection
// another client gave back.
func TestPoolCapWaitsThenRefuses(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Proxy.MaxConnectionsPerBackend = 2
		c.Proxy.Pool.WaitTimeout = config.Duration(400 * time.Millisecond)
	})
	a := h.client("rw", "sbtest")
	b := h.client("rw", "sbtest")
	start := time.Now()
	db, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Ping()
	waited := time.Since(start)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || err.Error() != "Error 1040 (08004): Too many connections" {
		t.Fatalf("third client at the cap: %v, want Error 1040 (08004): Too many connections", err)
	}
	if waited < 350*time.Millisecond {
		t.Fatalf("refused after %s: it did not wait for proxy.pool.wait_timeout", waited)
	}
	t.Logf("refused after %s: %s", waited.Round(time.Millisecond), me.Message)
	if n := int(h.metric("switchyard_backend_pool_waits_total", "node", "node1")); n != 1 {
		t.Fatalf("pool waits %d, want 1", n)
	}
	// A client that waits while another leaves gets its connection.
	got := make(chan error, 1)
	go func() {
		db2, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
		if err != nil {
			got <- err
			return
		}
		defer db2.Close()
		var one int
		got <- db2.QueryRow("SELECT 1").Scan(&one)
	}()
	time.Sleep(100 * time.Millisecond)
	a.close()
	if err := <-got; err != nil {
		t.Fatalf("client waiting while another left: %v", err)
	}
	b.close()
	if c := h.poolConnects("node1"); c != 2 {
		t.Fatalf("%d backend connections opened, want 2 (the cap)", c)
	}
}

// Idle pooled connections of a node that stops being the primary are
// closed, and clients of the primary listener get connections of the new
// primary.
func TestPoolDropsDemotedPrimary(t *testing.T) {
	h := newHarness(t, nil)
	a := h.client("rw", "sbtest")
	a.close()
	h.waitIdle("node1", 1)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1, 0, 2))
	deadline := time.Now().Add(5 * time.Second)
	for h.poolGauge("node1", "idle") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("node1 (demoted) still has %d idle pooled connections", h.poolGauge("node1", "idle"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := h.client("rw", "sbtest")
	if sid := b.str(t, "SELECT @@server_id").String; sid != "2" {
		t.Fatalf("rw client after the primary change on server %s, want 2", sid)
	}
	b.close()
	// node1 primary again: node2's connections go, and none of node1's
	// from before its demotion could be used.
	h.waitIdle("node2", 1)
	h.srv.SetClusterState(sandboxState(h.c, 3, 0, 1, 2))
	c := h.client("rw", "sbtest")
	if sid := c.str(t, "SELECT @@server_id").String; sid != "1" {
		t.Fatalf("rw client after the second change on server %s, want 1", sid)
	}
	c.close()
}

// An idle pooled connection is closed after proxy.pool.idle_timeout (and
// the server sees it go).
func TestPoolIdleTimeout(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Proxy.Pool.IdleTimeout = config.Duration(time.Second) })
	a := h.client("rw", "sbtest")
	id := a.int(t, "SELECT CONNECTION_ID()")
	a.close()
	h.waitIdle("node1", 1)
	start := time.Now()
	for h.poolGauge("node1", "idle") != 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the idle connection was not closed 10 s after proxy.pool.idle_timeout (1 s)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("idle connection closed %s after it was given back (idle_timeout 1s, checked every second)", time.Since(start).Round(10*time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		if err := h.direct(0).QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend thread %d still on the server after the pool closed it", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
