package proxy

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

func TestWrongPasswordAndUnknownUser(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	cases := []struct{ user, pw, using string }{
		{h.c.AppUser, "wrong-password", "YES"},
		{"nosuchuser", "whatever", "YES"},
		{h.c.AppUser, "", "NO"},
	}
	for _, c := range cases {
		d, _ := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/", c.user, c.pw, addr))
		err := d.Ping()
		d.Close()
		code, msg := mysqlErr(err)
		want := fmt.Sprintf("Access denied for user '%s'@'127.0.0.1' (using password: %s)", c.user, c.using)
		if code != 1045 || msg != want {
			t.Fatalf("user %q: got %d %q, want 1045 %q", c.user, code, msg, want)
		}
		// Raw check of the SQLSTATE and that the connection is closed after.
		_, rerr := dialRaw(t, addr, c.user, c.pw, "", 0, "")
		var me *mysql.MyError
		if !errors.As(rerr, &me) || me.Code != 1045 || me.State != "28000" {
			t.Fatalf("user %q raw: %v", c.user, rerr)
		}
	}
	if v := counterValue(t, h, "switchyard_proxy_auth_failures_total"); v < 6 {
		t.Fatalf("auth failures metric %v, want ≥ 6", v)
	}
}

// healthy returns a single-connection pool through rw that must keep working.
func healthy(t *testing.T, h *harness) *sql.DB {
	db := h.db("rw", "", nil)
	db.SetMaxOpenConns(1)
	return db
}

func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for {
		p, _, err := mysqlproto.ReadPacket(r, nil, 0)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s: connection still open after 5s", what)
			}
			return // closed (EOF or reset), possibly after an ERR packet
		}
		if len(p) == 0 || p[0] != mysql.ERR_HEADER {
			t.Fatalf("%s: unexpected packet %x", what, p)
		}
	}
}

// expectERRThenClosed reads one ERR packet with error code and sequence
// number seq from c, then expects c closed.
func expectERRThenClosed(t *testing.T, c net.Conn, what string, code uint16, seq byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	p, got, err := mysqlproto.ReadPacket(r, nil, 0)
	if err != nil {
		t.Fatalf("%s: no error packet before the close: %v", what, err)
	}
	if len(p) < 3 || p[0] != mysql.ERR_HEADER || mysqlproto.ParseERR(p).Code != code || got != seq {
		t.Fatalf("%s: got packet %d %q, want ERR %d as packet %d", what, got, p, code, seq)
	}
	if _, _, err := mysqlproto.ReadPacket(r, nil, 0); err == nil {
		t.Fatalf("%s: more after the error packet", what)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: connection still open after 5s", what)
	}
}

func TestGarbageAndTruncatedPacketsCloseOnlyThatConnection(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	good := healthy(t, h)
	if serverID(t, good) != 1 {
		t.Fatal("healthy session not on node1")
	}

	// 1. Garbage instead of a handshake response.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := mysqlproto.ReadPacket(bufio.NewReader(c), nil, 0); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\x01\x02\xff\xfe"))
	// As mariadbd answers it: 1156 "Got packets out of order", packet 1.
	expectERRThenClosed(t, c, "garbage handshake", mysql.ER_NET_PACKETS_OUT_OF_ORDER, 1)
	c.Close()

	// 1b. Handshake responses the server would refuse: a packet numbered
	// 5, one too short to parse, one longer than any handshake response.
	for _, bad := range []struct {
		what string
		b    []byte
		code uint16
		seq  byte
	}{
		{"handshake response numbered 5", []byte{1, 0, 0, 5, 0}, mysql.ER_NET_PACKETS_OUT_OF_ORDER, 1},
		{"short handshake response", []byte{5, 0, 0, 1, 'h', 'e', 'l', 'l', 'o'}, mysql.ER_HANDSHAKE_ERROR, 2},
		{"huge handshake response", append([]byte{0xff, 0xff, 0xff, 1}, make([]byte, 100)...), mysql.ER_HANDSHAKE_ERROR, 2},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := mysqlproto.ReadPacket(bufio.NewReader(c), nil, 0); err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(bad.b)
		expectERRThenClosed(t, c, bad.what, bad.code, bad.seq)
		c.Close()
	}

	// 2. Garbage after a successful login (not a command packet).
	rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rc.c.Write([]byte{0x05, 0x00, 0x00, 0x07, 'h', 'e', 'l', 'l', 'o', 0xde, 0xad, 0xbe, 0xef})
	// As mariadbd answers it: 1156 as packet 0, then the close.
	expectERRThenClosed(t, rc.c, "garbage command", mysql.ER_NET_PACKETS_OUT_OF_ORDER, 0)
	rc.Close()

	// 3. A truncated command packet, then the client hangs up.
	rc, err = dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rc.c.Write([]byte{100, 0, 0, 0, mysql.COM_QUERY, 'S', 'E', 'L'})
	rc.Close()

	// 4. A truncated handshake response, then hang up.
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = mysqlproto.ReadPacket(bufio.NewReader(c), nil, 0)
	_, _ = c.Write([]byte{200, 0, 0, 1, 0x85, 0xa6})
	c.Close()

	// 5. An empty command packet: as mariadbd answers it, 1047, and the
	// session goes on.
	rc, err = dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rc.c.Write([]byte{0, 0, 0, 0})
	if p := rc.next(); p[0] != mysql.ERR_HEADER || mysqlproto.ParseERR(p).Code != mysql.ER_UNKNOWN_COM_ERROR {
		t.Fatalf("empty command: %s, want error 1047", describe(p))
	}
	if rows := rc.query("SELECT 5"); rows[0][0] != "5" {
		t.Fatalf("after an empty command: %v", rows)
	}
	rc.Close()

	// The healthy session and new sessions are unaffected, and the broken
	// sessions are gone.
	if serverID(t, good) != 1 {
		t.Fatal("healthy session broken")
	}
	if newSessionServerID(t, h, "rw") != 1 {
		t.Fatal("new session broken")
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.Stats().Listeners[0].Sessions != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("sessions still open: %+v", h.srv.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedAddr returns a loopback address nothing listens on (refused).
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// silentAddr returns a loopback address whose listener never accepts: the
// kernel completes TCP handshakes into the backlog but no server greeting
// ever comes.
func silentAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// blackholeAddr returns a loopback address whose accept queue is full, so
// new connection attempts get no SYN-ACK and hang until the dial timeout.
func blackholeAddr(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // queue full: this dial timed out
		}
		t.Cleanup(func() { c.Close() })
		if i > 64 {
			t.Skip("cannot fill a loopback accept queue on this kernel")
		}
	}
}

func TestAllBackendsDownGivesClearErrorFast(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := newHarness(t, func(c *config.Config) { c.Proxy.ConnectTimeout = config.Duration(timeout) })
	cases := []struct{ name, addr, want string }{
		{"refused", closedAddr(t), "connection refused"},
		{"silent", silentAddr(t), "connect timeout after 300ms"},
		{"blackhole", blackholeAddr(t), "connect timeout after 300ms"},
	}
	for _, cached := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/greeting_cached=%v", c.name, cached), func(t *testing.T) {
				h.srv.route("main").greeting.Store(nil)
				if cached {
					h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
					newSessionServerID(t, h, "rw") // caches the backend greeting
				}
				st := sandboxState(h.c, 1, 0, 1, 2)
				for i := range st.Nodes {
					st.Nodes[i].Address = c.addr
				}
				h.srv.SetClusterState(st)
				for _, l := range []string{"rw", "ro"} {
					start := time.Now()
					d, _ := sql.Open("mysql", h.dsn(l, "", nil))
					err := d.Ping()
					d.Close()
					took := time.Since(start)
					code, msg := mysqlErr(err)
					if code != 1105 || !strings.Contains(msg, "cannot reach") || !strings.Contains(msg, c.want) {
						t.Fatalf("%s: got %d %q", l, code, msg)
					}
					if took > 10*timeout {
						t.Fatalf("%s: error after %v, want well under %v", l, took, 10*timeout)
					}
					t.Logf("%s: %q after %v", l, msg, took.Round(time.Millisecond))
				}
			})
		}
	}
}

// A backend that dies mid-session: the client gets a clear error, not a
// hang, and the session stays open: in manual mode (the harness) its next
// statement gets the lost-primary error at once, naming what an operator
// must do.
func TestBackendDiesMidSession(t *testing.T) {
	h := newHarness(t, nil)
	db := healthy(t, h)
	if serverID(t, db) != 1 {
		t.Fatal("not on node1")
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(context.Background(), "SELECT 1")
	code, msg := mysqlErr(err)
	if code != 1105 || !strings.Contains(msg, "node1") ||
		!(strings.Contains(msg, "lost while this read ran") || strings.Contains(msg, "is unreachable")) {
		t.Fatalf("after backend death: %v", err)
	}
	start := time.Now()
	_, err = conn.ExecContext(context.Background(), "SELECT 1")
	code, msg = mysqlErr(err)
	if code != 1105 || !strings.Contains(msg, "failover.mode is manual") || !strings.Contains(msg, "switchyard failover --cluster main") {
		t.Fatalf("next statement on the same session: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the lost-primary error took %v in manual mode, want it at once", took)
	}
}

func TestMaxConnectionsPerBackend(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Proxy.MaxConnectionsPerBackend = 2 })
	var open []*rawConn
	for range 2 {
		rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, rc)
	}
	_, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != mysql.ER_CON_COUNT_ERROR || me.State != "08004" || me.Message != "Too many connections" {
		t.Fatalf("third connection: %v", err)
	}
	open[0].cmd(mysql.COM_QUIT)
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err == nil {
			rc.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not released: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	open[1].Close()
}

func counterValue(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				sum += m.Counter.GetValue()
			}
			if m.Gauge != nil {
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}
