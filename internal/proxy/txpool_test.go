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

	"github.com/switchyard-db/switchyard/internal/config"
)

// txHarness is a harness with a third listener, "rwtx": the primary with
// pooling transaction, at most limit backend connections per node.
func txHarness(t testing.TB, limit int) *harness {
	return newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		if limit > 0 {
			c.Proxy.MaxConnectionsPerBackend = limit
		}
	})
}

func (c *client) int(t testing.TB, q string) int64 {
	t.Helper()
	var v sql.NullInt64
	if err := c.conn.QueryRowContext(context.Background(), q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v.Int64
}

// inUse is how many of node1's pooled connections sessions hold, once
// the proxy had time to act on the client's last response (it gives a
// connection back right after relaying it): 0 is waited for up to 2 s,
// any other count is read after 50 ms.
func (h *harness) inUse(want int) int {
	deadline := time.Now().Add(2 * time.Second)
	if want != 0 {
		time.Sleep(50 * time.Millisecond)
		return h.poolGauge("node1", "in_use")
	}
	for {
		n := h.poolGauge("node1", "in_use")
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Transaction pooling: many clients running short transactions share a few
// backend connections; every committed row is there.
func TestTxPoolManyClientsFewConnections(t *testing.T) {
	const clients, txs, limit = 300, 4, 16
	h := txHarness(t, limit)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.txpool_ledger (client INT, n INT, PRIMARY KEY (client, n))")
	sampler := h.direct(0)
	sampler.SetMaxOpenConns(1)
	baseThreads := globalStatus(t, sampler, "Threads_connected")
	var wg sync.WaitGroup
	var failures atomic.Int64
	var firstErr atomic.Value
	cls := make([]*client, clients)
	for i := range cls {
		cls[i] = h.client("rwtx", "sbtest")
	}
	start := time.Now()
	maxThreads := 0
	stop := make(chan struct{})
	sampled := make(chan int)
	go func() {
		d := sampler
		top := 0
		for {
			select {
			case <-stop:
				sampled <- top
				return
			case <-time.After(20 * time.Millisecond):
			}
			top = max(top, globalStatus(t, d, "Threads_connected"))
		}
	}()
	for i, c := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for n := range txs {
				tx, err := c.conn.BeginTx(ctx, nil)
				if err == nil {
					_, err = tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO txpool_ledger VALUES (%d, %d)", i, n))
					if err == nil {
						err = tx.Commit()
					} else {
						_ = tx.Rollback()
					}
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("client %d tx %d: %w", i, n, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	maxThreads = <-sampled
	elapsed := time.Since(start)
	if failures.Load() > 0 {
		t.Fatalf("%d clients failed; first: %v", failures.Load(), firstErr.Load())
	}
	var rows int
	if err := h.direct(0).QueryRow("SELECT COUNT(*) FROM sbtest.txpool_ledger").Scan(&rows); err != nil || rows != clients*txs {
		t.Fatalf("ledger has %d rows (%v), want %d", rows, err, clients*txs)
	}
	connects := h.poolConnects("node1")
	t.Logf("%d clients × %d transactions in %s: %d backend connections opened (limit %d), Threads_connected at most %d (%d before), checkouts same/clean/reset %d/%d/%d (loaded machine)",
		clients, txs, elapsed.Round(time.Millisecond), connects, limit, maxThreads, baseThreads,
		h.checkouts("node1", checkoutSame), h.checkouts("node1", checkoutClean), h.checkouts("node1", checkoutReset))
	if connects > limit {
		t.Fatalf("%d backend connections opened, limit %d", connects, limit)
	}
	// The proxy's own backend checks (reachability.go) open a short
	// connection per node and probe interval.
	if monitor := 2; maxThreads > baseThreads+limit+monitor {
		t.Fatalf("Threads_connected reached %d: more than %d before + %d pooled + %d checks", maxThreads, baseThreads, limit, monitor)
	}
	if n := h.inUse(0); n != 0 {
		t.Fatalf("%d connections still held by idle clients", n)
	}
}

// Transaction pooling: what pins a session to its backend connection, one
// rule at a time. A pinned session keeps its connection (in_use stays 1)
// and its state; an unpinned one gives it back after each statement.
func TestTxPoolPinning(t *testing.T) {
	h := txHarness(t, 0)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.pin_t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	mustExec(t, h.direct(0), "INSERT INTO sbtest.pin_t (v) VALUES (1), (2), (3)")
	other := h.client("rwtx", "sbtest")
	// churn makes another session run statements in between (it takes and
	// gives back connections, possibly the first session's previous one).
	churn := func() {
		for range 3 {
			other.int(t, "SELECT COUNT(*) FROM pin_t")
		}
	}
	wantHeld := func(what string, held int) {
		t.Helper()
		if got := h.inUse(held); got != held {
			t.Fatalf("%s: %d backend connections held between statements, want %d", what, got, held)
		}
	}
	cases := []struct {
		name   string
		pin    []string // statements that pin the session
		check  string   // a statement whose first column must be want after churn
		want   int64
		unpin  string // a statement that ends the pin ("": the session stays pinned)
		closes bool   // the client must reconnect to be unpinned
	}{
		{name: "temporary table", pin: []string{"CREATE TEMPORARY TABLE tmp_pin (x INT)", "INSERT INTO tmp_pin VALUES (7)"},
			check: "SELECT x FROM tmp_pin", want: 7, closes: true},
		{name: "GET_LOCK", pin: []string{"SELECT GET_LOCK('pin_lock', 0)"},
			check: "SELECT IS_USED_LOCK('pin_lock') = @@pseudo_thread_id", want: 1, closes: true},
		{name: "user variable from an expression", pin: []string{"SET @pin_v = (SELECT MAX(v) FROM pin_t)"},
			check: "SELECT @pin_v", want: 3, closes: true},
		{name: "SET STATEMENT FOR SET of a user variable", pin: []string{"SET STATEMENT max_statement_time=5 FOR SET @pin_s = 7"},
			check: "SELECT @pin_s", want: 7, closes: true},
		{name: "SET STATEMENT FOR SET of sql_mode", pin: []string{"SET STATEMENT max_statement_time=5 FOR SET SESSION sql_mode = 'ANSI'"},
			check: "SELECT @@sql_mode LIKE '%ANSI_QUOTES%'", want: 1, closes: true},
		{name: "LOCK TABLES", pin: []string{"LOCK TABLES pin_t READ"},
			check: "SELECT COUNT(*) FROM pin_t", want: 3, unpin: "UNLOCK TABLES"},
		{name: "transaction", pin: []string{"BEGIN", "UPDATE pin_t SET v = v + 10 WHERE id = 1"},
			check: "SELECT v FROM pin_t WHERE id = 1", want: 11, unpin: "ROLLBACK"},
		{name: "autocommit=0", pin: []string{"SET autocommit = 0", "UPDATE pin_t SET v = v + 20 WHERE id = 1"},
			check: "SELECT v FROM pin_t WHERE id = 1", want: 21, unpin: "ROLLBACK"},
		{name: "SQL_CALC_FOUND_ROWS", pin: []string{"SELECT SQL_CALC_FOUND_ROWS id FROM pin_t LIMIT 1"},
			check: "SELECT FOUND_ROWS()", want: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := h.client("rwtx", "sbtest")
			defer a.close()
			a.int(t, "SELECT 1")
			wantHeld("before", 0)
			for _, q := range tc.pin {
				a.exec(t, q)
			}
			wantHeld("after "+tc.pin[len(tc.pin)-1], 1)
			churn()
			if got := a.int(t, tc.check); got != tc.want {
				t.Fatalf("%s after another session ran statements: %d, want %d", tc.check, got, tc.want)
			}
			switch {
			case tc.unpin != "":
				wantHeld("after "+tc.check, 1)
				a.exec(t, tc.unpin)
				if tc.name == "autocommit=0" {
					a.exec(t, "SET autocommit = 1")
				}
				wantHeld("after "+tc.unpin, 0)
			case tc.closes:
				wantHeld("after "+tc.check, 1)
			default:
				wantHeld("after "+tc.check, 0) // the pin lasted one statement
			}
		})
	}
	// Literal user variables, session variables, the schema and prepared
	// statements are re-created on another connection: no pin.
	t.Run("re-created state", func(t *testing.T) {
		a := h.client("rwtx", "sbtest")
		defer a.close()
		a.exec(t, "SET @lit = 41")
		a.exec(t, "SET SESSION sql_mode = 'ANSI_QUOTES'")
		a.exec(t, "USE otherdb")
		st, err := a.conn.PrepareContext(context.Background(), "SELECT ? + @lit")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		wantHeld("after SET, USE and PREPARE", 0)
		b := h.client("rwtx", "sbtest")
		defer b.close()
		// b holds a connection in a transaction, so a's next statement
		// needs one of its own or b's idle one.
		bt, err := b.conn.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bt.Exec("SELECT 1"); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := st.QueryRow(1).Scan(&v); err != nil || v != 42 {
			t.Fatalf("prepared statement on another connection: %d, %v", v, err)
		}
		if got := a.str(t, "SELECT DATABASE()").String; got != "otherdb" {
			t.Fatalf("schema %q", got)
		}
		if got := a.str(t, "SELECT @@session.sql_mode").String; got != "ANSI_QUOTES" {
			t.Fatalf("sql_mode %q", got)
		}
		_ = bt.Rollback()
		if got := b.str(t, "SELECT @@session.sql_mode = @@global.sql_mode").String; got != "1" {
			t.Fatalf("client b sees another session's sql_mode")
		}
		if got := b.str(t, "SELECT @lit"); got.Valid {
			t.Fatalf("client b sees another session's @lit = %s", got.String)
		}
	})
}

// Transaction pooling with a single backend connection: two clients
// alternate on it; LAST_INSERT_ID(), warnings and ROW_COUNT() stay each
// client's own.
func TestTxPoolDiagnosticsOnSharedConnection(t *testing.T) {
	h := txHarness(t, 1)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.diag_t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	a := h.client("rwtx", "sbtest")
	b := h.client("rwtx", "sbtest")
	if ia, ib := a.int(t, "SELECT @@pseudo_thread_id"), b.int(t, "SELECT @@pseudo_thread_id"); ia != ib {
		t.Fatalf("clients on backend connections %d and %d: the limit of 1 is not applied", ia, ib)
	}
	// LAST_INSERT_ID after an insert and a boundary, with the other
	// client's insert in between on the same connection.
	a.exec(t, "INSERT INTO diag_t (v) VALUES (1)")
	b.exec(t, "INSERT INTO diag_t (v) VALUES (2)")
	b.exec(t, "INSERT INTO diag_t (v) VALUES (3)")
	if got := a.int(t, "SELECT LAST_INSERT_ID()"); got != 1 {
		t.Fatalf("client a: LAST_INSERT_ID() = %d, want 1 (its own insert)", got)
	}
	if got := b.int(t, "SELECT LAST_INSERT_ID()"); got != 3 {
		t.Fatalf("client b: LAST_INSERT_ID() = %d, want 3", got)
	}
	c := h.client("rwtx", "sbtest")
	if got := c.int(t, "SELECT LAST_INSERT_ID()"); got != 0 {
		t.Fatalf("new client: LAST_INSERT_ID() = %d, want 0", got)
	}
	c.close()
	// SHOW WARNINGS after a statement with a warning: the connection is
	// kept until the next statement, so the other client waits.
	a.exec(t, "SET SESSION sql_mode = ''")
	a.exec(t, "INSERT INTO diag_t (v) VALUES ('12abc')") // 1265 data truncated: a warning
	bDone := make(chan error, 1)
	go func() {
		_, err := b.conn.ExecContext(context.Background(), "INSERT INTO diag_t (v) VALUES (4)")
		bDone <- err
	}()
	select {
	case err := <-bDone:
		t.Fatalf("client b ran while client a's warnings were pending (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	rows, err := a.conn.QueryContext(context.Background(), "SHOW WARNINGS")
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	for rows.Next() {
		var level, msg string
		var code int
		if err := rows.Scan(&level, &code, &msg); err != nil {
			t.Fatal(err)
		}
		codes = append(codes, code)
	}
	rows.Close()
	if len(codes) != 1 || codes[0] != 1265 {
		t.Fatalf("SHOW WARNINGS after the truncating insert: codes %v, want [1265]", codes)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("client b after a's SHOW WARNINGS: %v", err)
	}
	// ROW_COUNT() right after the statement works; after another session
	// used the connection the proxy answers SELECT ROW_COUNT() from the
	// previous statement's OK and refuses forms it cannot rewrite rather
	// than give another session's count.
	a.exec(t, "UPDATE diag_t SET v = v + 1 WHERE id <= 2")
	if got := a.int(t, "SELECT ROW_COUNT()"); got != 2 {
		t.Fatalf("ROW_COUNT() right after the UPDATE: %d, want 2", got)
	}
	a.exec(t, "UPDATE diag_t SET v = v + 1 WHERE id <= 3")
	b.int(t, "SELECT 1")
	if got := a.int(t, "SELECT ROW_COUNT()"); got != 3 {
		t.Fatalf("ROW_COUNT() after another session used the connection: %d, want 3", got)
	}
	a.exec(t, "UPDATE diag_t SET v = v + 1 WHERE id <= 3")
	b.int(t, "SELECT 1")
	_, err = a.conn.ExecContext(context.Background(), "SELECT ROW_COUNT() + 1")
	if err == nil || !strings.Contains(err.Error(), "ROW_COUNT()") {
		t.Fatalf("ROW_COUNT() + 1 after another session used the connection: %v, want an error saying why", err)
	}
	// FOUND_ROWS() after a plain SELECT is the rows it returned, also
	// after another session used the connection.
	a.exec(t, "SELECT id FROM diag_t")
	n := b.int(t, "SELECT COUNT(*) FROM diag_t")
	if got := a.int(t, "SELECT FOUND_ROWS()"); got != n {
		t.Fatalf("FOUND_ROWS() after another session used the connection: %d, want %d", got, n)
	}
}

// ROW_COUNT() on a transaction-pooled listener whose one backend connection
// another client uses between every two statements: the value and the
// column name are those a direct connection gives, after DML, a SELECT,
// DDL and SET.
func TestTxPoolRowCountMatchesDirect(t *testing.T) {
	h := txHarness(t, 1)
	ctx := context.Background()
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.rc_p (id INT PRIMARY KEY, v INT)")
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.rc_d (id INT PRIMARY KEY, v INT)")
	direct, err := h.direct(0).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.ExecContext(ctx, "USE sbtest"); err != nil {
		t.Fatal(err)
	}
	a := h.client("rwtx", "sbtest")
	b := h.client("rwtx", "sbtest")
	steps := []string{
		"INSERT INTO %s VALUES (1, 0), (2, 0), (3, 0)",
		"UPDATE %s SET v = v + 1 WHERE id <= 2",
		"UPDATE %s SET v = v WHERE id = 1", // matched, not changed: 0
		"SELECT * FROM %s",
		"DELETE FROM %s WHERE id = 3",
		"CREATE TABLE %s_x (i INT)",
		"SET @@session.sql_mode = DEFAULT, @t = '%s'",
		"REPLACE INTO %s VALUES (1, 7)", // delete + insert: 2
	}
	type answer struct {
		cols []string
		vals []int64
	}
	read := func(c *sql.Conn, q string) answer {
		t.Helper()
		rows, err := c.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var an answer
		an.cols, _ = rows.Columns()
		an.vals = make([]int64, len(an.cols))
		ptrs := make([]any, len(an.cols))
		for i := range ptrs {
			ptrs[i] = &an.vals[i]
		}
		if !rows.Next() {
			t.Fatalf("%s: no row", q)
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return an
	}
	run := func(c *sql.Conn, q string) {
		t.Helper()
		rows, err := c.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
		}
		rows.Close()
	}
	reads := []string{"SELECT ROW_COUNT()", "select row_count( ) AS rc;", "SELECT ROW_COUNT() n, ROW_COUNT()"}
	for i, step := range steps {
		rd := reads[i%len(reads)]
		run(direct, fmt.Sprintf(step, "rc_d"))
		want := read(direct, rd)
		run(a.conn, fmt.Sprintf(step, "rc_p"))
		b.int(t, "SELECT 1") // b takes the connection: a's result is not there any more
		got := read(a.conn, rd)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q then %q: through the proxy %v, direct %v", step, rd, got, want)
		}
		t.Logf("%q then %q: %v", step, rd, got)
	}
}

// Under contention (60 clients, 4 backend connections) every client's
// UPDATE ... WHERE id = n; SELECT ROW_COUNT() reads its own count.
func TestTxPoolRowCountUnderContention(t *testing.T) {
	const clients, rounds, limit = 60, 5, 4
	h := txHarness(t, limit)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.rc_c (id INT PRIMARY KEY, v INT)")
	mustExec(t, h.direct(0), "INSERT INTO sbtest.rc_c SELECT seq, 0 FROM sbtest.seq_1_to_60")
	var wg sync.WaitGroup
	var wrong, failed atomic.Int64
	errs := make(chan error, clients)
	for i := 1; i <= clients; i++ {
		c := h.client("rwtx", "sbtest")
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			ctx := context.Background()
			for r := 0; r < rounds; r++ {
				if _, err := c.conn.ExecContext(ctx, fmt.Sprintf("UPDATE rc_c SET v = v + 1 WHERE id = %d", id)); err != nil {
					failed.Add(1)
					errs <- err
					return
				}
				var n int64
				if err := c.conn.QueryRowContext(ctx, "SELECT ROW_COUNT()").Scan(&n); err != nil {
					failed.Add(1)
					errs <- err
					return
				}
				if n != 1 {
					wrong.Add(1)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("client: %v", err)
	}
	if wrong.Load() != 0 {
		t.Fatalf("%d of %d ROW_COUNT() reads were not the client's own count (1)", wrong.Load(), clients*rounds)
	}
}

// poolings runs body once per listener pooling mode, as subtests "session"
// and "transaction", with every listener of the harness in that mode: the
// client checks pass through a transaction-pooled listener as they do
// through a session-pooled one.
func poolings(t *testing.T, body func(t *testing.T, pooling func(*config.Config))) {
	for _, mode := range []string{config.PoolingSession, config.PoolingTransaction} {
		t.Run(mode, func(t *testing.T) {
			body(t, func(c *config.Config) {
				for i := range c.Listeners {
					c.Listeners[i].Pooling = mode
				}
			})
		})
	}
}
