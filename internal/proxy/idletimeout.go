package proxy

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Client idle timeout on transaction-pooled listeners. A server closes a
// connection that waited for a command longer than the session's
// wait_timeout. With pooling: transaction an idle client holds no backend
// connection (txpool.go), so that close can never reach it; the proxy
// enforces the limit itself, as MariaDB computes it:
//
//   - at login the session's wait_timeout is the node's global
//     wait_timeout, or its global interactive_timeout when the client set
//     CLIENT_INTERACTIVE;
//   - after COM_RESET_CONNECTION and COM_CHANGE_USER it is the global
//     wait_timeout, interactive client or not (checked on MariaDB 10.11.19:
//     an interactive login with interactive_timeout=7, wait_timeout=5 reads
//     @@wait_timeout 7, then 5 after either command);
//   - a value the client sets (SET SESSION wait_timeout, SET
//     @@wait_timeout, also from a stored program) is the one the server's
//     session tracking reports (sessionstate.go).
//
// The nodes' global values are read on the session's backend connection at
// login and kept per node for waitDefaultsTTL, so that a SET GLOBAL reaches
// sessions that log in at most that much later.
//
// The idle time runs from when the session starts waiting for its next
// command (awaitCommand) and only while it holds no backend connection: a
// session pinned to one (a transaction, LOCK TABLES, ...) is left to the
// server's own timeouts on it (wait_timeout, idle_transaction_timeout). The
// parker's sweep (idlepark.go, every idleParkAfter) finds the sessions
// past their limit: a parked one is resumed to close, one still waiting in
// its goroutine has its wait's deadline armed and closes instead of
// parking. A client is thus closed between its wait_timeout and one sweep
// period later. The close copies MariaDB's (seen on 10.11.19 with strace:
// no packet, SO_LINGER 0, close, so the client gets a reset), is logged at
// Info and counted with close reason idle_timeout.
//
// Sessions whose backend does not report session state (no
// CLIENT_SESSION_TRACK) are not timed: the proxy would not know the value
// the client set. TLS sessions wait in their goroutine with a read deadline
// at the limit instead of the sweep.

// closeIdleTimeout is the close reason of a transaction-pooled client that
// stayed idle longer than its wait_timeout.
const closeIdleTimeout = "idle_timeout"

// waitDefaultsTTL is how long a node's global wait_timeout and
// interactive_timeout, read at a login, serve the next logins.
const waitDefaultsTTL = 10 * time.Second

const waitDefaultsSQL = "SELECT @@global.wait_timeout, @@global.interactive_timeout"

// waitDefaults are a node's global wait_timeout and interactive_timeout
// (seconds) as read at a time.
type waitDefaults struct {
	wait, interactive int64
	at                time.Time
}

// waitDefaultsCache holds the nodes' waitDefaults by cluster + "/" + node.
type waitDefaultsCache struct{ m sync.Map }

// waitDefaultsFor returns the session's node's global values, read on
// its backend when not known or, if fresh, older than waitDefaultsTTL (nil
// when they cannot be read). Only a login asks for fresh values: after a
// reset or change of user any known ones serve, so that no statement of
// the proxy's replaces the connection's diagnostics then.
func (s *session) waitDefaultsFor(fresh bool) *waitDefaults {
	key := s.l.cluster + trackDefaultsKey + s.be.t.node
	if v, ok := s.srv.waitDefaults.m.Load(key); ok {
		if d := v.(*waitDefaults); !fresh || time.Since(d.at) < waitDefaultsTTL {
			return d
		}
	}
	row, err := s.backendRow(waitDefaultsSQL)
	if err == nil && len(row) == 2 {
		w, err1 := strconv.ParseInt(row[0], 10, 64)
		i, err2 := strconv.ParseInt(row[1], 10, 64)
		if err1 == nil && err2 == nil {
			d := &waitDefaults{wait: w, interactive: i, at: time.Now()}
			s.srv.waitDefaults.m.Store(key, d)
			return d
		}
	}
	s.log.Warn("reading the server's wait_timeout failed; the proxy does not close this idle client", "node", s.be.t.node, "err", err)
	return nil
}

// initWaitTimeout sets the session's default wait_timeout (s.defWait) on
// a transaction-pooled listener: at login (interactive_timeout for a
// CLIENT_INTERACTIVE client), after COM_RESET_CONNECTION or
// COM_CHANGE_USER (wait_timeout). Called with the session's backend set.
func (s *session) initWaitTimeout(login bool) {
	s.defWait = 0
	if !s.txPool || s.be == nil || !s.be.tracked {
		return
	}
	d := s.waitDefaultsFor(login)
	if d == nil {
		return
	}
	s.defWait = d.wait
	if login && s.caps&mysql.CLIENT_INTERACTIVE != 0 {
		s.defWait = d.interactive
	}
}

// waitTimeout returns the session's wait_timeout (0: not enforced).
func (s *session) waitTimeout() time.Duration {
	if !s.tracked {
		return 0
	}
	secs := s.defWait
	for _, v := range s.st.vars {
		if strings.EqualFold(v.name, "wait_timeout") {
			if n, err := strconv.ParseInt(v.value, 10, 64); err == nil {
				secs = n
			}
		}
	}
	if secs <= 0 {
		return 0
	}
	return time.Duration(secs) * time.Second
}

// noteIdleStart records, on a transaction-pooled listener, that the
// session starts waiting for a command, and its idle limit: its
// wait_timeout while it holds no backend connection, none otherwise.
func (s *session) noteIdleStart() {
	var limit time.Duration
	if s.be == nil {
		limit = s.waitTimeout()
	}
	s.idleFrom.Store(time.Now().UnixNano())
	s.idleLimit.Store(int64(limit))
}

// idleOver reports whether the session has waited longer than its idle
// limit at now (UnixNano). Any goroutine.
func (s *session) idleOver(now int64) bool {
	limit := s.idleLimit.Load()
	return limit > 0 && now-s.idleFrom.Load() >= limit
}

// closeIdle ends a session idle past its wait_timeout the way MariaDB
// ends one: no packet, and a reset rather than a FIN (SO_LINGER 0).
func (s *session) closeIdle() string {
	limit := time.Duration(s.idleLimit.Load())
	s.resetOnClose()
	s.log.Info("closing the client: idle longer than its wait_timeout (listener pooling: transaction, as the server closes it)",
		"wait_timeout", int64(limit/time.Second), "user", s.user)
	return closeIdleTimeout
}

// resetOnClose makes the close of the client's socket a reset (SO_LINGER
// 0), as MariaDB closes an idle session: the client's next write then
// fails (the C client's 2006 "server has gone away") instead of its read
// finding the end of the stream (2013 "lost connection during query").
func (s *session) resetOnClose() {
	if tc, ok := s.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	} else if u, ok := s.client.(interface{ NetConn() net.Conn }); ok {
		if tc, ok := u.NetConn().(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
}

// tlsIdleDeadline sets, for a transaction-pooled session that never parks
// (TLS), a read deadline at its idle limit (none when it has none).
func (s *session) tlsIdleDeadline() {
	limit := time.Duration(s.idleLimit.Load())
	if limit <= 0 {
		return
	}
	_ = s.client.SetReadDeadline(time.Unix(0, s.idleFrom.Load()).Add(limit))
	s.idleDeadline = true
}

// tlsIdleExpired clears the read deadline tlsIdleDeadline set, once the
// wait for a command returned (err, with got bytes of it), and reports
// whether it ended at the idle limit.
func (s *session) tlsIdleExpired(err error, got int) bool {
	s.idleDeadline = false
	_ = s.client.SetReadDeadline(time.Time{})
	ne, ok := err.(net.Error)
	return ok && ne.Timeout() && got == 0 && s.idleOver(time.Now().UnixNano())
}
