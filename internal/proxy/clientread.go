package proxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// clientIn is a client read buffer: a bufio.Reader of clientReadBuf bytes
// over clientSrc. A session holds one only while it reads the connection
// phase or a command (and while bytes it has not consumed are buffered:
// pipelined commands); an idle session holds none and waits for its next
// command in the poller (awaitCommand). Pooled in Server.clientIns.
type clientIn struct {
	r   *bufio.Reader // reads from &src
	src clientSrc
}

// clientSrc is what clientIn.r reads: first the bytes read while the
// session waited for a command (pre[off:n]), then err if that read failed,
// then the connection.
type clientSrc struct {
	c      net.Conn
	pre    []byte // clientReadBuf bytes
	off, n int
	err    error
}

func (c *clientSrc) Read(p []byte) (int, error) {
	if c.off < c.n {
		k := copy(p, c.pre[c.off:c.n])
		c.off += k
		return k, nil
	}
	if c.err != nil {
		err := c.err
		c.err = nil
		return 0, err
	}
	return c.c.Read(p)
}

func newClientIn() any {
	in := &clientIn{src: clientSrc{pre: make([]byte, clientReadBuf)}}
	in.r = bufio.NewReaderSize(&in.src, clientReadBuf)
	return in
}

// takeReader gives the session a client reader with nothing buffered (the
// connection phase reads through it).
func (s *session) takeReader() {
	if s.cin != nil {
		return
	}
	s.bindReader(s.srv.clientIns.Get().(*clientIn))
}

func (s *session) bindReader(in *clientIn) {
	in.src.c = s.client
	s.cin, s.cr = in, in.r
	s.readerHeld.Store(true)
	if s.z != nil {
		s.z.d.Reset(&in.src)
		in.r.Reset(&s.z.d)
	}
}

// dropReader returns the session's client reader to the pool. Only called
// when it holds no unread byte.
func (s *session) dropReader() {
	in := s.cin
	if in == nil {
		return
	}
	s.cin, s.cr = nil, nil
	s.readerHeld.Store(false)
	in.r.Reset(&in.src)
	in.src = clientSrc{pre: in.src.pre}
	s.srv.clientIns.Put(in)
}

// awaitCommand makes sure s.cr holds the start of the next client command
// or will return the connection's error. Bytes already buffered (a
// pipelined command) are kept; otherwise the reader goes back to the pool
// and the session waits in the poller with no buffer, taking one only when
// the socket is readable and reading into it with the same one read(2) a
// net.Conn would make. Errors surface through s.cr as they would from the
// connection (io.EOF, a *net.OpError).
//
// It returns true when the session parked instead (idlepark.go): the
// caller's goroutine must return and leave the session open.
func (s *session) awaitCommand() bool {
	if s.txPool {
		s.noteIdleStart()
	}
	if s.raw == nil || s.tls {
		s.takeReader() // not a socket, or TLS (tls.go): keep one reader for the session
		s.waitStart = time.Now()
		if s.txPool && s.cr.Buffered() == 0 {
			s.tlsIdleDeadline()
		}
		return false
	}
	if in := s.cin; in != nil {
		if in.r.Buffered() > 0 || in.src.off < in.src.n || in.src.err != nil || (s.z != nil && s.z.d.Buffered() > 0) {
			return false
		}
		s.dropReader()
	}
	parked, err := s.waitIdle()
	if parked {
		return true
	}
	if err != nil {
		// Closed (shutdown), or a deadline: the reader reports it.
		if s.cin == nil {
			s.bindReader(s.srv.clientIns.Get().(*clientIn))
		}
		s.cin.src.err = err
	}
	return false
}

// readIdle is the syscall.RawConn read callback of awaitCommand (bound
// once as s.readFn, so waiting allocates nothing): it reads
// what the socket has into a pooled buffer, or returns false (the buffer
// back in the pool) to wait for readability.
func (s *session) readIdle(fd uintptr) bool {
	in := s.srv.clientIns.Get().(*clientIn)
	for {
		// A raw call, as sockIO's: the socket is non-blocking.
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&in.src.pre[0])), uintptr(len(in.src.pre)))
		n := int(r)
		var err error
		if e != 0 {
			n, err = -1, e
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			s.srv.clientIns.Put(in)
			return false
		case err != nil:
			n = 0
			in.src.err = &net.OpError{Op: "read", Net: "tcp", Source: s.client.LocalAddr(), Addr: s.client.RemoteAddr(),
				Err: os.NewSyscallError("read", err)}
		case n == 0:
			in.src.err = io.EOF
		}
		in.src.off, in.src.n = 0, n
		if n > 0 {
			s.arrived.Store(true) // a command on its way (killflight.go)
		}
		s.bindReader(in)
		return true
	}
}
