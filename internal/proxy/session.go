package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Capabilities the proxy itself implements on the client side (it parses the
// connection phase), whatever the backend supports.
const proxyCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_CONNECT_WITH_DB | mysql.CLIENT_PROTOCOL_41 |
	mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA |
	mysql.CLIENT_CONNECT_ATTRS | mysql.CLIENT_COMPRESS

// Capabilities that change what the backend sends or accepts after login.
// Bytes are relayed raw, so client and backend must agree on them: the proxy
// offers them only when the backend does and logs into the backend with the
// client's choice.
const relayCaps = mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_LONG_FLAG | mysql.CLIENT_LOCAL_FILES |
	mysql.CLIENT_IGNORE_SPACE | mysql.CLIENT_INTERACTIVE | mysql.CLIENT_TRANSACTIONS |
	mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_MULTI_RESULTS | mysql.CLIENT_PS_MULTI_RESULTS |
	mysql.CLIENT_SESSION_TRACK | mysql.CLIENT_DEPRECATE_EOF

// MariaDB extended capabilities relayed like relayCaps: offered when the
// backend offers them, asked for on the backend login when the client asked.
// Each changes what the relay reads: progress reports mid-response
// (relayResults), COM_STMT_BULK_EXECUTE (command.go), extended type info
// in column definitions (relayed as they are: the relay counts them, never
// parses them). COM_MULTI (not in 10.11) and bulk unit results (11.5)
// are not offered, nor metadata caching (MARIADB_CLIENT_CACHE_METADATA):
// a statement prepared again on another connection (a session move, a
// transaction-pooled checkout) counts there as having sent its column
// definitions, and the server then leaves them out of executes whose rows
// do not match the prepare's definitions (`SELECT ? + 1` is DOUBLE at the
// prepare and BIGINT rows at the execute, checked on 10.11.19), so a
// client holding the first connection's definitions would decode the rows
// with the wrong types. Without it every execute brings its definitions.
// The relay still handles the "metadata follows" byte and missing
// definitions (stmtInfo.meta, stmtInfo.resend) should a backend send them.
const relayExtCaps = mysqlproto.MariaDBClientProgress | mysqlproto.MariaDBClientStmtBulkOperations |
	mysqlproto.MariaDBClientExtendedTypeInfo

// session is one client connection and the backend connection it owns.
// Only the session's goroutine touches its fields, except shutdown (from
// Server.Close), which closes the connections under mu.
type session struct {
	srv *Server
	l   *listener
	id  uint32
	// dialWhy classifies the socket error of the last dialAndLogin ("" when
	// the socket worked), for the reason label of backend connect errors.
	dialWhy string
	client  net.Conn
	// cr reads the client: in.r while the session holds a pooled reader
	// (clientread.go), nil while it waits idle for a command.
	cr  *bufio.Reader
	cin *clientIn
	// readerHeld mirrors cin != nil for other goroutines (a parked
	// session holds no reader: idlepark.go).
	readerHeld atomic.Bool
	raw        syscall.RawConn    // the client socket, for the idle wait; nil if not a socket
	readFn     func(uintptr) bool // s.readIdle
	fd         int                // raw's descriptor (-1 if none), for parking (idlepark.go)
	idle       atomic.Uint32      // idleBusy, idleWaiting, ... (idlepark.go)
	log        sessionLog
	z          *zlink // compressed protocol (compress.go); nil for uncompressed clients
	// cio writes the client socket (sockio.go) while client is it (not
	// TLS); nil if not a TCP socket.
	cio *sockIO

	// Negotiated at login.
	caps      uint32
	ext       uint32 // MariaDB extended capabilities (relayExtCaps)
	charset   byte
	maxPacket uint32
	attrs     []byte
	scramble  []byte
	user      string
	// tls: the client switched to TLS at login (tls.go); client is then
	// the *tls.Conn.
	tls    bool
	stage1 [mysqlproto.HashLen]byte
	edKey  *[64]byte // SHA-512(pw) of an ed25519 user (auth.go); nil otherwise
	// schema is the default database as far as the proxy knows (login,
	// COM_INIT_DB, USE, session tracking); restored when the session moves.
	schema string

	mu     sync.Mutex // guards be against shutdown, the sweeper and the drain monitor
	be     *backend
	snap   *routeSnapshot // snapshot be was chosen or last confirmed under
	status uint16         // server status flags of the last OK/EOF
	closed bool
	// lastBe is the backend connection the session used last (pool.go:
	// taken again first, with its state as the session left it); ended
	// is set when the session ended between commands, so that its
	// connection can go back to the pool.
	lastBe *backend
	ended  bool
	// Transaction pooling (txpool.go): the listener multiplexes
	// (txPool), the session gave its connection back and takes one at
	// its next command (returned), it keeps its connection for the next
	// statement (keepNext), the command's result had warnings
	// (warned), the last insert id reported to it and whether the
	// current connection lacks it (idRestore), whether the current
	// connection did not run the previous statement (diagLost) and
	// whether any statement ran (ran).
	insertID  uint64
	txPool    bool
	returned  bool
	keepNext  bool
	warned    bool
	idRestore bool
	diagLost  bool
	ran       bool
	// rowCount is ROW_COUNT() after the session's last statement (the OK
	// packet's affected rows, -1 after a result set), and rewritten the
	// payload sent in place of the client's pending one: a COM_QUERY that
	// reads it on another connection (txpool.go), or rewritten for other
	// reasons (connid.go, trackvars.go), or a short COM_STMT_* padded
	// (stmtShort); nil otherwise.
	rowCount  int64
	rewritten []byte
	// foundRows is FOUND_ROWS() after the session's last statement that
	// returned a result set (-1 when unknown: SQL_CALC_FOUND_ROWS, a
	// cursor), rows the rows relayed of the result set being relayed,
	// results the result sets the command ended (movediag.go); lastDiag:
	// the last statement left warnings or an error.
	foundRows int64
	rows      int64
	results   int
	lastDiag  bool
	shut      bool // shutdown closed the client: the session must not park
	// killed is set (from the killer's goroutine, kill.go) before the
	// proxy kills the session's backend thread.
	killed atomic.Bool
	// A statement on its way to the backend, for KILL QUERY (killflight.go),
	// under mu: stmtPhase, and the KILL QUERY that comes before the
	// statement reached the backend (killCur: the command being handled;
	// killNext: the command the client sent and the session has not read).
	stmtPhase         int
	killCur, killNext bool
	// arrived: bytes of a command were read from the client socket (or are
	// buffered) since the last command ended (readIdle, cmdDone).
	arrived atomic.Bool

	// busy is busyCmd|busyTx|busyDetached (hold.go), written by the
	// session and read (or swapped, by the sweeper) from other goroutines.
	busy     atomic.Uint32
	detached bool // the sweeper closed be: move at the next command
	// Failover hold (failoverhold.go): when the session started waiting
	// for a new primary (zero when not), whether its backend was found
	// closed by the server, the node lost, the autocommit read being
	// relayed (command byte + text, to run it again), whether that rerun
	// is running, whether the statement in flight in a transaction is a
	// COMMIT, and a buffer for the idle peek.
	holdStart  time.Time
	beLost     bool
	lostNode   string
	lostCause  string // the connect error that found the primary lost
	rerun      []byte
	rerunning  bool
	commitSent bool
	peekByte   [1]byte
	// hupBe is the backend connection found closed by its server while
	// the session was idle and left for the next command to handle
	// (idleclose.go); parkFd is the duplicate of the backend socket in the
	// parker's epoll set while the session is parked (-1 when none,
	// guarded by the parker's mu).
	hupBe  *backend
	parkFd int
	// waitStart is when a session that never parks (TLS, idlepark.go)
	// began waiting for its current command: one that waited at least
	// idleParkAfter has its backend checked as a parked one is
	// (idleclose.go).
	waitStart time.Time
	// Idle timeout on transaction-pooled listeners (idletimeout.go): the
	// session's default wait_timeout in seconds (defWait), when it
	// started waiting for its current command and its idle limit then
	// (UnixNano and nanoseconds, read by the sweeper; limit 0: none),
	// whether it was found past it (idleExpired: set by the session's
	// goroutine or, for a parked session, under the parker's mu before it
	// is resumed), and whether a TLS session's read deadline is set for
	// it (idleDeadline).
	defWait      int64
	idleFrom     atomic.Int64
	idleLimit    atomic.Int64
	idleExpired  bool
	idleDeadline bool
	// txEnded is the error of a transaction the proxy ended while the
	// pending command had no response to carry it (COM_STMT_CLOSE,
	// COM_STMT_SEND_LONG_DATA): the next command that has a response
	// gets it instead of running (endTx).
	txEnded *mysql.MyError
	// replayIdle: the transaction is being replayed while the client has
	// no command pending (replayIdleTx): an error goes to txEnded.
	replayIdle bool
	// replayNow: the session's primary connection was closed by a route
	// change while it was idle in a transaction (Server.sweep): its
	// goroutine replays the transaction before it waits for the client
	// again (replayIdleNow).
	replayNow atomic.Bool
	// fl is the command in flight, shared with the cutter (cut.go).
	fl inflight

	// For the admin API's session list (sessions.go): when the session
	// began and the client's address (set once, before the session is
	// registered), whether a command of it is held (switchover or
	// failover hold), and the start of the statement being run (under mu,
	// copied where the command takes mu anyway).
	began    time.Time
	addr     string
	held     atomic.Bool
	curStmt  [maxShownStatement]byte
	curStmtN int

	// Session state to rebuild on another backend (sessionstate.go,
	// stmts.go).
	st         sessState
	tracked    bool           // the backend reports session state (CLIENT_SESSION_TRACK)
	strip      bool           // remove session-state blocks from OKs for this client
	trk        *trackSettings // the client's own tracking settings (trackvars.go); nil if unknown
	trkFilter  bool           // filter session-state entries of OKs by trk
	inTrackSet bool           // relayTrackSet is recording its SET's OK
	retracked  bool           // the proxy ran statements of its own after the command (retrack)
	cls        sqlClass       // class of the command being relayed
	setText    []byte         // text of the SET statement being relayed
	stmts      map[uint32]*stmtInfo
	xlate      bool       // some client statement id differs from its backend id
	nextStmtID uint32     // last client id handed out while xlate
	prepPacket []byte     // COM_STMT_PREPARE being relayed (command byte + text)
	execStmt   *stmtInfo  // the statement of the COM_STMT_EXECUTE being relayed
	lastExec   *stmtInfo  // the statement of the last command when it was a COM_STMT_EXECUTE (for messages)
	okBuf      []byte     // scratch for rewritten OK packets
	samples    uint32     // read statements seen, for sampling (hotreads.go)
	rlog       *replayLog // the open transaction's record (replay.go); nil unless failover.transaction_replay

	// Per-command relay state.
	br      *bufio.Reader // backend reader (pooled)
	cw      *bufio.Writer // client writer (pooled)
	seq     byte          // last sequence id written to the client
	in, out int           // bytes relayed this command
	lastOK  bool          // the response ended with OK/EOF (not ERR)
	// seqShift is added to the sequence ids of the backend packets still
	// to be relayed in this response: the packets the proxy put in
	// (resendMeta).
	seqShift byte
	// cursorReq: the command is a COM_STMT_EXECUTE whose flags byte asked
	// for a cursor (CURSOR_TYPE_READ_ONLY, _FOR_UPDATE, _SCROLLABLE).
	cursorReq bool
	scratch   []byte
}

// failure is an error that ends a session, with the close reason.
type failure struct {
	reason string
	err    error
}

func (f *failure) Error() string { return f.reason + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func fail(reason string, err error) error { return &failure{reason: reason, err: err} }

func newSession(s *Server, l *listener, c net.Conn) *session {
	sess := &session{srv: s, l: l, id: s.nextConnID.Add(1), client: c, fd: -1, parkFd: -1, txPool: l.pooling == config.PoolingTransaction,
		began: time.Now(), addr: c.RemoteAddr().String()}
	sess.log.s = sess
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil && raw.Control(func(fd uintptr) { sess.fd = int(fd) }) == nil {
			sess.raw, sess.readFn = raw, sess.readIdle
		}
	}
	sess.cio = newSockIO(c)
	return sess
}

// remote returns the client's IP (host:port if it has no port), for
// messages.
func (s *session) remote() string {
	a := s.client.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

func (s *session) serve() {
	s.l.sessions.Add(1)
	s.srv.metrics.clientConns.WithLabelValues(s.l.name).Inc()
	s.srv.metrics.clientConnsTotal.WithLabelValues(s.l.name).Inc()
	s.run(true)
}

// run logs the client in (with login) and serves its commands until the
// session ends, then closes it; or returns leaving it open when it parked
// (idlepark.go), to be run again (without login) when the client sends
// something.
func (s *session) run(login bool) {
	reason := closeClientGone
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("session panic; closing the session", "panic", r, "stack", string(debug.Stack()))
			reason = closePanic
		}
		if reason == sessionParked {
			return
		}
		defer s.srv.removeSession(s)
		s.finish(reason)
	}()
	if login {
		if reason = s.login(); reason != "" {
			return
		}
		s.rlog = s.newReplayLog()
	} else if s.idleExpired {
		reason = s.closeIdle()
		return
	} else if reason = s.afterIdle(); reason != "" {
		return
	}
	reason = s.loop()
}

// finish closes both connections and records why.
func (s *session) finish(reason string) {
	s.mu.Lock()
	s.closed = true
	be := s.be
	s.be = nil
	s.mu.Unlock()
	_ = s.client.Close()
	if be != nil {
		s.giveBack(be, s.ended)
	}
	s.dropReader()
	if s.rlog != nil {
		s.rlog.uncount() // a transaction open at the end (replay_snap.go)
		s.snapTaken()
	}
	s.l.sessions.Add(-1)
	s.srv.metrics.clientConns.WithLabelValues(s.l.name).Dec()
	s.srv.metrics.sessionsClosed.WithLabelValues(reason).Inc()
	s.log.Debug("session closed", "reason", reason, "user", s.user)
}

// shutdown is called by Server.Close from another goroutine: it closes the
// connections so the session's goroutine returns.
func (s *session) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.shut = true
	_ = s.client.Close()
	if s.be != nil {
		_ = s.be.conn.Close()
	}
	s.mu.Unlock()
	// A parked session has no goroutine to see the close (closing a
	// descriptor removes it from the epoll set without an event).
	s.srv.parker.resume(s.id)
}

// setBackend installs be (nil allowed) and returns the previous one.
func (s *session) setBackend(be *backend) (*backend, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.be
	if s.closed {
		return old, false
	}
	s.be = be
	return old, true
}

// writeDirect sends one packet to the client with a single write (outside
// the pooled writer).
func (s *session) writeDirect(seq byte, payload []byte) error {
	s.scratch, _ = mysqlproto.AppendPacket(s.scratch[:0], seq, payload)
	_, err := s.clientWrite(s.scratch)
	return err
}

// writeError sends e to the client as an ERR packet with sequence id seq:
// with the '#' SQLSTATE marker, or without one when e.State is empty (a
// server's error relayed in the form it was sent, serverERR).
func (s *session) writeError(seq byte, e *mysql.MyError) {
	if s.l != nil {
		s.l.errors.inc(e.Code)
	}
	_ = s.writeDirect(seq, appendERRAsSent(nil, e))
}

// appendERRAsSent appends e as an ERR payload; an empty e.State leaves
// out the SQLSTATE marker (see serverERR).
func appendERRAsSent(b []byte, e *mysql.MyError) []byte {
	if e.State != "" {
		return mysqlproto.AppendError(b, e)
	}
	b = append(b, mysql.ERR_HEADER, byte(e.Code), byte(e.Code>>8))
	return append(b, e.Message...)
}

// awaitRoute returns the listener's cluster's routing snapshot. Right
// after the proxy (re)starts it has none until it read the cluster's
// state from the topology store: a client that connects then waits for it
// before its greeting (taken from the node the state routes to), up to the
// cluster's failover.max_hold, as a statement holds for a failover; nil
// past it or when the proxy shuts down.
func (s *session) awaitRoute(rc *runtimeConfig) *routeSnapshot {
	if snap := s.l.route.snap.Load(); snap != nil {
		return snap
	}
	wait := min(rc.maxHold(s.l.cluster), handshakeWindow)
	start := time.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-s.l.route.first:
		s.log.Debug("login waited for the routing state", "waited", time.Since(start))
	case <-timer.C:
	case <-s.srv.closing:
	}
	return s.l.route.snap.Load()
}

// login runs the connection phase: greeting, authentication (switching the
// client to mysql_native_password if needed), backend login as the client's
// user, final OK. It returns "" on success or the close reason.
func (s *session) login() string {
	_ = s.client.SetDeadline(time.Now().Add(handshakeWindow))
	s.takeReader()
	rc := s.srv.rc.Load()
	snap := s.awaitRoute(rc)
	t, merr := snap.pickAvoiding(s.l.role, rc.fallback(s.l.cluster), func(t *target) bool { return !s.srv.reachable(t) })
	if merr != nil {
		t, merr = snap.pick(s.l.role, rc.fallback(s.l.cluster))
	}
	if snap == nil {
		merr = errNoRoute(fmt.Sprintf("switchyard: no routing state for cluster %s within %s (failover.max_hold) of the connect: the controller has not published one, or this proxy cannot read the topology store; retry shortly",
			s.l.cluster, rc.maxHold(s.l.cluster)))
	}
	// Errors found before the client logged in (no route, backend
	// unreachable) are sent after its handshake response, as the server
	// does for most login-time errors: clients then report them as server
	// errors (1105), not as a failed connection or TLS handshake (2002).
	var deferred *mysql.MyError
	var deferredReason string
	var g *greetingInfo
	// On a primary listener whose primary is lost (a failover without a
	// primary yet, or a refused connect) the login waits for the new
	// primary after authentication (failoverhold.go).
	lost, wait := "", false
	if old, ok := s.lostInFailover(snap); ok && merr != nil {
		lost, wait, merr = old, true, nil
	} else if merr != nil {
		deferred, deferredReason = merr, closeNoRoute
		s.log.Repeated(slog.LevelInfo, "client login refused|no route|"+s.l.name, "client login refused", "reason", "no route", "err", merr.Message)
	} else if lp := s.srv.lostNow(snap); lp != nil && s.l.role == rolePrimary && t.node == lp.node {
		// Declared dead with no failover coming: refused after
		// authentication, without a connect to it.
		lost, wait, s.lostCause = t.node, true, lostCause
	} else {
		g, merr = s.greeting(t, snap, rc)
		if connectLost(merr) && s.l.role == rolePrimary && snap.lossCheck {
			lost, wait, s.lostCause, merr = t.node, true, merr.Message, nil
		}
	}
	if merr != nil && deferred == nil && s.l.role == roleReplica {
		// The first session of a cluster reads a greeting from its node:
		// try the other replicas (and the primary) before giving up.
		tried := map[string]bool{t.addr: true}
		for range len(snap.replicas) + 1 {
			alt, perr := snap.pickAvoiding(s.l.role, rc.fallback(s.l.cluster), func(x *target) bool { return tried[x.addr] })
			if perr != nil {
				break
			}
			tried[alt.addr] = true
			if g, merr = s.greeting(alt, snap, rc); merr == nil {
				t = alt
				break
			}
		}
	}
	if merr != nil && deferred == nil {
		deferred, deferredReason = merr, closeBackendConnect
	}
	if g == nil {
		if g = s.l.route.greeting.Load(); g == nil {
			g = fallbackGreeting()
		}
	}
	scramble, err := mysqlproto.NewScramble(mysqlproto.ScrambleLen)
	if err != nil {
		s.writeError(0, errUnknown("switchyard: cannot generate a handshake challenge"))
		return closeServer
	}
	s.scramble = scramble
	caps, ext := g.offer()
	hs := mysqlproto.Handshake{
		ServerVersion:   g.version,
		ConnectionID:    s.id,
		Scramble:        scramble,
		Capabilities:    caps,
		ExtCapabilities: ext,
		Charset:         g.charset,
		Status:          mysql.SERVER_STATUS_AUTOCOMMIT,
		AuthPlugin:      mysql.AUTH_NATIVE_PASSWORD,
	}
	if s.l.tls != nil {
		hs.Capabilities |= mysql.CLIENT_SSL
	}
	if err := s.writeDirect(0, mysqlproto.AppendHandshake(nil, &hs)); err != nil {
		return closeClientGone
	}
	// The handshake response (or SSLRequest) is packet 1: anything else
	// gets the server's answer, ER_NET_PACKETS_OUT_OF_ORDER with sequence
	// 1, as MariaDB's sql/net_serv.cc (checked against mariadbd 10.11:
	// an HTTP request or a packet numbered 5 gets 1156, SQLSTATE 08S01).
	if hb, err := s.cr.Peek(mysqlproto.HeaderSize); err == nil {
		if h := mysqlproto.ParseHeader(hb); h.Seq != 1 {
			s.writeError(1, mysqlproto.NewError(mysql.ER_NET_PACKETS_OUT_OF_ORDER, "Got packets out of order"))
			s.log.Info("closing client: handshake response out of order (not a MySQL client?)", "seq", h.Seq, "len", h.Len)
			return closeClientProtocol
		}
	}
	payload, seq, err := mysqlproto.ReadPacket(s.cr, nil, handshakeMax)
	if errors.Is(err, mysqlproto.ErrPacketTooLarge) {
		s.writeError(seq+1, mysqlproto.NewError(mysql.ER_HANDSHAKE_ERROR, "Bad handshake"))
		s.log.Info("closing client: bad handshake response", "err", err)
		return closeClientProtocol
	}
	if err != nil {
		s.logClientError("reading handshake response", err)
		return clientReason(err)
	}
	resp, err := mysqlproto.ParseHandshakeResponse(payload)
	if err != nil {
		s.writeError(seq+1, mysqlproto.NewError(mysql.ER_HANDSHAKE_ERROR, "Bad handshake"))
		s.log.Info("closing client: bad handshake response", "err", err)
		return closeClientProtocol
	}
	// TLS (tls.go): an SSLRequest switches the client connection to TLS
	// and resp becomes the handshake response read over it.
	var reason string
	if resp, seq, reason = s.clientTLS(resp, seq); reason != "" {
		return reason
	}
	s.user = resp.User
	s.caps = resp.Capabilities & hs.Capabilities
	auth, seq, reason := s.authClient(rc, resp.User, resp.AuthPlugin, resp.AuthResponse, scramble, seq+1, false)
	if reason != "" {
		return reason
	}
	if deferred != nil {
		s.writeError(seq, deferred)
		return deferredReason
	}
	s.caps = resp.Capabilities & hs.Capabilities
	s.ext = resp.ExtCapabilities & hs.ExtCapabilities
	s.charset = resp.Charset
	s.maxPacket = resp.MaxPacketSize
	s.attrs = resp.Attrs
	s.user = auth.u.name
	s.stage1, s.edKey = auth.stage1, auth.edKey
	s.schema = resp.Database

	t, snap, be, okPayload, merr := s.loginConnect(t, snap, rc, lost, wait)
	if merr != nil {
		s.writeError(seq, merr)
		return closeBackendConnect
	}
	s.setBackend(be)
	s.lastBe = be
	s.idRestore = s.txPool // the connection may have another session's LAST_INSERT_ID
	if snap.hold == nil {
		s.snap = snap
	}
	s.setTracking(be, okPayload)
	s.initTracking()
	s.initWaitTimeout(true)
	s.srv.setOwner(s, s.user) // before the OK: the client may be KILLed at once
	if err := s.writeDirect(seq, s.clientOK(okPayload)); err != nil {
		return closeClientGone
	}
	if s.caps&mysql.CLIENT_COMPRESS != 0 {
		s.startCompression()
	}
	if s.txPool {
		s.txBoundary()
	}
	_ = s.client.SetDeadline(time.Time{})
	s.log.Debug("session open", "user", s.user, "backend", t.node, "backend_addr", t.addr)
	return ""
}

// loginConnect opens the session's first backend connection, to t under
// snap. On a primary listener whose primary is lost (wait, lost naming
// it, or a connect to it refused or timed out) it waits for the next
// primary (awaitPrimary, at most failover.max_hold) and connects there. It
// returns the target and snapshot connected under.
func (s *session) loginConnect(t *target, snap *routeSnapshot, rc *runtimeConfig, lost string, wait bool) (*target, *routeSnapshot, *backend, []byte, *mysql.MyError) {
	for {
		if wait {
			_ = s.client.SetDeadline(time.Now().Add(handshakeWindow + rc.maxHold(s.l.cluster)))
			next, merr := s.awaitPrimary(lost)
			if merr != nil {
				return t, snap, nil, nil, merr
			}
			snap, t = next, next.primary
		}
		ct, be, okp, merr := s.connectRoute(t, snap, rc, false)
		if connectLost(merr) && s.l.role == rolePrimary && snap.lossCheck {
			wait, lost, s.lostCause = true, t.node, merr.Message
			time.Sleep(lostPoll) // no tight loop when the node's check and a connect disagree
			continue
		}
		if merr == nil {
			s.heldDone()
		}
		return ct, snap, be, okp, merr
	}
}

// Why a login was refused, for the "client login refused" log line (the
// client's error is identical for all of them, as MySQL's is).
const (
	refusedUnknownUser = "unknown user"
	refusedBadPassword = "wrong password"
	refusedNoPassword  = "no password given for an account that has one"
	refusedUndecrypted = "password could not be decrypted (RSA)"
)

// denyAccess answers a failed login with MySQL's ER_ACCESS_DENIED_ERROR,
// identical for unknown users and wrong passwords; the log line says which
// (why, one of the refused* constants), aggregated per listener, user and
// reason.
func (s *session) denyAccess(seq byte, user string, withPassword bool, why string) {
	s.srv.metrics.authFailures.WithLabelValues(s.l.name).Inc()
	using := "NO"
	if withPassword {
		using = "YES"
	}
	msg := fmt.Sprintf("Access denied for user '%s'@'%s' (using password: %s)", user, s.remote(), using)
	s.writeError(seq, mysqlproto.NewError(mysql.ER_ACCESS_DENIED_ERROR, msg))
	s.log.Repeated(slog.LevelInfo, "client login refused|"+why+"|"+s.l.name+"|"+user, "client login refused",
		"reason", why, "user", user, "using_password", using)
}

func (s *session) logClientError(what string, err error) {
	if errors.Is(err, io.EOF) {
		s.log.Debug("client closed the connection", "during", what)
		return
	}
	s.log.Info("closing client connection", "during", what, "err", err)
}

// clientReason maps an error reading from the client to a close reason.
func clientReason(err error) string {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	if errors.Is(err, io.EOF) {
		return closeClientGone
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
		return closeClientGone
	}
	return closeClientProtocol
}

// fallbackGreeting is announced when no backend greeting of the cluster is
// known and none can be read (the client then gets the connect error after
// its handshake response): a MariaDB 10.11 server with no optional
// capabilities, utf8mb4_general_ci.
func fallbackGreeting() *greetingInfo {
	return &greetingInfo{version: "5.5.5-10.11.0-MariaDB-switchyard", charset: 45}
}

func errUnknown(msg string) *mysql.MyError {
	return &mysql.MyError{Code: mysql.ER_UNKNOWN_ERROR, State: mysql.DEFAULT_MYSQL_STATE, Message: msg}
}

// setTracking records whether the session's new backend reports session
// state and the status flags it left the session with.
func (s *session) setTracking(be *backend, okPayload []byte) {
	s.tracked = be.tracked
	s.strip = be.tracked && s.caps&mysql.CLIENT_SESSION_TRACK == 0
	s.updateTrackFilter()
	s.status = be.status
	if !be.tracked {
		if st, ok := mysqlproto.OKStatus(okPayload); ok {
			s.status = st
		}
	}
}

func (snap *routeSnapshot) stateEpoch() int64 {
	if snap == nil {
		return 0
	}
	return snap.state.Epoch
}

func nodeName(be *backend) string {
	if be == nil {
		return ""
	}
	return be.t.node
}
