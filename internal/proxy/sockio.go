package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// sockIO reads and writes a TCP socket for the relay: as net.Conn does
// (the poller waits for readiness, deadlines and Close apply, errors are
// the same *net.OpError), but each read(2) and write(2) is a raw system
// call that keeps the goroutine's processor. The sockets are non-blocking,
// so these calls never wait; through net.Conn each one would be announced
// to the scheduler, which gives the processor of a call that took longer
// than its 20 µs tick (a loaded machine, a write that wakes the peer) to
// another thread and makes the caller wait for it back afterwards: two
// context switches and a futex wake, per call, that relay nothing.
type sockIO struct {
	c  net.Conn
	rc syscall.RawConn

	rbuf   []byte // the read in progress (only the session reads)
	rn     int
	rerr   error
	readFn func(uintptr) bool

	wmu     sync.Mutex // writes may come from other goroutines (fd's lock is taken after wbuf is set)
	wbuf    []byte
	wn      int
	werr    error
	writeFn func(uintptr) bool

	// A write deferred to the next Read (deferNext): pend is written by
	// the read's first callback, under wmu, so that the poller's readiness
	// is reset before the write and the wait for the answer needs no read
	// that finds nothing yet (readAfterWrite).
	deferNext bool
	pend      []byte
	pendFn    func(uintptr) bool
	pendDone  bool // pend was written in full (the callback now reads)
}

// newSockIO returns a sockIO for c, or nil when c is not a socket.
func newSockIO(c net.Conn) *sockIO {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	x := &sockIO{c: c, rc: rc}
	x.readFn, x.writeFn, x.pendFn = x.read, x.write, x.readAfterWrite
	return x
}

// deferNextWrite makes the next Write's bytes wait for the next Read,
// which writes them and then waits for the answer (only the goroutine that
// reads calls it). A command written just before its response is read
// costs one system call less: net.Conn's Read, and Read without a
// deferred write, read once before waiting, and that read finds nothing
// yet. A Write before that Read writes them first; Close drops them. A
// failed write of them is returned by that Read (or Write) as a
// *mysqlproto.WriteError: the server did not receive all of them. Only
// for a command that has a response.
func (x *sockIO) deferNextWrite() {
	x.wmu.Lock()
	x.deferNext = true
	x.wmu.Unlock()
}

// flushPend writes the deferred bytes, if any (wmu held).
func (x *sockIO) flushPend() error {
	if len(x.pend) == 0 {
		return nil
	}
	x.wbuf, x.wn, x.werr = x.pend, 0, nil
	err := x.writeErr(x.rc.Write(x.writeFn))
	x.wbuf, x.pend = nil, x.pend[:0]
	return err
}

// writeErr is the *mysqlproto.WriteError of the write of x.wbuf that ended
// with the poller's error pollErr, or nil when it succeeded.
func (x *sockIO) writeErr(pollErr error) error {
	switch {
	case pollErr != nil:
		return &mysqlproto.WriteError{Err: x.opError("write", pollErr)}
	case x.werr != nil:
		return &mysqlproto.WriteError{Err: x.werr}
	}
	return nil
}

// Read implements io.Reader as net.Conn's Read.
func (x *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	x.rbuf, x.rn, x.rerr = p, 0, nil
	x.wmu.Lock()
	if len(x.pend) > 0 {
		defer x.wmu.Unlock()
		return x.readPend()
	}
	x.wmu.Unlock()
	err := x.rc.Read(x.readFn)
	x.rbuf = nil
	if err != nil {
		return 0, x.opError("read", err)
	}
	return x.rn, x.rerr
}

func (x *sockIO) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&x.rbuf[0])), uintptr(len(x.rbuf)))
		switch e {
		case 0:
			x.rn = int(n)
			if n == 0 {
				x.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			x.rerr = x.opError("read", os.NewSyscallError("read", e))
			return true
		}
	}
}

// readPend writes the deferred bytes and reads the answer in one poller
// call (wmu held, x.rbuf set): the poller's readiness is reset before the
// write, so waiting right after it misses no answer. A write that would
// block is finished by Write's path, then the read is a plain one.
func (x *sockIO) readPend() (int, error) {
	defer func() { x.wbuf, x.pend, x.rbuf = nil, x.pend[:0], nil }()
	x.wbuf, x.wn, x.werr, x.pendDone = x.pend, 0, nil, false
	err := x.rc.Read(x.pendFn)
	if !x.pendDone {
		// The write failed, would block, or the poller failed first.
		if err == nil && x.werr == nil {
			err = x.rc.Write(x.writeFn) // it would block: finish it as Write does
		}
		if werr := x.writeErr(err); werr != nil {
			return 0, werr
		}
		err = x.rc.Read(x.readFn)
	}
	if err != nil {
		return 0, x.opError("read", err)
	}
	return x.rn, x.rerr
}

// readAfterWrite is readPend's callback: the first call writes x.wbuf
// and asks the poller to wait (when the write fails or would block, it
// stops and readPend handles it); later calls read.
func (x *sockIO) readAfterWrite(fd uintptr) bool {
	if !x.pendDone {
		if !x.write(fd) || x.werr != nil {
			return true
		}
		x.pendDone = true
		return false // wait for the answer
	}
	return x.read(fd)
}

// Write implements io.Writer as net.Conn's Write: all of p, or an error.
// After deferNextWrite it only keeps p for the next Read.
func (x *sockIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if x.deferNext {
		x.deferNext = false
		x.pend = append(x.pend, p...)
		return len(p), nil
	}
	if err := x.flushPend(); err != nil {
		return 0, err
	}
	x.wbuf, x.wn, x.werr = p, 0, nil
	err := x.rc.Write(x.writeFn)
	n := x.wn
	x.wbuf = nil
	if err != nil {
		return n, x.opError("write", err)
	}
	return n, x.werr
}

func (x *sockIO) write(fd uintptr) bool {
	for x.wn < len(x.wbuf) {
		rest := x.wbuf[x.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			x.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			x.werr = x.opError("write", os.NewSyscallError("write", e))
			return true
		}
	}
	return true
}

// opError wraps err as net.Conn's Read and Write do; the poller's errors
// (a deadline, a closed connection) come wrapped by RawConn already.
func (x *sockIO) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op = op
		return oe
	}
	return &net.OpError{Op: op, Net: "tcp", Source: x.c.LocalAddr(), Addr: x.c.RemoteAddr(), Err: err}
}
