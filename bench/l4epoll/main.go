// Command l4epoll is HAProxy's threading model written in Go, as a reference
// for bench/proxy.sh ("go-epoll"): N event loops, each on an OS thread of
// its own (runtime.LockOSThread) with its own epoll set; a client
// connection and its backend connection belong to one loop; an event is
// handled in place — read(2) into a 64 KiB buffer, write(2) to the peer —
// with no goroutine woken, no channel and no Go netpoller. It relays bytes
// and nothing of the protocol: what a Go relay built like HAProxy costs per
// query, against HAProxy (C) and bench/l4relay (goroutines and the
// netpoller) measured in the same run.
//
// A write that would block waits for the peer's socket with poll(2) on the
// loop's thread (up to 1 s): enough for the benchmark's small packets, not a
// production design.
//
// Usage: l4epoll [-loops N] LISTEN_ADDR BACKEND_ADDR   (N: default the CPU count)
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// maxFD bounds the descriptors a loop tracks (the machine's hard limit is
// below it).
const maxFD = 1 << 16

// loop is one event loop: its epoll set and, by descriptor, the peer each
// relays to (peer fd + 1; 0: none).
type loop struct {
	ep   int
	peer [maxFD]atomic.Int32
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

func (l *loop) run() {
	runtime.LockOSThread()
	evs := make([]syscall.EpollEvent, 128)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(l.ep, evs, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			fmt.Fprintln(os.Stderr, "l4epoll: epoll_wait:", err)
			os.Exit(1)
		}
		for i := range n {
			fd := int(evs[i].Fd)
			p := int(l.peer[fd].Load()) - 1
			if p < 0 {
				continue
			}
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			if e == syscall.EAGAIN || e == syscall.EINTR {
				continue
			}
			if e != 0 || r == 0 || !writeAll(p, buf[:r]) {
				l.closePair(fd, p)
			}
		}
	}
}

// writeAll writes b to fd, waiting with poll(2) while the socket is full;
// false when the peer is gone.
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		w, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			b = b[w:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			pfd := pollFd{fd: int32(fd), events: 0x4} // POLLOUT
			syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&pfd)), 1, 1000)
		default:
			return false
		}
	}
	return true
}

func (l *loop) closePair(a, b int) {
	l.peer[a].Store(0)
	l.peer[b].Store(0)
	syscall.Close(a)
	syscall.Close(b)
}

// rawFD takes c's descriptor over (non-blocking, no longer the netpoller's).
func rawFD(c net.Conn) (int, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = syscall.Dup(int(s)) }); err != nil {
		return -1, err
	}
	c.Close()
	if derr != nil {
		return -1, derr
	}
	if fd >= maxFD {
		syscall.Close(fd)
		return -1, fmt.Errorf("descriptor %d past %d", fd, maxFD)
	}
	return fd, syscall.SetNonblock(fd, true)
}

func main() {
	loops := flag.Int("loops", runtime.NumCPU(), "event loops (OS threads)")
	flag.Parse()
	if flag.NArg() != 2 || *loops < 1 {
		fmt.Fprintln(os.Stderr, "usage: l4epoll [-loops N] LISTEN_ADDR BACKEND_ADDR")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "l4epoll:", err)
		os.Exit(1)
	}
	ls := make([]*loop, *loops)
	for i := range ls {
		ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			fmt.Fprintln(os.Stderr, "l4epoll: epoll_create:", err)
			os.Exit(1)
		}
		ls[i] = &loop{ep: ep}
		go ls[i].run()
	}
	for next := 0; ; next++ {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "l4epoll:", err)
			os.Exit(1)
		}
		b, err := net.Dial("tcp", flag.Arg(1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "l4epoll: backend:", err)
			c.Close()
			continue
		}
		cf, err1 := rawFD(c)
		bf, err2 := rawFD(b)
		if err1 != nil || err2 != nil {
			fmt.Fprintln(os.Stderr, "l4epoll:", err1, err2)
			if cf >= 0 {
				syscall.Close(cf)
			}
			if bf >= 0 {
				syscall.Close(bf)
			}
			continue
		}
		l := ls[next%len(ls)]
		l.peer[cf].Store(int32(bf + 1))
		l.peer[bf].Store(int32(cf + 1))
		for _, fd := range []int{cf, bf} {
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}
			if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
				fmt.Fprintln(os.Stderr, "l4epoll: epoll_ctl:", err)
				l.closePair(cf, bf)
				break
			}
		}
	}
}
