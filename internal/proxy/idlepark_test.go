package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

func (p *idleParker) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// waitParked waits until n sessions are parked (a session idle for one to
// two sweeps parks).
func waitParked(t *testing.T, srv *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * idleParkAfter)
	for srv.parker.count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions parked after %s, want %d", srv.parker.count(), 10*idleParkAfter, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An idle session parks (no goroutine, no read buffer) and, woken by its
// next command, runs it on the same backend connection with its
// transaction and session state intact; commands sent together
// (pipelined) are all answered, none lost with a released buffer.
func TestIdleSessionParksAndResumes(t *testing.T) {
	h := newHarness(t, nil)
	rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_ = rc.c.SetDeadline(time.Now().Add(60 * time.Second))
	rc.query("CREATE TABLE park_t (id INT PRIMARY KEY)")
	rc.query("SET @mark = 42")
	rc.query("BEGIN")
	rc.query("INSERT INTO park_t VALUES (1)")
	thread := rc.query("SELECT CONNECTION_ID()")[0][0]
	waitParked(t, h.srv, 1)
	h.srv.mu.Lock()
	for sess := range h.srv.sessions {
		if sess.readerHeld.Load() {
			t.Errorf("a parked session holds a client reader")
		}
	}
	h.srv.mu.Unlock()
	if got := rc.query("SELECT CONNECTION_ID(), @mark, @@in_transaction")[0]; got[0] != thread || got[1] != "42" || got[2] != "1" {
		t.Fatalf("after parking: connection %s, @mark %s, in_transaction %s; want %s, 42, 1 (same backend, state kept)", got[0], got[1], got[2], thread)
	}
	rc.query("COMMIT")
	waitParked(t, h.srv, 1)
	// Three commands in one write: the first wakes the session, the other
	// two are already buffered when it finishes.
	var b []byte
	for _, q := range []string{"SELECT 1", "SELECT COUNT(*) FROM park_t", "SELECT @mark"} {
		b, _ = mysqlproto.AppendPacket(b, 0, append([]byte{mysql.COM_QUERY}, q...))
	}
	if _, err := rc.c.Write(b); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"1", "1", "42"} {
		rows, _ := rc.textResult()
		if len(rows) != 1 || rows[0][0] != want {
			t.Fatalf("pipelined command %d: rows %v, want [[%s]]", i+1, rows, want)
		}
	}
}

// Close ends parked sessions too (closing their socket removes it from
// the epoll set without an event: Close must wake them) and returns.
func TestCloseEndsParkedSessions(t *testing.T) {
	h := newHarness(t, nil)
	var conns []*rawConn
	for range 3 {
		rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		conns = append(conns, rc)
	}
	waitParked(t, h.srv, 3)
	done := make(chan struct{})
	go func() { _ = h.srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Server.Close did not return with parked sessions")
	}
	for i, rc := range conns {
		_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := rc.c.Read(make([]byte, 1))
		var ne net.Error
		if !errors.Is(err, io.EOF) && !(errors.As(err, &ne) && !ne.Timeout()) {
			t.Errorf("client %d after Close: read %v, want the connection closed", i, err)
		}
	}
}

// A parked session whose client goes away is closed (its backend
// connection goes back to the pool: none stays in use).
func TestParkedSessionClientGone(t *testing.T) {
	h := newHarness(t, nil)
	rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, h.srv, 1)
	rc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := h.srv.Stats()
		open := int64(0)
		for _, b := range st.Backends {
			open += b.Connections - b.Idle
		}
		if st.Listeners[0].Sessions == 0 && open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the parked client closed: %d sessions, %d backend connections in use; want 0, 0", st.Listeners[0].Sessions, open)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitParked(t, h.srv, 0)
}

// A parked session moves with the route like any idle session: after a
// reparent its next command wakes it and runs on the new primary with its
// user variable and prepared statement.
func TestParkedSessionMoves(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET @u = 'parked'"); err != nil {
		t.Fatal(err)
	}
	st, err := conn.PrepareContext(ctx, "SELECT @@server_id, @u")
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, h.srv, 1)
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	var sid int
	var u string
	if err := st.QueryRowContext(ctx).Scan(&sid, &u); err != nil || sid != 2 || u != "parked" {
		t.Fatalf("parked session after the reparent: server_id %d, @u %q, %v; want 2, parked", sid, u, err)
	}
}
