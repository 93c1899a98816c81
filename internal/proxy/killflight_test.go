package proxy

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// sleepSent sends SELECT SLEEP(secs) on rc and returns once it is written,
// with a channel that gets the outcome as sleeper's does.
func sleepSent(t *testing.T, rc *rawConn, secs int) <-chan string {
	t.Helper()
	b, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{gomysql.COM_QUERY}, fmt.Sprintf("SELECT SLEEP(%d)", secs)...))
	if _, err := rc.c.Write(b); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		var row []byte
		for i := 0; i < 5; i++ { // count, definition, EOF, row, EOF
			p, _, err := mysqlproto.ReadPacket(rc.r, nil, 0)
			if err != nil {
				out <- "connection: " + err.Error()
				return
			}
			if p[0] == gomysql.ERR_HEADER {
				if e := mysqlproto.ParseERR(p); e.Code == gomysql.ER_QUERY_INTERRUPTED && e.State == "70100" {
					out <- "interrupted"
				} else {
					out <- describe(p)
				}
				return
			}
			if i == 3 {
				row = append([]byte(nil), p...)
			}
		}
		switch v := string(row[1:]); v {
		case "1":
			out <- "interrupted"
		case "0":
			out <- "done"
		default:
			out <- "SLEEP returned " + v
		}
	}()
	return out
}

// TestKillQueryByConnectionIDOnTxPool: on a transaction-pooled listener
// CONNECTION_ID() (text and prepared) answers the handshake's connection
// id, with the server's column name, the same in every transaction; KILL
// QUERY with it interrupts the session's running SLEEP (20 rounds), and
// also a SLEEP that is still waiting for a backend connection when the
// KILL comes (the pool at its cap): that one is answered
// ER_QUERY_INTERRUPTED when it gets its connection, instead of running
// (5 rounds).
func TestKillQueryByConnectionIDOnTxPool(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Proxy.MaxConnectionsPerBackend = 2
		c.Proxy.Pool.WaitTimeout = config.Duration(20 * time.Second)
	})
	dial := func(listener string) *rawConn {
		rc, err := dialRaw(t, h.srv.ListenerAddr(listener), h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	// k is session-pooled: it keeps its backend connection, so its KILL
	// needs none from the pool.
	c, k, other := dial("rwtx"), dial("rw"), dial("rwtx")
	want := strconv.FormatUint(uint64(c.greeting.ConnectionID), 10)
	for range 3 {
		if got := c.query("SELECT CONNECTION_ID()")[0][0]; got != want {
			t.Fatalf("SELECT CONNECTION_ID() = %s, want the handshake's id %s", got, want)
		}
		other.query("SELECT 1") // takes the idle connection c used
	}

	// go-sql-driver: the column name and a prepared statement.
	ctx := context.Background()
	conn, err := h.db("rwtx", "", nil).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT CONNECTION_ID(), connection_id() AS id")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	types, _ := rows.ColumnTypes()
	var textID, aliasID uint64
	for rows.Next() {
		if err := rows.Scan(&textID, &aliasID); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if fmt.Sprint(cols) != "[CONNECTION_ID() id]" || types[0].DatabaseTypeName() != "UNSIGNED INT" || textID != aliasID {
		t.Fatalf("columns %v, type %s, ids %d %d", cols, types[0].DatabaseTypeName(), textID, aliasID)
	}
	st, err := conn.PrepareContext(ctx, "SELECT CONNECTION_ID() + ?")
	if err != nil {
		t.Fatal(err)
	}
	var prepID uint64
	if err := st.QueryRowContext(ctx, 0).Scan(&prepID); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if prepID != textID {
		t.Fatalf("prepared CONNECTION_ID() = %d, text %d", prepID, textID)
	}

	kill := func(round int) {
		t.Helper()
		k.cmd(gomysql.COM_QUERY, []byte("KILL QUERY "+want)...)
		if p := k.next(); p[0] != gomysql.OK_HEADER {
			t.Fatalf("round %d: KILL QUERY %s: %s", round, want, describe(p))
		}
	}
	for i := range 20 {
		done := sleepSent(t, c, 20)
		waitRunning(t, h, "SELECT SLEEP(20)")
		kill(i)
		if r := waitOutcome(t, done, 15*time.Second, fmt.Sprintf("round %d: killed SLEEP", i)); r != "interrupted" {
			t.Fatalf("round %d: SLEEP got %q, want it interrupted", i, r)
		}
		if got := c.query("SELECT 12")[0][0]; got != "12" {
			t.Fatalf("round %d: after the KILL QUERY: %s", i, got)
		}
	}
	// The pool at its cap (k's connection and other's transaction):
	// c's SLEEP waits for a connection when the KILL comes.
	for i := range 5 {
		other.query("BEGIN")
		other.query("SELECT 1")
		done := sleepSent(t, c, 20)
		waitPoolWaits(t, h, i+1)
		kill(i)
		other.query("COMMIT")
		start := time.Now()
		if r := waitOutcome(t, done, 15*time.Second, fmt.Sprintf("waiting round %d: killed SLEEP", i)); r != "interrupted" {
			t.Fatalf("waiting round %d: SLEEP got %q, want it interrupted", i, r)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("waiting round %d: the SLEEP ran (%s) though killed before it had a connection", i, took)
		}
		if got := c.query("SELECT 12")[0][0]; got != "12" {
			t.Fatalf("waiting round %d: after the KILL QUERY: %s", i, got)
		}
	}
}

// waitPoolWaits waits until node1's pool counted n waits.
func waitPoolWaits(t *testing.T, h *harness, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for int(h.metric("switchyard_backend_pool_waits_total", "node", "node1")) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no session waits for a pooled connection (want %d waits)", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
