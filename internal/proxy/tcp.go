package proxy

import (
	"context"
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
// SYN-ACK before it sends a second SYN on a new socket (and a third after
// as long again, ...), all racing within proxy.connect_timeout.
const connectRetryAfter = 250 * time.Millisecond

// maxConnectAttempts bounds the racing connects of one dialBackend.
const maxConnectAttempts = 4

// dialBackend opens a TCP connection to addr within timeout, with the
// liveness settings of b. A server whose listen queue is full (MariaDB
// back_log, the kernel's somaxconn) drops the SYN without an answer, and
// Linux retransmits it only after its initial RTO of 1 s (RFC 6298) — with
// the default proxy.connect_timeout of 1 s one dropped SYN would be a
// client error. So, like happy eyeballs (RFC 8305) racing addresses, a
// connect that has no answer after connectRetryAfter is raced by a new
// one, and so on every connectRetryAfter up to maxConnectAttempts; earlier
// attempts keep waiting (a slow path still connects), the first to
// connect wins and the others are closed. An attempt that fails with
// anything but a timeout (ECONNREFUSED: nothing listens, the server is
// down; EMFILE; unreachable) ends the dial at once with that error. Past
// timeout the error is a net.Error whose Timeout() is true.
func (b backendTCP) dialBackend(timeout time.Duration, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := b.dialer(0)
	type result struct {
		conn net.Conn
		err  error
	}
	results := make(chan result, maxConnectAttempts)
	attempt := func() {
		c, err := d.DialContext(ctx, "tcp", addr)
		results <- result{c, err}
	}
	go attempt()
	inflight, started := 1, 1
	retry := time.NewTimer(connectRetryAfter)
	defer retry.Stop()
	// Attempts still running when the dial returns are cancelled; close
	// any of them that connected anyway.
	abandon := func(n int) {
		go func() {
			for range n {
				if r := <-results; r.conn != nil {
					_ = r.conn.Close()
				}
			}
		}()
	}
	for {
		select {
		case r := <-results:
			inflight--
			var ne net.Error
			switch {
			case r.err == nil:
				abandon(inflight)
				return r.conn, nil
			case !(errors.As(r.err, &ne) && ne.Timeout()) || inflight == 0:
				abandon(inflight)
				return nil, r.err
			}
		case <-retry.C:
			if started < maxConnectAttempts && ctx.Err() == nil {
				go attempt()
				inflight++
				started++
				retry.Reset(connectRetryAfter)
			}
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
