package proxy

import (
	"bufio"
	"io"
	"net"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Server-side closes of idle sessions. A server closes a connection that
// stayed idle longer than its wait_timeout (interactive_timeout for
// CLIENT_INTERACTIVE clients), or whose thread another session KILLed.
// MariaDB 10.11 closes the socket without a packet; MySQL 8.0.24+ first sends
// ER_CLIENT_INTERACTION_TIMEOUT (4031) and MariaDB sends ER_CONNECTION_KILLED
// (1927) to a thread killed while it runs. A client connected directly sees
// the closed socket: go-sql-driver's check before reusing a pooled
// connection finds it and opens another one without an error, the C client
// reports 2006/2013 at its next statement.
//
// With session pooling the session's backend connection is the client's
// own, so the proxy does the same: while a session waits for a command its
// backend socket is watched (parked sessions: in the parker's epoll set;
// sessions idle for less than a sweep: by the sweeper, idlepark.go), and
// when the server closed it while the node is still the session's route
// and alive (a new connection to it gets the server's greeting, the
// proxy's own check finds it reachable, no switchover hold or route change
// is in progress), the
// server's packet, if it sent one, is passed on and the client's socket is
// closed. Anything else — the node crashed, refused, shut down (1053), left
// the route — is a primary loss or a role change, handled at the session's
// next command as before (failoverhold.go, migrate.go).
//
// With transaction pooling an idle client holds no backend connection: a
// pooled connection closed by its server is dropped by the pool and never
// closes a client; the proxy enforces the client's wait_timeout itself
// (idletimeout.go). A session pinned to its connection (a transaction,
// GET_LOCK, ...) holds it while idle, and its server's close is passed on
// as with session pooling.

// closeBackendIdle is the close reason of a session whose backend closed
// its idle connection (wait_timeout, KILL) while the node stayed healthy.
const closeBackendIdle = "backend_idle_closed"

// watchBackend reports whether the idle session's backend socket is to be
// watched for a server-side close (called with s.mu held, or by the
// session's goroutine).
func (s *session) watchBackend() bool {
	be := s.be
	return be != nil && be.fd >= 0 && be != s.hupBe && !be.closed.Load()
}

// fdPeerClosed reports whether the socket fd has been closed (or reset) by
// its peer, or has unasked data (an error packet before a close), without
// consuming anything; buf is one byte of scratch owned by the caller.
func fdPeerClosed(fd int, buf *[1]byte) bool {
	// recvfrom(2) without an address buffer (unix.Recvfrom allocates one),
	// as a raw system call: with MSG_DONTWAIT it never blocks, so the
	// scheduler need not hear of it (sockio.go).
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return errno != unix.EAGAIN && errno != unix.EINTR
}

// afterIdle runs when a parked session resumes: when its backend closed
// the connection while the session was idle, and that is the server's
// idle timeout or a KILL (idleCloseOnly), it passes the server's error
// packet on and returns closeBackendIdle; otherwise "" (the session goes
// on, and its next command finds the connection closed).
func (s *session) afterIdle() string {
	// A KILL through the proxy (kill.go) ends the session its own way.
	if !s.watchBackend() || s.killed.Load() || !s.peerGone(s.be) {
		return ""
	}
	be := s.be
	s.mu.Lock() // the sweeper reads it (watchBackend)
	s.hupBe = be
	s.mu.Unlock()
	pkt, seq := s.readParting(be)
	var code uint16
	if len(pkt) > 0 && pkt[0] == mysql.ERR_HEADER {
		code = mysqlproto.ParseERR(pkt).Code
	}
	if why := s.idleCloseOnly(be, code); why != "" {
		if s.replaysIdle(why) {
			return s.replayIdleTx(be.t.node, why)
		}
		s.log.Info("backend connection closed by the server while the session was idle; the next command finds it lost",
			"node", be.t.node, "error", code, "because", why)
		return ""
	}
	if len(pkt) > 0 && pkt[0] == mysql.ERR_HEADER {
		_ = s.writeDirect(seq, pkt)
	} else {
		// Closed without a packet (MariaDB's wait_timeout): reset, as the
		// server reset the backend socket.
		s.resetOnClose()
	}
	s.log.Info("backend closed the connection (idle timeout)", "node", be.t.node, "error", code)
	return closeBackendIdle
}

// readParting reads the packet a server sent before closing the
// connection (nil if none), with its sequence id.
func (s *session) readParting(be *backend) ([]byte, byte) {
	_ = be.conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	defer be.conn.SetReadDeadline(time.Time{})
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(be.reader())
	defer func() { br.Reset(nil); s.srv.readers.Put(br) }()
	p, seq, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	if err != nil {
		return nil, 0
	}
	return append([]byte(nil), p...), seq
}

// idleCloseOnly reports whether a close of be's connection (with the
// error code the server sent, 0 if none) was the server ending one idle
// connection, not the node going away or a route change: "" when it was,
// else what says otherwise (for the log).
func (s *session) idleCloseOnly(be *backend, code uint16) string {
	if code == mysql.ER_SERVER_SHUTDOWN {
		return "server shutdown"
	}
	snap := s.l.route.snap.Load()
	switch {
	case snap == nil || s.snap == nil:
		// s.snap nil: the session's next command checks the route.
		return "route changed"
	case snap.hold != nil:
		return "switchover hold"
	case s.detached:
		return "detached"
	case !snap.valid(s.l.role, s.srv.rc.Load().fallback(s.l.cluster), be):
		return "node left the route"
	case !s.srv.reachable(be.t):
		return "node unreachable"
	}
	if why := serverGreets(be.t.addr, s.srv.rc.Load().connectTimeout); why != "" {
		return why
	}
	return ""
}

// serverGreets reports whether the server at addr is alive: "" once a new
// connection to it receives a packet (its greeting, or an error packet
// such as 1040 too many connections: a server that answers), else why not.
// A TCP connect alone does not tell: a server killed with SIGKILL resets
// its client connections while the kernel may still complete connects to
// its listening socket, so a crash would pass for an idle timeout; after
// SIGKILL no thread of it writes a greeting.
func serverGreets(addr string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "node refuses connections"
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	var hdr [5]byte // packet header and the first payload byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return "node accepts connections but does not greet them (" + err.Error() + ")"
	}
	return ""
}

// replaysIdle reports whether the idle session whose primary connection
// closed (why: idleCloseOnly's answer) replays its transaction now rather
// than at its client's next command: transaction replay is on, it is in a
// recorded transaction on a primary listener, its state can move, and the
// close is the primary going away — not a switchover, whose drain and
// fence decide for open transactions — and no KILL through the proxy
// ends the session (kill.go).
func (s *session) replaysIdle(why string) bool {
	r := s.rlog
	return r != nil && s.l.role == rolePrimary && (s.inTx() || r.active()) && s.txEnded == nil && !s.killed.Load() &&
		why != "switchover hold" && why != "detached" && s.movesOutsideTx()
}

// movesOutsideTx reports whether the session's state could move to
// another connection once its transaction (and LOCK TABLES, which the
// loss of the connection ends too) is dropped: what replayTx checks after
// dropLost, so that an idle session that could not be replayed is left
// for its next command, which gets the error saying why.
func (s *session) movesOutsideTx() bool {
	status, locked := s.status, s.st.locked
	s.status &^= mysql.SERVER_STATUS_IN_TRANS
	s.st.locked = false
	why := s.unmigratable()
	s.status, s.st.locked = status, locked
	return why == ""
}

// replayIdleTx replays, on the primary the controller names (waiting for
// the failover, bounded by failover.max_hold), the transaction of an idle
// session whose primary went away (lost), without waiting for the
// client's next command: statements outside transactions released on the
// new primary after the failover wait for it (replay_snap.go), and a
// client that thinks for a while before its next statement would
// otherwise replay after they ran — reading rows they changed, or
// forcing auto-increment ids (the ones its client was told) that the new
// primary has meanwhile given to their INSERTs. A replay that fails
// leaves its rolled-back error for the next command (txEnded). It
// returns a close reason or "".
func (s *session) replayIdleTx(lost, why string) string {
	s.log.Info("primary connection closed while the session was idle in a transaction; replaying it now",
		"node", lost, "because", why)
	s.replayIdle = true
	defer func() { s.replayIdle = false }()
	cause := "the connection to it closed while the session was idle (" + why + ")"
	handled, _, reason := s.replayOnLoss(comNone, false, false, lost, cause)
	if !handled {
		return ""
	}
	return reason
}

// comNone stands for "no command" in replayIdleTx: COM_SLEEP, which
// clients never send (the server answers it with an error).
const comNone = mysql.COM_SLEEP

// replayIdleNow is replayIdleTx for a session nudged by a route change
// (nudgeReplay): when its primary connection is gone and it is in a
// recorded transaction, the transaction is replayed now. The session was
// marked detached by the sweep; after the replay it is on its new
// backend, and not detached.
func (s *session) replayIdleNow() string {
	be := s.be
	if be == nil || !be.closed.Load() || !s.replaysIdle("route changed") {
		return ""
	}
	reason := s.replayIdleTx(be.t.node, "its node left the route")
	if reason == "" && s.be != nil && !s.be.closed.Load() {
		s.busy.Store(s.txBits())
	}
	return reason
}
