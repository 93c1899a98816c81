package proxy

import (
	"context"
	"database/sql"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// cutBound is the loose bound for a cut command's error to reach the
// client after the snapshot was installed (expected: a few milliseconds).
const cutBound = 5 * time.Second

func conn1(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitResult(t *testing.T, ch chan result, within time.Duration, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("%s: no answer within %s", what, within)
	}
	return result{}
}

// A write in flight on a frozen (SIGSTOP) primary when the failover phase
// is published gets the outcome-unknown error at once — before the proxy
// acknowledges the new epoch — and never the OK that the woken old primary
// sends later; the session then continues on the new primary.
func TestCutInFlightWriteOnFrozenPrimary(t *testing.T) {
	h := newHarness(t, nil)
	rw := h.db("rw", "sbtest", nil)
	mustExec(t, rw, "CREATE TABLE cut1 (id INT PRIMARY KEY)")
	h.waitReplicated(1, 2)
	c := conn1(t, rw)
	if id := serverID(t, c); id != 1 {
		t.Fatalf("rw on server_id %d, want 1", id)
	}
	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	ins := execAsync(c, "INSERT INTO cut1 VALUES (42)")
	time.Sleep(300 * time.Millisecond) // the INSERT is forwarded and waits on the frozen server
	select {
	case r := <-ins:
		t.Fatalf("INSERT on a frozen primary answered before the failover: %v", r.err)
	default:
	}

	fo := sandboxState(h.c, 2, 0, 1, 2)
	fo.Primary, fo.Phase, fo.OldPrimary, fo.Target = "", topo.PhaseFailover, "node1", "node2"
	published := time.Now()
	h.srv.SetClusterState(fo)
	if e := h.srv.Epochs()["main"]; e != 2 {
		t.Fatalf("epoch acknowledged after SetClusterState = %d, want 2", e)
	}
	r := waitResult(t, ins, cutBound, "INSERT in flight on the old primary after the failover phase")
	took := r.at.Sub(published)
	t.Logf("epoch publication → client error: %s", took.Round(time.Microsecond))
	code, msg := mysqlErr(r.err)
	if r.err == nil || code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(msg, "outcome is unknown") {
		t.Fatalf("INSERT in flight: err %v (code %d), want 1105 saying its outcome is unknown", r.err, code)
	}

	// New primary published; the old one wakes up and commits the INSERT
	// it had read: nothing of it reaches the client.
	h.srv.SetClusterState(sandboxState(h.c, 2, 1, 2))
	resume()
	var n int
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := h.direct(0).QueryRow("SELECT COUNT(*) FROM sbtest.cut1 WHERE id = 42").Scan(&n)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the woken old primary has %d row(s) with id 42 (the client was told the outcome is unknown)", n)
	if id := serverID(t, c); id != 2 {
		t.Fatalf("the session after the cut runs on server_id %d, want 2 (the new primary)", id)
	}
	if cut := counterValue(t, h, "switchyard_proxy_commands_cut_total"); cut < 1 {
		t.Fatalf("switchyard_proxy_commands_cut_total{listener=rw} = %v, want ≥ 1", cut)
	}
}

// A read in flight on a replica the controller reports unreachable is cut:
// the client gets the error at once and the session continues on the other
// replica. A read in flight on a drained replica, and a statement in flight
// on a primary the controller reports unreachable (a busy primary is not a
// dead one), finish.
func TestCutInFlightReadOnUnreachableReplica(t *testing.T) {
	h := newHarness(t, nil)
	ro := h.db("ro", "", nil)
	c := conn1(t, ro)
	id := serverID(t, c)
	if id != 2 && id != 3 {
		t.Fatalf("ro on server_id %d", id)
	}
	idx := id - 1
	other := 3 - idx // the other replica's index (1 or 2)

	// Drained: the read finishes where it is.
	slow := execAsync(c, "SELECT SLEEP(1.5)")
	time.Sleep(300 * time.Millisecond)
	h.srv.SetDrained(topo.DrainedNodes{Cluster: "main", Nodes: map[string]topo.DrainRecord{h.c.Nodes[idx].Name: {}}})
	if r := waitResult(t, slow, 30*time.Second, "read on a drained replica"); r.err != nil {
		t.Fatalf("read in flight on a drained replica failed: %v (it must finish)", r.err)
	}
	h.srv.SetDrained(topo.DrainedNodes{Cluster: "main"})

	// Primary reported unreachable: a statement in flight there finishes.
	rw := conn1(t, h.db("rw", "", nil))
	busy := execAsync(rw, "SELECT SLEEP(1.5)")
	time.Sleep(300 * time.Millisecond)
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.Nodes[0].Probe = topo.Probe{Reachable: false, At: time.Now(), Error: "probe timeout"}
	h.srv.SetClusterState(st)
	if r := waitResult(t, busy, 30*time.Second, "statement on a slow primary"); r.err != nil {
		t.Fatalf("statement in flight on a primary reported unreachable failed: %v (a busy primary is not cut)", r.err)
	}
	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))

	// The replica refuses the monitor with 1040: alive, not cut.
	busyRead := execAsync(c, "SELECT SLEEP(1.5)")
	time.Sleep(300 * time.Millisecond)
	st = sandboxState(h.c, 1, 0, 1, 2)
	st.Nodes[idx].Probe = topo.Probe{Reachable: false, At: time.Now(), Error: "too many connections", ErrorKind: "too_many_connections"}
	h.srv.SetClusterState(st)
	if r := waitResult(t, busyRead, 30*time.Second, "read on a replica refusing the monitor"); r.err != nil {
		t.Fatalf("read in flight on a replica that answers 1040 to the monitor failed: %v (it is alive)", r.err)
	}
	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))

	// The replica itself is reported unreachable: cut.
	if got := serverID(t, c); got != id {
		t.Fatalf("ro session moved to server_id %d after the drain ended; want it to stay on %d", got, id)
	}
	long := execAsync(c, "SELECT SLEEP(30)")
	time.Sleep(300 * time.Millisecond)
	st = sandboxState(h.c, 1, 0, 1, 2)
	st.Nodes[idx].Serving = false
	st.Nodes[idx].Reason = "unreachable"
	st.Nodes[idx].Probe = topo.Probe{Reachable: false, At: time.Now(), Error: "no answer within 1s"}
	published := time.Now()
	h.srv.SetClusterState(st)
	r := waitResult(t, long, cutBound, "read in flight on an unreachable replica")
	t.Logf("unreachable replica published → client error: %s", r.at.Sub(published).Round(time.Microsecond))
	code, msg := mysqlErr(r.err)
	if code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(msg, "abandoned") || !strings.Contains(msg, "unreachable") {
		t.Fatalf("read in flight: err %v (code %d), want 1105 saying the statement was abandoned on an unreachable replica", r.err, code)
	}
	if got := serverID(t, c); got != other+1 {
		t.Fatalf("after the cut the ro session runs on server_id %d, want %d", got, other+1)
	}
}

// A statement held by a switchover that is then rolled back runs on the old
// primary even though the fence killed its session's backend connection
// meanwhile: the session reconnects like a move.
func TestHeldStatementAfterAbortedSwitchover(t *testing.T) {
	h := newHarness(t, nil)
	rw := h.db("rw", "sbtest", nil)
	mustExec(t, rw, "CREATE TABLE cut3 (id INT PRIMARY KEY, sid INT)")
	c := conn1(t, rw)
	var thread int64
	if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&thread); err != nil {
		t.Fatal(err)
	}
	startHold(h, "sw-abort", topo.SwitchStepHold)
	held := execAsync(c, "INSERT INTO cut3 VALUES (1, @@server_id)")
	waitAck(t, h, "holding", func(a topo.SwitchoverAck) bool { return a.Holding && a.Held == 1 })
	// The fence: read_only and the client sessions killed.
	root := h.direct(0)
	mustExec(t, root, "SET GLOBAL read_only = ON")
	mustExec(t, root, "KILL CONNECTION ?", thread)
	time.Sleep(200 * time.Millisecond)
	// Catch-up timed out: rollback makes the old primary writable, then
	// publishes phase stable (same epoch) and marks the document done.
	mustExec(t, root, "SET GLOBAL read_only = OFF")
	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
	h.srv.SetSwitchover(topo.SwitchoverProgress{ID: "sw-abort", Cluster: "main", Epoch: 1, From: "node1", To: "node2", Step: topo.SwitchStepDone})
	r := waitResult(t, held, 30*time.Second, "held INSERT after the rollback")
	if r.err != nil {
		t.Fatalf("held INSERT after an aborted switchover failed: %v (want it to run on the old primary)", r.err)
	}
	var sid int
	if err := root.QueryRow("SELECT sid FROM sbtest.cut3 WHERE id = 1").Scan(&sid); err != nil || sid != 1 {
		t.Fatalf("held INSERT: row sid %d, err %v; want it written on node1", sid, err)
	}
}

// Backend sockets carry TCP keepalive and TCP_USER_TIMEOUT sized from
// proxy.connect_timeout and probe.interval.
func TestBackendSocketLiveness(t *testing.T) {
	h := newHarness(t, nil)
	c := conn1(t, h.db("rw", "", nil))
	if id := serverID(t, c); id != 1 {
		t.Fatalf("rw on server_id %d", id)
	}
	var be *backend
	h.srv.mu.Lock()
	for sess := range h.srv.sessions {
		sess.mu.Lock()
		if sess.be != nil {
			be = sess.be
		}
		sess.mu.Unlock()
	}
	h.srv.mu.Unlock()
	if be == nil {
		t.Fatal("no backend connection")
	}
	raw, err := be.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ut, ka, idle int
	var serr error
	_ = raw.Control(func(fd uintptr) {
		if ut, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT); serr != nil {
			return
		}
		if ka, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); serr != nil {
			return
		}
		idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	})
	if serr != nil {
		t.Fatal(serr)
	}
	want := h.cfg.Proxy.ConnectTimeout.D() + h.cfg.Probe.Interval.D()
	t.Logf("backend socket: TCP_USER_TIMEOUT %d ms, SO_KEEPALIVE %d, TCP_KEEPIDLE %d s", ut, ka, idle)
	if time.Duration(ut)*time.Millisecond != want || ka != 1 || idle < 1 {
		t.Fatalf("TCP_USER_TIMEOUT %d ms (want %s), SO_KEEPALIVE %d (want 1), TCP_KEEPIDLE %d s (want ≥ 1)", ut, want, ka, idle)
	}
}

// The proxy's own check failing to connect (as when a live server's
// accept queue is full and it drops SYNs) does not cut a statement in
// flight on a connection that still hears from the server.
func TestFailedCheckDoesNotCutLiveBackend(t *testing.T) {
	h := newHarness(t, nil)
	c := conn1(t, h.db("rw", "", nil))
	if id := serverID(t, c); id != 1 {
		t.Fatalf("rw on server_id %d", id)
	}
	busy := execAsync(c, "SELECT SLEEP(1.5)")
	time.Sleep(300 * time.Millisecond)
	h.srv.cutUnreachable("main", h.c.Nodes[0].Name, "no answer within 1s")
	if r := waitResult(t, busy, 30*time.Second, "statement on a live primary after a failed check"); r.err != nil {
		t.Fatalf("statement in flight on a live primary was cut after a failed connect check: %v", r.err)
	}
}

// TestErrCutPrimaryFencedWording: a statement cut because this proxy
// stopped routing writes (its registration lost, the primary not
// confirmed) is not told that the primary changed: it did not.
func TestErrCutPrimaryFencedWording(t *testing.T) {
	snap := &routeSnapshot{fenced: "lost its registration; failsafe: cannot confirm node1"}
	why := snap.cutReason(rolePrimary, &target{node: "node1"})
	msg := errCutPrimary("main", why, true).Message
	for _, want := range []string{"this proxy stopped routing writes to the primary (lost its registration; failsafe: cannot confirm node1) of cluster main",
		"outcome is unknown", "transaction was rolled back", "writes resume once this proxy is registered again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "changed") {
		t.Errorf("%q says the primary changed", msg)
	}
	moved := errCutPrimary("main", "node1 is no longer the primary (epoch 3: the primary is node2)", false).Message
	if !strings.Contains(moved, "the primary of cluster main changed") {
		t.Errorf("a primary change: %q", moved)
	}
}

// TestCutInFlightReadRunsAgain: with failover.mode auto and a failover
// that can come, a plain autocommit SELECT in flight on a frozen primary
// when the failover phase is published is cut like any command, and then
// run again on the new primary once it is published: the client gets the
// new primary's answer, no error. A locking read in flight at the same
// time (it may have taken locks, and a read of the woken old primary's
// data is not the same read) still gets the outcome-unknown error.
func TestCutInFlightReadRunsAgain(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	rw := h.db("rw", "sbtest", nil)
	mustExec(t, rw, "CREATE TABLE cutr (id INT PRIMARY KEY)")
	mustExec(t, rw, "INSERT INTO cutr VALUES (1)")
	h.waitReplicated(1, 2)
	plain, locking := conn1(t, rw), conn1(t, rw)
	for _, c := range []*sql.Conn{plain, locking} {
		if id := serverID(t, c); id != 1 {
			t.Fatalf("rw on server_id %d, want 1", id)
		}
	}
	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	waitStopped(t, pid)
	type answer struct {
		id  int
		err error
	}
	read := func(c *sql.Conn, q string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			var a answer
			a.err = c.QueryRowContext(context.Background(), q).Scan(&a.id)
			ch <- a
		}()
		return ch
	}
	plainCh := read(plain, "SELECT @@server_id")
	lockingCh := read(locking, "SELECT id FROM cutr WHERE id = 1 FOR UPDATE")
	time.Sleep(300 * time.Millisecond) // both forwarded, waiting on the frozen server
	reruns := ctrValue(h.srv.metrics.primaryLostRerun.WithLabelValues("main"))
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	select {
	case a := <-lockingCh:
		if code, msg := mysqlErr(a.err); code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(msg, "outcome is unknown") {
			t.Fatalf("locking read in flight: %v, want 1105 saying its outcome is unknown", a.err)
		}
	case <-time.After(cutBound):
		t.Fatalf("locking read in flight: no answer within %s of the failover phase", cutBound)
	}
	select {
	case a := <-plainCh:
		t.Fatalf("plain read in flight answered before the new primary was published: %d, %v", a.id, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	h.srv.SetClusterState(done)
	select {
	case a := <-plainCh:
		if a.err != nil || a.id != 2 {
			t.Fatalf("plain read in flight: server_id %d, %v; want 2 (run again on the new primary)", a.id, a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("plain read in flight: no answer 15 s after the new primary was published")
	}
	if n := ctrValue(h.srv.metrics.primaryLostRerun.WithLabelValues("main")) - reruns; n != 1 {
		t.Fatalf("reads run again: %v, want 1", n)
	}
}

// TestCutInFlightPrepareRunsAgain: a COM_STMT_PREPARE outside a
// transaction in flight on a frozen primary when the failover phase is
// published is cut and then prepared again on the new primary (it
// changes nothing on a server): the client gets the new primary's answer
// and the statement executes there, no outcome-unknown error.
func TestCutInFlightPrepareRunsAgain(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	rw := h.db("rw", "sbtest", nil)
	c := conn1(t, rw)
	if id := serverID(t, c); id != 1 {
		t.Fatalf("rw on server_id %d, want 1", id)
	}
	pid := h.c.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	waitStopped(t, pid)
	type answer struct {
		st  *sql.Stmt
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		st, err := c.PrepareContext(context.Background(), "SELECT @@server_id + ?")
		ch <- answer{st, err}
	}()
	time.Sleep(300 * time.Millisecond) // forwarded, waiting on the frozen server
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	select {
	case a := <-ch:
		t.Fatalf("PREPARE in flight answered before the new primary was published: %v", a.err)
	case <-time.After(cutBound + 200*time.Millisecond):
	}
	h.srv.SetClusterState(done)
	var a answer
	select {
	case a = <-ch:
	case <-time.After(15 * time.Second):
		t.Fatal("PREPARE in flight: no answer 15 s after the new primary was published")
	}
	if a.err != nil {
		t.Fatalf("PREPARE in flight when the failover began: %v, want it prepared again on the new primary", a.err)
	}
	defer a.st.Close()
	var id int
	if err := a.st.QueryRowContext(context.Background(), 0).Scan(&id); err != nil || id != 2 {
		t.Fatalf("executing the statement prepared again: server_id %d, %v; want 2", id, err)
	}
}

// TestCutInFlightPreparedReadRunsAgain: a prepared plain read (autocommit
// COM_STMT_EXECUTE) in flight on a frozen primary when the failover phase
// is published is cut and executed again on the new primary, its
// statement prepared again there: the client gets the new primary's
// answer, no error.
func TestCutInFlightPreparedReadRunsAgain(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	rw := h.db("rw", "sbtest", nil)
	c := conn1(t, rw)
	ps, err := c.PrepareContext(context.Background(), "SELECT @@server_id + ?")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	var id int
	if err := ps.QueryRowContext(context.Background(), 0).Scan(&id); err != nil || id != 1 {
		t.Fatalf("before the freeze: server_id %d, %v", id, err)
	}
	pid := h.c.PID(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	waitStopped(t, pid)
	type answer struct {
		id  int
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		var a answer
		a.err = ps.QueryRowContext(context.Background(), 0).Scan(&a.id)
		ch <- a
	}()
	time.Sleep(300 * time.Millisecond) // forwarded, waiting on the frozen server
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	select {
	case a := <-ch:
		t.Fatalf("prepared read in flight answered before the new primary was published: %d, %v", a.id, a.err)
	case <-time.After(cutBound + 200*time.Millisecond):
	}
	h.srv.SetClusterState(done)
	select {
	case a := <-ch:
		if a.err != nil || a.id != 2 {
			t.Fatalf("prepared read in flight: server_id %d, %v; want 2 (executed again on the new primary)", a.id, a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("prepared read in flight: no answer 15 s after the new primary was published")
	}
}
