package proxy

import (
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Backend socket liveness. A backend whose packets are dropped (a
// blackholed network path, a dead host) never answers and never refuses:
// without a bound a command in flight on it waits for the kernel's
// retransmission timeout (about 15 minutes on Linux). Every backend
// connection therefore gets
//
//   - TCP keepalive with idle time and probe interval = max(probe.interval,
//     1s) (the kernel counts in whole seconds), so an idle or waiting
//     connection (a long statement running) sends probes;
//   - TCP_USER_TIMEOUT (tcp(7)) = proxy.connect_timeout + probe.interval:
//     the kernel aborts the connection when data it sent (a command, a
//     keepalive probe) stays unacknowledged that long.
//
// With the defaults (1 s, 1 s) a command in flight on a blackholed backend
// fails within about 2-3 s (user timeout, plus up to one keepalive
// interval for the next probe to be sent), i.e. within connect_timeout + 2
// probe intervals. A busy or frozen (SIGSTOP) server is not affected: its
// kernel acknowledges both data and probes.

// backendTCP is the liveness settings of backend sockets.
type backendTCP struct {
	keepAlive   time.Duration // TCP_KEEPIDLE and TCP_KEEPINTVL
	userTimeout time.Duration // TCP_USER_TIMEOUT
}

func newBackendTCP(connectTimeout, probeInterval time.Duration) backendTCP {
	ka := max(probeInterval, time.Second).Round(time.Second)
	return backendTCP{keepAlive: ka, userTimeout: connectTimeout + max(probeInterval, 100*time.Millisecond)}
}

// dialer returns the dialer for backend connections.
func (b backendTCP) dialer(timeout time.Duration) *net.Dialer {
	count := int(b.userTimeout/b.keepAlive) + 2 // TCP_USER_TIMEOUT decides first
	return &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: b.keepAlive, Interval: b.keepAlive, Count: count,
		},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(b.userTimeout.Milliseconds()))
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}

// connectRetryAfter is how long a backend connect waits for the server's
// SYN-ACK before it gives that socket up and sends a new SYN on a new one.
const connectRetryAfter = 250 * time.Millisecond

// connectAttempts is the number of connects one dialBackend makes at most.
const connectAttempts = 3

// dialBackend opens a TCP connection to addr within timeout, with the
// liveness settings of b. A server whose listen queue is full (MariaDB
// back_log, the kernel's somaxconn) drops the SYN without an answer, and
// Linux resends it only after its initial RTO of 1 s (RFC 6298) — with the
// default proxy.connect_timeout of 1 s one dropped SYN would be a client
// error. So a connect that has no answer after connectRetryAfter is given
// up and made again on a new socket, up to connectAttempts times; the last
// attempt has what is left of timeout (500 ms of the default 1 s). The
// attempts follow each other instead of racing (as happy eyeballs, RFC 8305,
// races addresses): two attempts that both got through a busy server's
// queue would cost it a connection slot each (measured: error 1040 from
// the server under a 5,000-client storm), while a socket closed before its
// SYN-ACK costs it nothing. A path whose round trip exceeds
// connectRetryAfter therefore connects only on the last attempt. An attempt
// that fails with anything but a timeout (ECONNREFUSED: nothing listens,
// the server is down; EMFILE; unreachable) ends the dial at once with that
// error. Past timeout the error is a net.Error whose Timeout() is true.
func (b backendTCP) dialBackend(timeout time.Duration, addr string) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	for i := 1; ; i++ {
		window := time.Until(deadline)
		if i < connectAttempts && window > 2*connectRetryAfter {
			window = connectRetryAfter
		}
		c, err := b.dialer(window).Dial("tcp", addr)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() || i == connectAttempts || time.Until(deadline) <= 0 {
			return c, err
		}
	}
}

// peerClosed reports whether the server closed conn (or sent something
// while the connection was idle, which it does only when it kills it, e.g.
// the fence of a switchover that was then rolled back). It peeks without
// blocking; connections it cannot inspect count as open.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
		case err != nil || n >= 0:
			closed = true // EOF (n 0), pending data or a socket error
		}
		return true // never wait for readiness
	})
	return closed
}

// sinceLastAck is how long ago the kernel last received an acknowledgement
// (any segment acknowledging data, a keepalive answer) on conn, from
// TCP_INFO's tcpi_last_ack_recv; ok is false when conn cannot be inspected.
func sinceLastAck(conn net.Conn) (d time.Duration, ok bool) {
	sc, isSC := conn.(syscall.Conn)
	if !isSC {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, false
	}
	return time.Duration(info.Last_ack_recv) * time.Millisecond, true
}

// connFD returns conn's socket descriptor, or -1. The descriptor is used
// only while the connection is open and owned by its session.
func connFD(conn net.Conn) int {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1
	}
	return fd
}
