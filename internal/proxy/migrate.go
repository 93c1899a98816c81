package proxy

import (
	"bufio"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Session migration. When a session's backend stops being a valid route
// (switchover, failover, a replica that stops serving or is drained) the
// session moves at its next command, before forwarding it: a new backend
// connection is logged in as the client's user with its capabilities,
// charset, default schema and connect attributes, and one pipelined
// round trip rebuilds the rest — a SET with every tracked system variable
// and literal user variable (sessionstate.go) followed by a
// COM_STMT_PREPARE of every prepared statement (stmts.go). The client sees
// nothing but latency. A session whose state cannot be rebuilt (see
// unmigratable) gets one error and is closed; that is counted in
// switchyard_proxy_session_migrations_failed_total.

// restoreTimeout bounds rebuilding a session on a new backend (login
// excluded).
const restoreTimeout = 5 * time.Second

// migrateAttempts is how many times a move tries to connect to its new
// backend when the connect or handshake fails (not when the server refuses
// the login).
const migrateAttempts = 3

// setupOpts says what setupBackend sends, in this order: COM_RESET_CONNECTION
// (a pooled connection of another session, pool.go), COM_INIT_DB of
// initDB (when not empty), the SET that switches session tracking on
// (tracking: a new or reset connection) or, with restore, the one that
// also rebuilds the session's variables (replaySQL), and with restore a
// COM_STMT_PREPARE per prepared statement.
//
// reselect marks initDB as the schema the connection already has, selected
// again after the reset (which takes character_set_database and
// collation_database from their global values): the server refusing it
// (the schema was dropped meanwhile) leaves the connection as it was and
// is no error, as the reset alone was not.
type setupOpts struct {
	reset    bool
	initDB   string
	reselect bool
	tracking bool
	restore  bool
}

// setupBackend readies a backend connection for the session in one
// pipelined round trip (setupOpts); the new statement ids go to
// be.restored. A COM_INIT_DB the server refuses (1049 unknown database,
// 1044 access denied) returns the server's error as it is.
func (s *session) setupBackend(be *backend, br *bufio.Reader, o setupOpts) *mysql.MyError {
	t := be.t
	be.setupWarned = false
	var ids []uint32
	var out []byte
	globals := s.srv.globalsGen.Load()
	if o.reset {
		out, _ = mysqlproto.AppendPacket(out, 0, []byte{mysql.COM_RESET_CONNECTION})
	}
	if o.initDB != "" {
		out, _ = mysqlproto.AppendPacket(out, 0, append([]byte{mysql.COM_INIT_DB}, o.initDB...))
	}
	set := be.tracked && (o.tracking || o.restore)
	if set {
		q := trackingSQL
		if o.restore {
			q = s.st.replaySQL() + s.trk.restoreSQL() + s.insertIDSQL()
		}
		out, _ = mysqlproto.AppendPacket(out, 0, append([]byte{mysql.COM_QUERY}, q...))
	}
	if o.restore {
		ids = s.stmtIDsSorted()
		for _, id := range ids {
			out, _ = mysqlproto.AppendPacket(out, 0, append([]byte{mysql.COM_STMT_PREPARE}, s.stmts[id].text...))
		}
	}
	if len(out) == 0 {
		return nil
	}
	if _, err := be.conn.Write(out); err != nil {
		return errUnknown(fmt.Sprintf("switchyard: backend %s (%s): setting up the session failed: %v", t.node, t.addr, err))
	}
	// Every response is read, even after an error, so that the connection
	// stays in step.
	var first *mysql.MyError
	readOK := func(what string, keep bool) {
		p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
		var merr *mysql.MyError
		switch {
		case err != nil:
			merr = errUnknown(fmt.Sprintf("switchyard: backend %s (%s): setting up the session failed: %v", t.node, t.addr, err))
		case len(p) > 0 && p[0] == mysql.ERR_HEADER:
			e := serverERR(p)
			if keep {
				merr = e
			} else {
				merr = errUnknown(fmt.Sprintf("switchyard: backend %s (%s) refused %s (error %d: %s)", t.node, t.addr, what, e.Code, e.Message))
			}
		default:
			if st, ok := mysqlproto.OKStatus(p); ok {
				be.status = st
			}
			be.setupWarned = okWarnings(p) > 0
		}
		if first == nil {
			first = merr
		}
	}
	if o.reset {
		readOK("COM_RESET_CONNECTION", false)
		if first == nil {
			be.globals = globals
		}
	}
	if o.initDB != "" {
		before := first
		readOK("the default schema", true)
		if o.reselect && before == nil && first != nil && !connectLost(first) {
			first = nil
		}
	}
	if set {
		readOK("the session's variables", false)
	}
	if first != nil && connectLost(first) && !o.restore {
		return first
	}
	be.resend = nil
	if len(ids) > 0 {
		be.restored = make(map[uint32]uint32, len(ids))
	}
	for _, id := range ids {
		newID, resend, merr := s.readPrepared(br, be, s.stmts[id])
		if merr != nil {
			return merr
		}
		be.restored[id] = newID
		if resend != nil {
			if be.resend == nil {
				be.resend = map[uint32]*metaResend{}
			}
			be.resend[id] = resend
		}
	}
	return first
}

// readPrepared reads the response to a COM_STMT_PREPARE sent by
// setupBackend and checks it matches the statement as first prepared. With
// metadata caching, the result column definitions are returned when they
// differ from those the client holds (st.meta: the table changed since the
// client last got them): the server counts them as sent and may leave them
// out of the next execute, which must then bring them to the client.
func (s *session) readPrepared(br *bufio.Reader, be *backend, st *stmtInfo) (uint32, *metaResend, *mysql.MyError) {
	t := be.t
	p, _, err := mysqlproto.ReadPacket(br, nil, 0)
	if err != nil {
		return 0, nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s): preparing the session's statements again failed: %v", t.node, t.addr, err))
	}
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		e := mysqlproto.ParseERR(p)
		return 0, nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) cannot prepare one of the session's statements again (error %d: %s)", t.node, t.addr, e.Code, e.Message))
	}
	ok, err := mysqlproto.ParseStmtPrepareOK(p)
	if err != nil {
		return 0, nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s): bad answer preparing a statement again: %v", t.node, t.addr, err))
	}
	var cols metaSum
	var defs [][]byte
	for i, n := range []uint16{ok.Params, ok.Columns} {
		if n == 0 {
			continue
		}
		for j := range int(n) + 1 {
			if j == int(n) && s.deprecateEOF() {
				break
			}
			p, _, err := mysqlproto.ReadPacket(br, nil, 0)
			if err != nil {
				return 0, nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s): preparing the session's statements again failed: %v", t.node, t.addr, err))
			}
			if i == 1 && j < int(n) && s.cacheMeta() {
				cols.add(s.srv.metaSeed, p, s.ext)
				defs = append(defs, p)
			}
		}
	}
	var resend *metaResend
	if s.cacheMeta() && cols != st.meta {
		// The server would leave the definitions out of the next
		// execute (it sent them with this prepare, to the proxy) while
		// the client holds others: that execute brings these.
		resend = &metaResend{defs: defs, sum: cols}
	}
	if ok.Params != st.params {
		return 0, nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) prepares a statement of this session with %d parameters, not %d as before",
			t.node, t.addr, ok.Params, st.params))
	}
	return ok.StatementID, resend, nil
}

// inTx reports whether the session has a transaction open.
func (s *session) inTx() bool { return s.status&mysql.SERVER_STATUS_IN_TRANS != 0 }

// txBits is the busy bit for the transaction state.
func (s *session) txBits() uint32 {
	if s.inTx() || s.st.locked {
		return busyTx
	}
	return 0
}

// reroute runs when the cluster's snapshot changed since the session last
// looked, or its backend was closed by the sweeper, with command cmd
// pending. Primary listeners hold the command during a switchover; a
// session whose backend is no longer a valid route moves (or its
// transaction is ended). It reports whether it answered the command itself,
// or a close reason.
func (s *session) reroute(cmd byte) (answered bool, reason string) {
	for {
		snap := s.l.route.snap.Load()
		hp := snap.hold
		if hp == nil || s.l.role != rolePrimary || s.inTx() || s.st.locked {
			if hp != nil && s.l.role == rolePrimary && hp.fencing() && s.be != nil && hp.from == s.be.t.node {
				return s.abortTx(snap, cmd, fmt.Sprintf("it was still open when the drain bound (switchover.drain_timeout) passed and the old primary %s was fenced", hp.from))
			}
			// Without a hold, or the drain: finish the transaction on
			// the old primary.
			answered, reason := s.follow(snap, cmd)
			if reason == closeReroute {
				continue // the route changed while waiting for a pooled connection
			}
			return answered, reason
		}
		if cmd == mysql.COM_PING {
			// Health checks of pools are answered at once: a ping runs no
			// statement and needs no primary.
			return s.answerPing()
		}
		if answered, reason := s.holdCommand(hp, cmd); answered || reason != "" {
			return answered, reason
		}
		if prev := s.busy.Swap(busyCmd); prev&busyDetached != 0 {
			s.detached = true
		}
		if next := s.l.route.snap.Load(); next.hold == nil && next.primary != nil && next.primary.node == hp.from &&
			reportedDead(&next.state, hp.from) && !s.srv.reachable(next.primary) {
			// The switchover was rolled back to a primary the controller
			// found dead and this proxy cannot reach (it died or froze
			// during the drain): the statement waits for the failover as
			// one that found its primary lost, instead of being sent to
			// it.
			s.log.Info("switchover rolled back to a primary this proxy cannot reach: holding the statement for the failover", "node", hp.from)
			s.lostCause = s.srv.reachError(next.primary)
			if _, merr := s.awaitPrimary(hp.from); merr != nil {
				return s.answerCommand(cmd, merr)
			}
			// The next loop follows the snapshot it returned (a move when
			// the primary changed).
		}
	}
}

// answerPing answers the pending COM_PING with an OK from the proxy.
func (s *session) answerPing() (bool, string) {
	if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
		return true, clientReason(err)
	}
	ok := mysqlproto.OK{Status: s.status &^ mysql.SERVER_SESSION_STATE_CHANGED}
	if err := s.writeDirect(1, mysqlproto.AppendOK(nil, s.caps, &ok)); err != nil {
		return true, closeClientGone
	}
	return true, ""
}

// follow makes the session route by snap: it stays when its backend is
// still valid, otherwise moves (idle), finishes its transaction where it is
// (replica listeners) or has its transaction ended (primary listeners). A
// backend that is still the route but whose server closed the connection
// (checked without blocking each time the snapshot changed: a switchover
// that fenced the old primary, killing its client connections, and then
// rolled back leaves the same primary; a primary that crashed) is
// reconnected like a move, so statements held by the aborted switchover run
// on the old primary. On primary listeners a session whose primary was lost
// (its connection died, or the cluster is failing over) waits for the new
// primary when a failover can come (failoverhold.go); in a transaction it
// gets one error (primaryLostInTx).
func (s *session) follow(snap *routeSnapshot, cmd byte) (bool, string) {
	rc := s.srv.rc.Load()
	fallback := rc.fallback(s.l.cluster)
	if s.be != nil && !s.detached && snap.valid(s.l.role, fallback, s.be) {
		if !peerClosed(s.be.sock()) {
			if snap.hold == nil || s.l.role != rolePrimary {
				s.snap = snap
			}
			return false, ""
		}
		// The route is the same but the server closed this connection
		// meanwhile (the fence of a switchover that was rolled back
		// killed it, or the server went away): reconnect like a move.
		s.log.Info("backend connection closed by the server while the session was idle; reconnecting", "node", s.be.t.node)
		s.detached, s.beLost = true, true
	}
	if (s.inTx() || s.st.locked) && s.be != nil {
		if s.l.role == roleReplica && !s.detached {
			return false, "" // let the read transaction end where it is; move after
		}
		if old, failing := s.lostInFailover(snap); s.beLost || (failing && old == s.be.t.node) {
			s.lostNode = s.be.t.node
			s.beLost = false
			return s.primaryLostInTx(cmd, false)
		}
		why := fmt.Sprintf("the primary of cluster %s changed (epoch %d) while it was open", s.l.cluster, snap.stateEpoch())
		if s.rlog != nil {
			// Transaction replay (replay.go).
			if handled, answered, reason := s.replayOnLoss(cmd, false, false, nodeName(s.be), why); handled {
				return answered, reason
			}
		}
		return s.abortTx(snap, cmd, why)
	}
	return s.migrate(snap, rc, cmd)
}

// abortTx ends the session's transaction: the pending command is answered
// with an error saying the transaction was rolled back, the backend
// connection is closed (the server rolls back what is left), and the session
// moves to the current route at its next command.
func (s *session) abortTx(snap *routeSnapshot, cmd byte, why string) (bool, string) {
	old, _ := s.setBackend(nil)
	if old != nil {
		old.close(false)
	}
	s.status &^= mysql.SERVER_STATUS_IN_TRANS
	s.st.locked = false
	s.snap = nil
	s.detached = false
	s.srv.metrics.txAborted.WithLabelValues(s.l.name).Inc()
	s.log.Info("transaction ended by a primary change", "why", why)
	return s.endTx(cmd, errUnknown(fmt.Sprintf(
		"switchyard: your transaction was rolled back: %s; the statement was not run; the session continues on the current primary: run the transaction again", why)))
}

// unmigratable says why the session's state cannot be rebuilt on another
// backend, or "".
func (s *session) unmigratable() string {
	switch {
	case s.inTx():
		return "has a transaction open"
	case s.st.locked:
		return "holds table locks (LOCK TABLES)"
	case s.st.userLock:
		return "took a user lock (GET_LOCK)"
	case s.st.txChars:
		return "set characteristics for its next transaction (SET TRANSACTION)"
	case s.st.opaque != "":
		return s.st.opaque
	}
	for _, st := range s.stmts {
		switch {
		case st.longData:
			return "is sending long data to a prepared statement"
		case st.cursor:
			return "has a cursor open"
		}
	}
	return ""
}

// migrate moves an idle session to snap's route, with cmd pending. It
// reports whether it answered cmd (a primary listener whose primary is
// lost and no failover came: the session continues without a backend), or
// a close reason after answering the client with an error.
func (s *session) migrate(snap *routeSnapshot, rc *runtimeConfig, cmd byte) (bool, string) {
	old := s.be
	if why := s.unmigratable(); why != "" {
		t, _ := snap.pick(s.l.role, rc.fallback(s.l.cluster))
		to := "the new route"
		if t != nil {
			to = t.node
		}
		s.srv.metrics.migrationsFailed.WithLabelValues(s.l.name, "state").Inc()
		s.writeError(1, errUnknown(fmt.Sprintf(
			"switchyard: this session cannot be moved to %s (cluster %s, epoch %d): it %s; the session is closed, reconnect",
			to, s.l.cluster, snap.stateEpoch(), why)))
		s.log.Info("closing session: route changed and its state cannot be moved", "from", nodeName(old), "to", to, "why", why)
		return false, closeRouteChanged
	}
	s.beLost = false
	merr, reason := s.moveTo(snap, rc)
	switch {
	case merr == nil:
		return false, ""
	case reason == closeReroute:
		return false, reason // reroute looks at the new snapshot
	case reason == "", reason == closeNoRoute:
		// The primary is lost and no new one came, or the cluster has no
		// route for this listener now (no primary published, writes
		// refused while this proxy has no registration): this command
		// fails with the reason, the session stays and looks for a route
		// again at its next command.
		return s.answerCommand(cmd, merr)
	}
	s.writeError(1, merr)
	return false, reason
}

// moveTo connects the session to snap's route, rebuilding its state, and
// installs the new backend (closing the old one). On a primary listener
// whose primary is lost — the snapshot is a failover without a primary
// yet, or the connect is refused or times out — it waits for the next primary (awaitPrimary) and tries
// again. It returns nil on success; otherwise the error for the client
// with a close reason, or with "" when the session may go on without a
// backend (the primary was lost and none came; error 1040: no pooled
// connection came free, the server or this host is out of connections),
// or errRouteChanged with closeReroute when the route changed while it
// waited for a pooled connection.
func (s *session) moveTo(snap *routeSnapshot, rc *runtimeConfig) (*mysql.MyError, string) {
	old := s.be
	for {
		if failed, ok := s.lostInFailover(snap); ok && snap.lossCheck {
			if old != nil {
				s.setBackend(nil)
				old.close(false)
				old = nil
			}
			var merr *mysql.MyError
			if snap, merr = s.awaitPrimary(failed); merr != nil {
				return merr, ""
			}
		}
		t, merr := snap.pickAvoiding(s.l.role, rc.fallback(s.l.cluster), func(t *target) bool { return !s.srv.reachable(t) })
		if merr != nil {
			t, merr = snap.pick(s.l.role, rc.fallback(s.l.cluster))
		}
		if merr != nil {
			return merr, closeNoRoute
		}
		if lp := s.srv.lostNow(snap); lp != nil && s.l.role == rolePrimary && t.node == lp.node {
			// Declared dead with no failover coming: no connect to it.
			if old != nil {
				s.setBackend(nil)
				old.close(false)
			}
			s.lostCause = lostCause
			merr := s.refusePrimary(lp.class, lp.node, lp.why)
			s.lostCause = ""
			return merr, ""
		}
		if s.l.role == rolePrimary && snap.lossCheck && !s.srv.reachable(t) {
			// This proxy's own check cannot connect to the primary (a
			// partition): hold for the failover at once rather than
			// wait out a connect timeout first.
			if old != nil {
				s.setBackend(nil)
				old.close(false)
				old = nil
			}
			s.lostCause = "this proxy's check cannot connect to " + t.node + ": " + s.srv.reachError(t)
			if snap, merr = s.awaitPrimary(t.node); merr != nil {
				return merr, ""
			}
			if snap.primary != nil && snap.primary.node == t.node {
				time.Sleep(lostPoll) // answered a check again: no tight loop if a connect disagrees
			}
			continue
		}
		t, be, _, merr := s.connectRoute(t, snap, rc, true)
		if merr == errRouteChanged {
			return merr, closeReroute
		}
		if connectLost(merr) && s.l.role == rolePrimary && snap.lossCheck {
			// The primary does not answer: hold for the failover (or get
			// the reason none can come at once).
			if old != nil {
				s.setBackend(nil)
				old.close(false)
				old = nil
			}
			s.lostCause = merr.Message
			time.Sleep(lostPoll) // no tight loop when the node's check and a connect disagree
			if snap, merr = s.awaitPrimary(t.node); merr != nil {
				return merr, ""
			}
			continue
		}
		for attempt := 1; connectLost(merr) && attempt < migrateAttempts; attempt++ {
			// A connect or handshake that timed out (a busy server right
			// after a promotion): the session waits a little longer rather
			// than fail. Server refusals (access denied, too many
			// connections) are not retried.
			s.log.Info("moving the session: connecting to the new route failed; retrying", "node", t.node, "attempt", attempt, "err", merr.Message)
			time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
			t, be, _, merr = s.connectRoute(t, snap, rc, true)
		}
		if merr == errRouteChanged {
			return merr, closeReroute
		}
		if merr != nil && merr.Code == mysql.ER_CON_COUNT_ERROR {
			// No connection came free within proxy.pool.wait_timeout, the
			// server or this host is out of connections (localres.go):
			// MariaDB gives 1040 only at login, so a logged-in session
			// gets it for this command and keeps its state.
			s.srv.metrics.migrationsFailed.WithLabelValues(s.l.name, "limit").Inc()
			return merr, ""
		}
		if merr != nil {
			s.srv.metrics.migrationsFailed.WithLabelValues(s.l.name, "restore").Inc()
			return merr, closeBackendConnect
		}
		if _, ok := s.setBackend(be); !ok {
			be.close(true)
			return errUnknown("switchyard: the proxy is shutting down"), closeServer
		}
		if old != nil {
			old.close(true)
		}
		s.status = be.status
		s.tracked = be.tracked
		s.strip = be.tracked && s.caps&mysql.CLIENT_SESSION_TRACK == 0
		s.updateTrackFilter()
		if !s.txPool {
			// The diagnostics stayed on the old connection (movediag.go);
			// warnings of the SET that rebuilt the session are not the
			// client's.
			s.diagLost = s.ran || be.setupWarned
			s.lastDiag = s.lastDiag || be.setupWarned
		}
		if !be.sameState {
			s.applyRestored(be)
		}
		s.lastBe = be
		s.detached = false
		if snap.hold == nil || s.l.role != rolePrimary {
			s.snap = snap
		}
		s.heldDone()
		if s.returned {
			// A checkout between transactions (txpool.go), not a move.
			s.checkedOut(be)
			return nil, ""
		}
		s.srv.metrics.migrations.WithLabelValues(s.l.name).Inc()
		s.log.Debug("session moved to the new route", "from", nodeName(old), "to", t.node, "epoch", snap.stateEpoch(),
			"variables", len(s.st.vars), "user_variables", len(s.st.userVars), "statements", len(s.stmts))
		return nil, ""
	}
}

// closeReroute is moveTo's and migrate's reason when the route changed
// while the session waited for a pooled connection (errRouteChanged):
// the caller looks at the new snapshot. Never a session's close reason.
const closeReroute = "reroute"

// moveToCurrent is moveTo on the current snapshot, taken again when the
// route changes while the session waits for a pooled connection.
func (s *session) moveToCurrent() (*mysql.MyError, string) {
	for {
		merr, reason := s.moveTo(s.l.route.snap.Load(), s.srv.rc.Load())
		if reason != closeReroute {
			return merr, reason
		}
	}
}

// applyRestored installs the backend ids of the statements be prepared
// again and the definitions their next executes must bring (be.resend),
// and turns id translation on when any id differs from the client's.
func (s *session) applyRestored(be *backend) {
	s.xlate = false
	for cid, bid := range be.restored {
		st := s.stmts[cid]
		st.backendID = bid
		st.cursor, st.longData = false, false
		st.rebind = st.params > 0
		st.resend = be.resend[cid]
		if cid != bid {
			s.xlate = true
		}
		if cid > s.nextStmtID {
			s.nextStmtID = cid
		}
	}
}

// clientOK returns a login or COM_CHANGE_USER OK payload as the client
// must see it (without the session-state block for clients that did not
// ask for session tracking).
func (s *session) clientOK(p []byte) []byte {
	if s.strip {
		if st, ok := mysqlproto.OKStatus(p); ok && st&mysql.SERVER_SESSION_STATE_CHANGED != 0 {
			return stripState(nil, p)
		}
	}
	return p
}
