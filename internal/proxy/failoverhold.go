package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Holding statements while the primary is lost (a crash failover). A
// primary listener learns that its primary is gone when a session's
// backend connection dies (the server's FIN or RST, seen in flight or, for
// an idle session, by a non-blocking peek before the next command is
// forwarded), when a connect to it is refused or times out, or when the
// cluster state enters PhaseFailover (no primary). If an automatic failover
// can come — clusters[].failover.mode auto and hold on, and the
// controller's published AutoFailover ready (no maintenance, block or
// disable, a promotable replica), or the failover already running — the
// session waits (awaitPrimary) for a snapshot whose primary is another
// node, or the same node answering this proxy's check again, at most
// failover.max_hold, and then goes on there with its session state
// (migrate.go):
//
//   - a statement not yet sent, and a new login, wait and run on the new
//     primary: the client sees latency only;
//   - an idle session whose backend died moves like after a switchover;
//   - a statement in flight when the connection died, of which nothing
//     reached the client, that the server provably never ran (notExecuted:
//     writing it failed, or the server's kernel reset the connection, which
//     it does only when the command was still unread in its socket or
//     arrived after the process was gone) is sent again on the new primary
//     like a statement not yet sent, when it is an autocommit text-protocol
//     statement or an autocommit COM_STMT_EXECUTE (re-prepared there, its
//     statement id mapped: rerunExecute);
//   - otherwise, a statement in flight of which nothing reached the
//     client: a single autocommit SELECT (text protocol)
//     without locking clauses is run again on the new primary; another
//     read gets error 1105 saying it was abandoned (errReadAbandoned), a
//     write error 1105 saying its outcome is unknown (errLostInFlight); the
//     session continues;
//   - a session in a transaction gets one error saying the transaction was
//     rolled back by the loss of the primary (primaryLostInTx) and
//     continues.
//
// Where no automatic failover can come (manual mode, maintenance, a block,
// no candidate, failover.hold off) nothing is held: the statement gets
// error 1105 at once with the reason and what an operator must do
// (errPrimaryRefused), counted in
// switchyard_primary_lost_refused_total{cluster,reason}. Once the
// controller declares the primary dead (topo.ClusterState.PrimaryLost:
// DeadPrimary confirmed in failover.confirm_rounds rounds, the rule an
// automatic failover starts on) and no automatic failover comes, a frozen
// or blackholed primary that still completes TCP connects is not tried
// any more: new statements, pings and logins get that error at once,
// without a backend connect, and the statements in flight there are cut
// (errCutLost: outcome unknown) instead of waiting for the server to wake
// (lostNow, cutLostPrimary). Before that verdict a busy primary is never
// treated as dead; after it, the first check of this proxy that finds the
// primary answering again ends the refusals. The peers that do
// the same: MaxScale's readwritesplit delayed_retry (a failed statement is
// retried on the next server until delayed_retry_timeout) and Vitess's
// vtgate buffer (enable_buffer: primary traffic stalls for a bounded
// window per request during a failover).

// lostPoll is how often a held session looks at this proxy's own check of
// the lost node (snapshot changes wake it at once).
const lostPoll = 20 * time.Millisecond

// Refusal classes of switchyard_primary_lost_refused_total besides
// the topo.Auto* classes.
const (
	refusedHoldOff = "hold_off" // failover.hold is false
	refusedMaxHold = "max_hold" // no new primary within failover.max_hold
	refusedFenced  = "fenced"   // this proxy stopped routing writes (lease lost)
)

// failoverOutlook says whether a failover of cluster's lost primary can be
// expected from st (the applied state), cl (its config) and now: "" and ""
// when the session should wait for it, else the refusal class and the
// reason for the client. Pure.
func failoverOutlook(st *topo.ClusterState, cl *config.Cluster, now time.Time) (class, why string) {
	if cl != nil && !cl.Failover.HoldOn() {
		return refusedHoldOff, "failover.hold is off, so statements are not held for a failover"
	}
	if st != nil && st.Phase == topo.PhaseFailover {
		return "", "" // the failover runs
	}
	if cl != nil && cl.Failover.Mode != config.FailoverAuto {
		return topo.AutoNotAuto, fmt.Sprintf("failover.mode is %s: an operator must run `switchyard failover --cluster %s`", cl.Failover.Mode, cl.Name)
	}
	if st == nil {
		return "", ""
	}
	if a := st.AutoFailover; a != nil {
		if a.Ready {
			return "", ""
		}
		return a.Class, a.Reason
	}
	// A controller that does not publish its readiness: judge from the
	// state's policy fields.
	switch {
	case st.Maintenance != nil:
		return topo.AutoMaintenance, fmt.Sprintf("maintenance mode is on: an operator must run `switchyard failover --cluster %s`", st.Cluster)
	case st.AutoDisabled != "":
		return topo.AutoDisabledOff, fmt.Sprintf("automatic failover is disabled (%s): an operator must run `switchyard failover --cluster %s`", st.AutoDisabled, st.Cluster)
	case st.FailoverBlock != nil && now.Before(st.FailoverBlock.Until):
		return topo.AutoBlocked, fmt.Sprintf("automatic failover is blocked until %s: an operator must run `switchyard failover --cluster %s` or `switchyard ack --cluster %s`",
			st.FailoverBlock.Until.UTC().Format(time.RFC3339), st.Cluster, st.Cluster)
	}
	return "", ""
}

// holdable reports whether primary listeners of the cluster of st would
// hold statements if the primary were lost now (cl its config): the
// sessions then keep what they need to (a copy of an autocommit read, the
// idle-connection peek). Computed once per snapshot.
func holdable(st *topo.ClusterState, cl *config.Cluster, now time.Time) bool {
	if cl == nil {
		return false
	}
	class, _ := failoverOutlook(st, cl, now)
	return class == ""
}

// notDeclared is added to the cause of a refusal for a primary that is
// only silent when no verdict came: an operator should not fail over a
// primary that is merely overloaded or paused.
const notDeclared = "the controller has not declared it dead: it may only be overloaded or paused, check it before acting"

// errPrimaryRefused is the error a statement gets at once when the
// primary is lost and no automatic failover can come: MySQL error 1105
// (ER_UNKNOWN_ERROR, SQLSTATE HY000).
// cause is what the proxy saw (a connect error), "" if nothing more.
func errPrimaryRefused(cluster, node, cause, why string) *mysql.MyError {
	if cause != "" {
		cause = " (" + strings.TrimPrefix(cause, "switchyard: ") + ")"
	}
	return errUnknown(fmt.Sprintf("switchyard: primary %s of cluster %s is unreachable%s and %s; the statement was not run",
		orText(node, "(none)"), cluster, cause, why))
}

// errLostInFlight is the error of a statement in flight (what: its first
// keyword, see lostKeyword) when its primary's connection died, whose
// outcome the proxy cannot know: MySQL error 1105, worded as
// errOutcomeUnknown.
func errLostInFlight(what, cluster, node string) *mysql.MyError {
	return errOutcomeUnknown(what, cluster, node, "")
}

// lostKeyword names the statement in flight when the primary was lost,
// for errLostInFlight: its first keyword in capitals (from the replay
// record, or the copy kept to run it again), else "the statement".
func (s *session) lostKeyword() string {
	if r := s.rlog; r != nil && r.fl.active && r.fl.wlen > 0 {
		return r.fl.keyword()
	}
	var text []byte
	if len(s.rerun) > 1 && s.rerun[0] == mysql.COM_QUERY {
		text = s.rerun[1:]
	} else if len(s.rerun) >= execHeader && s.rerun[0] == mysql.COM_STMT_EXECUTE {
		if st := s.stmts[binary.LittleEndian.Uint32(s.rerun[1:])]; st != nil {
			text = st.text
		}
	}
	if text == nil && s.lastExec != nil {
		text = s.lastExec.text // a prepared statement not kept, or kept under another id
	}
	if w, _ := firstWord(text); len(w) > 0 {
		return strings.ToUpper(string(w))
	}
	return "the statement"
}

// errMaybeWrote is the error of an autocommit SELECT whose answer was lost
// with its primary and that is not run again because it may lock or write
// (a locking clause, a stored function): it may have run there.
func errMaybeWrote(cluster, node string) *mysql.MyError {
	return errUnknown(fmt.Sprintf("switchyard: the connection to primary %s of cluster %s was lost while this statement ran and it was not run again: "+
		"it may lock or write (a locking clause, a stored function), and it may have run there; check before retrying, the session continues", node, cluster))
}

// errReadAbandoned is the error of a read in flight when its primary's
// connection died that could not be run again: MySQL error 1105.
func errReadAbandoned(cluster, node, why string) *mysql.MyError {
	return errUnknown(fmt.Sprintf("switchyard: the connection to primary %s of cluster %s was lost while this read ran and it was not run again (%s); "+
		"retry it, the session continues", node, cluster, why))
}

// awaitPrimary waits, while the session's primary lost (a node name; ""
// when unknown) is gone, for a snapshot whose primary route is usable
// (not fenced) and is another node, or is lost again answering this
// proxy's own check after the wait began. It returns that snapshot, or the
// error to give the client: at once when no failover can come
// (failoverOutlook: manual mode, maintenance, a block, no candidate,
// failover.hold off, writes fenced), or when failover.max_hold has passed
// since the session started holding (s.holdStart, kept across the calls
// of one statement) without a new primary. Waiting is idle for the drain
// monitor and the sweeper. The session's backend must be nil.
func (s *session) awaitPrimary(lost string) (*routeSnapshot, *mysql.MyError) {
	defer func() { s.lostCause = "" }()
	cluster := s.l.cluster
	rc := s.srv.rc.Load()
	cl := rc.clusters[cluster]
	maxHold := rc.maxHold(cluster)
	now := time.Now()
	first := s.holdStart.IsZero()
	if first {
		s.holdStart = now
	}
	deadline := s.holdStart.Add(maxHold)
	s.srv.backendTrouble() // check the nodes now: the controller counts this proxy's view
	s.held.Store(true)
	defer s.held.Store(false)
	prevBusy := s.busy.Swap(0)
	defer s.busy.Store(prevBusy &^ busyDetached)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		snap := s.l.route.snap.Load()
		if snap == nil {
			return nil, s.refusePrimary(refusedMaxHold, lost, "no routing state for this cluster yet")
		}
		if p := snap.primary; p != nil && (p.node != lost || s.srv.answeredSince(p, s.holdStart)) {
			return snap, nil
		}
		if snap.fenced != "" {
			return nil, s.refusePrimary(refusedFenced, lost, "this proxy stopped routing writes ("+snap.fenced+")")
		}
		verdictWait := false
		class, why := failoverOutlook(&snap.state, cl, s.srv.now())
		if class != "" {
			// A primary that went silent (a connect or greeting got no
			// answer: frozen, blackholed) may only be busy: until the
			// controller declares it dead (snap.lost) the session waits
			// for that verdict or for the primary to answer again, as
			// the hold would. A refused connect, a closed connection or
			// the verdict: the error at once.
			if !silentCause(s.lostCause) || snap.lost != nil || class == refusedHoldOff ||
				snap.primary == nil || snap.primary.node != lost {
				if snap.lost != nil && snap.primary != nil && snap.primary.node == lost {
					s.lostCause = lostCause
				}
				return nil, s.refusePrimary(class, lost, why)
			}
			verdictWait = true
		}
		if first {
			first = false
			if !verdictWait {
				s.l.route.markLost(lost) // a failover comes: replays will follow
			}
			s.srv.metrics.primaryLostHeld.WithLabelValues(cluster).Inc()
			if verdictWait {
				s.log.Info("primary silent: waiting for it to answer or for the controller's verdict", "cluster", cluster, "node", lost, "max_hold", maxHold)
			} else {
				s.log.Info("primary lost: holding the statement for the failover", "cluster", cluster, "node", lost, "max_hold", maxHold)
			}
		}
		until := deadline
		if verdictWait {
			// The verdict on a silent primary comes within about
			// failover.silence_bound of the silence; without one by then
			// (no controller running, say) waiting longer only delays
			// the error.
			if vd := s.holdStart.Add(verdictWaitBound(cl)); vd.Before(until) {
				until = vd
			}
			if !time.Now().Before(until) {
				// No automatic failover comes (verdictWait), and the
				// primary is only silent: it may be overloaded, not dead.
				if !strings.Contains(s.lostCause, notDeclared) {
					s.lostCause += "; " + notDeclared
				}
				return nil, s.refusePrimary(class, lost, why)
			}
		}
		wait := time.Until(until)
		if wait <= 0 {
			return nil, s.refusePrimary(refusedMaxHold, lost, fmt.Sprintf("no new primary was published within %s (failover.max_hold); retry it", maxHold))
		}
		if timer == nil {
			timer = time.NewTimer(min(wait, lostPoll))
		} else {
			timer.Reset(min(wait, lostPoll))
		}
		select {
		case <-snap.replaced:
		case <-timer.C:
		case <-s.srv.closing:
			return nil, errUnknown("switchyard: the proxy is shutting down")
		}
	}
}

// refusePrimary counts and logs a statement not held (or no longer held)
// for a lost primary and returns its error.
func (s *session) refusePrimary(class, node, why string) *mysql.MyError {
	s.holdStart = time.Time{}
	s.srv.metrics.primaryLostRefused.WithLabelValues(s.l.cluster, class).Inc()
	if ok, suppressed := s.srv.limit.holdRefusedLog.allow(time.Now()); ok {
		s.log.Warn("primary lost: statement refused", "cluster", s.l.cluster, "node", node, "reason", class, "why", why, "suppressed", suppressed)
	}
	return errPrimaryRefused(s.l.cluster, node, s.lostCause, why)
}

// heldDone records the end of a successful hold (the session reached a
// primary again).
func (s *session) heldDone() {
	if s.holdStart.IsZero() {
		return
	}
	s.srv.metrics.primaryLostReleased.WithLabelValues(s.l.cluster).Inc()
	s.srv.metrics.holdSeconds.Observe(time.Since(s.holdStart).Seconds())
	s.holdStart = time.Time{}
}

// lostInFailover returns the old primary when snap is a failover in
// progress (no primary yet) on a primary listener.
func (s *session) lostInFailover(snap *routeSnapshot) (string, bool) {
	if s.l.role != rolePrimary || snap == nil || snap.primary != nil || snap.fenced != "" || snap.state.Phase != topo.PhaseFailover {
		return "", false
	}
	return snap.state.OldPrimary, true
}

// connectLost reports whether merr is a failure to reach a server (a
// refused or timed-out connect, a handshake cut short) rather than a
// server's refusal, which keeps its own error number.
func connectLost(merr *mysql.MyError) bool {
	return merr != nil && merr != errRouteChanged && merr.Code == mysql.ER_UNKNOWN_ERROR
}

// primaryBackendLost handles a command on a primary listener whose backend
// connection died (EOF, RST) before anything of the response was relayed:
// see the package comment above. It returns the close reason ("" to go
// on).
func (s *session) primaryBackendLost(cmd byte, err error) string {
	node := s.be.t.node
	s.srv.backendTrouble()
	inTx := s.inTx() || s.st.locked
	if old, _ := s.setBackend(nil); old != nil {
		old.close(false)
	}
	s.snap, s.detached = nil, false
	if !inTx && cmd == mysql.COM_STMT_PREPARE && len(s.prepPacket) > 0 && !s.rerunning {
		// A PREPARE changes nothing on the server but the statement,
		// which died with it: prepare it again on the next primary
		// whether or not the lost one read it.
		return s.rerunPrepareLost(node)
	}
	if !inTx && s.resendable(cmd, err) {
		s.log.Info("the lost primary never ran the statement in flight (connection reset before any answer); sending it to the new primary",
			"node", node, "err", err)
		if cmd == mysql.COM_STMT_EXECUTE {
			return s.rerunExecute(node)
		}
		return s.rerunStatement(node, s.cls)
	}
	if inTx {
		s.lostNode = node
		_, reason := s.primaryLostInTx(cmd, true)
		return reason
	}
	if s.cls == classSelect && (cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_EXECUTE) {
		switch {
		case cmd == mysql.COM_QUERY && len(s.rerun) > 1 && !s.rerunning && rerunnableRead(s.rerun[1:]):
			return s.rerunRead(node)
		case cmd == mysql.COM_QUERY && len(s.rerun) > 1 && !s.rerunning:
			s.writeError(1, errMaybeWrote(s.l.cluster, node))
		case cmd == mysql.COM_STMT_EXECUTE:
			s.writeError(1, errReadAbandoned(s.l.cluster, node, "prepared reads are not run again"))
		default:
			s.writeError(1, errReadAbandoned(s.l.cluster, node, "reads are run again only while an automatic failover can come"))
		}
		return ""
	}
	s.srv.metrics.primaryLostInFlight.WithLabelValues(s.l.cluster).Inc()
	s.log.Warn("primary connection lost with a statement in flight; its outcome is unknown", "node", node)
	if kindOf(cmd) != respNone {
		s.writeError(1, errOutcomeUnknown(s.lostKeyword(), s.l.cluster, node, "the connection to it broke: "+err.Error()))
	}
	return ""
}

// notExecuted reports whether err, the failure of a command of which no
// byte of the response had arrived, proves that the server never ran the
// command: writing it failed (the server did not receive all of it), or
// the connection was reset. A TCP endpoint closed with data still unread
// in its receive queue answers with RST instead of FIN (RFC 2525 §2.17,
// Linux tcp_close), and so does a host whose socket is already gone; the
// server reads a whole command before it runs it, and has nothing more to
// read while it runs one. A server that read the command and then died
// (kill -9 mid-statement) closes with FIN: EOF, outcome unknown.
func notExecuted(err error) bool {
	var we *mysqlproto.WriteError
	return errors.As(err, &we) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
}

// resendable reports whether the command cmd that failed with err outside
// a transaction can be sent again on the next primary as if it had not
// been sent: the server never ran it (notExecuted), it is a text-protocol
// statement or a COM_STMT_EXECUTE whose copy was kept (keepForLoss,
// keepExecForLoss, only while a hold is possible), and no response reached
// the client.
func (s *session) resendable(cmd byte, err error) bool {
	kept := (cmd == mysql.COM_QUERY && len(s.rerun) > 1) || (cmd == mysql.COM_STMT_EXECUTE && len(s.rerun) >= execHeader)
	return kept && s.rerun[0] == cmd && !s.rerunning && s.out == 0 && notExecuted(err) &&
		s.l.role == rolePrimary && !s.inTx() && !s.st.locked
}

// execHeader is the fixed start of a COM_STMT_EXECUTE payload: command
// byte, statement id (4), flags (1), iteration count (4).
const execHeader = 10

// keepExecForLoss keeps, before the COM_STMT_EXECUTE payload p (nil when
// it does not fit the read buffer) of statement st (client id id) is
// forwarded on a primary listener where a hold is possible, a copy of it
// with the client's statement id, to send it again on the next primary if
// the lost one provably never ran it (notExecuted). Only an autocommit
// execute is kept, without a cursor asked for (flags 0: the cursor would
// belong to the lost server) and without long data sent before it (that
// went to the lost server only). Nothing otherwise; any copy of an
// earlier command is dropped.
func (s *session) keepExecForLoss(p []byte, id uint32, st *stmtInfo) {
	s.rerun, s.commitSent = s.rerun[:0], false
	if st == nil || len(p) < execHeader || p[5] != 0 || st.longData || s.l.role != rolePrimary ||
		s.inTx() || s.st.locked || !s.l.route.snap.Load().holdOn {
		return
	}
	s.rerun = append(s.rerun, p...)
	binary.LittleEndian.PutUint32(s.rerun[1:], id)
}

// rerunExecute sends the autocommit COM_STMT_EXECUTE saved in s.rerun,
// which the lost primary never ran (notExecuted), once a primary is back
// (held like a new statement): the session's statements are prepared again
// there when it moves (migrate.go), the kept packet gets the new backend's
// statement id, and the parameter types when the new backend has none yet
// (the client sent them only with its first execute). Its response is
// relayed as the answer to the client's command. It returns the close
// reason.
func (s *session) rerunExecute(lost string) string {
	id := binary.LittleEndian.Uint32(s.rerun[1:])
	if merr, reason := s.moveToCurrent(); merr != nil || reason != "" {
		if merr != nil && reason == "" {
			s.writeError(1, merr)
		}
		return reason
	}
	st := s.stmts[id]
	if st == nil {
		s.writeError(1, errLostInFlight(s.lostKeyword(), s.l.cluster, lost))
		return ""
	}
	// An autocommit statement: it runs after the replays of the cluster
	// have taken their snapshots, as a new one would (rerunStatement).
	s.cls = st.class
	s.rerunRecord(mysql.COM_STMT_EXECUTE, id, st)
	p := s.rerun
	binary.LittleEndian.PutUint32(p[1:], st.backendID)
	if st.rebind {
		n := int(st.params)
		off := execHeader + (n+7)/8
		if n > 0 && len(p) > off && p[off] == 0 && len(st.types) == 2*n {
			out := make([]byte, 0, len(p)+2*n)
			out = append(out, p[:off]...)
			out = append(out, 1)
			out = append(out, st.types...)
			p = append(out, p[off+1:]...)
		}
		st.rebind = false
	}
	if !s.beginRelay() {
		s.writeError(1, errLostInFlight(s.lostKeyword(), s.l.cluster, lost))
		return ""
	}
	s.log.Info("sending a prepared statement the lost primary never ran to the new primary", "lost", lost, "node", s.be.t.node)
	s.rerunning = true
	defer func() { s.rerunning = false }()
	s.seq, s.in, s.out, s.lastOK = 0, 0, 0, false
	s.cls = st.class
	if err := writePacket(s.be.conn, 0, p); err != nil {
		return s.failCommand(mysql.COM_STMT_EXECUTE, fail(closeBackendLost, err))
	}
	s.acquire()
	err := s.relay(mysql.COM_STMT_EXECUTE, kindOf(mysql.COM_STMT_EXECUTE))
	if rerr := s.release(); err == nil {
		err = rerr
	}
	if err != nil {
		return s.failCommand(mysql.COM_STMT_EXECUTE, err)
	}
	if s.rlog != nil {
		s.recordEnd()
	}
	if s.lastOK {
		s.st.afterStatement(st.class)
		if st.userVar {
			s.st.markOpaque("set a user variable in a prepared statement")
		}
		if st.userLock {
			s.st.userLock = true
		}
	}
	s.srv.metrics.primaryLostRerun.WithLabelValues(s.l.cluster).Inc()
	return ""
}

// rerunRead runs the autocommit read saved in s.rerun again once a primary
// is back (held like a new statement), relaying its response as the
// answer to the client's command. It returns the close reason.
func (s *session) rerunRead(lost string) string { return s.rerunStatement(lost, classSelect) }

// rerunStatement sends the autocommit statement saved in s.rerun (of
// class cls) once a primary is back (held like a new statement), relaying
// its response as the answer to the client's command: a read run again,
// or a statement the lost primary never ran (notExecuted). It returns the
// close reason.
func (s *session) rerunStatement(lost string, cls sqlClass) string {
	if merr, reason := s.moveToCurrent(); merr != nil || reason != "" {
		if merr != nil && reason == "" {
			s.writeError(1, merr)
		}
		return reason
	}
	// An autocommit statement: it runs after the replays of the cluster
	// have taken their snapshots, as a new one would (recordBegin,
	// replay_snap.go) — an INSERT sent first would take the
	// auto-increment ids a replayed transaction's client was told.
	s.cls = cls
	s.rerunRecord(mysql.COM_QUERY, 0, nil)
	if !s.beginRelay() {
		s.writeError(1, errReadAbandoned(s.l.cluster, lost, "the route changed again"))
		return ""
	}
	s.log.Info("running a statement again on the new primary after the old one was lost", "lost", lost, "node", s.be.t.node)
	s.rerunning = true
	defer func() { s.rerunning = false }()
	s.seq, s.in, s.out, s.lastOK = 0, 0, 0, false
	s.cls = cls
	if err := writePacket(s.be.conn, 0, s.rerun); err != nil {
		return s.failCommand(mysql.COM_QUERY, fail(closeBackendLost, err))
	}
	s.acquire()
	err := s.relay(mysql.COM_QUERY, respResults)
	if rerr := s.release(); err == nil {
		err = rerr
	}
	if err != nil {
		return s.failCommand(mysql.COM_QUERY, err)
	}
	if s.rlog != nil {
		s.recordEnd()
	}
	s.srv.metrics.primaryLostRerun.WithLabelValues(s.l.cluster).Inc()
	return ""
}

// rerunRecord is recordBegin for a statement sent again by the proxy
// (s.rerun: its payload, the client's statement id for an execute) after
// the lost primary never ran it: the record the first send made (a BEGIN,
// counted among the transactions open on the lost node, which the other
// sessions' statements would wait for) is replaced by this one, after the
// cluster's replays have taken their snapshots. Without transaction
// replay, it only waits for them.
func (s *session) rerunRecord(cmd byte, stmtID uint32, st *stmtInfo) {
	if s.rlog == nil {
		s.awaitSnapshots()
		return
	}
	s.rlog.reset()
	s.recordBegin(cmd, s.rerun, stmtID, st)
}

// rerunPrepareLost sends the COM_STMT_PREPARE in flight outside a
// transaction when the primary lost was lost (kept in s.prepPacket) to the
// next primary once there is one (held like a new statement; where no
// failover can come, the client gets the error saying so), and relays its
// answer as the answer to the client's command. It returns the close
// reason.
func (s *session) rerunPrepareLost(lost string) string {
	if merr, reason := s.moveToCurrent(); merr != nil || reason != "" {
		if merr != nil && reason == "" {
			s.writeError(1, merr)
		}
		return reason
	}
	if !s.beginRelay() {
		s.writeError(1, errUnknown(fmt.Sprintf("switchyard: the connection to primary %s of cluster %s was lost while this PREPARE ran and the route changed again; "+
			"prepare it again, the session continues", lost, s.l.cluster)))
		return ""
	}
	s.log.Info("preparing a statement again on the new primary after the old one was lost", "lost", lost, "node", s.be.t.node)
	s.rerunning = true
	defer func() { s.rerunning = false }()
	s.seq, s.in, s.out, s.lastOK = 0, 0, 0, false
	if err := writePacket(s.be.conn, 0, s.prepPacket); err != nil {
		return s.failCommand(mysql.COM_STMT_PREPARE, fail(closeBackendLost, err))
	}
	s.acquire()
	err := s.relay(mysql.COM_STMT_PREPARE, respPrepare)
	if rerr := s.release(); err == nil {
		err = rerr
	}
	if err != nil {
		return s.failCommand(mysql.COM_STMT_PREPARE, err)
	}
	return ""
}

// keepForLoss keeps, before the COM_QUERY payload p (command byte + text)
// is forwarded on a primary listener where a hold is possible, what a
// lost primary needs: a copy of an autocommit statement (a read, to run it
// again; another statement, to send it again if the lost primary never ran
// it), and whether a transaction's statement is its COMMIT. Nothing
// otherwise.
func (s *session) keepForLoss(p []byte) {
	s.rerun, s.commitSent = s.rerun[:0], false
	if s.l.role != rolePrimary || !s.l.route.snap.Load().holdOn {
		return
	}
	switch {
	case s.inTx() || s.st.locked:
		s.commitSent = isCommit(p[1:])
	case s.cls == classSelect, s.cls == classOther:
		// A read, to run again; any other statement, to send again only
		// if the lost primary provably never ran it (notExecuted).
		s.rerun = append(s.rerun, p...)
	}
}

// peerGone reports, without blocking or allocating, whether the server
// closed be's connection (or sent something unasked, which it does only
// when closing it): the idle check before a command is forwarded while a
// failover hold is possible.
func (s *session) peerGone(be *backend) bool {
	if be.fd < 0 || be.closed.Load() {
		return false
	}
	// 0: EOF (n 0) or unasked data (n 1); EAGAIN: nothing to read, alive.
	return fdPeerClosed(be.fd, &s.peekByte)
}

// lostPrimary is the controller's verdict that the primary is dead with no
// automatic failover coming, as a routing snapshot carries it.
type lostPrimary struct {
	node, class, why string
	// seen is when this proxy first applied the verdict: a check of its
	// own that began later and found the node answering ends it.
	seen time.Time
}

// lostVerdict returns the lostPrimary of snap (cr.mu held): the state's
// PrimaryLost when it names snap's primary in its epoch, the phase is
// stable, writes are not fenced and failoverOutlook (cl its config) says
// no automatic failover comes; else nil. The reason given to clients is
// failoverOutlook's (the controller's when failover.hold is off).
func (cr *clusterRoute) lostVerdict(snap *routeSnapshot, cl *config.Cluster, now time.Time) *lostPrimary {
	pl := snap.state.PrimaryLost
	if pl == nil || snap.primary == nil || pl.Node != snap.primary.node || pl.Epoch != snap.state.Epoch ||
		snap.state.Phase != topo.PhaseStable || snap.fenced != "" {
		cr.lostKey = ""
		return nil
	}
	class, why := failoverOutlook(&snap.state, cl, now)
	if class == "" {
		return nil // a failover can come: the hold applies
	}
	if class == refusedHoldOff {
		class, why = pl.Class, pl.Reason
	}
	key := fmt.Sprintf("%s|%d|%s", pl.Node, pl.Epoch, pl.Since.UTC().Format(time.RFC3339Nano))
	if cr.lostKey != key {
		cr.lostKey, cr.lostSeen = key, time.Now()
	}
	return &lostPrimary{node: pl.Node, class: class, why: why, seen: cr.lostSeen}
}

// lostNow returns snap's lost primary unless a check of this proxy that
// began after the verdict was applied found it answering (it woke up, the
// partition healed: the controller clears the verdict at its next round).
func (s *Server) lostNow(snap *routeSnapshot) *lostPrimary {
	if snap == nil || snap.lost == nil || snap.primary == nil {
		return nil
	}
	if s.answeredSince(snap.primary, snap.lost.seen) {
		return nil
	}
	return snap.lost
}

// lostWhy is the cut reason of a statement in flight on a lost primary.
func (lp *lostPrimary) lostWhy() string {
	return fmt.Sprintf("the controller declared %s dead (DeadPrimary) and %s", lp.node, lp.why)
}

// cutLostPrimary cuts every command in flight on primary listeners of
// cluster on the lost primary lp: a frozen server would answer them only
// when it wakes, if ever. The clients get errCutLost (outcome unknown).
func (s *Server) cutLostPrimary(cluster string, lp *lostPrimary) {
	why := lp.lostWhy()
	n := s.cutWhere(cluster, func(role string, t *target) string {
		if role == rolePrimary && t.node == lp.node {
			return why
		}
		return ""
	}, true)
	if n > 0 {
		s.log.Warn("cut commands in flight on a primary declared lost", "cluster", cluster, "node", lp.node, "sessions", n, "reason", lp.class)
	}
}

// refuseLost answers the pending command cmd at once with the refusal
// when the session's primary is declared lost (lostNow) and the session is
// on it or has no backend: nothing is sent to the server. It reports
// whether it answered, and the close reason.
func (s *session) refuseLost(cmd byte) (bool, string) {
	if s.l.role != rolePrimary || cmd == mysql.COM_PROCESS_KILL {
		return false, ""
	}
	lp := s.srv.lostNow(s.l.route.snap.Load())
	if lp == nil || (s.be != nil && s.be.t.node != lp.node) {
		return false, ""
	}
	s.lostCause = lostCause
	merr := s.refusePrimary(lp.class, lp.node, lp.why)
	s.lostCause = ""
	if s.be != nil && s.inTx() {
		// The session keeps its connection: a frozen or cut-off primary
		// that answers again still holds the transaction.
		e := *merr
		e.Message += fmt.Sprintf("; your transaction is still open on %s: it goes on there (COMMIT or ROLLBACK) if the node answers again, and is lost if the node is replaced", lp.node)
		merr = &e
	}
	return s.answerCommand(cmd, merr)
}

// lostCause is the cause errPrimaryRefused names for a primary declared
// lost.
const lostCause = "the controller declared it dead (DeadPrimary)"

// silentCause reports whether cause, the connect error that found the
// primary lost (session.lostCause), means the server gave no answer (a
// timeout, no route) rather than a refusal or reset from its host.
func silentCause(cause string) bool {
	return cause != "" && cause != lostCause && !strings.Contains(cause, "connection refused") &&
		!strings.Contains(cause, "connection reset")
}

// verdictWaitBound is how long a session facing a silent primary waits for
// the controller's verdict (or the primary's answer) when no automatic
// failover can come: failover.silence_bound (1.2s when unset) + 500ms,
// past the longest freeze that is never declared dead.
func verdictWaitBound(cl *config.Cluster) time.Duration {
	b := config.DefaultSilenceBound
	if cl != nil && cl.Failover.SilenceBound.D() > 0 {
		b = cl.Failover.SilenceBound.D()
	}
	return b + 500*time.Millisecond
}
