package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// backend is one server connection owned by a session.
type backend struct {
	conn net.Conn
	// raw is the TCP socket under conn when conn is TLS (tls.go), for the
	// checks that look at the socket (peerClosed, sinceLastAck); nil when
	// conn is the socket.
	raw     net.Conn
	fd      int // the socket's descriptor, for the idle peek (failoverhold.go); -1 if unknown
	t       *target
	counter *backendCounter
	gauge   prometheus.Gauge
	// threadID is the server's connection id (for logs and KILL).
	threadID uint32
	// gen is the route's primary generation when it was opened (see
	// routeSnapshot.gen).
	gen uint64
	// globals is Server.globalsGen when the connection last took its
	// session variables from the server's global values (its login or a
	// COM_RESET_CONNECTION): a clean connection whose globals is older is
	// reset at checkout (pool.go preparePooled).
	globals uint64
	closed  atomic.Bool
	// tracked: the server reports session state (CLIENT_SESSION_TRACK).
	tracked bool
	// status is the server status after the setup statement.
	status uint16
	// restored maps client statement ids to the ids this backend gave the
	// statements it prepared again (connect with restore).
	restored map[uint32]uint32
	// resend holds, by client statement id, the definitions of statements
	// prepared again whose columns differ from those the client holds
	// (readPrepared), installed with restored (applyRestored).
	resend map[uint32]*metaResend
	// rd is what the session's response reader reads from (reader).
	rd stickyReader
	// sio reads and writes conn for the relay when conn is the socket
	// (not TLS); nil otherwise.
	sio *sockIO

	// Pool state (pool.go). key, schema, clean, owner, epoch and
	// sameState are the holding session's while in use; inPool and idleAt
	// are guarded by counter.mu.
	key       poolKey
	schema    string // default schema selected on the connection
	clean     bool   // no session state but login, tracking and schema
	owner     uint32 // id of the session whose state the connection has (0: none)
	epoch     int64  // cluster epoch when opened or last taken
	sameState bool   // taken by the session that used it last: its state is there
	// setupWarned: the statements that set the connection up for its
	// session (setupBackend) left warnings, which SHOW WARNINGS would show
	// the session (movediag.go).
	setupWarned bool
	inPool      bool
	idleAt      time.Time
}

// sock returns the backend's TCP socket (under TLS, if any).
func (b *backend) sock() net.Conn {
	if b.raw != nil {
		return b.raw
	}
	return b.conn
}

// reader returns the io.Reader responses are read from: the connection,
// keeping its first error (stickyReader).
func (b *backend) reader() io.Reader {
	if b.rd.c != b.conn {
		b.rd = stickyReader{c: b.conn}
		if x := b.plainSock(); x != nil {
			b.rd.r = x
		}
	}
	return &b.rd
}

// writer returns what commands are written to: the socket's sockIO, or
// the connection.
func (b *backend) writer() io.Writer {
	if x := b.plainSock(); x != nil {
		return x
	}
	return b.conn
}

// plainSock returns the sockIO the relay reads and writes conn with, or
// nil when conn is not the plain socket (TLS).
func (b *backend) plainSock() *sockIO {
	if b.sio != nil && b.sio.c == b.conn {
		return b.sio
	}
	return nil
}

// stickyReader reads from a backend connection and returns its first
// error other than a timeout on every later read. bufio.Reader hands an
// error out once (a failed Peek clears it) and a socket reports a reset
// once (the next read returns EOF): without it a connection reset, which
// proves the server never read the command (failoverhold.go notExecuted),
// would be seen as a plain EOF.
type stickyReader struct {
	c   net.Conn
	r   io.Reader // c, or its sockIO
	err error
}

// Read implements io.Reader.
func (r *stickyReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	var n int
	var err error
	if r.r != nil {
		n, err = r.r.Read(p)
	} else {
		n, err = r.c.Read(p)
	}
	if err != nil {
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			r.err = err
		}
	}
	return n, err
}

// close ends the backend connection; with quit it first sends COM_QUIT so the
// server does not count an aborted connection. Only the first call acts (the
// sweeper and the session may both close it).
func (b *backend) close(quit bool) {
	if !b.closed.CompareAndSwap(false, true) {
		return
	}
	if quit {
		_ = b.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = b.conn.Write([]byte{1, 0, 0, 0, mysql.COM_QUIT})
	}
	_ = b.conn.Close()
	if b.counter != nil {
		b.counter.open.Add(-1)
		b.counter.closed(b)
	}
	if b.gauge != nil {
		b.gauge.Dec()
	}
}

// closingErrors are the errors with which a server refuses a client's
// packet and then closes the connection (MariaDB sql/net_serv.cc,
// sql/sql_parse.cc): the packet was larger than max_allowed_packet
// (ER_NET_PACKET_TOO_LARGE, 1153) or out of order (1156). They say
// nothing about the server's health.
var closingErrors = map[uint16]bool{mysql.ER_NET_PACKET_TOO_LARGE: true, mysql.ER_NET_PACKETS_OUT_OF_ORDER: true}

// closingError returns the sequence id and payload of an ERR packet in
// closingErrors that the server sent before it closed the connection
// (read within 100 ms, bypassing the reader's recorded error), or nil.
// Called only when the connection failed before any of the response
// reached the client.
func (b *backend) closingError() (byte, []byte) {
	if b.closed.Load() {
		return 0, nil
	}
	_ = b.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	defer func() { _ = b.conn.SetReadDeadline(time.Time{}) }()
	p, seq, err := mysqlproto.ReadPacket(bufio.NewReaderSize(b.conn, 512), nil, 1<<16)
	if err != nil || len(p) < 3 || p[0] != mysql.ERR_HEADER || !closingErrors[binary.LittleEndian.Uint16(p[1:])] {
		return 0, nil
	}
	return seq, p
}

// roleOf names t's role in snap for messages ("primary" or "replica").
func roleOf(t *target, snap *routeSnapshot) string {
	if snap != nil && snap.primary.same(t) {
		return "primary"
	}
	return "replica"
}

// dialError turns a dial or handshake failure into the ERR the client sees.
func dialError(t *target, snap *routeSnapshot, timeout time.Duration, err error) *mysql.MyError {
	if localResource(err) {
		return errLocalResource(t, snap, err)
	}
	detail := err.Error()
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		detail = fmt.Sprintf("connect timeout after %s", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		detail = "connection refused"
	}
	return errUnknown(fmt.Sprintf("switchyard: cannot reach %s %s (%s): %s", roleOf(t, snap), t.node, t.addr, detail))
}

// greeting returns what the proxy announces in its handshake: the cluster's
// cached backend version and capabilities, or — the first time — those of
// t, read from a short connection that is closed right after the server's
// greeting. If t cannot be reached the client gets the connect error at once.
func (s *session) greeting(t *target, snap *routeSnapshot, rc *runtimeConfig) (*greetingInfo, *mysql.MyError) {
	if g := s.l.route.greeting.Load(); g != nil {
		return g, nil
	}
	conn, err := rc.tcp.dialBackend(rc.connectTimeout, t.addr)
	if err != nil {
		s.srv.metrics.backendErrors.WithLabelValues(t.cluster, t.node, dialReason(err)).Inc()
		s.log.Repeated(slog.LevelWarn, "backend unreachable|"+t.cluster+"|"+t.node, "backend unreachable",
			"cluster", t.cluster, "node", t.node, "addr", t.addr, "err", err)
		return nil, dialError(t, snap, rc.connectTimeout, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(rc.connectTimeout))
	p, _, err := mysqlproto.ReadPacket(bufio.NewReaderSize(conn, 512), nil, handshakeMax)
	if err != nil {
		s.srv.metrics.backendErrors.WithLabelValues(t.cluster, t.node, dialReason(err)).Inc()
		return nil, dialError(t, snap, rc.connectTimeout, fmt.Errorf("no server greeting: %w", err))
	}
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		e := serverERR(p)
		s.srv.metrics.backendErrors.WithLabelValues(t.cluster, t.node, loginReason(e.Code)).Inc()
		return nil, e
	}
	h, err := mysqlproto.ParseHandshake(p)
	if err != nil {
		s.srv.metrics.backendErrors.WithLabelValues(t.cluster, t.node, connProtocol).Inc()
		return nil, backendLoginError(t, err)
	}
	return s.l.route.remember(h), nil
}

// remember caches a backend greeting for the cluster and returns the info.
func (cr *clusterRoute) remember(h *mysqlproto.Handshake) *greetingInfo {
	g := &greetingInfo{version: h.ServerVersion, caps: h.Capabilities, ext: h.ExtCapabilities, charset: h.Charset}
	if old := cr.greeting.Load(); old == nil || *old != *g {
		cr.greeting.Store(g)
	}
	return cr.greeting.Load()
}

// serverERR returns the server's ERR payload p as an error to relay to the
// client unchanged: its number, message and SQLSTATE, or an empty State
// when p carries no '#' SQLSTATE marker (a server refusing a connection
// before its greeting, e.g. MariaDB's 1040 past max_connections + 1, sends
// none; the marker is optional in protocol 4.1 ERR packets). writeError
// then sends it without a marker too, so the client reports the same text
// as a direct one (go-sql-driver: "Error 1040: Too many connections").
// https://mariadb.com/kb/en/err_packet/
func serverERR(p []byte) *mysql.MyError {
	e := mysqlproto.ParseERR(p)
	if len(p) < 4 || p[3] != '#' {
		e.State = ""
	}
	return e
}

// backendLoginError wraps a server's refusal (e.g. 1040 too many connections,
// 1045 access denied, 1049 unknown database) keeping its number and SQLSTATE.
func backendLoginError(t *target, err error) *mysql.MyError {
	var me *mysql.MyError
	if errors.As(err, &me) {
		return &mysql.MyError{Code: me.Code, State: me.State, Message: me.Message}
	}
	return errUnknown(fmt.Sprintf("switchyard: backend %s (%s) login failed: %v", t.node, t.addr, err))
}

// connectRoute connects to first and, on a replica listener, when that
// fails, to the other serving replicas (skipping those this proxy found
// unreachable) and then the primary if fallback is on: a node that went
// away costs one refused connect (or one connect timeout), never more. It
// returns the target it connected to.
func (s *session) connectRoute(first *target, snap *routeSnapshot, rc *runtimeConfig, restore bool) (*target, *backend, []byte, *mysql.MyError) {
	be, okp, merr := s.connect(first, snap, rc, restore)
	if merr == nil || s.l.role != roleReplica {
		return first, be, okp, merr
	}
	tried := map[string]bool{first.addr: true}
	avoid := func(t *target) bool { return tried[t.addr] || !s.srv.reachable(t) }
	for range len(snap.replicas) + 1 {
		t, perr := snap.pickAvoiding(s.l.role, rc.fallback(s.l.cluster), avoid)
		if perr != nil {
			return first, nil, nil, merr
		}
		tried[t.addr] = true
		if be, okp, err := s.connect(t, snap, rc, restore); err == nil {
			s.log.Info("backend unavailable; session routed to another node", "failed", first.node, "node", t.node)
			return t, be, okp, nil
		}
	}
	return first, nil, nil, merr
}

// dialAndLogin opens a backend connection to t: the TCP connect within
// proxy.connect_timeout (dialBackend), then the server's greeting, the
// login and the session setup within proxy.connect_timeout again, counted
// from the connect. A server hit by thousands of connects at once (a
// connection storm: MariaDB creates a thread per connection and answers
// them in turn) can take most of a second to accept a connect that its
// listen queue held and as long again to send the greeting; counting both
// against one connect_timeout failed logins that HAProxy, which does not
// bound the server's handshake, completed (bench/storm, session pooling).
// A frozen server (it accepts in the kernel, never greets) still fails
// within connect_timeout of the connect.
func (s *session) dialAndLogin(t *target, snap *routeSnapshot, rc *runtimeConfig, restore bool) ([]byte, *backend, *mysql.MyError) {
	s.dialWhy = ""
	conn, err := rc.tcp.dialBackend(rc.connectTimeout, t.addr)
	if err != nil {
		s.dialWhy = dialReason(err)
		return nil, nil, dialError(t, snap, rc.connectTimeout, err)
	}
	_ = conn.SetDeadline(time.Now().Add(rc.connectTimeout))
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() {
		br.Reset(nil)
		s.srv.readers.Put(br)
	}()
	sock := conn
	globals := s.srv.globalsGen.Load()
	okp, threadID, tracked, merr := s.backendLogin(&conn, br, t, snap, rc)
	if merr != nil {
		_ = conn.Close()
		return nil, nil, merr
	}
	be := &backend{conn: conn, fd: connFD(sock), t: t, threadID: threadID, tracked: tracked, globals: globals}
	if conn != sock {
		be.raw = sock
	} else {
		be.sio = newSockIO(conn)
	}
	if p := s.srv.backendCounter(t); p.wantLimits(time.Now()) {
		// Before the setup, whose statements leave the state the session
		// starts from (servermax.go).
		maxConns, userMax, threads, ok, err := readLimits(conn, br)
		if err != nil {
			_ = conn.Close()
			return nil, nil, dialError(t, snap, rc.connectTimeout, fmt.Errorf("reading the server's connection limits: %w", err))
		}
		if !ok {
			p.limitsUnreadable()
		} else {
			open := int(p.open.Load()) + 1 // this one is not counted yet
			if p.noteLimits(maxConns, userMax, threads, open) {
				s.log.Info("server's connection limits", "node", t.node, "addr", t.addr, "max_connections", maxConns,
					"max_user_connections", userMax, "threads_connected", threads,
					"ceiling", p.limitNow(rc), "max_connections_per_backend", rc.maxPerBackend)
			}
		}
	}
	if restore {
		_ = conn.SetDeadline(time.Now().Add(max(rc.connectTimeout, restoreTimeout)))
	}
	if merr := s.setupBackend(be, br, setupOpts{tracking: true, restore: restore}); merr != nil {
		_ = conn.Close()
		return nil, nil, merr
	}
	if br.Buffered() > 0 {
		_ = conn.Close()
		return nil, nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) sent unexpected data after login", t.node, t.addr))
	}
	_ = conn.SetDeadline(time.Time{})
	return okp, be, nil
}

// backendLogin logs into the server on *cp (greeting read through br),
// switching *cp to TLS first when the cluster has clusters[].tls.
func (s *session) backendLogin(cp *net.Conn, br *bufio.Reader, t *target, snap *routeSnapshot, rc *runtimeConfig) ([]byte, uint32, bool, *mysql.MyError) {
	conn := *cp
	ioErr := func(what string, err error) *mysql.MyError {
		s.dialWhy = dialReason(err)
		return dialError(t, snap, rc.connectTimeout, fmt.Errorf("%s: %w", what, err))
	}
	p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	if err != nil {
		return nil, 0, false, ioErr("no server greeting", err)
	}
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		// Refused before the greeting (1040 past max_connections + 1,
		// 1129 host blocked): relayed in the form the server sent.
		return nil, 0, false, serverERR(p)
	}
	h, err := mysqlproto.ParseHandshake(p)
	if err != nil {
		return nil, 0, false, backendLoginError(t, err)
	}
	s.l.route.remember(h)
	if missing := (s.caps & relayCaps) &^ h.Capabilities; missing != 0 {
		return nil, 0, false, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) lacks capabilities this session negotiated (%s); reconnect",
			t.node, t.addr, capNames(missing)))
	}
	if missing := s.ext &^ h.ExtCapabilities; missing != 0 {
		return nil, 0, false, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) lacks MariaDB capabilities this session negotiated (%s); reconnect",
			t.node, t.addr, extCapNames(missing)))
	}
	if h.Capabilities&mysql.CLIENT_PROTOCOL_41 == 0 || h.Capabilities&mysql.CLIENT_SECURE_CONNECTION == 0 {
		return nil, 0, false, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) does not speak protocol 4.1", t.node, t.addr))
	}
	caps := (s.caps & relayCaps) | mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION
	caps |= h.Capabilities & (mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
	// Session tracking is always asked for (sessionstate.go); clients
	// that did not ask get OK packets without it.
	tracked := h.Capabilities&mysql.CLIENT_SESSION_TRACK != 0
	if tracked {
		caps |= mysql.CLIENT_SESSION_TRACK
	}
	if s.schema != "" {
		caps |= mysql.CLIENT_CONNECT_WITH_DB
	}
	if s.attrs != nil && h.Capabilities&mysql.CLIENT_CONNECT_ATTRS != 0 {
		caps |= mysql.CLIENT_CONNECT_ATTRS
	}
	if s.ext != 0 {
		// Extended capabilities travel only with CLIENT_MYSQL clear.
		caps &^= mysql.CLIENT_LONG_PASSWORD
	}
	resp := mysqlproto.HandshakeResponse{
		Capabilities:    caps,
		ExtCapabilities: s.ext,
		MaxPacketSize:   s.maxPacket,
		Charset:         s.charset,
		User:            s.user,
		AuthResponse:    s.nativeToken(h.Scramble),
		Database:        s.schema,
		AuthPlugin:      mysql.AUTH_NATIVE_PASSWORD,
		Attrs:           s.attrs,
	}
	seq := byte(1)
	if tc := rc.backendTLSConfig(t); tc != nil {
		resp.Capabilities |= mysql.CLIENT_SSL
		c, next, merr := backendStartTLS(conn, br, h, resp.Capabilities, tc, t, s)
		if merr != nil {
			return nil, 0, false, merr
		}
		conn, *cp, seq = c, c, next
	}
	if err := writePacket(conn, seq, mysqlproto.AppendHandshakeResponse(nil, &resp)); err != nil {
		return nil, 0, false, ioErr("sending login", err)
	}
	for range 4 { // at most a couple of auth switches
		p, rseq, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
		if err != nil {
			return nil, 0, false, ioErr("reading login result", err)
		}
		switch {
		case len(p) > 0 && p[0] == mysql.OK_HEADER:
			return append([]byte(nil), p...), h.ConnectionID, tracked, nil
		case len(p) > 0 && p[0] == mysql.ERR_HEADER:
			return nil, 0, false, serverERR(p)
		case len(p) > 0 && p[0] == mysql.EOF_HEADER:
			sw, err := mysqlproto.ParseAuthSwitchRequest(p)
			var answer []byte
			switch {
			case err == nil && sw.Plugin == mysql.AUTH_NATIVE_PASSWORD:
				answer = s.nativeToken(sw.Data)
			case err == nil && sw.Plugin == mysqlproto.PluginEd25519:
				// Every byte after the plugin name's NUL is the nonce
				// (ParseAuthSwitchRequest drops a trailing NUL, which a
				// random nonce may end with).
				nonce := p[len(mysqlproto.PluginEd25519)+2:]
				var merr *mysql.MyError
				if answer, merr = s.ed25519Answer(t, nonce); merr != nil {
					return nil, 0, false, merr
				}
			default:
				plugin := "mysql_old_password"
				if sw != nil {
					plugin = sw.Plugin
				}
				return nil, 0, false, errUnknown(fmt.Sprintf(
					"switchyard: backend %s asks for auth plugin %s for user %s; only mysql_native_password and client_ed25519 are supported towards backends",
					t.node, plugin, s.user))
			}
			seq = rseq + 1
			if err := writePacket(conn, seq, answer); err != nil {
				return nil, 0, false, ioErr("sending auth switch response", err)
			}
		default:
			return nil, 0, false, errUnknown(fmt.Sprintf(
				"switchyard: backend %s sent an unsupported authentication packet for user %s (0x%02x); only mysql_native_password is supported towards backends",
				t.node, s.user, firstByte(p)))
		}
	}
	return nil, 0, false, errUnknown(fmt.Sprintf("switchyard: backend %s: too many authentication rounds", t.node))
}

// nativeToken answers a server scramble for the session's user ("" for an
// empty password).
func (s *session) nativeToken(scramble []byte) []byte {
	if s.stage1 == ([mysqlproto.HashLen]byte{}) {
		return []byte{}
	}
	if len(scramble) > mysqlproto.ScrambleLen {
		scramble = scramble[:mysqlproto.ScrambleLen]
	}
	return mysqlproto.NativeToken(scramble, s.stage1)
}

func writePacket(c net.Conn, seq byte, payload []byte) error {
	b, _ := mysqlproto.AppendPacket(nil, seq, payload)
	_, err := c.Write(b)
	return err
}

func firstByte(p []byte) byte {
	if len(p) == 0 {
		return 0
	}
	return p[0]
}

// extCapNames names MariaDB extended capability bits.
func extCapNames(c uint32) string {
	names := map[uint32]string{
		mysqlproto.MariaDBClientProgress:           "MARIADB_CLIENT_PROGRESS",
		mysqlproto.MariaDBClientComMulti:           "MARIADB_CLIENT_COM_MULTI",
		mysqlproto.MariaDBClientStmtBulkOperations: "MARIADB_CLIENT_STMT_BULK_OPERATIONS",
		mysqlproto.MariaDBClientExtendedTypeInfo:   "MARIADB_CLIENT_EXTENDED_TYPE_INFO",
		mysqlproto.MariaDBClientCacheMetadata:      "MARIADB_CLIENT_CACHE_METADATA",
		mysqlproto.MariaDBClientBulkUnitResults:    "MARIADB_CLIENT_BULK_UNIT_RESULTS",
	}
	var out []string
	for bit := uint32(1); bit != 0; bit <<= 1 {
		if c&bit != 0 {
			n, ok := names[bit]
			if !ok {
				n = fmt.Sprintf("bit %d", bits.TrailingZeros32(bit)+mysqlproto.MariaDBExtCapsShift)
			}
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

func capNames(c uint32) string {
	var names []string
	for bit := uint32(1); bit != 0; bit <<= 1 {
		if c&bit != 0 {
			if n, ok := mysql.CapNames[bit]; ok {
				names = append(names, n)
			}
		}
	}
	return strings.Join(names, ", ")
}
