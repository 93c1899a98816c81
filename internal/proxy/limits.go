package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Client-connection limit and descriptor budget.
//
// Every client session holds a descriptor for its own connection and, while
// it holds one, one for its backend connection. A proxy that accepts
// clients until accept(2) fails with EMFILE has already spent the descriptors the rest of the process needs
// (etcd's WAL and snapshots, the etcd client, probes, the admin endpoint),
// and those parts then fail in ways that are far worse than a refused login.
// So the proxy admits at most proxy.max_client_connections sessions over all
// its listeners and answers the next ones the way MariaDB answers a client
// past max_connections (checked with MariaDB 10.11.19): the greeting, then,
// after the client's handshake response, ERR 1040 (SQLSTATE 08004) "Too
// many connections", so clients report a server error, not a failed
// connect. Like MariaDB past its one extra connection, a client that comes
// while too many refusals are being answered gets ERR 1040 as the first
// packet instead of a greeting.

// Refusal reasons: the "reason" label of
// switchyard_client_connections_refused_total.
const (
	// refusedMaxClients: the client got ERR 1040 after its handshake.
	refusedMaxClients = "max_client_connections"
	// refusedOverflow: more than maxRefusing refusals were being answered
	// at once; the client got ERR 1040 in place of the greeting.
	refusedOverflow = "refusals_in_progress"
)

// DefaultReservedDescriptors is the descriptor reserve of a proxy that runs
// without an embedded etcd: the admin HTTP endpoint, the controller's probes,
// the proxy's backend checks, the etcd client and log files.
const DefaultReservedDescriptors = 256

// EmbeddedEtcdDescriptors is added to the reserve when the embedded etcd
// runs in the same process (its WAL segments, snapshots, bbolt file, client
// and peer listeners and their connections).
const EmbeddedEtcdDescriptors = 256

// maxRefusing bounds the refusals answered at once (each holds a descriptor
// and a goroutine for at most refuseWindow); past it a connection gets ERR
// 1040 at once, without a greeting. It is part of the reserve.
const maxRefusing = 64

// tooManyBeforeHandshake is ERR 1040 "Too many connections" as a first
// packet (sequence 0, no SQLSTATE).
func tooManyBeforeHandshake() []byte {
	const code = mysql.ER_CON_COUNT_ERROR
	payload := append([]byte{0xff, code & 0xff, code >> 8}, "Too many connections"...)
	return append([]byte{byte(len(payload)), 0, 0, 0}, payload...)
}

// refuseWindow bounds the handshake of a refused client.
const refuseWindow = 2 * time.Second

// DefaultMaxClientConnections is proxy.max_client_connections when the
// config leaves it 0:
//
//	max((budget - reserve) / 2, budget - reserve - backend), at least 1
//
// where budget is the process's descriptor limit (RLIMIT_NOFILE soft
// limit), reserve the descriptors kept for everything but client sessions
// and their backend connections (see DefaultReservedDescriptors,
// EmbeddedEtcdDescriptors) and backend the most backend connections the
// pools may hold (BackendDescriptors: proxy.max_connections_per_backend
// times the configured nodes). Each client holds one descriptor, and at
// most one backend connection (a session-pooled client from login to
// logout, a transaction-pooled one only within a transaction), so the
// descriptors in use are at most clients + min(clients, backend): the
// first term bounds them when every client holds a backend connection, the
// second when the pools' caps bound the backend side (with transaction
// pooling, where idle clients hold none, it is the larger one). A budget of
// 0 or less (unknown) means no limit (0); a backend of 0 or less leaves the
// first term alone.
func DefaultMaxClientConnections(budget, reserve, backend int) int {
	if budget <= 0 {
		return 0
	}
	n := (budget - reserve) / 2
	if backend > 0 {
		n = max(n, budget-reserve-backend)
	}
	return max(n, 1)
}

// BackendDescriptors is the most backend connections the proxy's pools may
// hold under c: proxy.max_connections_per_backend times the nodes of every
// cluster (the cap is per node, over all users and listeners).
func BackendDescriptors(c *config.Config) int {
	nodes := 0
	for _, cl := range c.Clusters {
		nodes += len(cl.Nodes)
	}
	return nodes * c.Proxy.MaxConnectionsPerBackend
}

// DescriptorBudget returns the process's RLIMIT_NOFILE soft limit (the
// number of descriptors it may hold), or 0 when it cannot be read or is
// unlimited.
func DescriptorBudget() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}

// limitState is the Server's client-connection accounting. Only accept and
// session end touch it.
type limitState struct {
	budget, reserve int
	max             atomic.Int64 // effective proxy.max_client_connections; 0 = none
	clients         atomic.Int64 // admitted sessions, all listeners
	refusing        atomic.Int64 // refusals being answered
	// refusedConns are the clients being answered 1040, closed by
	// Server.Close; guarded by Server.mu.
	refusedConns map[net.Conn]struct{}
	refusedLog   rateLog
	acceptLog    rateLog
	// Warnings a storm repeats per session (pool.go, failoverhold.go):
	// the first is logged, then one line per rateLogInterval.
	poolLimitLog, holdRefusedLog rateLog

	refused      *prometheus.CounterVec // listener, reason
	acceptErrors *prometheus.CounterVec // listener, errno
	maxGauge     prometheus.Gauge
}

func (ls *limitState) init(reg prometheus.Registerer, budget, reserve int) error {
	ls.budget, ls.reserve = budget, reserve
	ls.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_client_connections_refused_total",
		Help: "Client connections refused by the proxy, by listener and reason (max_client_connections: ERR 1040 after the handshake; refusals_in_progress: closed without a greeting while too many refusals were being answered).",
	}, []string{"listener", "reason"})
	ls.acceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_accept_errors_total",
		Help: "accept(2) failures on a client listener, by listener and error (EMFILE, ENFILE, ENOMEM, other); the listener backs off 5 ms doubling to 1 s and keeps serving.",
	}, []string{"listener", "error"})
	ls.maxGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_client_connections_max",
		Help: "The effective proxy.max_client_connections of this proxy (0: no limit).",
	})
	if reg == nil {
		return nil
	}
	var err error
	if ls.refused, err = register(reg, ls.refused); err != nil {
		return fmt.Errorf("proxy: register metrics: %w", err)
	}
	if ls.acceptErrors, err = register(reg, ls.acceptErrors); err != nil {
		return fmt.Errorf("proxy: register metrics: %w", err)
	}
	if ls.maxGauge, err = register(reg, ls.maxGauge); err != nil {
		return fmt.Errorf("proxy: register metrics: %w", err)
	}
	return nil
}

// setMax applies proxy.max_client_connections of c (0: derived from the
// budget and c's backend caps).
func (ls *limitState) setMax(c *config.Config) int {
	n := c.Proxy.MaxClientConnections
	if n == 0 {
		n = DefaultMaxClientConnections(ls.budget, ls.reserve, BackendDescriptors(c))
	}
	ls.max.Store(int64(n))
	ls.maxGauge.Set(float64(n))
	return n
}

// admit counts one more session and reports whether it is within the limit;
// a session that is not admitted is not counted.
func (ls *limitState) admit() bool {
	n := ls.clients.Add(1)
	if lim := ls.max.Load(); lim > 0 && n > lim {
		ls.clients.Add(-1)
		return false
	}
	return true
}

// MaxClientConnections returns the effective proxy.max_client_connections
// (0: no limit) and the number of client sessions open now.
func (s *Server) MaxClientConnections() (limit, open int64) {
	return s.limit.max.Load(), s.limit.clients.Load()
}

// rateLog lets one log line through per interval and counts the others.
type rateLog struct {
	next       atomic.Int64 // unix nanoseconds
	suppressed atomic.Int64
}

// rateLogInterval is how often a repeated limit or accept warning is logged.
const rateLogInterval = 10 * time.Second

// allow reports whether to log now, and how many lines were suppressed
// since the last one.
func (r *rateLog) allow(now time.Time) (bool, int64) {
	next := r.next.Load()
	if now.UnixNano() < next || !r.next.CompareAndSwap(next, now.Add(rateLogInterval).UnixNano()) {
		r.suppressed.Add(1)
		return false, 0
	}
	return true, r.suppressed.Swap(0)
}

// acceptErrorName names an accept(2) failure for metrics and logs.
func acceptErrorName(err error) string {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return "EMFILE"
	case errors.Is(err, syscall.ENFILE):
		return "ENFILE"
	case errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.ENOMEM):
		return "ENOMEM"
	}
	return "other"
}

// acceptFailed records an accept error of l and returns how long to back
// off: 5 ms doubling to 1 s, as net/http's Server does.
func (s *Server) acceptFailed(l *listener, err error, backoff time.Duration) time.Duration {
	backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
	name := acceptErrorName(err)
	s.limit.acceptErrors.WithLabelValues(l.name, name).Inc()
	if ok, suppressed := s.limit.acceptLog.allow(time.Now()); ok {
		limit, open := s.MaxClientConnections()
		s.log.Warn("accept failed; the listener backs off and keeps serving",
			"listener", l.name, "err", err, "error", name, "retry_in", backoff,
			"sessions", open, "max_client_connections", limit, "descriptor_budget", s.limit.budget,
			"suppressed", suppressed)
	}
	return backoff
}

// refuse answers a client past proxy.max_client_connections on its own
// goroutine (s.wg counts it; s.mu is held by the caller).
func (s *Server) refuse(l *listener, c net.Conn) {
	reason := refusedMaxClients
	if s.limit.refusing.Add(1) > maxRefusing {
		reason = refusedOverflow
	}
	s.limit.refused.WithLabelValues(l.name, reason).Inc()
	if ok, suppressed := s.limit.refusedLog.allow(time.Now()); ok {
		limit, open := s.MaxClientConnections()
		s.log.Warn("client login refused",
			"reason", "too many connections (proxy.max_client_connections, MySQL error 1040)", "class", reason,
			"listener", l.name, "remote", c.RemoteAddr().String(),
			"sessions", open, "max_client_connections", limit, "suppressed", suppressed)
	}
	if reason == refusedOverflow {
		s.limit.refusing.Add(-1)
		// Before the handshake there is no SQLSTATE marker (no
		// CLIENT_PROTOCOL_41 yet), as MariaDB sends it. One write on a
		// fresh socket does not block.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(tooManyBeforeHandshake())
		_ = c.Close()
		return
	}
	if s.limit.refusedConns == nil {
		s.limit.refusedConns = make(map[net.Conn]struct{})
	}
	s.limit.refusedConns[c] = struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.limit.refusing.Add(-1)
		s.answerTooMany(l, c)
		s.mu.Lock()
		delete(s.limit.refusedConns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
}

// answerTooMany sends the greeting, reads the handshake response and sends
// ERR 1040 "Too many connections" in its place.
func (s *Server) answerTooMany(l *listener, c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(refuseWindow))
	g := l.route.greeting.Load()
	if g == nil {
		g = fallbackGreeting()
	}
	scramble, err := mysqlproto.NewScramble(mysqlproto.ScrambleLen)
	if err != nil {
		return
	}
	caps, ext := g.offer()
	hs := mysqlproto.Handshake{
		ServerVersion:   g.version,
		ConnectionID:    s.nextConnID.Add(1),
		Scramble:        scramble,
		Capabilities:    caps,
		ExtCapabilities: ext,
		Charset:         g.charset,
		Status:          mysql.SERVER_STATUS_AUTOCOMMIT,
		AuthPlugin:      mysql.AUTH_NATIVE_PASSWORD,
	}
	buf, _ := mysqlproto.AppendPacket(nil, 0, mysqlproto.AppendHandshake(nil, &hs))
	if _, err := c.Write(buf); err != nil {
		return
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	// The response itself is not needed: skip it (bounded, to read the
	// whole packet before answering so the client sees the ERR, not a reset).
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n > 64<<10 {
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return
	}
	e := mysqlproto.NewError(mysql.ER_CON_COUNT_ERROR, "Too many connections")
	l.errors.inc(e.Code)
	buf, _ = mysqlproto.AppendPacket(buf[:0], hdr[3]+1, mysqlproto.AppendError(nil, e))
	_, _ = c.Write(buf)
}
