package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Replay results (label "result" of switchyard_proxy_transaction_replays_total).
const (
	replayOK            = "replayed"
	replayNotReplayable = "not_replayable"
	replayLimit         = "limit"
	replayMismatch      = "mismatch"
	replayNoPrimary     = "no_primary"
	replayConnect       = "connect"
	replayLostAgain     = "lost_again"
)

// newReplayLog returns the session's transaction record when
// failover.transaction_replay is on for its cluster and it is on a primary
// listener, else nil (nothing is recorded).
func (s *session) newReplayLog() *replayLog {
	if s.l.role != rolePrimary {
		return nil
	}
	cl := s.srv.cfg.Load().Cluster(s.l.cluster)
	if cl == nil || !cl.Failover.TransactionReplay {
		return nil
	}
	maxBytes, maxStmts := cl.Failover.ReplayMaxBytes, cl.Failover.ReplayMaxStatements
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	if maxStmts <= 0 {
		maxStmts = 256
	}
	r := newReplayLog(maxBytes, maxStmts)
	r.mk.on = commitOutcomeOn(cl)
	r.relaxReads = cl.Failover.ReplayChecksum == config.ReplayChecksumNoConsistentReads
	return r
}

// replayOnLoss handles the loss of the session's primary connection (it
// broke, the command was cut, or the route moved while a transaction was
// open) when transaction replay is on. cmd is the command concerned; with
// inflight it had been forwarded (its record is in rlog.fl), else it is
// still pending in the client read buffer. lost names the primary that was
// lost and cause says what happened, for messages.
//
// It returns handled=false when replay has nothing to say (off, a replica
// listener, part of the response already relayed, an autocommit read in
// flight): the caller goes on as without replay. Otherwise the client got
// its answer — the statement in flight ran again on the new primary after
// the transaction was replayed, the rolled-back error, or the
// outcome-unknown error — or, for a pending command (answered=false), the
// transaction was replayed and the command runs next as usual; reason is a
// close reason or "".
func (s *session) replayOnLoss(cmd byte, inflight, wrote bool, lost, cause string) (handled, answered bool, reason string) {
	r := s.rlog
	if r == nil || s.l.role != rolePrimary || wrote {
		return false, false, ""
	}
	fl := r.fl
	if !inflight {
		if !s.inTx() && !r.active() {
			return false, false, ""
		}
		fl = flight{cmd: cmd, pend: true, inTx: true}
		r.dropPending()
	} else if !fl.active {
		return false, false, ""
	}
	inTx := fl.inTx || r.active()
	absent := false // a COMMIT in flight found not committed: replay and commit
	defer s.snapTaken()
	if inflight && fl.commit && r.mk.sent {
		s.pendSnapshot() // it may replay: count it while it waits for the primary
		committed, notCommitted, reason, why := s.resolveCommit(lost)
		switch {
		case committed:
			return true, true, reason
		case notCommitted:
			absent = true
		default:
			s.log.Warn("COMMIT in flight when the primary was lost: not resolved", "lost", lost, "why", why)
		}
	}
	if inflight && !absent {
		switch {
		case !inTx && fl.kind == kindRead, !inTx && fl.kind == kindRollback:
			return false, false, "" // nothing of a transaction to keep
		case fl.kind == kindRollback:
			s.dropLost()
			r.reset()
			s.rejoinPrimary(lost)
			s.log.Info("primary lost while ROLLBACK ran: the transaction is rolled back either way", "node", lost)
			ok := mysqlproto.OK{Status: s.status & mysql.SERVER_STATUS_AUTOCOMMIT}
			if err := s.writeDirect(1, mysqlproto.AppendOK(nil, s.caps, &ok)); err != nil {
				return true, true, closeClientGone
			}
			return true, true, ""
		case fl.kind == kindEnds, fl.kind == kindBegin && fl.inTx, !inTx && fl.kind == kindWrite:
			s.dropLost()
			r.reset()
			s.srv.metrics.outcomeUnknown.WithLabelValues(s.l.name).Inc()
			what := "a statement ending a transaction ran"
			if !inTx {
				what = "a write ran"
			}
			s.log.Warn("primary lost while "+what+": its outcome is unknown", "node", lost,
				"statement", fl.keyword(), "cause", cause)
			if reason, closing := s.closeUnmovable(cmd, fmt.Sprintf(
				"the outcome of %s is unknown: the primary %s of cluster %s was lost while it ran (%s); check before retrying",
				fl.keyword(), orText(lost, "?"), s.l.cluster, cause)); closing {
				return true, true, reason
			}
			s.rejoinPrimary(lost)
			s.writeError(1, errOutcomeUnknown(fl.keyword(), s.l.cluster, lost, cause))
			return true, true, ""
		}
	}
	s.pendSnapshot()
	s.srv.metrics.replayAttempts.WithLabelValues(s.l.name).Inc()
	start := time.Now()
	// A COM_STMT_PREPARE in flight is not recorded (it changes nothing in
	// the transaction); its text is still in s.prepPacket: replay what was
	// recorded, then prepare it again on the new backend.
	prepInFlight := inflight && fl.cmd == mysql.COM_STMT_PREPARE && len(s.prepPacket) > 0 &&
		(len(r.entries) == 0 || r.entries[len(r.entries)-1].done)
	s.l.route.replaying.Add(1)
	recorded := len(r.entries) // for the log: the COMMIT run again resets the record
	if inflight && recorded > 0 && !r.entries[recorded-1].done {
		recorded-- // the statement in flight, run again after the replay
	}
	result, why := s.replayTx(lost, inflight && !prepInFlight, absent)
	// A replay whose connection was lost too committed nothing (its
	// statements ran in a transaction that died with it): it runs again
	// on the primary the controller names, within failover.max_hold —
	// the first connect may reach the dying primary itself, whose
	// listening socket outlives its connections by a few milliseconds.
	hold := s.srv.rc.Load().maxHold(s.l.cluster)
	for try := 1; result == replayLostAgain && try <= replayRetries && time.Since(start) < hold; try++ {
		again := nodeName(s.be)
		if again == "" {
			again = lost
		}
		s.log.Info("connection lost during the replay; replaying again", "lost", lost, "node", again, "why", why, "attempt", try+1)
		s.pendSnapshot()
		time.Sleep(time.Duration(try) * 20 * time.Millisecond)
		result, why = s.replayTx(again, inflight && !prepInFlight, false)
	}
	s.snapTaken()
	s.l.route.replaying.Add(-1)
	reran := false
	switch {
	case result == replayOK && prepInFlight:
		result, why = s.rerunPrepare()
	case result == replayOK && inflight:
		// The statement in flight runs as one of a transaction already
		// replayed (recordBegin): after the other replays of the cluster
		// have taken their snapshots, or it could take the
		// auto-increment ids their clients were told and make their
		// replays wait on its locks.
		s.awaitSnapshots()
		result, why = s.rerunInFlight()
		reran = true
	}
	s.srv.metrics.replays.WithLabelValues(s.l.name, result).Inc()
	if absent && result == replayOK {
		s.srv.metrics.outcomeResolved.WithLabelValues(s.l.name, outcomeReplayed).Inc()
	}
	if result == replayOK {
		r.replayed = true
		s.log.Info("transaction replayed on the primary", "lost", lost, "node", nodeName(s.be),
			"statements", recorded, "in_flight", inflight, "took", time.Since(start))
		if inflight {
			return true, true, ""
		}
		return true, false, ""
	}
	if result == closeClientGone || result == closeRouteChanged {
		return true, true, result
	}
	s.dropLost()
	r.reset()
	if reason, closing := s.closeUnmovable(cmd, fmt.Sprintf(
		"your transaction was rolled back: the primary %s of cluster %s was lost while it was open", orText(lost, "?"), s.l.cluster)); closing {
		s.srv.metrics.txAborted.WithLabelValues(s.l.name).Inc()
		return true, true, reason
	}
	if result != replayNoPrimary && result != replayConnect {
		s.rejoinPrimary(lost)
	}
	if absent && reran && result == replayLostAgain {
		// The replayed COMMIT may have run on the new primary before it
		// was lost too: its outcome is unknown again.
		s.srv.metrics.outcomeUnknown.WithLabelValues(s.l.name).Inc()
		s.log.Warn("primary lost while a statement ending a transaction ran: its outcome is unknown", "node", lost,
			"statement", fl.keyword(), "cause", "the new primary was lost too while the replayed COMMIT ran: "+why)
		s.writeError(1, errOutcomeUnknown(fl.keyword(), s.l.cluster, lost, "the new primary was lost too while the replayed COMMIT ran: "+why))
		return true, true, ""
	}
	s.srv.metrics.txAborted.WithLabelValues(s.l.name).Inc()
	s.log.Info("transaction not replayed: rolled back", "lost", lost, "result", result, "why", why, "cause", cause,
		"args", r.mismatchArgs, "snapshot_gtid", r.snapGTID)
	e := errReplayFailed(s.l.cluster, lost, why, inflight)
	if inflight {
		if kindOf(cmd) != respNone {
			s.writeError(1, e)
		} else {
			s.txEnded = e // the next command gets it (endTx)
		}
		return true, true, ""
	}
	answered, reason = s.endTx(cmd, e)
	return true, answered, reason
}

// closeUnmovable ends a session that lost its primary connection (its
// transaction already dropped, dropLost) when its state cannot be rebuilt
// on another connection (unmigratable: temporary tables, a user lock, SQL
// prepared statements...): going on would run its next statements without
// that state, as a session that cannot move when its route changes is
// closed (migrate). The pending command cmd gets one error, what happened
// (what) and why the session cannot go on, unless it has no response; it
// returns closeRouteChanged and true. It returns false when the session
// can go on.
func (s *session) closeUnmovable(cmd byte, what string) (string, bool) {
	why := s.unmigratable()
	if why == "" {
		return "", false
	}
	s.srv.metrics.migrationsFailed.WithLabelValues(s.l.name, "state").Inc()
	s.log.Info("closing session: its primary connection was lost and its state cannot be moved", "why", why)
	if kindOf(cmd) != respNone {
		s.writeError(1, errUnknown(fmt.Sprintf(
			"switchyard: %s; this session cannot be moved to another connection: it %s; the session is closed, reconnect", what, why)))
	}
	return closeRouteChanged, true
}

// dropPending forgets the last recorded statement when its response had
// not begun: it is still pending and is recorded again when it runs.
func (r *replayLog) dropPending() {
	if n := len(r.entries); n > 0 && !r.entries[n-1].done {
		r.buf = r.buf[:r.entries[n-1].off]
		r.entries = r.entries[:n-1]
	}
	r.cur, r.hashing, r.fl.active = -1, false, false
}

// rejoinPrimary connects the session, out of any transaction, to the
// primary (waiting for the one the controller names when the lost one is
// gone), so that the error it is about to get is its last: its next
// command runs there. When that fails the session moves (or gets the
// no-route error) at its next command, as after a cut.
func (s *session) rejoinPrimary(lost string) {
	if lp := s.srv.lostNow(s.l.route.snap.Load()); lp != nil && lp.node == lost {
		// Declared dead with no failover coming: a connect would only
		// wait out proxy.connect_timeout before the client's error; the
		// next command gets the refusal at once.
		return
	}
	if _, merr, _ := s.connectPrimary(lost); merr != nil {
		s.log.Info("could not reconnect to the primary after losing it; the session moves at its next command", "lost", lost, "err", merr.Message)
	}
}

// dropLost forgets the session's backend connection and transaction: the
// session moves to the current route at its next command.
func (s *session) dropLost() {
	old, _ := s.setBackend(nil)
	if old != nil {
		old.close(false)
	}
	s.status &^= mysql.SERVER_STATUS_IN_TRANS
	s.st.locked = false
	s.snap = nil
	s.detached = false
}

// replayTx connects the session to the primary with its state rebuilt and
// replays the recorded statements (the one in flight excepted); with
// connected, the session's backend is already a fresh connection to the
// primary (resolveCommit) and is used. It returns replayOK, or the result
// label and why it failed.
func (s *session) replayTx(lost string, inflight, connected bool) (string, string) {
	r := s.rlog
	if !connected {
		s.dropLost()
	}
	if r.broken != "" {
		if r.limit {
			return replayLimit, r.broken
		}
		return replayNotReplayable, r.broken
	}
	if why := s.unmigratable(); why != "" {
		return replayNotReplayable, "the session " + why
	}
	n := len(r.entries)
	if inflight {
		n-- // the last entry is the statement in flight
		if n < 0 || r.entries[n].done {
			return replayNotReplayable, "the statement in flight was not recorded"
		}
	}
	be := s.be
	if !connected {
		var merr *mysql.MyError
		var waited bool
		be, merr, waited = s.connectPrimary(lost)
		if merr != nil && waited {
			return replayNoPrimary, merr.Message
		}
		if merr != nil {
			return replayConnect, merr.Message
		}
	}
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(be.reader())
	defer func() {
		br.Reset(nil)
		s.srv.readers.Put(br)
	}()
	_ = be.conn.SetDeadline(time.Now().Add(restoreTimeout))
	defer func() { _ = be.conn.SetDeadline(time.Time{}) }()
	// A replayed statement waits at most replayLockWait for a row lock:
	// the other sessions of the cluster wait for this replay, and one
	// that waits longer has met a transaction begun on the new primary
	// since (its result would differ anyway).
	restoreLockWait, why := s.boundLockWait(br, be)
	if why != "" {
		return replayLostAgain, why
	}
	defer func() {
		if restoreLockWait != nil {
			_, _, _, _, _ = s.queryOne(br, be, restoreLockWait)
		}
	}()
	// The replay takes its snapshot at its opener when nothing after it
	// depends on data committed later (replay_snap.go); else once all of
	// it ran again (the caller's snapTaken).
	opener, csText, found, cs := r.snapshotOpener(n)
	r.snapGTID, r.mismatchArgs = "", ""
	relax, refuse, why := s.replayChecks(br, be, n)
	if why != "" {
		return replayLostAgain, why
	}
	if refuse != "" {
		return replayNotReplayable, refuse
	}
	differed := 0
	// Rows the connection wrote so far (handlerWrites), known before a
	// plain read that may be let through: a read that wrote (a view or
	// a quoted name calling a stored function) is compared.
	var wrote uint64
	wroteKnown := false
	var buf []byte
	for i := 0; i < n; i++ {
		e := &r.entries[i]
		if !e.done {
			return replayNotReplayable, "a statement of the transaction had not completed"
		}
		plainRead := relax && consistentRead(r.entryText(e))
		if plainRead && !wroteKnown {
			v, ok, why := s.handlerWrites(br, be)
			if why != "" {
				return replayLostAgain, why
			}
			wrote, wroteKnown = v, ok
		}
		if !plainRead {
			wroteKnown = false
		}
		var err error
		var id uint32
		temp := false
		if cs && i == opener {
			err = writePacket(be.conn, 0, append([]byte{mysql.COM_QUERY}, csText...))
		} else {
			var merr *mysql.MyError
			if id, temp, merr = s.replayStmtID(br, be, e); merr != nil {
				return replayLostAgain, merr.Message
			}
			if e.insertID != 0 {
				if why := s.forceInsertID(br, be, e.insertID); why != "" {
					return replayLostAgain, why
				}
			}
			err = s.sendRecorded(be, e, id)
		}
		if err != nil {
			return replayLostAgain, lostInReplay(be, err)
		}
		sum, status, b, err := s.readSum(br, buf)
		buf = b
		if err != nil {
			return replayLostAgain, fmt.Sprintf("replaying on %s: %v", be.t.node, err)
		}
		if found && i == opener && sum == e.sum {
			// What the new primary had committed when the replay's
			// snapshot was taken (for the log of a mismatch); a
			// variable read opens no InnoDB read view.
			v, _, code, _, qerr := s.queryOne(br, be, []byte("SELECT @@gtid_binlog_state"))
			if qerr != nil {
				return replayLostAgain, fmt.Sprintf("replaying on %s: %v", be.t.node, qerr)
			}
			if code == 0 {
				r.snapGTID = v
			}
			if cs {
				s.snapTaken()
			}
		}
		if e.insertID != 0 && !(cs && i == opener) {
			// The forced value is kept until a statement generates one:
			// clear it, whether this one used it or not.
			if why := s.forceInsertID(br, be, 0); why != "" {
				return replayLostAgain, why
			}
		}
		if temp {
			// COM_STMT_CLOSE has no response.
			var cl [5]byte
			cl[0] = mysql.COM_STMT_CLOSE
			binary.LittleEndian.PutUint32(cl[1:], id)
			if _, err := mysqlproto.WritePacket(be.conn, 0, cl[:]); err != nil {
				return replayLostAgain, lostInReplay(be, err)
			}
		}
		if sum != e.sum && plainRead && wroteKnown && r.errCode == 0 && status&mysql.SERVER_STATUS_IN_TRANS != 0 {
			// A plain consistent read (failover.replay_checksum
			// no_consistent_reads): its client already has its
			// result, and nothing else depends on it. Not one that
			// failed now, after which the transaction is no longer
			// open (the statements after it would run outside it), or
			// that wrote rows.
			after, ok, why := s.handlerWrites(br, be)
			if why != "" {
				return replayLostAgain, why
			}
			if ok && after == wrote {
				differed++
				s.srv.metrics.replayReadsDiffered.WithLabelValues(s.l.name).Inc()
				sum = e.sum
			}
			wrote, wroteKnown = after, ok
		} else if plainRead {
			wroteKnown = false
		}
		if sum != e.sum {
			r.mismatchArgs = r.describeArgs(e)
			because := ""
			switch r.errCode {
			case mysql.ER_LOCK_WAIT_TIMEOUT:
				because = fmt.Sprintf(" (it waited more than %s for a row lock another session holds there: error 1205)", replayLockWait)
			case mysql.ER_LOCK_DEADLOCK:
				because = " (a deadlock with another session there: error 1213)"
			case mysql.ER_DUP_ENTRY:
				because = " (another session took the same key there meanwhile: error 1062)"
			case 0:
			default:
				because = fmt.Sprintf(" (error %d)", r.errCode)
			}
			return replayMismatch, fmt.Sprintf("statement %d of the transaction (%s) returned a different result when replayed on %s%s",
				i+1, r.describe(s, e), be.t.node, because)
		}
		s.status = status
	}
	if br.Buffered() > 0 {
		return replayLostAgain, fmt.Sprintf("backend %s sent data beyond the replayed responses", be.t.node)
	}
	if differed > 0 {
		s.log.Info("replayed transaction: consistent reads returned rows committed since, not compared (failover.replay_checksum no_consistent_reads)",
			"node", be.t.node, "reads", differed, "statements", n)
	}
	return replayOK, ""
}

// replayRetries bounds how many times a replay whose connection was lost
// runs again (within failover.max_hold).
const replayRetries = 3

// replayLockWait bounds how long a replayed statement waits for a row
// lock (innodb_lock_wait_timeout, whole seconds, for the replay only).
const replayLockWait = time.Second

// boundLockWait sets the new primary connection's
// innodb_lock_wait_timeout to replayLockWait for the replay when it is
// longer, and returns the statement that sets the session's own value
// back (nil when nothing was changed), or why the connection failed.
func (s *session) boundLockWait(br *bufio.Reader, be *backend) (restore []byte, why string) {
	v, found, code, _, err := s.queryOne(br, be, []byte("SELECT @@SESSION.innodb_lock_wait_timeout"))
	if err != nil {
		return nil, lostInReplay(be, err)
	}
	cur, perr := strconv.ParseUint(v, 10, 64)
	if code != 0 || !found || perr != nil || cur <= uint64(replayLockWait/time.Second) {
		return nil, "" // not InnoDB's, or already short: leave it
	}
	_, _, code, _, err = s.queryOne(br, be, []byte("SET SESSION innodb_lock_wait_timeout = "+strconv.Itoa(int(replayLockWait/time.Second))))
	if err != nil {
		return nil, lostInReplay(be, err)
	}
	if code != 0 {
		return nil, ""
	}
	return []byte("SET SESSION innodb_lock_wait_timeout = " + v), ""
}

// forceInsertID sets the new primary connection's insert_id session
// variable to id (0 clears it): the next statement that generates an
// AUTO_INCREMENT value gets id, as the original run of the replayed
// statement did, so its result (the OK's last insert id) can match and
// the rows the client was told of keep their ids. This is how MariaDB's
// own statement-based binary log replays an INSERT (an INSERT_ID event
// before it, https://mariadb.com/kb/en/server-system-variables/#insert_id);
// MaxScale's transaction_replay_checksum=no_insert_id ignores the id
// instead. A value another transaction took meanwhile makes the
// statement fail with a duplicate key: a mismatch, rolled back. It
// returns why it failed, "" when it did not.
func (s *session) forceInsertID(br *bufio.Reader, be *backend, id uint64) string {
	_, _, code, _, err := s.queryOne(br, be, strconv.AppendUint([]byte("SET insert_id = "), id, 10))
	switch {
	case err != nil:
		return lostInReplay(be, err)
	case code != 0:
		return fmt.Sprintf("the new primary %s refused SET insert_id during the replay (error %d)", be.t.node, code)
	}
	return ""
}

// connectPrimary opens the session's new primary connection, state
// rebuilt, and installs it. The snapshot's primary is tried at once (the
// connection may have broken while the server lives on: KILL, a network
// hiccup); when it cannot be reached the session waits for the primary the
// controller names (awaitPrimary). waitFailed reports that the error is
// the wait's (no primary came in time, or none can come).
func (s *session) connectPrimary(lost string) (_ *backend, _ *mysql.MyError, waitFailed bool) {
	rc := s.srv.rc.Load()
	snap := s.l.route.snap.Load()
	var be *backend
	var merr *mysql.MyError
	tried := false
	if t := snap.primary; t != nil && snap.fenced == "" && snap.hold == nil {
		_, be, _, merr = s.connectRoute(t, snap, rc, true)
		tried = true
	}
	for attempt := 0; be == nil; attempt++ {
		if tried && merr != nil && merr.Code != mysql.ER_UNKNOWN_ERROR {
			return nil, merr, false // the server refused the login: waiting will not help
		}
		if attempt >= migrateAttempts {
			return nil, merr, false
		}
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
		}
		var werr *mysql.MyError
		if snap, werr = s.awaitPrimary(lost); werr != nil {
			return nil, werr, true
		}
		_, be, _, merr = s.connectRoute(snap.primary, snap, rc, true)
		tried = true
	}
	if _, ok := s.setBackend(be); !ok {
		be.close(true)
		return nil, errUnknown("switchyard: the proxy is shutting down"), false
	}
	s.status = be.status
	s.tracked = be.tracked
	s.strip = be.tracked && s.caps&mysql.CLIENT_SESSION_TRACK == 0
	s.updateTrackFilter()
	s.applyRestored(be)
	s.detached = false
	if snap.hold == nil {
		s.snap = snap
	}
	s.heldDone()
	return be, nil, false
}

// replayStmtID returns the new backend's id for the prepared statement
// recorded entry e executes (0 for a COM_QUERY). A statement the client
// closed since is prepared again for the replay (temp: close it after).
func (s *session) replayStmtID(br *bufio.Reader, be *backend, e *replayEntry) (id uint32, temp bool, merr *mysql.MyError) {
	if e.st == nil {
		return 0, false, nil
	}
	if cur := s.stmts[e.stmtID]; cur == e.st {
		return cur.backendID, false, nil
	}
	if err := writePacket(be.conn, 0, append([]byte{mysql.COM_STMT_PREPARE}, e.st.text...)); err != nil {
		return 0, false, errUnknown(lostInReplay(be, err))
	}
	// The client closed it: no definitions to give it.
	id, _, merr = s.readPrepared(br, be, e.st)
	return id, true, merr
}

// sendRecorded writes recorded statement e to be, a COM_STMT_EXECUTE with
// statement id id (the new backend's).
func (s *session) sendRecorded(be *backend, e *replayEntry, id uint32) error {
	p := s.rlog.payload(e)
	if e.st != nil {
		binary.LittleEndian.PutUint32(p[1:], id)
		defer binary.LittleEndian.PutUint32(p[1:], e.stmtID)
	}
	_, err := mysqlproto.WritePacket(be.conn, 0, p)
	return err
}

// readSum reads one response from br without relaying it and returns its
// checksum (computed as the relay does, relay.go) and the status flags it
// ended with. buf is scratch space, returned for reuse.
func (s *session) readSum(br *bufio.Reader, buf []byte) (uint64, uint16, []byte, error) {
	h := &s.rlog.h
	h.Reset()
	s.rlog.errCode = 0
	var status uint16
	for {
		p, _, err := mysqlproto.ReadPacket(br, buf, 0)
		if err != nil {
			return 0, 0, buf, err
		}
		buf = p[:0]
		if len(p) == 0 {
			return 0, 0, buf, errors.New("empty packet")
		}
		switch p[0] {
		case mysql.OK_HEADER:
			sumOK(h, p)
			st, _ := mysqlproto.OKStatus(p)
			status = st
			if st&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return h.Sum64(), status, buf, nil
			}
			continue
		case mysql.ERR_HEADER:
			if mysqlproto.IsProgress(p) && s.ext&mysqlproto.MariaDBClientProgress != 0 {
				continue
			}
			sumErr(h, p)
			s.rlog.errCode = errCodeOf(p)
			return h.Sum64(), s.status, buf, nil
		case mysql.LocalInFile_HEADER:
			return 0, 0, buf, errors.New("the server asked for a LOCAL INFILE")
		}
		ncols, meta, ok := mysqlproto.ColumnCount(p, s.cacheMeta())
		if !ok {
			return 0, 0, buf, errors.New("bad column count packet")
		}
		sumCols(h, ncols)
		skip := s.defPackets(ncols, meta)
		for range skip {
			if p, _, err = mysqlproto.ReadPacket(br, buf, 0); err != nil {
				return 0, 0, buf, err
			}
			buf = p[:0]
		}
		if !s.deprecateEOF() {
			if _, st, ok := mysqlproto.ParseEOF(p); ok && st&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
				return 0, 0, buf, errors.New("the server opened a cursor")
			}
		}
		more := false
	rows:
		for {
			if p, _, err = mysqlproto.ReadPacket(br, buf, 0); err != nil {
				return 0, 0, buf, err
			}
			buf = p[:0]
			switch {
			case len(p) > 0 && p[0] == mysql.ERR_HEADER:
				sumErr(h, p)
				s.rlog.errCode = errCodeOf(p)
				return h.Sum64(), s.status, buf, nil
			case len(p) > 0 && p[0] == mysql.EOF_HEADER && len(p) < mysqlproto.MaxPacketPayload:
				var st uint16
				if s.deprecateEOF() {
					st, _ = mysqlproto.OKStatus(p)
				} else {
					_, st, _ = mysqlproto.ParseEOF(p)
				}
				status = st
				more = st&mysql.SERVER_MORE_RESULTS_EXISTS != 0
				break rows
			default:
				sumRow(h, p)
			}
		}
		if !more {
			return h.Sum64(), status, buf, nil
		}
	}
}

// rerunInFlight runs the statement that was in flight when the primary was lost on
// the session's new backend and relays its response as usual.
func (s *session) rerunInFlight() (string, string) {
	r := s.rlog
	idx := len(r.entries) - 1
	e := &r.entries[idx]
	cmd := r.fl.cmd
	var id uint32
	if e.st != nil {
		cur := s.stmts[e.stmtID]
		if cur != e.st {
			return replayNotReplayable, "the prepared statement in flight is gone"
		}
		id = cur.backendID
	}
	if !s.beginRelay() {
		return replayLostAgain, "the route changed again before the statement in flight could run again"
	}
	mark := r.markCommit()
	if mark {
		s.awaitReplays()
		// The COMMIT runs again with a new marker, in the same round trip.
		if _, err := s.sendMarker(mysqlproto.Header{}, false); err != nil {
			s.endRelay()
			return replayLostAgain, fmt.Sprintf("the new primary %s was lost: %v", s.be.t.node, err)
		}
	}
	if err := s.sendRecorded(s.be, e, id); err != nil {
		s.endRelay()
		return replayLostAgain, fmt.Sprintf("the new primary %s was lost: %v", s.be.t.node, err)
	}
	r.cur, r.hashing, r.fl.active = idx, true, true
	r.h.Reset()
	if result, why := s.relayAgain(cmd, kindOf(cmd), "the statement", mark); result != replayOK {
		return result, why
	}
	if s.lastOK {
		cls := s.cls
		if e.st != nil {
			cls = e.st.class
		}
		s.st.afterStatement(cls)
	}
	s.recordEnd()
	return replayOK, ""
}

// rerunPrepare sends the COM_STMT_PREPARE that was in flight when the
// primary was lost (kept in s.prepPacket) to the session's new backend
// after its transaction was replayed, and relays the answer as the answer
// to the client's command (the statement gets a client id as any other).
func (s *session) rerunPrepare() (string, string) {
	if !s.beginRelay() {
		return replayLostAgain, "the route changed again before the PREPARE in flight could run again"
	}
	if _, err := mysqlproto.WritePacket(s.be.conn, 0, s.prepPacket); err != nil {
		s.endRelay()
		return replayLostAgain, fmt.Sprintf("the new primary %s was lost: %v", s.be.t.node, err)
	}
	return s.relayAgain(mysql.COM_STMT_PREPARE, respPrepare, "the PREPARE", false)
}

// relayAgain relays the response to command cmd (of kind), sent again on
// the session's new backend after a replay, as the answer to the client's
// command; what names it in messages ("the statement"); with mark a
// commit marker went before it and its answer comes first. It returns
// replayOK, or the result label and why it failed.
func (s *session) relayAgain(cmd byte, kind responseKind, what string, mark bool) (string, string) {
	s.seq, s.in, s.out, s.lastOK = 0, 0, 0, false
	s.acquire()
	answered, err := false, error(nil)
	if mark {
		answered, err = s.markAnswer()
	}
	if err == nil && !answered {
		err = s.relay(cmd, kind)
	}
	if rerr := s.release(); err == nil {
		err = rerr
	}
	cut, _, wrote := s.endRelay()
	s.srv.bytesOut.Add(float64(s.out))
	if wrote && (cut != "" || err != nil) {
		s.log.Info("closing session: the new primary was lost too while " + what + " ran again, after part of its response was sent")
		return closeRouteChanged, ""
	}
	if cut != "" {
		return replayLostAgain, "the new primary left the route too while " + what + " ran again: " + cut
	}
	if err != nil {
		if clientReason(err) == closeClientGone {
			return closeClientGone, ""
		}
		return replayLostAgain, fmt.Sprintf("%s in flight failed again on %s: %v", what, nodeName(s.be), err)
	}
	s.l.queries.Inc()
	if be := s.be; be != nil {
		be.counter.countQuery()
	}
	return replayOK, ""
}

// describe names recorded statement e for messages: the start of its text.
func (r *replayLog) describe(s *session, e *replayEntry) string {
	var text []byte
	if e.st != nil {
		text = e.st.text
	} else {
		text = r.payload(e)[1:]
	}
	q := string(text)
	if len(q) > 80 {
		q = q[:77] + "..."
	}
	return fmt.Sprintf("%q", q)
}

// errOutcomeUnknown is the error a client gets when the statement in
// flight when its primary was lost ended a transaction or was an
// autocommit write (what names it: its first keyword, "the statement"
// when unknown): MySQL error 1105 (ER_UNKNOWN_ERROR, SQLSTATE HY000).
// cause says what the proxy saw, "" for nothing more. It is never replayed:
// the primary may have committed it (with semi-sync, a replica may have it
// and the new primary with it).
func errOutcomeUnknown(what, cluster, lost, cause string) *mysql.MyError {
	if cause != "" {
		cause = " (" + strings.TrimPrefix(cause, "switchyard: ") + ")"
	}
	return errUnknown(fmt.Sprintf("switchyard: the outcome of %s is unknown (it may or may not have been committed): "+
		"the connection to primary %s of cluster %s was lost while it ran%s; check before retrying; the session continues on the primary the controller names",
		what, orText(lost, "?"), cluster, cause))
}

// errReplayFailed is the error a client gets when its transaction was
// interrupted by the loss of its primary and could not be replayed: MySQL
// error 1105 (ER_UNKNOWN_ERROR, SQLSTATE HY000).
func errReplayFailed(cluster, lost, why string, inflight bool) *mysql.MyError {
	stmt := "the statement was not run"
	if inflight {
		stmt = "nothing of the statement that was running was kept"
	}
	return errUnknown(fmt.Sprintf("switchyard: your transaction was rolled back: the primary %s of cluster %s was lost while it was open "+
		"and it could not be replayed: %s; %s; the session continues on the current primary: run the transaction again",
		orText(lost, "?"), cluster, strings.TrimSuffix(strings.TrimPrefix(why, "switchyard: "), "; the statement was not run"), stmt))
}

// errCodeOf is the error code of ERR packet payload p (0 when too short).
func errCodeOf(p []byte) uint16 {
	if len(p) < 3 {
		return 0
	}
	return uint16(p[1]) | uint16(p[2])<<8
}
