package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
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
	x.readFn, x.writeFn = x.read, x.write
	return x
}

// Read implements io.Reader as net.Conn's Read.
func (x *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	x.rbuf, x.rn, x.rerr = p, 0, nil
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

// Write implements io.Writer as net.Conn's Write: all of p, or an error.
func (x *sockIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
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
