package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// TLS on both sides of the proxy.
//
// Client side (listeners[].tls): a listener with a certificate offers
// CLIENT_SSL in its greeting. A client that wants TLS answers with the
// 32-byte SSLRequest, runs the TLS handshake, then sends its full
// handshake response over TLS (MySQL "Protocol::SSLRequest"); the
// session reads and writes through the *tls.Conn from then on
// (session.client) and never parks idle (idlepark.go reads the raw
// socket, whose bytes are TLS records): a TLS session keeps its goroutine
// and its client reader. Plaintext sessions are unchanged.
//
// Backend side (clusters[].tls): after the server's greeting the proxy
// sends an SSLRequest, runs the TLS handshake as a client (server name =
// host of the node's address) and logs in over TLS (backendStartTLS).
// backend.conn is the *tls.Conn; backend.raw keeps the socket for the
// liveness checks that look at TCP state (peek, TCP_INFO).

// tlsReloadEvery bounds how often a handshake looks at the certificate
// files' modification times (two stat(2) calls).
const tlsReloadEvery = time.Second

// tlsLogEvery rate-limits the log of failed client TLS handshakes, per
// listener (a scanner or a client with the wrong CA would fill the log).
const tlsLogEvery = 10 * time.Second

// tlsMetrics are the TLS counters, by listener.
type tlsMetrics struct {
	handshakeFailures *prometheus.CounterVec
	reloadFailures    *prometheus.CounterVec
	reloads           *prometheus.CounterVec
	sessions          *prometheus.CounterVec
	notAfter          *prometheus.GaugeVec
}

func newTLSMetrics(reg prometheus.Registerer) (*tlsMetrics, error) {
	m := &tlsMetrics{
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_tls_handshake_failures_total",
			Help: "Client TLS handshakes that failed (client does not trust the certificate, bad or unverified client certificate, protocol error), by listener.",
		}, []string{"listener"}),
		reloadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_tls_reload_failures_total",
			Help: "Certificate reloads that failed (unreadable file, key mismatch, expired); the listener keeps its previous certificate. By listener.",
		}, []string{"listener"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_tls_reloads_total",
			Help: "Listener certificates reloaded from changed files or on SIGHUP, by listener.",
		}, []string{"listener"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_tls_sessions_total",
			Help: "Client sessions that switched to TLS, by listener.",
		}, []string{"listener"}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_proxy_tls_certificate_not_after_seconds",
			Help: "End of validity (Unix seconds) of the certificate a listener presents, by listener: alert before it passes.",
		}, []string{"listener"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.handshakeFailures, m.reloadFailures, m.reloads, m.sessions, m.notAfter} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("proxy: register TLS metrics: %w", err)
			}
		}
	}
	return m, nil
}

// listenerTLS is a listener's client-side TLS (config.ListenerTLS).
type listenerTLS struct {
	name              string // listener
	certFile, keyFile string
	require           bool
	requireCert       bool // client_cert required: checked after the handshake (1045, as MariaDB)
	cfg               *tls.Config
	log               *slog.Logger
	m                 *tlsMetrics

	cert      atomic.Pointer[tls.Certificate]
	lastCheck atomic.Int64 // unix ns of the last look at the files

	mu        sync.Mutex // guards the fields below (reloads)
	certMod   fileStamp
	keyMod    fileStamp
	failedMod [2]fileStamp // stamps whose load failed (logged once)

	lastLog    atomic.Int64 // unix ns of the last logged handshake failure
	suppressed atomic.Int64 // failures not logged since
}

// fileStamp identifies a version of a file.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// newListenerTLS loads the listener's certificate (and client CAs);
// nil, nil when the listener has no TLS. Errors name the field.
func newListenerTLS(name string, i int, lc config.ListenerTLS, log *slog.Logger, m *tlsMetrics) (*listenerTLS, error) {
	if !lc.Enabled() {
		return nil, nil
	}
	f := fmt.Sprintf("proxy: listeners[%d] (%s).tls", i, name)
	minV, err := config.TLSVersion(lc.MinVersion)
	if err != nil {
		return nil, fmt.Errorf("%s.min_version: %w", f, err)
	}
	lt := &listenerTLS{name: name, certFile: lc.CertFile, keyFile: lc.KeyFile, require: lc.Require,
		requireCert: lc.ClientCert == config.ClientCertRequired, log: log, m: m}
	lt.certMod, _ = stamp(lc.CertFile)
	lt.keyMod, _ = stamp(lc.KeyFile)
	cert, err := config.LoadKeyPair(lc.CertFile, lc.KeyFile, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file: %w", f, err)
	}
	lt.cert.Store(&cert)
	m.notAfter.WithLabelValues(name).Set(float64(cert.Leaf.NotAfter.Unix()))
	lt.lastCheck.Store(time.Now().UnixNano())
	lt.cfg = &tls.Config{MinVersion: minV, GetCertificate: lt.getCertificate}
	if lc.CAFile != "" {
		pool, err := config.LoadCAPool(lc.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", f, err)
		}
		lt.cfg.ClientCAs = pool
	}
	switch lc.ClientCert {
	case config.ClientCertOptional, config.ClientCertRequired:
		// Required is checked after the handshake, so that a client
		// without a certificate gets MariaDB's answer to an account with
		// REQUIRE X509 (1045) instead of a TLS alert.
		lt.cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return lt, nil
}

// getCertificate is tls.Config.GetCertificate: the current certificate,
// reloaded first if its files changed (looked at once per tlsReloadEvery).
func (lt *listenerTLS) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now().UnixNano()
	if last := lt.lastCheck.Load(); now-last >= int64(tlsReloadEvery) && lt.lastCheck.CompareAndSwap(last, now) {
		lt.reload(false)
	}
	return lt.cert.Load(), nil
}

// reload reads the certificate and key again when their files changed (or
// always, with force: SIGHUP). A pair that fails to load keeps the
// previous certificate; the failure is logged and counted once per version
// of the files.
func (lt *listenerTLS) reload(force bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	cs, cerr := stamp(lt.certFile)
	ks, kerr := stamp(lt.keyFile)
	if !force && cerr == nil && kerr == nil && cs == lt.certMod && ks == lt.keyMod {
		return
	}
	err := errors.Join(cerr, kerr)
	var cert tls.Certificate
	if err == nil {
		cert, err = config.LoadKeyPair(lt.certFile, lt.keyFile, time.Now())
	}
	if err != nil {
		if lt.failedMod != [2]fileStamp{cs, ks} || force {
			lt.failedMod = [2]fileStamp{cs, ks}
			lt.m.reloadFailures.WithLabelValues(lt.name).Inc()
			lt.log.Error("TLS certificate reload failed; keeping the previous certificate", "listener", lt.name, "cert_file", lt.certFile, "err", err)
		}
		return
	}
	lt.cert.Store(&cert)
	lt.m.notAfter.WithLabelValues(lt.name).Set(float64(cert.Leaf.NotAfter.Unix()))
	lt.certMod, lt.keyMod, lt.failedMod = cs, ks, [2]fileStamp{}
	lt.m.reloads.WithLabelValues(lt.name).Inc()
	lt.log.Info("TLS certificate reloaded", "listener", lt.name, "cert_file", lt.certFile,
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

// handshakeFailed counts a failed client handshake and logs it, at most
// once per tlsLogEvery per listener.
func (lt *listenerTLS) handshakeFailed(s *session, err error) {
	lt.m.handshakeFailures.WithLabelValues(lt.name).Inc()
	now := time.Now().UnixNano()
	last := lt.lastLog.Load()
	if now-last < int64(tlsLogEvery) || !lt.lastLog.CompareAndSwap(last, now) {
		lt.suppressed.Add(1)
		return
	}
	s.log.Info("client TLS handshake failed; closing the client", "err", err, "not_logged_since_last", lt.suppressed.Swap(0))
}

// ReloadTLS reads every listener's certificate and key again (SIGHUP). A
// listener whose files fail to load keeps its certificate (logged and
// counted in switchyard_proxy_tls_reload_failures_total).
func (s *Server) ReloadTLS() {
	for _, l := range s.listeners {
		if l.tls != nil {
			l.tls.reload(true)
		}
	}
}

// prefixConn reads pre before the connection: the bytes of the TLS
// ClientHello that the session's reader took in with the SSLRequest.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// clientTLS handles TLS in the connection phase after the client's first
// handshake-response packet resp (sequence id seq): an SSLRequest on a
// listener without TLS gets an error; on a TLS listener it starts TLS
// (startTLS) and returns the full handshake response read over TLS. A
// client the listener refuses (tlsRefusal) gets 1045. It returns the
// response, its sequence id, and "" or the close reason.
func (s *session) clientTLS(resp *mysqlproto.HandshakeResponse, seq byte) (*mysqlproto.HandshakeResponse, byte, string) {
	if resp.SSLRequest {
		if s.l.tls == nil {
			s.writeError(seq+1, errUnknown("switchyard: listener "+s.l.name+" has no TLS (listeners[].tls); connect without SSL (for example --ssl=0 or --ssl-mode=DISABLED)"))
			s.log.Info("closing client: it asked for TLS, which the listener does not offer")
			return nil, seq, closeClientProtocol
		}
		if reason := s.startTLS(); reason != "" {
			return nil, seq, reason
		}
		payload, next, err := mysqlproto.ReadPacket(s.cr, nil, handshakeMax)
		if err != nil {
			s.logClientError("reading handshake response after TLS", err)
			return nil, seq, clientReason(err)
		}
		seq = next
		if resp, err = mysqlproto.ParseHandshakeResponse(payload); err != nil || resp.SSLRequest {
			s.writeError(seq+1, mysqlproto.NewError(mysql.ER_HANDSHAKE_ERROR, "Bad handshake"))
			s.log.Info("closing client: bad handshake response after TLS", "err", err)
			return nil, seq, closeClientProtocol
		}
	}
	if merr := s.tlsRefusal(resp); merr != nil {
		s.writeError(seq+1, merr)
		return nil, seq, closeAuthFailed
	}
	return resp, seq, ""
}

// startTLS answers a client's SSLRequest: the TLS handshake on the client
// connection (within the login deadline), after which the session reads
// and writes through the *tls.Conn. It returns "" or the close reason.
func (s *session) startTLS() string {
	lt := s.l.tls
	var conn net.Conn = s.client
	if n := s.cr.Buffered(); n > 0 {
		b, _ := s.cr.Peek(n)
		conn = &prefixConn{Conn: s.client, pre: append([]byte(nil), b...)}
	}
	tc := tls.Server(conn, lt.cfg)
	if err := tc.Handshake(); err != nil {
		lt.handshakeFailed(s, err)
		return closeTLSHandshake
	}
	s.mu.Lock() // shutdown closes s.client from another goroutine
	s.client = tc
	s.mu.Unlock()
	// The raw socket now carries TLS records: no idle parking, which
	// reads it directly (clientread.go awaitCommand keeps one reader for
	// a TLS session). s.raw stays: the sweeper reads it without s.mu.
	s.tls = true
	in := s.cin
	in.r.Reset(&in.src)
	in.src = clientSrc{c: tc, pre: in.src.pre}
	lt.m.sessions.WithLabelValues(s.l.name).Inc()
	return ""
}

// closeTLSHandshake: the client's TLS handshake failed.
const closeTLSHandshake = "tls_handshake"

// tlsRefusal is the error for a client that a TLS listener refuses after
// its handshake response: on a listener with tls.require a client that did
// not switch to TLS, with client_cert required one without a verified
// certificate. MariaDB 10.11 answers both (require_secure_transport=ON,
// an account with REQUIRE X509) with 1045 access denied; nil when the
// client may go on.
func (s *session) tlsRefusal(resp *mysqlproto.HandshakeResponse) *mysql.MyError {
	lt := s.l.tls
	if lt == nil {
		return nil
	}
	switch {
	case !s.tls && lt.require:
		s.log.Repeated(slog.LevelInfo, "client login refused|TLS required|"+s.l.name, "client login refused",
			"reason", "TLS required (the listener's tls.mode is required)", "user", resp.User)
	case s.tls && lt.requireCert && len(s.client.(*tls.Conn).ConnectionState().PeerCertificates) == 0:
		s.log.Repeated(slog.LevelInfo, "client login refused|client certificate required|"+s.l.name, "client login refused",
			"reason", "client certificate required", "user", resp.User)
	default:
		return nil
	}
	s.srv.metrics.authFailures.WithLabelValues(s.l.name).Inc()
	using := "NO"
	if len(resp.AuthResponse) > 0 {
		using = "YES"
	}
	return mysqlproto.NewError(mysql.ER_ACCESS_DENIED_ERROR,
		fmt.Sprintf("Access denied for user '%s'@'%s' (using password: %s)", resp.User, s.remote(), using))
}

// backendTLSConfig returns the client TLS configuration for a connection to
// t (server name = host of its address), or nil when its cluster has no
// TLS.
func (rc *runtimeConfig) backendTLSConfig(t *target) *tls.Config {
	base := rc.backendTLS[t.cluster]
	if base == nil {
		return nil
	}
	tc := base.Clone()
	if host, _, err := net.SplitHostPort(t.addr); err == nil {
		tc.ServerName = host
	}
	return tc
}

// backendTLSBase builds the per-cluster backend TLS configurations (nil
// entries for clusters without TLS). Errors name the field.
func backendTLSBase(c *config.Config) (map[string]*tls.Config, error) {
	var out map[string]*tls.Config
	for i, cl := range c.Clusters {
		if !cl.TLS.Enabled {
			continue
		}
		tc, err := config.BackendTLS(cl.TLS, "")
		if err != nil {
			return nil, fmt.Errorf("proxy: clusters[%d] (%s).tls: %w", i, cl.Name, err)
		}
		tc.ClientSessionCache = tls.NewLRUClientSessionCache(64) // lets new pool connections resume a TLS session
		if out == nil {
			out = map[string]*tls.Config{}
		}
		out[cl.Name] = tc
	}
	return out, nil
}

// backendStartTLS sends an SSLRequest (sequence id 1) with caps after the
// server's greeting h and runs the TLS handshake on conn. It returns the
// TLS connection (br then reads from it) and the sequence id of the
// handshake response.
func backendStartTLS(conn net.Conn, br *bufio.Reader, h *mysqlproto.Handshake, caps uint32, tc *tls.Config, t *target, s *session) (net.Conn, byte, *mysql.MyError) {
	if h.Capabilities&mysql.CLIENT_SSL == 0 {
		return nil, 0, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) does not offer TLS (its server has no ssl_cert) and clusters[].tls.enabled is set", t.node, t.addr))
	}
	if br.Buffered() > 0 {
		return nil, 0, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) sent data before the SSLRequest", t.node, t.addr))
	}
	// The SSLRequest carries the MariaDB extended capabilities too: the
	// server takes them from it (the response after the TLS handshake
	// repeats them).
	req := mysqlproto.HandshakeResponse{Capabilities: caps | mysql.CLIENT_SSL, ExtCapabilities: s.ext, MaxPacketSize: s.maxPacket,
		Charset: s.charset, SSLRequest: true}
	if err := writePacket(conn, 1, mysqlproto.AppendHandshakeResponse(nil, &req)); err != nil {
		return nil, 0, errUnknown(fmt.Sprintf("switchyard: backend %s (%s): sending SSLRequest: %v", t.node, t.addr, err))
	}
	c := tls.Client(conn, tc)
	if err := c.Handshake(); err != nil {
		return nil, 0, errUnknown(fmt.Sprintf("switchyard: backend %s (%s): TLS handshake failed: %v", t.node, t.addr, err))
	}
	br.Reset(c)
	return c, 2, nil
}
