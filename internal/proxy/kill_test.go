package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

func TestParseKill(t *testing.T) {
	for _, c := range []struct {
		q     string
		form  killForm
		query bool
		id    uint32
		self  bool
	}{
		{"KILL 42", killByID, false, 42, false},
		{"kill query 7;", killByID, true, 7, false},
		{"  /* c */ KILL CONNECTION 9 ; ", killByID, false, 9, false},
		{"KILL HARD QUERY 3", killByID, true, 3, false},
		{"KILL SOFT 3", killByID, false, 3, false},
		{"KILL QUERY CONNECTION_ID()", killByID, true, 0, true},
		{"KILL connection_id ( )", killByID, false, 0, true},
		{"KILL QUERY ID 12345", killRelay, true, 0, false},
		{"KILL USER app", killRelay, false, 0, false},
		{"KILL 40+2", killRefused, false, 42, false},
		{"KILL 3; SELECT 1", killRefused, false, 3, false},
		{"KILL (SELECT 1)", killRefused, false, 0, false},
		{"KILL 99999999999", killRefused, false, 0, false},
		{"KILL", killRefused, false, 0, false},
	} {
		k, form := parseKill([]byte(c.q))
		if form != c.form || (form == killByID && (k.query != c.query || k.id != c.id || k.self != c.self)) {
			t.Errorf("parseKill(%q) = %+v, %d; want form %d query=%v id=%d self=%v", c.q, k, form, c.form, c.query, c.id, c.self)
		}
	}
	if classify([]byte("kill query 1")) != classKill || classify([]byte("KILLER")) == classKill {
		t.Error("classify does not recognise KILL by its first word")
	}
}

// killTarget resolution over in-memory sessions: a proxy id of the same
// user first, then a backend thread id of the same user's sessions (the
// killer's node preferred), another user's session is denied, else unknown.
func TestKillTargetResolution(t *testing.T) {
	srv := &Server{}
	mk := func(id uint32, user, node string, thread uint32) *session {
		s := &session{srv: srv, id: id}
		if node != "" {
			s.be = &backend{t: &target{node: node}, threadID: thread}
		}
		srv.setOwner(s, user)
		return s
	}
	a := mk(1, "app", "node1", 50)
	b := mk(2, "app", "node2", 60)
	c := mk(3, "app", "node1", 60)
	other := mk(4, "bob", "node1", 70)
	mk(5, "bob", "", 0)
	for _, tc := range []struct {
		user string
		id   uint32
		near string
		want *session
		code uint16
	}{
		{"app", 1, "node1", a, 0},
		{"app", 50, "node2", a, 0},
		{"app", 60, "node1", c, 0},
		{"app", 60, "node2", b, 0},
		{"app", 4, "node1", nil, gomysql.ER_KILL_DENIED_ERROR},
		{"app", 70, "node1", nil, gomysql.ER_KILL_DENIED_ERROR},
		{"app", 5, "node1", nil, gomysql.ER_KILL_DENIED_ERROR},
		{"bob", 4, "node1", other, 0},
		{"app", 999, "node1", nil, gomysql.ER_NO_SUCH_THREAD},
	} {
		got, merr := srv.killTarget(nil, tc.user, tc.id, tc.near)
		code := uint16(0)
		if merr != nil {
			code = merr.Code
		}
		if got != tc.want || code != tc.code {
			t.Errorf("killTarget(%s, %d, %s) = session %v, error %d; want %v, %d", tc.user, tc.id, tc.near, got, code, tc.want, tc.code)
		}
	}
	// A transaction-pooled session's backend thread names it only for
	// itself; its proxy id names it for everyone.
	tx := mk(6, "app", "node1", 80)
	tx.txPool = true
	if got, merr := srv.killTarget(a, "app", 80, "node1"); got != nil || merr == nil || merr.Code != gomysql.ER_NO_SUCH_THREAD ||
		!strings.Contains(merr.Message, "proxy's connection id") {
		t.Errorf("thread of a transaction-pooled session from another session: %v, %v", got, merr)
	}
	if got, merr := srv.killTarget(tx, "app", 80, "node1"); got != tx || merr != nil {
		t.Errorf("own current thread on a transaction-pooled listener: %v, %v", got, merr)
	}
	if got, merr := srv.killTarget(a, "app", 6, "node1"); got != tx || merr != nil {
		t.Errorf("proxy id of a transaction-pooled session: %v, %v", got, merr)
	}
	if got, merr := srv.killTarget(tx, "app", 60, "node1"); got != c || merr != nil {
		t.Errorf("session-pooled thread from a transaction-pooled killer: %v, %v", got, merr)
	}
	if got, merr := srv.killTarget(tx, "app", 4, "node1"); got != nil || merr == nil || merr.Code != gomysql.ER_KILL_DENIED_ERROR {
		t.Errorf("proxy id of another user's session from a transaction-pooled killer: %v, %v", got, merr)
	}
}

// sleeper runs SELECT SLEEP(secs) on rc in the background and reports the
// outcome: "interrupted" (ER_QUERY_INTERRUPTED or SLEEP returned 1),
// "done" (returned 0), or the error.
func sleeper(rc *rawConn, secs int) <-chan string {
	out := make(chan string, 1)
	go func() {
		read := func() ([]byte, error) {
			p, _, err := mysqlproto.ReadPacket(rc.r, nil, 0)
			return append([]byte(nil), p...), err
		}
		b, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{gomysql.COM_QUERY}, fmt.Sprintf("SELECT SLEEP(%d)", secs)...))
		if _, err := rc.c.Write(b); err != nil {
			out <- "connection: " + err.Error()
			return
		}
		outcome := func(p []byte) string {
			if p[0] != gomysql.ERR_HEADER {
				return ""
			}
			if e := mysqlproto.ParseERR(p); e.Code == gomysql.ER_QUERY_INTERRUPTED {
				return "interrupted"
			}
			return describe(p)
		}
		// Column count, one definition, EOF, one row, EOF (no
		// CLIENT_DEPRECATE_EOF); an ERR may replace the count or the row.
		var row []byte
		for i := 0; i < 5; i++ {
			p, err := read()
			if err != nil {
				out <- "connection: " + err.Error()
				return
			}
			if r := outcome(p); r != "" {
				out <- r
				return
			}
			if i == 3 {
				row = p
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

// waitRunning waits until node 0 runs a statement with text q.
func waitRunning(t *testing.T, h *harness, q string) {
	t.Helper()
	root := h.direct(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = ?", q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never ran on node1", q)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitOutcome(t *testing.T, ch <-chan string, within time.Duration, what string) string {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("%s: no answer within %s", what, within)
		return ""
	}
}

// KILL QUERY through the proxy with the handshake id (what the mariadb
// client's Ctrl-C sends) and with CONNECTION_ID() interrupts that session's
// query and no other; KILL CONNECTION closes the session; unknown ids and
// one's own id behave as on the server.
func TestKillThroughProxy(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	dial := func() *rawConn {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	a := dial()
	aProxyID := a.greeting.ConnectionID
	aThread, err := strconv.ParseUint(a.query("SELECT CONNECTION_ID()")[0][0], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	if uint32(aThread) == aProxyID {
		t.Logf("proxy id and backend thread id coincide (%d)", aProxyID)
	}
	c := dial()
	b := h.db("rw", "", nil)
	ctx := context.Background()

	for _, by := range []struct {
		name string
		id   uint64
	}{{"handshake id", uint64(aProxyID)}, {"CONNECTION_ID()", aThread}} {
		aDone := sleeper(a, 20)
		cDone := sleeper(c, 3)
		waitRunning(t, h, "SELECT SLEEP(20)")
		waitRunning(t, h, "SELECT SLEEP(3)")
		start := time.Now()
		if _, err := b.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", by.id)); err != nil {
			t.Fatalf("KILL QUERY by %s: %v", by.name, err)
		}
		if r := waitOutcome(t, aDone, 10*time.Second, "killed query"); r != "interrupted" {
			t.Fatalf("KILL QUERY by %s: session A got %q", by.name, r)
		}
		t.Logf("KILL QUERY by %s: session A's SLEEP(20) ended %s after the KILL", by.name, time.Since(start).Round(time.Millisecond))
		if r := waitOutcome(t, cDone, 30*time.Second, "bystander"); r != "done" {
			t.Fatalf("KILL QUERY by %s touched session C: %q", by.name, r)
		}
		if rows := a.query("SELECT 1"); rows[0][0] != "1" {
			t.Fatalf("session A after KILL QUERY: %v", rows)
		}
	}

	_, err = b.ExecContext(ctx, "KILL QUERY 4000000000")
	if code, msg := mysqlErr(err); code != gomysql.ER_NO_SUCH_THREAD || msg != "Unknown thread id: 4000000000" {
		t.Fatalf("KILL of an unknown id: %v", err)
	}
	_, err = b.ExecContext(ctx, "KILL 40+2")
	if code, _ := mysqlErr(err); code != gomysql.ER_NOT_SUPPORTED_YET {
		t.Fatalf("KILL with an expression: %v", err)
	}

	// KILL CONNECTION closes A, while it runs a statement; C goes on.
	aDone := sleeper(a, 20)
	waitRunning(t, h, "SELECT SLEEP(20)")
	if _, err := b.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", aProxyID)); err != nil {
		t.Fatalf("KILL CONNECTION: %v", err)
	}
	killedOutcome(t, waitOutcome(t, aDone, 10*time.Second, "killed connection"), "session pooling")
	expectClosed(t, a.c, "killed session")
	if rows := c.query("SELECT 2"); rows[0][0] != "2" {
		t.Fatalf("session C after KILL CONNECTION of A: %v", rows)
	}

	// COM_PROCESS_KILL closes the target too.
	d := dial()
	c.cmd(gomysql.COM_PROCESS_KILL, binary.LittleEndian.AppendUint32(nil, d.greeting.ConnectionID)...)
	if p := c.next(); p[0] != gomysql.OK_HEADER {
		t.Fatalf("COM_PROCESS_KILL: %s", describe(p))
	}
	expectClosed(t, d.c, "session killed by COM_PROCESS_KILL")

	// KILL QUERY of one's own id interrupts the KILL itself, as the
	// server does (1317), by CONNECTION_ID() and by the handshake id, and
	// the session goes on.
	for _, q := range []string{"KILL QUERY CONNECTION_ID()", fmt.Sprintf("KILL QUERY %d", c.greeting.ConnectionID)} {
		c.cmd(gomysql.COM_QUERY, []byte(q)...)
		if p := c.next(); p[0] != gomysql.ERR_HEADER || mysqlproto.ParseERR(p).Code != gomysql.ER_QUERY_INTERRUPTED {
			t.Fatalf("%s: %s, want ERR 1317", q, describe(p))
		}
		if rows := c.query("SELECT 3"); rows[0][0] != "3" {
			t.Fatalf("session after %s: %v", q, rows)
		}
	}

	// One's own id: ER_CONNECTION_KILLED, then closed.
	c.cmd(gomysql.COM_QUERY, []byte("KILL CONNECTION_ID()")...)
	if p := c.next(); p[0] != gomysql.ERR_HEADER || mysqlproto.ParseERR(p).Code != errConnectionKilled {
		t.Fatalf("KILL of the own id: %s", describe(p))
	}
	expectClosed(t, c.c, "session that killed itself")
	waitFor(t, "killed sessions gone", func() bool { return h.srv.Stats().Listeners[0].Sessions <= 1 })
}

// The mariadb client's Ctrl-C (it sends KILL QUERY <handshake id> on a new
// connection) interrupts its own query through the proxy.
func TestMariaDBClientCtrlC(t *testing.T) {
	bin := lookTool(t, "mariadb")
	h := newHarness(t, nil)
	host, port := hostPort(t, h.srv.ListenerAddr("rw"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--no-defaults", "-h"+host, "-P"+port, "-u"+h.c.AppUser, "-p"+h.c.AppPassword,
		"--skip-ssl", "-e", "SELECT SLEEP(30) AS mine")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, "SELECT SLEEP(30) AS mine")
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	took := time.Since(start)
	if took > 10*time.Second {
		t.Fatalf("mariadb ran %s after Ctrl-C: %v\n%s", took, err, out.String())
	}
	var n int
	if qerr := h.direct(0).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(30)%'").Scan(&n); qerr != nil || n != 0 {
		t.Fatalf("the query still runs on node1 after Ctrl-C (%d, %v)", n, qerr)
	}
	t.Logf("mariadb after Ctrl-C (%s, %v): %s", took.Round(time.Millisecond), err, strings.TrimSpace(out.String()))
}

// killedOutcome checks what a session running a statement saw when another
// session killed its connection: ER_CONNECTION_KILLED (1927) or the
// connection closed, as a direct client sees it, never a lost-primary error.
func killedOutcome(t *testing.T, r, what string) {
	t.Helper()
	if !strings.HasPrefix(r, "connection: ") && !strings.Contains(r, "1927") {
		t.Fatalf("%s: the killed session got %q, want ER_CONNECTION_KILLED (1927) or the connection closed", what, r)
	}
	t.Logf("%s: the killed session got %q", what, r)
}

// On a transaction-pooled listener a backend thread id names no session:
// KILL QUERY with the id CONNECTION_ID() returned earlier, now the thread
// of another client's connection, is refused saying why and leaves that
// client's statement alone; KILL by the proxy's connection id interrupts
// the right session; the session killed by KILL CONNECTION gets 1927.
func TestKillOnTxPoolListener(t *testing.T) {
	h := txHarness(t, 0)
	addr := h.srv.ListenerAddr("rwtx")
	dial := func() *rawConn {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	a := dial()
	a.query("SELECT CONNECTION_ID()")
	b := dial()
	bDone := sleeper(b, 3)
	waitRunning(t, h, "SELECT SLEEP(3)")
	// The thread b's statement runs on, which a ran on before.
	var thread string
	if err := h.direct(0).QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(3)'").Scan(&thread); err != nil {
		t.Fatal(err)
	}
	if thread == strconv.FormatUint(uint64(a.greeting.ConnectionID), 10) || thread == strconv.FormatUint(uint64(b.greeting.ConnectionID), 10) {
		t.Skipf("backend thread id %s coincides with a proxy connection id", thread)
	}
	a.cmd(gomysql.COM_QUERY, []byte("KILL QUERY "+thread)...)
	p := a.next()
	if p[0] != gomysql.ERR_HEADER {
		t.Fatalf("KILL QUERY of a's previous backend thread (now b's): %s, want an error", describe(p))
	}
	if e := mysqlproto.ParseERR(p); e.Code != gomysql.ER_NO_SUCH_THREAD || !strings.Contains(e.Message, "proxy's connection id") {
		t.Fatalf("KILL QUERY of a shared backend thread: %s", describe(p))
	}
	if r := waitOutcome(t, bDone, 10*time.Second, "bystander"); r != "done" {
		t.Fatalf("KILL QUERY of a's previous thread touched client b: %q", r)
	}
	// By the proxy's connection id: b's statement, and only it.
	bDone = sleeper(b, 20)
	c := dial()
	cDone := sleeper(c, 3)
	waitRunning(t, h, "SELECT SLEEP(20)")
	waitRunning(t, h, "SELECT SLEEP(3)")
	a.cmd(gomysql.COM_QUERY, []byte(fmt.Sprintf("KILL QUERY %d", b.greeting.ConnectionID))...)
	if p := a.next(); p[0] != gomysql.OK_HEADER {
		t.Fatalf("KILL QUERY by b's proxy id: %s", describe(p))
	}
	if r := waitOutcome(t, bDone, 10*time.Second, "killed query"); r != "interrupted" {
		t.Fatalf("KILL QUERY by b's proxy id: b got %q", r)
	}
	if r := waitOutcome(t, cDone, 10*time.Second, "bystander"); r != "done" {
		t.Fatalf("KILL QUERY of b touched c: %q", r)
	}
	// KILL CONNECTION while b runs a statement.
	bDone = sleeper(b, 20)
	waitRunning(t, h, "SELECT SLEEP(20)")
	a.cmd(gomysql.COM_QUERY, []byte(fmt.Sprintf("KILL %d", b.greeting.ConnectionID))...)
	if p := a.next(); p[0] != gomysql.OK_HEADER {
		t.Fatalf("KILL CONNECTION by b's proxy id: %s", describe(p))
	}
	killedOutcome(t, waitOutcome(t, bDone, 10*time.Second, "killed connection"), "transaction pooling")
	expectClosed(t, b.c, "killed session")
	if rows := c.query("SELECT 2"); rows[0][0] != "2" {
		t.Fatalf("client c after b was killed: %v", rows)
	}
}

// KILL [QUERY] of another user's session by the id its handshake gave it
// gets 1095, as the server answers for another user's thread, through a
// session- and a transaction-pooled listener alike, and kills nothing.
func TestKillOtherUsersSessionDenied(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Users = append(c.Users, config.User{Name: "kb", Password: "kb-pw"})
	})
	mustExec(t, h.direct(0), "CREATE USER kb@'%' IDENTIFIED BY 'kb-pw'")
	dial := func(addr, user, pw string) *rawConn {
		rc, err := dialRaw(t, addr, user, pw, "", 0, "")
		if err != nil {
			t.Fatalf("login as %s to %s: %v", user, addr, err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	// The server's answer for another user's thread (checked direct
	// first), with the id given.
	check := func(where string, killer, victim *rawConn) {
		t.Helper()
		id := victim.greeting.ConnectionID
		for _, verb := range []string{"KILL QUERY", "KILL"} {
			killer.cmd(gomysql.COM_QUERY, []byte(fmt.Sprintf("%s %d", verb, id))...)
			p := killer.next()
			e := mysqlproto.ParseERR(p)
			if p[0] != gomysql.ERR_HEADER || e.Code != gomysql.ER_KILL_DENIED_ERROR || e.State != "HY000" ||
				e.Message != fmt.Sprintf("You are not owner of thread %d", id) {
				t.Errorf("%s of another user's session %s: %s, want 1095 (HY000) You are not owner of thread %d", verb, where, describe(p), id)
			}
		}
	}
	check("direct", dial(h.c.Nodes[0].Address, "kb", "kb-pw"), dial(h.c.Nodes[0].Address, h.c.AppUser, h.c.AppPassword))
	for _, l := range []string{"rw", "rwtx"} {
		addr := h.srv.ListenerAddr(l)
		victim := dial(addr, h.c.AppUser, h.c.AppPassword)
		check("through "+l, dial(addr, "kb", "kb-pw"), victim)
		if rows := victim.query("SELECT 1"); rows[0][0] != "1" {
			t.Fatalf("the other user's session through %s after the refused KILL: %v", l, rows)
		}
	}
}
