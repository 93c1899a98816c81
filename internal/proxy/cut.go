package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Route fencing of commands in flight. A session whose command is being
// forwarded or relayed is not moved by the sweeper (it is busy), so when its
// node stops being a valid route the command is cut instead, at once, when
// the snapshot that says so is installed (rebuild), and before the proxy
// acknowledges that snapshot's epoch in its registration (Epochs):
//
//   - primary listeners: the node is no longer the snapshot's primary (a new
//     primary, PhaseFailover with no primary, the proxy's own write fence
//     after a lost lease) or the controller quarantined it;
//   - replica listeners: the controller reports the node unreachable (its
//     last probe failed: Probe.Reachable false with Probe.At set) or
//     quarantined it.
//
// Besides, the proxy's own backend check (reachability.go, every
// probe.interval) cuts the commands in flight on a node it cannot even
// connect to — a connect that got no TCP answer within
// proxy.connect_timeout, host or network unreachable, after a first one
// bounded by probe.connect_timeout: a blackholed or vanished host — on
// every listener, so no client waits longer than about connect_timeout +
// probe.interval + probe.connect_timeout for a dead address; and backend
// sockets carry TCP keepalive and TCP_USER_TIMEOUT (tcp.go) as the last
// bound. The check reports such a node unreachable (registration) earlier,
// after two connects bounded by probe.connect_timeout; that report alone
// never cuts.
//
// A slow or busy node is never cut (its probes succeed), nor a drained one
// (drained nodes let commands in flight finish), nor a replica that stopped
// serving for lag or replication state.
//
// Cutting a command closes its backend connection and marks the session
// cut under inflight.mu. Every write of a relayed response to the client
// goes through clientGate, which takes the same mutex and refuses to write
// once the session is cut, so after the cut no byte of the old node's
// response — in particular no OK of a write — reaches the client: the
// response either reached the client before the snapshot was acknowledged,
// or never does. A client that does not read its socket cannot hold the
// cut up: after cutWriteBound its connection is closed.
//
// The client then gets, in place of the response, MySQL error 1105
// (ER_UNKNOWN_ERROR, SQLSTATE HY000) with a message saying what happened
// (errCutPrimary, errCutLost, errCutReplica) — or, if part of the response had already
// reached it, its connection is closed (it cannot parse an error in the
// middle of a packet). The session itself continues: its transaction, if
// one was open, is gone with the backend connection, and its next command
// moves it to the current route like an idle session (migrate.go), or gets
// the no-route error while there is none.

// cutWriteBound is how long a cut waits for a write to the client that is
// in progress (a client not reading its socket) before closing the client.
const cutWriteBound = time.Second

// errCutWrite is returned by clientGate once the session's command is cut.
var errCutWrite = errors.New("the command was cut: its node left the route")

// inflight is the per-session state shared between the session's relay and
// the cutter, under mu.
type inflight struct {
	mu    sync.Mutex
	on    bool     // a command is being forwarded or relayed on be
	be    *backend // the backend it runs on
	cut   string   // why the command was cut ("" while it was not)
	lost  bool     // cut because the node stopped answering (not a route change)
	wrote bool     // bytes of the response reached the client
}

// clientGate is the client writer of relayed responses: it refuses to
// write once the command was cut.
type clientGate struct{ s *session }

func (g clientGate) Write(p []byte) (int, error) {
	fl := &g.s.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.cut != "" {
		return 0, errCutWrite
	}
	n, err := g.s.clientWrite(p)
	if n > 0 {
		fl.wrote = true
	}
	return n, err
}

// cutReason says why a command in flight on t must be cut under snap on a
// listener of role, or "" when it may go on.
func (snap *routeSnapshot) cutReason(role string, t *target) string {
	if snap == nil || t == nil {
		return ""
	}
	if why := snap.quarantined[t.node]; why != "" {
		return fmt.Sprintf("%s was quarantined by the controller (%s)", t.node, why)
	}
	if role == roleReplica {
		if why := snap.unreachable[t.node]; why != "" {
			return fmt.Sprintf("the controller reports %s unreachable (%s)", t.node, why)
		}
		return ""
	}
	switch {
	case snap.primary.same(t):
		return ""
	case snap.fenced != "":
		return cutFenced + " (" + snap.fenced + ")"
	case snap.primary == nil:
		return fmt.Sprintf("%s is no longer the primary (epoch %d, phase %s: failover in progress, no primary yet)",
			t.node, snap.state.Epoch, snap.state.Phase)
	default:
		return fmt.Sprintf("%s is no longer the primary (epoch %d: the primary is %s)", t.node, snap.state.Epoch, snap.primary.node)
	}
}

// beginRelay marks the pending command in flight on the session's backend.
// It returns false, with nothing forwarded, when the current snapshot no
// longer allows the backend: the caller reroutes first. Marking under
// inflight.mu and then reading the snapshot makes the cutter (which
// installs the snapshot and then takes the mutex) see the command or the
// session see the new snapshot.
func (s *session) beginRelay() bool {
	s.fl.mu.Lock()
	s.fl.on, s.fl.be, s.fl.cut, s.fl.lost, s.fl.wrote = true, s.be, "", false, false
	s.fl.mu.Unlock()
	if s.be == nil {
		return true
	}
	if s.l.route.snap.Load().cutReason(s.l.role, s.be.t) != "" {
		s.endRelay()
		return false
	}
	return true
}

// endRelay ends the in-flight mark and returns why the command was cut
// ("" if it was not), whether because its node stopped answering, and
// whether part of the response reached the client.
func (s *session) endRelay() (cut string, lost, wrote bool) {
	s.fl.mu.Lock()
	defer s.fl.mu.Unlock()
	cut, lost, wrote = s.fl.cut, s.fl.lost, s.fl.wrote
	s.fl.on, s.fl.be, s.fl.cut, s.fl.lost, s.fl.wrote = false, nil, "", false, false
	return cut, lost, wrote
}

// cutInFlight cuts every command in flight in cluster on a node snap no
// longer allows, and returns when all are cut.
func (s *Server) cutInFlight(cluster string, snap *routeSnapshot) {
	if n := s.cutWhere(cluster, snap.cutReason, false); n > 0 {
		s.log.Warn("cut commands in flight on nodes that left the route", "cluster", cluster,
			"epoch", snap.state.Epoch, "primary", snap.state.Primary, "sessions", n)
	}
}

// cutUnreachable cuts every command in flight on node of cluster, which
// this proxy's own check could not even connect to (no TCP answer within
// proxy.connect_timeout: a blackholed or vanished host). A server that
// accepts connections but is slow or frozen is never cut this way.
//
// A failed connect alone does not prove the host gone: a server whose
// accept queue is full (back_log) drops new SYNs while it goes on serving
// the connections it has. So the commands are cut only if none of the
// backend connections with a command in flight there has heard from the
// server (tcpi_last_ack_recv) within proxy.connect_timeout: the connect
// that failed was sent after the fault began and waited that long, so on a
// dead path every connection has been silent at least as long.
func (s *Server) cutUnreachable(cluster, node, detail string) {
	if d, heard := s.heardFrom(cluster, node); heard {
		s.log.Warn("not cutting commands in flight: the check cannot connect but established connections still hear from the server (accept queue full?)",
			"cluster", cluster, "node", node, "last_ack_ago", d, "err", detail)
		return
	}
	why := fmt.Sprintf("this proxy cannot connect to %s any more (%s)", node, detail)
	n := s.cutWhere(cluster, func(_ string, t *target) string {
		if t.node == node {
			return why
		}
		return ""
	}, true)
	if n > 0 {
		s.log.Warn("cut commands in flight on an unreachable backend", "cluster", cluster, "node", node, "sessions", n, "err", detail)
	}
}

// heardFrom reports whether a backend connection with a command in flight
// on node of cluster received an acknowledgement within
// proxy.connect_timeout, and how long ago the most recent one was.
func (s *Server) heardFrom(cluster, node string) (time.Duration, bool) {
	bound := s.cfg.Load().Proxy.ConnectTimeout.D()
	s.mu.Lock()
	var list []*session
	for sess := range s.sessions {
		if sess.l.cluster == cluster && sess.busy.Load()&busyCmd != 0 {
			list = append(list, sess)
		}
	}
	s.mu.Unlock()
	best, heard := time.Duration(-1), false
	for _, sess := range list {
		if !sess.fl.mu.TryLock() {
			// A response is being written to the client (possibly
			// a slow one): no evidence either way.
			continue
		}
		be := sess.fl.be
		var d time.Duration
		ok := false
		if sess.fl.on && be != nil && be.t.node == node {
			d, ok = sinceLastAck(be.sock())
		}
		sess.fl.mu.Unlock()
		if ok && (best < 0 || d < best) {
			best = d
		}
		if ok && d < bound {
			heard = true
		}
	}
	return best, heard
}

// cutWhere cuts the commands in flight in cluster for which rule gives a
// reason, waits until all are cut and returns how many were.
func (s *Server) cutWhere(cluster string, rule func(role string, t *target) string, lost bool) int {
	s.mu.Lock()
	var list []*session
	for sess := range s.sessions {
		// busy is set before beginRelay and read after the snapshot was
		// swapped: a session not busy here sees the new snapshot.
		if sess.l.cluster == cluster && sess.busy.Load()&busyCmd != 0 {
			list = append(list, sess)
		}
	}
	s.mu.Unlock()
	if len(list) == 0 {
		return 0
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	cut := 0
	for _, sess := range list {
		wg.Go(func() {
			if sess.cut(rule, lost) {
				mu.Lock()
				cut++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return cut
}

// cut cuts the session's command in flight if rule gives a reason for its
// backend, and reports whether it did.
func (s *session) cut(rule func(role string, t *target) string, lost bool) bool {
	if !s.fl.mu.TryLock() {
		// A write to the client is in progress: wait for it, closing a
		// client that does not read.
		t := time.AfterFunc(cutWriteBound, func() { _ = s.client.Close() })
		s.fl.mu.Lock()
		t.Stop()
	}
	be := s.fl.be
	why := ""
	if s.fl.on && s.fl.cut == "" && be != nil {
		why = rule(s.l.role, be.t)
	}
	if why != "" {
		s.fl.cut, s.fl.lost = why, lost
	}
	s.fl.mu.Unlock()
	if why == "" {
		return false
	}
	be.close(false) // unblocks the relay's read or write
	s.srv.metrics.commandsCut.WithLabelValues(s.l.name).Inc()
	s.log.Warn("command in flight cut", "node", be.t.node, "why", why)
	return true
}

// afterCut finishes command cmd, which was cut: the backend connection is
// dropped, the transaction state forgotten, and the client gets the error
// in place of the response (or, with part of the response already sent,
// is closed). A COM_STMT_PREPARE outside a transaction is prepared again
// on the next primary instead: it changes nothing on the server. It
// returns the close reason ("" to continue).
func (s *session) afterCut(cmd byte, why string, lost, wrote bool) string {
	if s.rlog != nil && !wrote {
		// Transaction replay (replay.go).
		fl := s.rlog.fl
		if handled, answered, reason := s.replayOnLoss(fl.cmd, !fl.pend, false, nodeName(s.be), why); handled {
			if answered || reason != "" {
				return reason
			}
			return "" // replayed; the pending command runs next
		}
	}
	old, _ := s.setBackend(nil)
	node := ""
	if old != nil {
		node = old.t.node
		old.close(false)
	}
	inTx := s.inTx() || s.st.locked
	s.status &^= mysql.SERVER_STATUS_IN_TRANS
	s.st.locked = false
	s.snap = nil
	s.detached = false
	if wrote {
		s.log.Info("closing session: its command was cut after part of the response was sent", "node", node, "why", why)
		return closeRouteChanged
	}
	if s.l.role == rolePrimary && !inTx && cmd == mysql.COM_STMT_PREPARE && len(s.prepPacket) > 0 && !s.rerunning {
		s.log.Info("preparing a statement cut in flight again on the next primary", "node", node, "why", why)
		return s.rerunPrepareLost(node)
	}
	if s.l.role == rolePrimary && !inTx && s.cls == classSelect && len(s.rerun) > 1 && s.rerun[0] == mysql.COM_QUERY &&
		!s.rerunning && rerunnableRead(s.rerun[1:]) {
		// A plain autocommit read (text protocol, no locking clause)
		// changes nothing: it runs again on the primary the controller
		// names, as one whose connection died (primaryBackendLost).
		s.log.Info("running a read cut in flight again on the next primary", "node", node, "why", why)
		return s.rerunRead(node)
	}
	if s.l.role == rolePrimary && !inTx && cmd == mysql.COM_STMT_EXECUTE && len(s.rerun) >= execHeader &&
		s.rerun[0] == mysql.COM_STMT_EXECUTE && !s.rerunning {
		if st := s.stmts[binary.LittleEndian.Uint32(s.rerun[1:])]; st != nil && st.class == classSelect &&
			rerunnableRead(st.text) {
			// The same for a prepared plain read: executed again on
			// the next primary, its statement prepared again there.
			s.log.Info("running a prepared read cut in flight again on the next primary", "node", node, "why", why)
			return s.rerunExecute(node)
		}
	}
	switch {
	case s.l.role == rolePrimary && !inTx && s.cls == classSelect && s.plainReadInFlight():
		// A read changes nothing: its outcome is not in doubt.
		s.writeError(1, errReadAbandoned(s.l.cluster, node, why))
	case s.l.role == roleReplica:
		s.writeError(1, errCutReplica(s.l.cluster, why))
	case lost:
		s.writeError(1, errCutLost(s.l.cluster, node, why, inTx))
	default:
		s.writeError(1, errCutPrimary(s.l.cluster, why, inTx))
	}
	return ""
}

// cutFenced starts the cut reason of a command cut because this proxy
// stopped routing writes (its registration lost and the primary not
// confirmed directly, lease.go): the primary did not change.
const cutFenced = "this proxy stopped routing writes"

// errCutPrimary is the error a client of a primary listener gets when its
// statement was cut: MySQL error 1105 (ER_UNKNOWN_ERROR, SQLSTATE HY000).
// The statement may or may not have been committed on the old primary.
func errCutPrimary(cluster, why string, inTx bool) *mysql.MyError {
	tx := ""
	if inTx {
		tx = " Your open transaction was rolled back (its connection is gone)."
	}
	if strings.HasPrefix(why, cutFenced) {
		// The primary is the same; this proxy may no longer vouch for it.
		return errUnknown(fmt.Sprintf("switchyard: %s of cluster %s while this statement ran; its outcome is unknown "+
			"(it may or may not have been committed): the statement was cut so that no answer reaches you after another node could have been promoted.%s "+
			"Check before retrying; the session stays open and writes resume once this proxy is registered again or confirms the primary.",
			strings.Replace(why, cutFenced, cutFenced+" to the primary", 1), cluster, tx))
	}
	return errUnknown(fmt.Sprintf("switchyard: the primary of cluster %s changed while this statement ran; its outcome is unknown "+
		"(it may or may not have been committed on the old primary): %s.%s Check before retrying; the session continues on the new primary.",
		cluster, why, tx))
}

// errCutLost is the error a client of a primary listener gets when its
// statement was cut because this proxy cannot connect to the primary any
// more: MySQL error 1105 (ER_UNKNOWN_ERROR, SQLSTATE HY000).
func errCutLost(cluster, node, why string, inTx bool) *mysql.MyError {
	tx := ""
	if inTx {
		tx = " Your open transaction was rolled back (its connection is gone)."
	}
	return errUnknown(fmt.Sprintf("switchyard: primary %s of cluster %s stopped answering while this statement ran; its outcome is unknown "+
		"(it may or may not have been committed): %s.%s Check before retrying; the session continues on the primary the controller names.",
		node, cluster, why, tx))
}

// errCutReplica is the error a client of a replica listener gets when its
// statement was cut: MySQL error 1105 (ER_UNKNOWN_ERROR, SQLSTATE HY000).
func errCutReplica(cluster, why string) *mysql.MyError {
	return errUnknown(fmt.Sprintf("switchyard: the statement was abandoned: %s while it ran (cluster %s); "+
		"retry it, the session continues on another replica", why, cluster))
}

func orText(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// plainReadInFlight reports whether the autocommit statement in flight,
// as kept for a lost primary (s.rerun), is a read without a locking
// clause and without side effects the proxy can see: its cut leaves
// nothing in doubt.
func (s *session) plainReadInFlight() bool {
	var text []byte
	switch {
	case len(s.rerun) > 1 && s.rerun[0] == mysql.COM_QUERY:
		text = s.rerun[1:]
	case len(s.rerun) >= execHeader && s.rerun[0] == mysql.COM_STMT_EXECUTE:
		if st := s.stmts[binary.LittleEndian.Uint32(s.rerun[1:])]; st != nil {
			text = st.text
		}
	}
	return text != nil && consistentRead(text)
}

// rerunnableRead reports whether autocommit read q may run again on the
// next primary when its answer was lost: a plain consistent read
// (consistentRead: no locking clause, no variable, only built-in
// functions that change nothing, one statement) that replaySafe also
// accepts. A SELECT calling a stored function may have written on the lost
// primary: run again, it would write twice. (A view whose column calls
// such a function is not seen.)
func rerunnableRead(q []byte) bool { return replaySafe(q) && consistentRead(q) }
