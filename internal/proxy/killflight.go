package proxy

import (
	"strconv"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// KILL QUERY of a statement on its way. A server kills the statement its
// thread runs; through the proxy a statement spends a moment between the
// client's socket and the backend: read by the session's goroutine (a
// parked session first wakes up), its route checked, on a
// transaction-pooled listener a connection taken from the pool. A KILL
// QUERY that came in that moment found no statement on the backend and
// killed nothing, and the statement then ran to its end (a SLEEP(20) that
// the client had asked to interrupt). So the session tracks where its
// current statement is (stmtPhase, under session.mu) and a KILL QUERY
// (kill.go) acts by that:
//
//   - the statement is on the backend (phaseSent): its backend thread is
//     killed ("KILL QUERY <thread>" on its node), as before; while it is
//     being written (phaseWriting) the session does that itself once the
//     write is done, so that the KILL cannot reach the server first;
//   - the session is handling the command but has not forwarded it
//     (phaseHandling), or is between commands while the client has sent
//     one (the session is busy with it, holding or rerouting, has read
//     its bytes, or they wait in the client socket): the statement is
//     marked, and when it is
//     about to be forwarded the client gets ER_QUERY_INTERRUPTED (1317,
//     SQLSTATE 70100, "Query execution was interrupted"), what the server
//     answers a statement killed while it runs; nothing runs;
//   - the session is idle with nothing sent: nothing happens, as with a
//     server thread that runs no statement.
//
// Only COM_QUERY, COM_STMT_EXECUTE and COM_STMT_BULK_EXECUTE are refused
// this way; another command consumes the mark without effect.

const (
	phaseIdle     = iota // between commands
	phaseHandling        // in command(), not forwarded yet
	phaseWriting         // being written to the backend
	phaseSent            // written to the backend
)

// errQueryInterrupted is ER_QUERY_INTERRUPTED as MariaDB sends it.
func errQueryInterrupted() *mysql.MyError {
	return &mysql.MyError{Code: mysql.ER_QUERY_INTERRUPTED, State: "70100", Message: "Query execution was interrupted"}
}

// cmdStart records that the session handles a client command.
func (s *session) cmdStart() {
	s.mu.Lock()
	s.stmtPhase = phaseHandling
	s.arrived.Store(false)
	if s.killNext {
		s.killCur, s.killNext = true, false
	}
	s.mu.Unlock()
}

// stmtSent is called right before the command cmd is forwarded: it
// records it as being written and reports whether a KILL QUERY came for
// it, in which case the caller answers ER_QUERY_INTERRUPTED instead. text
// is the statement's text (nil when unknown); its start is kept for the
// session list until cmdDone.
func (s *session) stmtSent(cmd byte, text []byte) bool {
	s.mu.Lock()
	s.curStmtN = copy(s.curStmt[:], text)
	kill := s.killCur && (cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_EXECUTE || cmd == mysqlproto.ComStmtBulkExecute)
	s.killCur = false
	if !kill {
		s.stmtPhase = phaseWriting
	}
	s.mu.Unlock()
	return kill
}

// stmtWritten is called once the command is written to the backend: a
// KILL QUERY that came while it was being written kills the backend
// thread now (on its own goroutine: the session relays the answer).
func (s *session) stmtWritten() {
	s.mu.Lock()
	s.stmtPhase = phaseSent
	kill := s.killCur
	s.killCur = false
	be := s.be
	s.mu.Unlock()
	if !kill || be == nil {
		return
	}
	t, stmt := be.t, "KILL QUERY "+strconv.FormatUint(uint64(be.threadID), 10)
	// runAs logs in as the session's user: a copy, the session goes on.
	as := &session{srv: s.srv, l: s.l, id: s.id, user: s.user, stage1: s.stage1, edKey: s.edKey, charset: s.charset,
		maxPacket: s.maxPacket, log: s.log}
	s.srv.wg.Add(1)
	go func() {
		defer s.srv.wg.Done()
		if merr := as.runAs(as.l, t, stmt); merr != nil {
			s.log.Warn("KILL QUERY of a statement written after the KILL failed", "node", t.node, "err", merr.Message)
		}
	}()
}

// cmdDone records that the session answered its command.
func (s *session) cmdDone() {
	s.mu.Lock()
	s.stmtPhase, s.killCur, s.killNext = phaseIdle, false, false
	s.curStmtN = 0
	// Pipelined commands already buffered are on their way too.
	s.arrived.Store(s.cin != nil && (s.cin.r.Buffered() > 0 || s.cin.src.off < s.cin.src.n))
	s.mu.Unlock()
}

// killQueryTarget applies a KILL QUERY to the session (see above): it
// returns the backend whose thread to kill (nil: none, or the statement
// was marked) and what it found, for the log: "running", "marked" (not
// forwarded yet), "marked next" (sent by the client, not yet read or
// handled) or "idle".
func (s *session) killQueryTarget() (*backend, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, "closed"
	}
	switch {
	case s.stmtPhase == phaseSent:
		return s.be, "running"
	case s.stmtPhase == phaseHandling || s.stmtPhase == phaseWriting:
		s.killCur = true
		return nil, "marked"
	case s.busy.Load()&busyCmd != 0 || s.arrived.Load() || s.clientPending():
		s.killNext = true
		return s.be, "marked next"
	}
	return s.be, "idle"
}

// clientPending reports whether the client's socket holds bytes the
// session has not read (a command on its way), without consuming them.
// Called with s.mu held (s.closed false, so s.fd is still the client's).
func (s *session) clientPending() bool {
	if s.fd < 0 {
		return false
	}
	var b [1]byte
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return errno == 0 && n == 1
}
