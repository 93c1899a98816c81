package proxy

import (
	"errors"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Idle parking. A session's goroutine keeps a stack of at least 4 KB while
// it waits for a command (the runtime does not shrink a stack below four
// times what it uses, plus its no-split reserve). A session that stayed idle
// for idleParkAfter to twice that gives its goroutine up: its client socket
// is registered (one-shot) in the server's epoll set and the goroutine
// returns; when the socket becomes readable (a command, the client's FIN or
// a reset) a new goroutine resumes the session where it stopped. A session
// that sends a command at least every idleParkAfter is never parked, so
// busy sessions pay only two atomic operations per command for it.
//
// The session states (session.idle): idleBusy while it runs or reads a
// command; idleWaiting once it waits for the next one; idleSeen when the
// parker found it waiting at one sweep; idleArmed when it found it still
// waiting at the next sweep and set a read deadline in the past on its
// socket (under session.mu), which returns the wait with a timeout and
// makes the session park itself.
const (
	idleBusy uint32 = iota
	idleWaiting
	idleSeen
	idleArmed
)

// idleParkAfter is the sweep period of the parker: a session idle for
// between one and two periods is parked.
const idleParkAfter = time.Second

// sessionParked is the loop's result for a session that parked: its goroutine
// returns without closing it.
const sessionParked = "parked"

// idleParker is the server's epoll set of parked sessions and the
// goroutine that sweeps for idle sessions and resumes parked ones.
type idleParker struct {
	mu     sync.Mutex
	epfd   int                 // 0 before Start, -1 after the parker stopped: nothing parks
	parked map[uint32]*session // by connection id (the epoll event's data)
	// parks counts sessions parked since the last release of memory to
	// the system (releaseAfterStorm), at released.
	parks    int
	released time.Time
	peek     [1]byte // recvfrom scratch of the sweep (fdPeerClosed)
}

// Memory release after a storm: once at least stormParks sessions parked
// since the last release, and at most every stormRelease, the parker has
// the runtime return the memory the storm's logins used and left free
// (debug.FreeOSMemory: a garbage collection, then the free pages back to
// the system). Without it a process whose sessions went idle allocates
// nothing more, no collection runs for up to two minutes, and its resident
// size stays at the storm's peak.
const (
	stormParks   = 1000
	stormRelease = 10 * time.Second
)

func (s *Server) releaseAfterStorm() {
	p := &s.parker
	p.mu.Lock()
	due := p.parks >= stormParks && time.Since(p.released) >= stormRelease
	if due {
		p.parks, p.released = 0, time.Now()
	}
	p.mu.Unlock()
	if due {
		s.goBackground(debug.FreeOSMemory)
	}
}

// startParker opens the epoll set and runs the parker until Close (Start
// calls it with s.mu held). Without epoll sessions simply never park.
func (s *Server) startParker() {
	p := &s.parker
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		s.log.Warn("idle sessions keep their goroutine: epoll_create1 failed", "err", os.NewSyscallError("epoll_create1", err))
		return
	}
	p.mu.Lock()
	p.epfd, p.parked = fd, make(map[uint32]*session)
	p.mu.Unlock()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.runParker()
	}()
}

func (s *Server) runParker() {
	p := &s.parker
	defer func() {
		p.mu.Lock()
		_ = unix.Close(p.epfd)
		p.epfd = -1
		p.mu.Unlock()
	}()
	events := make([]unix.EpollEvent, 256)
	last := time.Now()
	for {
		select {
		case <-s.closing:
			return
		default:
		}
		n, err := unix.EpollWait(p.epfd, events, int(idleParkAfter/time.Millisecond)/2)
		if err != nil && !errors.Is(err, unix.EINTR) {
			s.log.Error("idle sessions keep their goroutine from now on: epoll_wait failed", "err", os.NewSyscallError("epoll_wait", err))
			return
		}
		for _, ev := range events[:max(n, 0)] {
			p.resume(uint32(ev.Fd))
		}
		if time.Since(last) >= idleParkAfter {
			last = time.Now()
			s.sweepIdle()
			s.releaseAfterStorm()
		}
	}
}

// sweepIdle advances every waiting session one state (idleWaiting →
// idleSeen → idleArmed, arming the wait's deadline).
func (s *Server) sweepIdle() {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		if sess.raw != nil && sess.idle.Load() >= idleWaiting {
			sessions = append(sessions, sess)
		}
	}
	s.mu.Unlock()
	past := time.Unix(1, 0)
	now := time.Now().UnixNano()
	for _, sess := range sessions {
		sess.mu.Lock()
		hup := !sess.closed && sess.watchBackend() && fdPeerClosed(sess.be.fd, &s.parker.peek)
		sess.mu.Unlock()
		if hup || (sess.txPool && sess.idleOver(now)) {
			// The server closed the backend connection (idleclose.go):
			// park now, the backend's registration wakes the session.
			// Or the session is idle past its wait_timeout
			// (idletimeout.go): its wait returns and it closes.
			sess.idle.CompareAndSwap(idleWaiting, idleSeen)
		} else if sess.idle.CompareAndSwap(idleWaiting, idleSeen) {
			continue
		}
		sess.mu.Lock()
		if !sess.closed && sess.idle.CompareAndSwap(idleSeen, idleArmed) {
			_ = sess.client.SetReadDeadline(past)
		}
		sess.mu.Unlock()
	}
	s.parker.expireIdle(now)
}

// expireIdle resumes, to close, the parked sessions idle past their
// wait_timeout at now (idletimeout.go).
func (p *idleParker) expireIdle(now int64) {
	var over []uint32
	p.mu.Lock()
	for id, s := range p.parked {
		if s.txPool && s.idleOver(now) {
			over = append(over, id)
		}
	}
	p.mu.Unlock()
	for _, id := range over {
		p.wake(id, true)
	}
}

// park registers s's client socket and hands the session to the parker.
// It returns false (the caller keeps waiting in its goroutine) when the
// session is closing or epoll refused the socket.
func (p *idleParker) park(s *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.shut {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epfd <= 0 || s.replayNow.Load() {
		return false // replayNow: checked under p.mu, as nudgeReplay does
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(s.id)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		return false
	}
	if s.watchBackend() {
		// A duplicate, so that a close of the backend connection by
		// another goroutine (the sweeper) cannot leave a registration
		// under a descriptor number the system hands out again.
		if dfd, err := unix.Dup(s.be.fd); err == nil {
			bev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(s.id)}
			if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, dfd, &bev) == nil {
				s.parkFd = dfd
			} else {
				_ = unix.Close(dfd)
			}
		}
	}
	p.parked[s.id] = s
	p.parks++
	return true
}

// resume starts a goroutine for parked session id (a no-op when it is not
// parked: woken already).
func (p *idleParker) resume(id uint32) { p.wake(id, false) }

// wake resumes parked session id; with expire, only when it is still idle
// past its wait_timeout, and to close (idletimeout.go).
func (p *idleParker) wake(id uint32, expire bool) {
	p.mu.Lock()
	s := p.parked[id]
	if s == nil || (expire && !s.idleOver(time.Now().UnixNano())) {
		p.mu.Unlock()
		return
	}
	s.idleExpired = expire
	delete(p.parked, id)
	if p.epfd > 0 {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, s.fd, nil) // EBADF when shutdown closed it: closing removed it
	}
	if s.parkFd >= 0 {
		_ = unix.Close(s.parkFd) // removes it from the epoll set
		s.parkFd = -1
	}
	p.mu.Unlock()
	go s.run(false)
}

// waitIdle waits in the poller until the client socket is readable
// (readIdle has then bound a reader holding what it read). It returns true
// when the session parked instead: its goroutine must return.
func (s *session) waitIdle() (bool, error) {
	for {
		s.idle.Store(idleWaiting)
		err := s.raw.Read(s.readFn)
		if s.idle.Swap(idleBusy) != idleArmed {
			return false, err
		}
		s.mu.Lock()
		_ = s.client.SetReadDeadline(time.Time{})
		s.mu.Unlock()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || s.cin != nil {
			return false, err
		}
		if s.txPool && s.idleOver(time.Now().UnixNano()) {
			s.idleExpired = true // the caller closes the session (idletimeout.go)
			return false, nil
		}
		if s.replayNow.Load() {
			return false, nil // the caller replays (nudgeReplay)
		}
		if s.srv.parker.park(s) {
			return true, nil
		}
		if s.replayNow.Load() {
			return false, nil
		}
	}
}

// nudgeReplay makes session s, idle in a transaction whose primary
// connection a route change just closed (Server.sweep), replay that
// transaction now (replayIdleNow) instead of at its client's next
// command: a parked session is resumed; one waiting in its goroutine has
// its read return at once, as a sweep does (a TLS session, whose read
// cannot be interrupted without losing its stream, replays at its next
// command as before). replayNow is set first and the parked set looked
// at under p.mu, which park also takes before it checks replayNow: a
// session that parks meanwhile either sees it and does not park, or is
// found parked here.
func (p *idleParker) nudgeReplay(s *session) {
	s.replayNow.Store(true)
	p.mu.Lock()
	parked := p.parked[s.id] != nil
	p.mu.Unlock()
	if parked {
		p.wake(s.id, false)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.raw == nil || s.tls {
		return
	}
	s.idle.CompareAndSwap(idleWaiting, idleSeen)
	if s.idle.CompareAndSwap(idleSeen, idleArmed) {
		_ = s.client.SetReadDeadline(time.Unix(1, 0))
	}
}
