package proxy

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestFailoverOutlook(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	off := false
	cl := func(mode string, hold *bool) *config.Cluster {
		return &config.Cluster{Name: "main", Failover: config.FailoverConfig{Mode: mode, Hold: hold}}
	}
	st := func(mut func(*topo.ClusterState)) *topo.ClusterState {
		s := &topo.ClusterState{Cluster: "main", Primary: "node1", Phase: topo.PhaseStable}
		if mut != nil {
			mut(s)
		}
		return s
	}
	cases := []struct {
		name  string
		cl    *config.Cluster
		st    *topo.ClusterState
		class string
		says  string
	}{
		{"auto, ready", cl("auto", nil), st(func(s *topo.ClusterState) { s.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"} }), "", ""},
		{"auto, not published", cl("auto", nil), st(nil), "", ""},
		{"manual", cl("manual", nil), st(nil), topo.AutoNotAuto, "an operator must run `switchyard failover --cluster main`"},
		{"manual, failover running", cl("manual", nil), st(func(s *topo.ClusterState) { s.Phase, s.Primary, s.OldPrimary = topo.PhaseFailover, "", "node1" }), "", ""},
		{"hold off", cl("auto", &off), st(nil), refusedHoldOff, "failover.hold is off"},
		{"published not ready", cl("auto", nil), st(func(s *topo.ClusterState) {
			s.AutoFailover = &topo.AutoFailover{Class: topo.AutoNoCandidate, Reason: "no replica of node1 could be promoted"}
		}), topo.AutoNoCandidate, "no replica of node1"},
		{"maintenance, not published", cl("auto", nil), st(func(s *topo.ClusterState) { s.Maintenance = &topo.Maintenance{} }), topo.AutoMaintenance, "maintenance"},
		{"blocked, not published", cl("auto", nil), st(func(s *topo.ClusterState) {
			s.FailoverBlock = &topo.FailoverBlock{Until: now.Add(time.Minute)}
		}), topo.AutoBlocked, "switchyard ack --cluster main"},
		{"block over, not published", cl("auto", nil), st(func(s *topo.ClusterState) {
			s.FailoverBlock = &topo.FailoverBlock{Until: now.Add(-time.Minute)}
		}), "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			class, why := failoverOutlook(c.st, c.cl, now)
			if class != c.class || !strings.Contains(why, c.says) {
				t.Fatalf("got %q %q, want class %q saying %q", class, why, c.class, c.says)
			}
		})
	}
}

func TestLostStatementScanners(t *testing.T) {
	for q, want := range map[string]bool{"COMMIT": true, "commit work": true, "  /* x */ COMMIT": true, "COMMITTED": false, "SELECT 1": false} {
		if got := isCommit([]byte(q)); got != want {
			t.Errorf("isCommit(%q) = %v, want %v", q, got, want)
		}
	}
	for q, want := range map[string]bool{"SELECT 1": true, "SELECT 1;": true, "SELECT 1 ; \n": true, "SELECT 1; DELETE FROM t": false,
		"SELECT ';'": true, "SELECT f_w(1)": false, "SELECT COUNT(*) FROM t": true, "SELECT v FROM t FOR UPDATE": false,
		"SELECT SLEEP(1)": false, "SELECT GET_LOCK('a', 1)": false} {
		if got := rerunnableRead([]byte(q)); got != want {
			t.Errorf("rerunnableRead(%q) = %v, want %v", q, got, want)
		}
	}
}

// failoverStates are the states a controller publishes for a crash
// failover of the harness sandbox from node1 to node2: the failover phase
// and then the new primary.
func failoverStates(h *harness) (failing, done topo.ClusterState) {
	failing = sandboxState(h.c, 2, 0, 1, 2)
	failing.Phase, failing.Primary, failing.OldPrimary, failing.Target = topo.PhaseFailover, "", "node1", "node2"
	done = sandboxState(h.c, 2, 1, 2)
	return failing, done
}

// TestHoldWhilePrimaryLost: with failover.mode auto and the controller
// saying a failover can come, killing the primary costs clients nothing
// but time: an idle session's next statement, a new login and a pooled
// session all wait and run on the new primary once it is published, and
// the idle session keeps its user variable and prepared statement.
func TestHoldWhilePrimaryLost(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	db := h.db("rw", "", nil)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET @v := 42"); err != nil {
		t.Fatal(err)
	}
	stmt, err := conn.PrepareContext(ctx, "SELECT ? + 1")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	type result struct {
		what   string
		server int
		err    error
		took   time.Duration
	}
	results := make(chan result, 3)
	var wg sync.WaitGroup
	wg.Go(func() {
		var id, v int
		err := conn.QueryRowContext(ctx, "SELECT @@server_id, @v").Scan(&id, &v)
		if err == nil && v != 42 {
			err = fmt.Errorf("user variable @v is %d after the move, want 42", v)
		}
		results <- result{"idle session", id, err, time.Since(killed)}
	})
	wg.Go(func() {
		d, err := sql.Open("mysql", h.dsn("rw", "", nil))
		if err != nil {
			results <- result{"login", 0, err, 0}
			return
		}
		defer d.Close()
		var id int
		err = d.QueryRow("SELECT @@server_id").Scan(&id)
		results <- result{"new login", id, err, time.Since(killed)}
	})
	wg.Go(func() {
		var id int
		err := db.QueryRow("SELECT @@server_id").Scan(&id) // the pool opens a second session or reuses
		results <- result{"pool", id, err, time.Since(killed)}
	})
	time.Sleep(300 * time.Millisecond)
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	time.Sleep(200 * time.Millisecond)
	h.srv.SetClusterState(done)
	published := time.Since(killed)
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v (after %v)", r.what, r.err, r.took)
		}
		if r.server != 2 {
			t.Fatalf("%s ran on server_id %d, want 2 (the new primary)", r.what, r.server)
		}
		if r.took < 400*time.Millisecond {
			t.Fatalf("%s answered after %v, before the new primary was published (%v)", r.what, r.took, published)
		}
		t.Logf("%s: ran on the new primary %v after the kill (published at %v)", r.what, r.took.Round(time.Millisecond), published.Round(time.Millisecond))
	}
	var n int
	if err := stmt.QueryRowContext(ctx, 41).Scan(&n); err != nil || n != 42 {
		t.Fatalf("prepared statement after the failover: %d, %v", n, err)
	}
	held, released := counterValue(t, h, "switchyard_proxy_primary_lost_held_total"), counterValue(t, h, "switchyard_proxy_primary_lost_released_total")
	if held < 3 || released != held || counterValue(t, h, "switchyard_primary_lost_refused_total") != 0 {
		t.Fatalf("held %v, released %v, refused %v: want every held statement released", held, released,
			counterValue(t, h, "switchyard_primary_lost_refused_total"))
	}
}

// TestLostPrimaryNoFailoverFailsAtOnce: when the controller says no
// automatic failover can come (here: blocked after an earlier one), a
// statement on a session whose primary died gets the reason at once and
// the session stays open.
func TestLostPrimaryNoFailoverFailsAtOnce(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Clusters[0].Failover.Mode = config.FailoverAuto })
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Class: topo.AutoBlocked,
		Reason: "automatic failover is blocked until 2026-01-01T01:00:00Z after a failover (failover.block_period): an operator must run `switchyard failover --cluster main` or `switchyard ack --cluster main`"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	conn, err := h.db("rw", "", nil).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET @v := 1"); err != nil {
		t.Fatal(err)
	}
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the server's FIN reaches the idle connection
	for i := range 2 {
		start := time.Now()
		_, err := conn.ExecContext(ctx, "SELECT 1")
		took := time.Since(start)
		code, msg := mysqlErr(err)
		if code != 1105 || !strings.Contains(msg, "is blocked until") || !strings.Contains(msg, "switchyard ack --cluster main") {
			t.Fatalf("statement %d: %v", i+1, err)
		}
		if took > 2*time.Second {
			t.Fatalf("statement %d: error after %v, want it at once", i+1, took)
		}
		t.Logf("statement %d: %q after %v", i+1, msg, took.Round(time.Millisecond))
	}
	if n := counterValue(t, h, "switchyard_primary_lost_refused_total"); n != 2 {
		t.Fatalf("switchyard_primary_lost_refused_total = %v, want 2", n)
	}
}

// TestLostPrimaryReadRerunAndTransaction: an autocommit read in flight
// when the primary is killed runs again on the new primary and returns its
// full result; a session with a transaction open gets one error saying the
// transaction was rolled back by the loss of the primary, and its next
// statement waits for the new primary.
func TestLostPrimaryReadRerunAndTransaction(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Clusters[0].Failover.Mode = config.FailoverAuto })
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	reader, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	txc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txc.Close()
	if _, err := txc.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := txc.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	type res struct {
		n, server int64
		err       error
	}
	done := make(chan res, 1)
	go func() {
		// Long enough to be in flight at the kill (the sequence engine
		// counts tens of millions of rows per second).
		var r res
		r.err = reader.QueryRowContext(ctx, "SELECT COUNT(*), @@server_id FROM seq_1_to_30000000").Scan(&r.n, &r.server)
		done <- r
	}()
	time.Sleep(150 * time.Millisecond)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	_, err = txc.ExecContext(ctx, "SELECT 2")
	if code, msg := mysqlErr(err); code != 1105 || !strings.Contains(msg, "your transaction was rolled back by the loss of primary node1") {
		t.Fatalf("statement in the open transaction after the kill: %v", err)
	}
	rolledBack := make(chan error, 1)
	go func() {
		_, err := txc.ExecContext(ctx, "ROLLBACK")
		rolledBack <- err
	}()
	time.Sleep(200 * time.Millisecond)
	failing, published := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(published)
	if err := <-rolledBack; err != nil {
		t.Fatalf("ROLLBACK after the failover: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("read in flight at the kill: %v", r.err)
	}
	if r.n != 30000000 || r.server != 2 {
		t.Fatalf("read in flight at the kill returned count %d from server_id %d, want 30000000 from 2 (run again on the new primary)", r.n, r.server)
	}
	var id int
	if err := txc.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id); err != nil || id != 2 {
		t.Fatalf("the transaction's session after the failover: server_id %d, %v", id, err)
	}
}

// TestLostPrimaryNeverRanStatementSentAgain: a write the primary provably
// never ran is sent to the new primary instead of failing. The primary is
// frozen (SIGSTOP) so that the INSERT forwarded to it stays unread in its
// socket, then killed: its kernel resets the connection (close with
// unread data), and the proxy sends the INSERT to the new primary, where
// it lands exactly once. A write the primary had read and was running when
// it died (FIN) still gets the outcome-unknown error.
func TestLostPrimaryNeverRanStatementSentAgain(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	for _, q := range []string{"CREATE TABLE nr_t (id INT PRIMARY KEY)", "CREATE TABLE nr_slow (id INT PRIMARY KEY)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	node2 := replicaWithTable(t, h, 1, "sbtest.nr_slow")
	unread, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unread.Close()
	running, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	for _, c := range []*sql.Conn{unread, running} {
		if err := c.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runningErr := make(chan error, 1)
	go func() {
		// Read by the server and running (SLEEP) when it dies.
		_, err := running.ExecContext(ctx, "INSERT INTO nr_slow SELECT 2 FROM (SELECT SLEEP(5)) AS s")
		runningErr <- err
	}()
	time.Sleep(300 * time.Millisecond)
	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	unreadErr := make(chan error, 1)
	go func() {
		// Forwarded to a frozen server: it stays in the socket, unread.
		_, err := unread.ExecContext(ctx, "INSERT INTO nr_t VALUES (1)")
		unreadErr <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	if err := <-runningErr; err == nil {
		t.Fatal("the INSERT running when the primary died succeeded")
	} else if code, msg := mysqlErr(err); code != 1105 || !strings.Contains(msg, "the outcome of INSERT is unknown") ||
		!strings.Contains(msg, "was lost while it ran (the connection to it broke: ") {
		t.Fatalf("the INSERT running when the primary died: %v, want the outcome-unknown error", err)
	}
	makeWritable(t, node2)
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(done)
	select {
	case err := <-unreadErr:
		if err != nil {
			t.Fatalf("the INSERT the lost primary never read: %v, want it sent to the new primary", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the INSERT the lost primary never read did not finish")
	}
	var ids []int
	rows, err := node2.QueryContext(ctx, "SELECT id FROM sbtest.nr_t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("rows on the new primary: %v, want exactly [1]", ids)
	}
}

// waitStopped waits until every thread of process pid is stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			// pid (comm) state ...: the state follows the last ')'.
			if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoRouteKeepsSession: a session whose cluster has no route for its
// listener (no primary published, and no failover to wait for) gets the
// reason for each statement and stays open; once a primary is published
// again its next statement runs there.
func TestNoRouteKeepsSession(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "", nil)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET @keep := 7"); err != nil {
		t.Fatal(err)
	}
	none := sandboxState(h.c, 2, 0, 1, 2)
	none.Primary = ""
	for i := range none.Nodes {
		none.Nodes[i].Role = topo.RoleReplica
	}
	h.srv.SetClusterState(none)
	for range 2 {
		var id int
		err := conn.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id)
		if code, _ := mysqlErr(err); err == nil || code == 0 {
			t.Fatalf("statement without a primary: server_id %d, %v; want a MySQL error", id, err)
		}
	}
	h.srv.SetClusterState(sandboxState(h.c, 3, 1, 0, 2))
	var id, keep int
	if err := conn.QueryRowContext(ctx, "SELECT @@server_id, @keep").Scan(&id, &keep); err != nil || id != 2 || keep != 7 {
		t.Fatalf("after a primary was published: server_id %d, @keep %d, %v; want 2, 7 on the same session", id, keep, err)
	}
}

// TestReplayWithPrepareInFlight: with transaction replay, a transaction
// whose COM_STMT_PREPARE was in flight when the primary died (frozen, then
// killed) is replayed on the new primary, the PREPARE runs again there, and
// the transaction commits: the client sees no error.
func TestReplayWithPrepareInFlight(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = true
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	if _, err := db.ExecContext(ctx, "CREATE TABLE rp_prep (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	node2 := replicaWithTable(t, h, 1, "sbtest.rp_prep")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"BEGIN", "INSERT INTO rp_prep VALUES (1)"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pid := h.c.PID(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	type prepared struct {
		st  *sql.Stmt
		err error
	}
	done := make(chan prepared, 1)
	go func() {
		st, err := conn.PrepareContext(ctx, "INSERT INTO rp_prep VALUES (?)")
		done <- prepared{st, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	makeWritable(t, node2)
	failing, published := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(published)
	var p prepared
	select {
	case p = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the PREPARE in flight never finished")
	}
	if p.err != nil {
		t.Fatalf("PREPARE in flight at the kill: %v, want it prepared again after the replay", p.err)
	}
	if _, err := p.st.ExecContext(ctx, 2); err != nil {
		t.Fatalf("execute after the replay: %v", err)
	}
	p.st.Close()
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT after the replay: %v", err)
	}
	var n int
	if err := node2.QueryRowContext(ctx, "SELECT COUNT(*) FROM sbtest.rp_prep WHERE id IN (1, 2)").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows 1 and 2 on the new primary: %d, %v; want 2", n, err)
	}
}

// replicaWithTable opens a root connection to node i and waits until
// table (schema.name) has replicated there.
func replicaWithTable(t *testing.T, h *harness, i int, table string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", h.c.RootDSN(i))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n)
		if err == nil {
			return db
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %s: %v", table, h.c.Nodes[i].Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// makeWritable turns a replica into a writable node by hand (what the
// controller's promotion does), for tests that publish the new state
// themselves.
func makeWritable(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{"STOP SLAVE", "SET GLOBAL read_only = OFF"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLostPrimaryNeverRanExecuteSentAgain: an autocommit COM_STMT_EXECUTE
// the primary provably never ran (forwarded to a frozen server, whose
// kernel then resets the connection when it is killed) is sent to the new
// primary, where the session's statement is prepared again and its id
// mapped: it lands exactly once, and the statement keeps working.
func TestLostPrimaryNeverRanExecuteSentAgain(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	if _, err := db.ExecContext(ctx, "CREATE TABLE nr_ps (id INT PRIMARY KEY, v VARCHAR(20))"); err != nil {
		t.Fatal(err)
	}
	node2 := replicaWithTable(t, h, 1, "sbtest.nr_ps")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Another statement first, so that the insert's backend id differs
	// from its client id once both are prepared again on node2.
	other, err := conn.PrepareContext(ctx, "SELECT COUNT(*) FROM nr_ps WHERE id > ?")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ins, err := conn.PrepareContext(ctx, "INSERT INTO nr_ps VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	if _, err := ins.ExecContext(ctx, 1, "before"); err != nil {
		t.Fatal(err)
	}
	waitRows(t, node2, "SELECT COUNT(*) FROM sbtest.nr_ps", 1)
	// A prepared write running when the primary dies: its outcome is
	// unknown, and the error names it and the cause.
	runConn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer runConn.Close()
	runningErr := make(chan error, 1)
	go func() {
		// Prepared, executed and closed (the driver's Exec with arguments).
		_, err := runConn.ExecContext(ctx, "INSERT INTO nr_ps SELECT ?, 'slow' FROM (SELECT SLEEP(5)) AS s", 100)
		runningErr <- err
	}()
	time.Sleep(300 * time.Millisecond)
	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	execErr := make(chan error, 1)
	go func() {
		// Forwarded to a frozen server: it stays in the socket, unread.
		_, err := ins.ExecContext(ctx, 2, "unread")
		execErr <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	if err := <-runningErr; err == nil {
		t.Fatal("the prepared INSERT running when the primary died succeeded")
	} else if code, msg := mysqlErr(err); code != 1105 || !strings.Contains(msg, "the outcome of INSERT is unknown") ||
		!strings.Contains(msg, "was lost while it ran (the connection to it broke: ") {
		t.Fatalf("the prepared INSERT running when the primary died: %v, want the outcome-unknown error naming INSERT and the cause", err)
	}
	makeWritable(t, node2)
	// The session must have seen the reset and be holding before the
	// failover is published (a command still in flight when the route
	// changes is cut instead: outcome unknown).
	deadline := time.Now().Add(10 * time.Second)
	for counterValue(t, h, "switchyard_proxy_primary_lost_held_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the session never held for the failover after the reset")
		}
		time.Sleep(10 * time.Millisecond)
	}
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(done)
	select {
	case err := <-execErr:
		if err != nil {
			t.Fatalf("the prepared INSERT the lost primary never read: %v, want it sent to the new primary", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the prepared INSERT the lost primary never read did not finish")
	}
	if _, err := ins.ExecContext(ctx, 3, "after"); err != nil {
		t.Fatalf("the prepared INSERT after the failover: %v", err)
	}
	var n int
	if err := other.QueryRowContext(ctx, 0).Scan(&n); err != nil || n != 3 {
		t.Fatalf("the other prepared statement after the failover: count %d, %v; want 3", n, err)
	}
	var got []string
	rows, err := node2.QueryContext(ctx, "SELECT CONCAT(id, ':', v) FROM sbtest.nr_ps ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	rows.Close()
	if strings.Join(got, ",") != "1:before,2:unread,3:after" {
		t.Fatalf("rows on the new primary: %v, want [1:before 2:unread 3:after], each once", got)
	}
}

// waitRows waits until query (a COUNT) on db returns want.
func waitRows(t *testing.T, db *sql.DB, query string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow(query).Scan(&n); err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %d within 10s", query, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLostPrimaryDeclaredRefusesAtOnce: a primary frozen by SIGSTOP still
// completes TCP connects, so only the controller's verdict
// (ClusterState.PrimaryLost) tells the proxy it is gone. For each reason
// no automatic failover comes (maintenance, a block, no candidate; manual
// mode is in test/e2e TestManualModeFrozenPrimary), once that verdict is
// applied: the statement in flight on the frozen primary is cut with the
// outcome-unknown error, a statement on an idle session and a new login
// get the reason at once, and before the verdict nothing is cut.
// With transaction replay on, the write in flight gets the error as fast:
// the session does not first try to reconnect to the node declared dead.
func TestLostPrimaryDeclaredRefusesAtOnce(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("transaction_replay=%v", replay), func(t *testing.T) { lostPrimaryDeclaredRefusesAtOnce(t, replay) })
	}
}

func lostPrimaryDeclaredRefusesAtOnce(t *testing.T, replay bool) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(30 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = replay
		c.Proxy.ConnectTimeout = config.Duration(time.Second)
	})
	base := sandboxState(h.c, 1, 0, 1, 2)
	base.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(base)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	if _, err := db.ExecContext(ctx, "CREATE TABLE lp_frozen (id INT AUTO_INCREMENT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		class, reason string
		mut           func(st *topo.ClusterState)
	}{
		{topo.AutoMaintenance, "maintenance mode is on (upgrade): automatic failover is blocked; an operator must run `switchyard failover --cluster main`",
			func(st *topo.ClusterState) { st.Maintenance = &topo.Maintenance{Reason: "upgrade", Since: time.Now()} }},
		{topo.AutoBlocked, "automatic failover is blocked until 2099-01-01T00:00:00Z after f1 (failover.block_period): an operator must run `switchyard failover --cluster main` or `switchyard ack --cluster main`",
			func(st *topo.ClusterState) {
				st.FailoverBlock = &topo.FailoverBlock{Until: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), Reason: "f1"}
			}},
		{topo.AutoNoCandidate, "no replica of node1 could be promoted (none is reachable and replicating from it with its SQL thread running, outside must_not and quarantine): an operator must repair a replica or run `switchyard failover --cluster main --force-stale`",
			func(*topo.ClusterState) {}},
	}
	conns := make([]*sql.Conn, len(cases)+1)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	idle := conns[len(cases)]
	// A session in an open transaction: it keeps its connection to the
	// frozen primary, and its refusal says the transaction is still open.
	txc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txc.Close()
	mustExec(t, txc, "BEGIN")
	mustExec(t, txc, "INSERT INTO lp_frozen VALUES ()")
	pid := h.c.PID(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	for i, c := range cases {
		st := base
		st.AutoFailover = &topo.AutoFailover{Class: c.class, Reason: c.reason}
		c.mut(&st)
		h.srv.SetClusterState(st) // not declared lost yet
		type answer struct {
			err error
			at  time.Time
		}
		done := make(chan answer, 1)
		go func() {
			_, err := conns[i].ExecContext(ctx, "INSERT INTO lp_frozen VALUES ()")
			done <- answer{err, time.Now()}
		}()
		select {
		case a := <-done:
			t.Fatalf("%s: the statement on the frozen primary ended before the verdict: %v", c.class, a.err)
		case <-time.After(700 * time.Millisecond): // well past proxy.connect_timeout's check of the node
		}
		st.PrimaryLost = &topo.PrimaryLost{Node: "node1", Epoch: st.Epoch, Since: time.Now(), Rounds: 2, Class: c.class, Reason: c.reason}
		declared := time.Now()
		h.srv.SetClusterState(st)
		a := <-done
		code, msg := mysqlErr(a.err)
		inFlight := "primary node1 of cluster main stopped answering while this statement ran; its outcome is unknown"
		if replay {
			// Worded by the replay's outcome check (replay_run.go).
			inFlight = "the outcome of INSERT is unknown (it may or may not have been committed): the connection to primary node1 of cluster main was lost while it ran"
		}
		if code != 1105 || !strings.Contains(msg, inFlight) ||
			!strings.Contains(msg, "the controller declared node1 dead (DeadPrimary) and "+c.reason) {
			t.Fatalf("%s: statement in flight: %v", c.class, a.err)
		}
		if d := a.at.Sub(declared); d > 500*time.Millisecond {
			t.Fatalf("%s: the statement in flight was cut %v after the verdict", c.class, d)
		}
		refused := "switchyard: primary node1 of cluster main is unreachable (the controller declared it dead (DeadPrimary)) and " + c.reason + "; the statement was not run"
		for _, who := range []string{"idle session", "cut session", "new login"} {
			start := time.Now()
			var err error
			switch who {
			case "idle session":
				_, err = idle.ExecContext(ctx, "SELECT 1")
			case "cut session":
				_, err = conns[i].ExecContext(ctx, "SELECT 1")
			default:
				d, oerr := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
				if oerr != nil {
					t.Fatal(oerr)
				}
				err = d.PingContext(ctx)
				d.Close()
			}
			took := time.Since(start)
			if code, msg := mysqlErr(err); code != 1105 || msg != refused {
				t.Fatalf("%s: %s: %v, want 1105 %q", c.class, who, err, refused)
			}
			if took > 300*time.Millisecond {
				t.Fatalf("%s: %s: the error came after %v, want it at once", c.class, who, took)
			}
		}
		if i == 0 {
			_, err := txc.ExecContext(ctx, "INSERT INTO lp_frozen VALUES ()")
			if code, msg := mysqlErr(err); code != 1105 || !strings.HasPrefix(msg, refused) ||
				!strings.Contains(msg, "your transaction is still open on node1") {
				t.Fatalf("%s: session in an open transaction: %v, want the refusal saying its transaction is still open on node1", c.class, err)
			}
		}
		t.Logf("%s: in-flight statement cut %v after the verdict; idle session, cut session and login refused at once",
			c.class, a.at.Sub(declared).Round(time.Millisecond))
	}
	if n := counterValue(t, h, "switchyard_primary_lost_refused_total"); n < float64(3*len(cases)) {
		t.Fatalf("switchyard_primary_lost_refused_total = %v, want >= %d", n, 3*len(cases))
	}
}

// TestSilentPrimaryNoVerdictSaysSo: a new login while the primary is
// frozen (SIGSTOP: connects complete, no greeting comes) and no automatic
// failover can come waits for the controller's verdict; when none comes
// (the primary may only be overloaded) the error says the controller has
// not declared it dead, so that no operator fails over a busy primary on
// the proxy's word alone.
func TestSilentPrimaryNoVerdictSaysSo(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverManual
		c.Clusters[0].Failover.SilenceBound = config.Duration(500 * time.Millisecond)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	reason := "failover.mode is manual: an operator must run `switchyard failover --cluster main`"
	st.AutoFailover = &topo.AutoFailover{Class: topo.AutoNotAuto, Reason: reason}
	h.srv.SetClusterState(st)
	pid := h.c.PID(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	d, err := sql.Open("mysql", h.dsn("rw", "sbtest", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	start := time.Now()
	err = d.PingContext(context.Background())
	took := time.Since(start)
	code, msg := mysqlErr(err)
	if code != 1105 || !strings.Contains(msg, "primary node1 of cluster main is unreachable") ||
		!strings.Contains(msg, "the controller has not declared it dead") || !strings.Contains(msg, reason) {
		t.Fatalf("login while the primary is frozen, no verdict: %v, want 1105 saying it was not declared dead and %q", err, reason)
	}
	if took > 10*time.Second {
		t.Fatalf("the error came after %v", took)
	}
	t.Logf("refused after %v: %s", took.Round(time.Millisecond), msg)
}

// TestPrepareInFlightWhenPrimaryLost: a COM_STMT_PREPARE in flight when
// the primary dies changes nothing that survives the server: it is
// prepared again on the new primary once that is published, with no error,
// and the statement then executes there — not "the outcome of the
// statement is unknown". The primary is frozen (SIGSTOP) so that the
// PREPARE stays in its socket, then killed.
func TestPrepareInFlightWhenPrimaryLost(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("transaction_replay=%v", replay), func(t *testing.T) { prepareInFlightWhenPrimaryLost(t, replay) })
	}
}

func prepareInFlightWhenPrimaryLost(t *testing.T, replay bool) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = replay
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	pid := h.c.PID(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	type prepared struct {
		stmt *sql.Stmt
		err  error
	}
	done := make(chan prepared, 1)
	go func() {
		stmt, err := conn.PrepareContext(ctx, "SELECT @@server_id, ? + 1")
		done <- prepared{stmt, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	failing, published := failoverStates(h)
	h.srv.SetClusterState(failing)
	time.Sleep(200 * time.Millisecond)
	h.srv.SetClusterState(published)
	var p prepared
	select {
	case p = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the PREPARE in flight at the kill got no answer 15 s later")
	}
	if p.err != nil {
		t.Fatalf("PREPARE in flight when the primary was killed: %v", p.err)
	}
	defer p.stmt.Close()
	var id, n int
	if err := p.stmt.QueryRowContext(ctx, 41).Scan(&id, &n); err != nil || id != 2 || n != 42 {
		t.Fatalf("the statement prepared again: server_id %d, ? + 1 = %d (%v), want 2 and 42", id, n, err)
	}
}
