package proxy

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Resolving a COMMIT in flight (clusters[].failover.transaction_replay with
// failover.commit_outcome "marker", the default). A COMMIT whose answer was
// lost with its primary may or may not have committed; the proxy makes the
// question answerable, as Oracle's Transaction Guard does with a logical
// transaction id:
//
//   - Inside every transaction that wrote, just before its COMMIT, the
//     proxy writes one row of switchyard.commit_marker (probe.CommitMarkerTable):
//     REPLACE of (owner, session) = (this proxy process, the session's
//     proxy connection id) with seq = the session's next sequence number.
//     It goes in the same write as the COMMIT (one round trip: marker and
//     COMMIT are sent together, both answers read, only the COMMIT's
//     relayed). The row commits or vanishes with the transaction.
//   - When the primary is lost with that COMMIT in flight, the session
//     waits for the primary (awaitPrimary), connects there and reads its
//     row. The published primary has applied everything it received from
//     the old one (the controller's failover applies the relay log up to
//     the received position after stopping the IO threads, before it
//     promotes), and receives nothing from it any more. seq present: the
//     COMMIT is in the surviving history and the client gets an OK.
//     Absent (or an older seq): it is not — if the old primary committed
//     it anyway, that transaction is errant there and the node is
//     quarantined — so the transaction is replayed (replay_run.go) and
//     committed, with a new marker; a replay that differs gets the
//     rolled-back error, which is now certain.
//   - When the row is read on the node that was lost (the connection
//     broke while the server lives on), the old connection's thread is
//     killed and gone first: until then its COMMIT could still finish.
//   - The marker's own answer: an ERR saying the transaction was rolled
//     back (ER_LOCK_DEADLOCK, ER_LOCK_TABLE_FULL) is the COMMIT's answer
//     (the COMMIT would commit an empty remainder); any other ERR (the
//     table missing, no privilege, read_only) leaves the COMMIT as it
//     was, unresolvable: it gets the outcome-unknown error if its primary
//     is lost. A marker whose answer never arrived is trusted only when
//     an earlier one of the session was written: a marker that fails
//     for a reason that does not repeat (KILL QUERY on it, a statement
//     timeout) in the instant its primary dies would be read as "not
//     committed".
//
// What the client sees is the COMMIT's own answer: the marker's OK (its
// affected rows, warnings, session-state block) is never relayed; the
// table has no AUTO_INCREMENT column, so LAST_INSERT_ID() is unchanged,
// and ROW_COUNT() after a COMMIT is the COMMIT's (0). The marker is part
// of the transaction, so it has the transaction's GTID (@@last_gtid is
// unchanged). An OK the proxy gives for a COMMIT found committed carries
// the session's status flags but no session-state block (no last_gtid).
// Not resolved: an autocommit write in flight (wrapping it in a
// transaction would change what it reports and how it locks), a COMMIT
// AND CHAIN / RELEASE, XA, a transaction that only read (it has no
// marker; its COMMIT in flight gets the outcome-unknown error).
//
// Cost: nothing unless transaction_replay is on; with it on, one row
// write (and its binlog row) per writing transaction, in the same round
// trip as the COMMIT.

// Marker answers (commitMark.answer).
const (
	markUnread int8 = iota
	markWritten
	markFailed
)

// Server error numbers after which InnoDB has rolled back the whole
// transaction (MariaDB "InnoDB Error Handling").
const (
	erLockDeadlock  = 1213 // ER_LOCK_DEADLOCK
	erLockTableFull = 1206 // ER_LOCK_TABLE_FULL
	erUnknownThread = 1094 // ER_NO_SUCH_THREAD
)

// Outcomes of switchyard_proxy_commit_outcome_resolved_total.
const (
	outcomeCommitted = "committed"
	outcomeReplayed  = "replayed"
)

// replayCommitWait bounds how long a replayed COMMIT waits for the other
// replays of its cluster (awaitReplays).
const replayCommitWait = 500 * time.Millisecond

// awaitReplays waits, at most replayCommitWait, until no other session of
// the cluster is replaying a transaction, before a replayed transaction
// that wrote commits (one whose COMMIT was in flight, or the client's
// COMMIT after a replay). In the history the old primary ran, that
// transaction had not committed when the other open transactions read: a
// replay of theirs that runs after it commits reads its rows changed and
// is rolled back as a mismatch, one that runs before reads what they read
// then (its rows locked by the waiting transaction block a replayed write,
// as they blocked the original, until the bound). Only the order changes;
// every replay is still checked against what its client saw.
func (s *session) awaitReplays() {
	s.awaitSnapshots()
	deadline := time.Now().Add(replayCommitWait)
	for s.l.route.replaying.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// threadGoneWait bounds the wait for a killed backend thread to leave
// the processlist before a marker is read on the node it ran on.
const threadGoneWait = 2 * time.Second

// commitMark is a session's commit-marker state.
type commitMark struct {
	on     bool      // failover.commit_outcome marker
	seq    uint64    // the last sequence number written (0: none yet)
	sent   bool      // a marker with seq went with the COMMIT in flight
	answer int8      // its answer: markUnread, markWritten, markFailed
	works  bool      // a marker of this session was written before
	warned bool      // a failed marker was logged
	node   string    // where the marker in flight went
	at     time.Time // when
	port   int       // from which local port (0: unknown)
	thread uint32    // and the backend thread that ran it
	pkt    []byte    // the marker packet (header and payload), reused
}

// newMarkerOwner returns this proxy process's owner value for commit
// markers: the proxy id (bytes outside [A-Za-z0-9._-] replaced) and a
// random suffix, so that a restarted proxy never takes the rows of its
// previous life for its own sessions'.
func newMarkerOwner(id string) string {
	b := []byte(id)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	return string(b) + "/" + hex.EncodeToString(r[:])
}

// commitOutcomeOn reports failover.commit_outcome marker for cl.
func commitOutcomeOn(cl *config.Cluster) bool {
	return cl != nil && cl.Failover.CommitOutcome != config.CommitOutcomeUnknown
}

// plainCommit reports whether q is COMMIT [WORK] and nothing else (not
// AND CHAIN, RELEASE).
func plainCommit(q []byte) bool {
	w, rest := firstWord(q)
	if len(w) != 6 || !eqFold(w, "commit") {
		return false
	}
	w2, rest2 := firstWord(rest)
	if eqFold(w2, "work") {
		w2, _ = firstWord(rest2)
	}
	if len(w2) > 0 {
		return false
	}
	for _, c := range rest {
		if !isSpace(c) && c != ';' && !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false // a comment or anything else: not recognised
		}
	}
	return true
}

// markCommit reports whether the command in flight is a COMMIT that gets
// a marker: the option is on, the transaction wrote, the command is a
// plain COMMIT inside it.
func (r *replayLog) markCommit() bool {
	return r.mk.on && r.fl.commit && r.wrote
}

// buildMarker fills r.mk.pkt with the marker statement for seq as a
// COM_QUERY packet (sequence id 0).
func (s *session) buildMarker(seq uint64) []byte {
	b := s.rlog.mk.pkt[:0]
	b = append(b, 0, 0, 0, 0, mysql.COM_QUERY)
	b = append(b, "REPLACE INTO switchyard.commit_marker (owner, session, seq) VALUES ('"...)
	b = append(b, s.srv.markerOwner...)
	b = append(b, "', "...)
	b = strconv.AppendUint(b, uint64(s.id), 10)
	b = append(b, ", "...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ')')
	mysqlproto.PutHeader(b[:mysqlproto.HeaderSize], len(b)-mysqlproto.HeaderSize, 0)
	s.rlog.mk.pkt = b
	return b
}

// sendMarker writes the marker for the COMMIT about to be forwarded to
// the session's backend. With whole (the COMMIT packet, header h, is
// buffered whole in the client reader and goes unchanged) the COMMIT
// packet is appended and both go in one write; combined reports that.
func (s *session) sendMarker(h mysqlproto.Header, whole bool) (combined bool, err error) {
	mk := &s.rlog.mk
	mk.seq++
	mk.sent, mk.answer = true, markUnread
	mk.node, mk.thread, mk.at, mk.port = s.be.t.node, s.be.threadID, time.Now(), 0
	if a, ok := s.be.conn.LocalAddr().(*net.TCPAddr); ok {
		mk.port = a.Port
	}
	b := s.buildMarker(mk.seq)
	n := mysqlproto.HeaderSize + h.Len
	if whole {
		p, perr := s.cr.Peek(n)
		if perr == nil {
			b = append(b, p...)
			mk.pkt = b
			if _, werr := s.be.conn.Write(b); werr != nil {
				return true, fail(closeBackendLost, &mysqlproto.WriteError{Err: werr})
			}
			_, _ = s.cr.Discard(n)
			s.in += n
			return true, nil
		}
	}
	if _, werr := s.be.conn.Write(b); werr != nil {
		return false, fail(closeBackendLost, &mysqlproto.WriteError{Err: werr})
	}
	return false, nil
}

// markAnswer reads the marker's answer, which comes before the COMMIT's
// (s.br acquired). When it says the transaction was rolled back, the
// COMMIT's answer is read and dropped and the marker's ERR is the
// client's answer (answered); otherwise the caller relays the COMMIT's
// answer.
func (s *session) markAnswer() (answered bool, err error) {
	mk := &s.rlog.mk
	p, _, rerr := mysqlproto.ReadPacket(s.br, s.scratch[:0], 0)
	if rerr != nil {
		return false, fail(closeBackendLost, rerr)
	}
	s.scratch = p[:0]
	switch {
	case len(p) > 0 && p[0] == mysql.OK_HEADER:
		mk.answer, mk.works = markWritten, true
		return false, nil
	case len(p) < 3 || p[0] != mysql.ERR_HEADER:
		return false, backendProtocol("commit marker answered with 0x%02x", firstByte(p))
	}
	mk.answer = markFailed
	code := uint16(p[1]) | uint16(p[2])<<8
	if code != erLockDeadlock && code != erLockTableFull {
		if !mk.warned {
			mk.warned = true
			if ok, suppressed := s.srv.markerLog.allow(time.Now()); ok {
				s.log.Warn("commit marker not written: a COMMIT in flight when the primary is lost gets the outcome-unknown error",
					"table", "switchyard.commit_marker", "code", code, "error", string(errText(p)), "suppressed", suppressed)
			}
		}
		return false, nil
	}
	// The transaction is gone: the COMMIT's OK would be a lie.
	errPkt := append([]byte(nil), p...)
	_, status, b, serr := s.readSum(s.br, s.scratch[:0])
	s.scratch = b[:0]
	if serr != nil {
		return false, fail(closeBackendLost, serr)
	}
	s.status = status &^ mysql.SERVER_STATUS_IN_TRANS
	if _, werr := mysqlproto.WritePacket(s.cw, 1, errPkt); werr != nil {
		return true, fail(closeClientGone, werr)
	}
	s.seq, s.lastOK = 1, false
	s.out += mysqlproto.HeaderSize + len(errPkt)
	return true, nil
}

// errText returns the message of an ERR payload.
func errText(p []byte) []byte {
	if len(p) > 9 && p[3] == '#' {
		return p[9:]
	}
	if len(p) > 3 {
		return p[3:]
	}
	return nil
}

// resolveCommit decides the COMMIT in flight whose primary (lost) was
// lost, when a marker went with it: it connects the session to the
// primary (waiting for the failover) and reads the marker there. It
// returns committed (the client got its OK), or absent (the session is on
// the primary with no transaction open: replay and commit it), or neither
// (unresolved; why says why, for the log).
//
// A connection that breaks while the marker is read (the lost node's
// server dying as it was reached, the new primary lost in turn) decides
// nothing: the session connects again to the primary the controller
// names, waiting for the failover, up to migrateAttempts times.
func (s *session) resolveCommit(lost string) (committed, absent bool, reason, why string) {
	mk := &s.rlog.mk
	if !(mk.answer == markWritten || mk.answer == markUnread && mk.works) {
		return false, false, "", "the commit marker was not written"
	}
	for attempt := 1; ; attempt++ {
		s.dropLost()
		be, merr, _ := s.connectPrimary(lost)
		if merr != nil {
			return false, false, "", merr.Message
		}
		var broken bool
		committed, absent, reason, why, broken = s.readMarker(be, lost)
		if !broken || attempt >= migrateAttempts {
			return committed, absent, reason, why
		}
		s.log.Info("COMMIT in flight when the primary was lost: reading its marker failed; connecting to the primary again",
			"lost", lost, "node", be.t.node, "why", why, "attempt", attempt)
		time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
	}
}

// readMarker is resolveCommit on be, the session's backend: broken
// reports that why is be's connection failing (io errors), which another
// connection may not repeat.
func (s *session) readMarker(be *backend, lost string) (committed, absent bool, reason, why string, broken bool) {
	r := s.rlog
	mk := &r.mk
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(be.reader())
	defer func() {
		br.Reset(nil)
		s.srv.readers.Put(br)
	}()
	_ = be.conn.SetDeadline(time.Now().Add(restoreTimeout))
	defer func() { _ = be.conn.SetDeadline(time.Time{}) }()
	if be.t.node == mk.node {
		if gone, err := s.threadGone(br, be, mk); err != nil || !gone {
			return false, false, "", fmt.Sprintf("the backend thread %d of the COMMIT on %s could not be ended (%v)", mk.thread, be.t.node, err), connBroken(err)
		}
	}
	q := make([]byte, 0, 160)
	q = append(q, "SELECT seq FROM switchyard.commit_marker WHERE owner = '"...)
	q = append(q, s.srv.markerOwner...)
	q = append(q, "' AND session = "...)
	q = strconv.AppendUint(q, uint64(s.id), 10)
	v, found, errCode, status, err := s.queryOne(br, be, q)
	if err == nil && errCode == 0 && status&mysql.SERVER_STATUS_IN_TRANS != 0 {
		// autocommit=0: the read opened a transaction; end it.
		_, _, errCode, status, err = s.queryOne(br, be, []byte("ROLLBACK"))
	}
	if err != nil {
		return false, false, "", fmt.Sprintf("reading the commit marker on %s: %v", be.t.node, err), connBroken(err)
	}
	if errCode != 0 {
		return false, false, "", fmt.Sprintf("reading the commit marker on %s: error %d", be.t.node, errCode), false
	}
	s.status = status
	seq, _ := strconv.ParseUint(v, 10, 64)
	if found && seq == mk.seq {
		s.log.Info("COMMIT in flight when the primary was lost: committed", "lost", lost, "node", be.t.node, "seq", mk.seq)
		r.reset()
		s.status &^= mysql.SERVER_STATUS_IN_TRANS
		ok := mysqlproto.OK{Status: s.status & (mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_NO_BACKSLASH_ESCAPED)}
		payload := mysqlproto.AppendOK(nil, s.caps, &ok)
		s.lastOK = true
		if s.txPool {
			s.noteOK(payload)
		}
		s.srv.metrics.outcomeResolved.WithLabelValues(s.l.name, outcomeCommitted).Inc()
		if err := s.writeDirect(1, payload); err != nil {
			return true, false, closeClientGone, "", false
		}
		return true, false, "", "", false
	}
	s.log.Info("COMMIT in flight when the primary was lost: not committed; replaying the transaction", "lost", lost, "node", be.t.node,
		"seq", mk.seq, "found", v)
	return false, true, "", "", false
}

// connBroken reports whether err is a connection's failure (an I/O error
// such as a reset, the end of the stream) rather than a server's answer.
func connBroken(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// threadGone makes sure the backend thread that sent the COMMIT (mk: its
// id, the local port of its connection, when it was sent) has ended on
// be's server. Not in the processlist: gone (ids are not reused within a
// server's life). Listed with a client address on that port: it is that
// thread; it is killed (the session's own user may) and the wait, at most
// threadGoneWait, lasts until it has left the processlist. Listed with
// another address (an address translation between proxy and server, or a
// restarted server that gave the id again): the server's Uptime decides —
// shorter than the time since the COMMIT was sent, it restarted and the
// thread is gone; longer, it is killed as above; within a second of it,
// nothing is decided (false).
func (s *session) threadGone(br *bufio.Reader, be *backend, mk *commitMark) (bool, error) {
	id := uint64(mk.thread)
	host, found, code, _, err := s.queryOne(br, be, strconv.AppendUint([]byte("SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = "), id, 10))
	if err != nil {
		return false, fmt.Errorf("reading the processlist: %w", err)
	}
	if code != 0 {
		return false, fmt.Errorf("reading the processlist: error %d", code)
	}
	if !found {
		return true, nil
	}
	if mk.port == 0 || !strings.HasSuffix(host, ":"+strconv.Itoa(mk.port)) {
		v, _, code, _, err := s.queryOne(br, be, []byte("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"))
		if err != nil || code != 0 {
			return false, fmt.Errorf("reading Uptime: %v (error %d)", err, code)
		}
		up, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return false, fmt.Errorf("reading Uptime: %q", v)
		}
		ago := time.Since(mk.at)
		switch uptime := time.Duration(up) * time.Second; {
		case uptime+time.Second < ago:
			return true, nil // restarted since: the id is another thread's
		case uptime < ago+time.Second:
			return false, nil
		}
	}
	_, _, code, _, err = s.queryOne(br, be, strconv.AppendUint([]byte("KILL CONNECTION "), id, 10))
	if err != nil {
		return false, err
	}
	if code == erUnknownThread {
		return true, nil
	}
	if code != 0 {
		return false, fmt.Errorf("KILL: error %d", code)
	}
	q := strconv.AppendUint([]byte("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = "), id, 10)
	deadline := time.Now().Add(threadGoneWait)
	for {
		v, _, code, _, err := s.queryOne(br, be, q)
		if err != nil || code != 0 {
			return false, fmt.Errorf("reading the processlist: %v (error %d)", err, code)
		}
		if v == "0" {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queryOne runs text query q on be (read through br) and returns the
// first column of its first row (found: a row came), the ERR code (0 when
// none) and the status flags it ended with.
func (s *session) queryOne(br *bufio.Reader, be *backend, q []byte) (val string, found bool, errCode uint16, status uint16, err error) {
	if err := writePacket(be.conn, 0, append([]byte{mysql.COM_QUERY}, q...)); err != nil {
		return "", false, 0, 0, err
	}
	p, _, err := mysqlproto.ReadPacket(br, nil, 0)
	if err != nil {
		return "", false, 0, 0, err
	}
	switch {
	case len(p) == 0:
		return "", false, 0, 0, fmt.Errorf("empty packet")
	case p[0] == mysql.OK_HEADER:
		st, _ := mysqlproto.OKStatus(p)
		return "", false, 0, st, nil
	case p[0] == mysql.ERR_HEADER:
		if len(p) < 3 {
			return "", false, 0, 0, fmt.Errorf("short ERR packet")
		}
		return "", false, uint16(p[1]) | uint16(p[2])<<8, s.status, nil
	}
	ncols, meta, ok := mysqlproto.ColumnCount(p, s.cacheMeta())
	if !ok {
		return "", false, 0, 0, fmt.Errorf("bad column count packet")
	}
	skip := s.defPackets(ncols, meta)
	for range skip {
		if _, _, err = mysqlproto.ReadPacket(br, nil, 0); err != nil {
			return "", false, 0, 0, err
		}
	}
	for {
		if p, _, err = mysqlproto.ReadPacket(br, nil, 0); err != nil {
			return "", false, 0, 0, err
		}
		switch {
		case len(p) > 0 && p[0] == mysql.ERR_HEADER && len(p) >= 3:
			return "", false, uint16(p[1]) | uint16(p[2])<<8, s.status, nil
		case len(p) > 0 && p[0] == mysql.EOF_HEADER && len(p) < 0xffffff:
			if s.deprecateEOF() {
				status, _ = mysqlproto.OKStatus(p)
			} else {
				_, status, _ = mysqlproto.ParseEOF(p)
			}
			return val, found, 0, status, nil
		default:
			if !found {
				found = true
				if len(p) > 0 && p[0] != 0xfb { // 0xfb: NULL
					n, k, ok := mysqlproto.ReadLenEnc(p)
					if ok && k+int(n) <= len(p) {
						val = string(p[k : k+int(n)])
					}
				}
			}
		}
	}
}
