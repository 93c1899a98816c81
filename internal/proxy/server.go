package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/logx"
)

// Buffer sizes. An idle session holds no buffer: the client reader
// (clientread.go) is taken from a pool when a command arrives and given
// back when the session has consumed every byte it read; the backend reader
// and client writer are taken for the duration of one command.
const (
	clientReadBuf   = 4 << 10
	backendReadBuf  = 64 << 10
	clientWriteBuf  = 64 << 10
	handshakeMax    = 256 << 10 // largest connection-phase packet accepted
	handshakeWindow = 10 * time.Second
)

// Options configure New.
type Options struct {
	// Config supplies listeners, clusters, users and proxy limits. Required.
	Config *config.Config
	// ID names this proxy in its registration (topo.ProxyRegistration.ID).
	// Default: the host name.
	ID string
	// Log receives session and routing events. Default: discard.
	Log *slog.Logger
	// Registry, when non-nil, receives the proxy's Prometheus metrics.
	Registry prometheus.Registerer
	// Now is the clock for registration timestamps. Default time.Now.
	// Socket deadlines always use the system clock.
	Now func() time.Time
	// Descriptors is the process's descriptor budget, from which a
	// proxy.max_client_connections of 0 is derived
	// (DefaultMaxClientConnections). Default: the RLIMIT_NOFILE soft limit
	// read by New (DescriptorBudget).
	Descriptors int
	// ReservedDescriptors are the descriptors kept for everything but
	// client sessions. Default: DefaultReservedDescriptors; callers that run
	// the embedded etcd in the same process add EmbeddedEtcdDescriptors.
	ReservedDescriptors int
}

// Server is the MySQL-protocol proxy: one accept loop per listener, one
// goroutine per client session.
type Server struct {
	log *slog.Logger
	id  string
	// markerOwner is this process's owner value in commit markers
	// (outcome.go newMarkerOwner); markerLog limits the warning about
	// markers that cannot be written (each session would repeat it).
	markerOwner string
	markerLog   rateLog
	now         func() time.Time
	metrics     *metrics
	tlsM        *tlsMetrics

	// drainedBad is, by cluster, the version of the drained nodes document
	// last refused for its MAC (logged once per version).
	drainedBadMu sync.Mutex
	drainedBad   map[string]int64

	// logAgg aggregates the log lines every session of an outage repeats
	// (sessionLog.Repeated).
	logAgg *logx.Aggregator

	// globalsGen counts the SET statements naming GLOBAL that sessions
	// sent: a pooled connection reset (or logged in) under an older count
	// may have session variables from old global values (pool.go).
	globalsGen atomic.Uint64

	rc  atomic.Pointer[runtimeConfig]
	cfg atomic.Pointer[config.Config]

	mu        sync.Mutex // guards the fields below; never taken per query
	clusters  map[string]*clusterRoute
	listeners []*listener
	sessions  map[*session]struct{}
	owners    map[uint32]owner           // logged-in sessions by proxy connection id, for KILL (kill.go)
	backends  map[string]*backendCounter // by address
	closed    bool
	started   bool

	bytesIn  prometheus.Counter // client → backend
	bytesOut prometheus.Counter // backend → client

	wg           sync.WaitGroup
	nextConnID   atomic.Uint32
	metaSeed     maphash.Seed // for metaSum (stmts.go)
	epochChanged chan struct{}

	reach reachState // backend reachability as this proxy sees it (reachability.go)
	fence writeFence // set while the registration lease is lost (lease.go)
	// failsafe confirms primaries directly while the fence is up (failsafe.go)
	failsafe failsafeState

	stateAlarm stateAlarms // cluster states refused (statealarm.go)
	limit      limitState  // proxy.max_client_connections, accept errors (limits.go)

	limits  atomic.Pointer[holdLimits] // switchover limits (hold.go)
	heldNow atomic.Int64               // commands held right now, all clusters
	acks    ackState                   // switchover acknowledgements (coordinate.go)
	hot     hotReads                   // sampled read statements (hotreads.go)
	closing chan struct{}              // closed by Close
	bg      sync.WaitGroup             // background goroutines (goBackground)

	auth     authState     // caching_sha2_password RSA key (auth.go)
	accounts accountsState // pass-through accounts (accounts.go)

	parker    idleParker // idle sessions without a goroutine (idlepark.go)
	clientIns sync.Pool  // *clientIn (clientReadBuf bytes)
	readers   sync.Pool  // *bufio.Reader of backendReadBuf bytes
	// trackDefaults are the nodes' global session-tracking settings (a
	// client's defaults, trackvars.go), by cluster + "/" + node.
	trackDefaults sync.Map
	// waitDefaults are the nodes' global wait_timeout and
	// interactive_timeout (idletimeout.go).
	waitDefaults waitDefaultsCache
	writers      sync.Pool // *bufio.Writer of clientWriteBuf bytes
	zpools       zpools    // compression state lent to compressed sessions (compress.go)
}

// listener is one client-facing endpoint.
type listener struct {
	name, cluster, role, address string
	pooling                      string       // config.PoolingSession or config.PoolingTransaction
	tls                          *listenerTLS // client-side TLS (tls.go); nil: plaintext only
	ln                           net.Listener
	route                        *clusterRoute
	sessions                     atomic.Int64
	queries                      prometheus.Counter
	latency                      prometheus.Observer  // switchyard_proxy_query_duration_seconds of the listener
	errors                       *clientErrorCounters // switchyard_proxy_client_errors_total of the listener
}

// backendCounter counts open connections to one backend address and holds
// its pool of idle connections (pool.go).
type backendCounter struct {
	cluster, node, addr string
	open                atomic.Int64
	// queries is switchyard_proxy_backend_queries_total of the node,
	// resolved when the counter is made (and when the address changes
	// node): counting a command costs no label lookup.
	queries atomic.Pointer[prometheus.Counter]
	nodePool
}

// countQuery counts one command relayed to the backend.
func (bc *backendCounter) countQuery() {
	if bc == nil {
		return
	}
	if c := bc.queries.Load(); c != nil {
		(*c).Inc()
	}
}

// New validates the proxy-relevant parts of o.Config and returns a Server
// that is not yet listening (call Start). Errors name the field at fault.
func New(o Options) (*Server, error) {
	if o.Config == nil {
		return nil, errors.New("proxy: Options.Config is required")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	id := o.ID
	if id == "" {
		id = defaultID()
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	tm, err := newTLSMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{
		log:          log,
		logAgg:       logx.New(log, logx.Options{}),
		id:           id,
		markerOwner:  newMarkerOwner(id),
		now:          now,
		metrics:      m,
		tlsM:         tm,
		clusters:     make(map[string]*clusterRoute),
		sessions:     make(map[*session]struct{}),
		backends:     make(map[string]*backendCounter),
		epochChanged: make(chan struct{}, 1),
		closing:      make(chan struct{}),
		bytesIn:      m.bytes.WithLabelValues("client_to_backend"),
		bytesOut:     m.bytes.WithLabelValues("backend_to_client"),
	}
	if err := s.failsafe.initMetrics(o.Registry); err != nil {
		return nil, err
	}
	if err := s.accounts.initMetrics(o.Registry); err != nil {
		return nil, err
	}
	if o.Registry != nil {
		if err := o.Registry.Register(healthCollector{s}); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) { // a second Server in one process: the first one's listeners are reported
				return nil, fmt.Errorf("proxy: register metrics: %w", err)
			}
		}
	}
	if s.auth.file = o.Config.Proxy.RSAKeyFile; s.auth.file != "" {
		if _, err := s.auth.rsaKey(); err != nil {
			return nil, fmt.Errorf("proxy: proxy.rsa_key_file: %w", err)
		}
	}
	budget, reserve := o.Descriptors, o.ReservedDescriptors
	if budget == 0 {
		budget = DescriptorBudget()
	}
	if reserve == 0 {
		reserve = DefaultReservedDescriptors
	}
	if err := s.limit.init(o.Registry, budget, reserve); err != nil {
		return nil, err
	}
	s.limit.setMax(o.Config)
	s.clientIns.New = newClientIn
	s.readers.New = func() any { return bufio.NewReaderSize(nil, backendReadBuf) }
	s.writers.New = func() any { return bufio.NewWriterSize(nil, clientWriteBuf) }
	s.zpools.init()
	s.metaSeed = maphash.MakeSeed()
	rc, err := newRuntimeConfig(o.Config, nil)
	if err != nil {
		return nil, err
	}
	s.rc.Store(rc)
	s.cfg.Store(o.Config)
	lim := newHoldLimits(o.Config)
	s.limits.Store(&lim)
	s.acks.changed = make(chan struct{}, 1)
	s.hot.init()
	seen := map[string]bool{}
	for i, lc := range o.Config.Listeners {
		switch {
		case lc.Name == "" || seen[lc.Name]:
			return nil, fmt.Errorf("proxy: listeners[%d].name %q is empty or not unique", i, lc.Name)
		case lc.Role != rolePrimary && lc.Role != roleReplica:
			return nil, fmt.Errorf("proxy: listeners[%d] (%s).role %q must be %q or %q", i, lc.Name, lc.Role, rolePrimary, roleReplica)
		case o.Config.Cluster(lc.Cluster) == nil:
			return nil, fmt.Errorf("proxy: listeners[%d] (%s).cluster %q is not a configured cluster", i, lc.Name, lc.Cluster)
		}
		seen[lc.Name] = true
		lt, err := newListenerTLS(lc.Name, i, lc.TLS, log, tm)
		if err != nil {
			return nil, err
		}
		s.listeners = append(s.listeners, &listener{
			name: lc.Name, cluster: lc.Cluster, role: lc.Role, address: lc.Address, pooling: lc.Pooling,
			route:   s.route(lc.Cluster),
			queries: m.queries.WithLabelValues(lc.Name),
			latency: m.queryDuration.WithLabelValues(lc.Name),
			errors:  newClientErrorCounters(m.clientErrors, lc.Name),
			tls:     lt,
		})
	}
	return s, nil
}

// ID returns the proxy's id (Options.ID or the host name).
func (s *Server) ID() string { return s.id }

// Start opens every listener in Config.Listeners and serves them in the
// background. On a bind failure it closes the listeners it opened and returns
// an error naming the listener and address.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.started {
		return errors.New("proxy: Start called twice or after Close")
	}
	for _, l := range s.listeners {
		ln, err := net.Listen("tcp", l.address)
		if err != nil {
			for _, o := range s.listeners {
				if o.ln != nil {
					_ = o.ln.Close()
					o.ln = nil
				}
			}
			return fmt.Errorf("proxy: listener %q: cannot listen on %s: %w", l.name, l.address, err)
		}
		l.ln = ln
	}
	s.started = true
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.reapIdle()
	}()
	limit, _ := s.MaxClientConnections()
	s.log.Debug("client connection limit", "max_client_connections", limit, "descriptor_budget", s.limit.budget, "reserved_descriptors", s.limit.reserve)
	s.startParker()
	s.startAccounts()
	for _, l := range s.listeners {
		s.wg.Add(1)
		go s.acceptLoop(l)
		s.log.Info("listening", "listener", l.name, "address", l.ln.Addr().String(), "cluster", l.cluster, "role", l.role)
	}
	return nil
}

// ListenerAddr returns the bound host:port of the named listener ("" if it
// is unknown or not started). Useful when the configured port is 0.
func (s *Server) ListenerAddr(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.listeners {
		if l.name == name && l.ln != nil {
			return l.ln.Addr().String()
		}
	}
	return ""
}

func (s *Server) acceptLoop(l *listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Any other error (EMFILE, ENFILE, ...) is temporary: back
			// off and keep serving; the connection stays in the kernel's
			// queue until a descriptor is free.
			backoff = s.acceptFailed(l, err, backoff)
			select {
			case <-time.After(backoff):
			case <-s.closing:
				return
			}
			continue
		}
		backoff = 0
		if !s.limit.admit() {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				_ = c.Close()
				return
			}
			s.refuse(l, c)
			s.mu.Unlock()
			continue
		}
		sess := newSession(s, l, c)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.limit.clients.Add(-1)
			_ = c.Close()
			return
		}
		s.sessions[sess] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go sess.serve()
	}
}

func (s *Server) removeSession(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	delete(s.owners, sess.id)
	s.mu.Unlock()
	s.limit.clients.Add(-1)
	s.wg.Done()
}

// SetConfig applies users (added, removed, changed passwords), proxy limits
// (connect timeout, max connections per backend, max client connections:
// sessions already open beyond a lowered limit stay), switchover limits
// (max_hold, max_held, max_duration) and cluster settings
// (node addresses used when a ClusterState lacks one, read_routing fallback)
// from c. Existing sessions keep their login. Listener changes are NOT
// applied (listeners are bound once at Start; restart the proxy to change
// them); they are reported in the log. An invalid user entry returns an error
// and changes nothing.
func (s *Server) SetConfig(c *config.Config) error {
	if c == nil {
		return errors.New("proxy: SetConfig: nil config")
	}
	rc, err := newRuntimeConfig(c, s.rc.Load())
	if err != nil {
		return err
	}
	old := s.cfg.Load()
	if !slices.Equal(old.Listeners, c.Listeners) {
		s.log.Warn("listener changes are not applied until the proxy restarts")
	}
	s.rc.Store(rc)
	s.cfg.Store(c)
	if old.Proxy.MaxClientConnections != c.Proxy.MaxClientConnections || BackendDescriptors(old) != BackendDescriptors(c) {
		n := s.limit.setMax(c)
		s.log.Info("client connection limit changed", "max_client_connections", n, "configured", c.Proxy.MaxClientConnections)
	}
	lim := newHoldLimits(c)
	s.limits.Store(&lim)
	s.recheckStates()
	return nil
}

// Close stops the listeners, closes every session (client and backend
// connections) and waits for their goroutines to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.logAgg.Close()
	for _, l := range s.listeners {
		if l.ln != nil {
			_ = l.ln.Close()
		}
	}
	for sess := range s.sessions {
		sess.shutdown()
	}
	for c := range s.limit.refusedConns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.bg.Wait()
	s.closeIdle(func(*backend) bool { return true }) // given back by sessions that ended meanwhile
	return nil
}

// backendCounter returns the connection counter for a backend address.
func (s *Server) backendCounter(t *target) *backendCounter {
	s.mu.Lock()
	defer s.mu.Unlock()
	bc := s.backends[t.addr]
	if bc == nil {
		bc = &backendCounter{cluster: t.cluster, node: t.node, addr: t.addr}
		q := s.metrics.backendQueries.WithLabelValues(t.cluster, t.node)
		bc.queries.Store(&q)
		s.backends[t.addr] = bc
	}
	if bc.cluster != t.cluster || bc.node != t.node {
		// The address now belongs to another node name: rare (a config
		// change); the pool's labels follow under both locks.
		bc.mu.Lock()
		bc.cluster, bc.node = t.cluster, t.node
		bc.idleG, bc.inUseG, bc.checkoutsC = nil, nil, nil
		bc.mu.Unlock()
		q := s.metrics.backendQueries.WithLabelValues(t.cluster, t.node)
		bc.queries.Store(&q)
	}
	return bc
}

// Stats is a point-in-time view of the proxy for status output.
type Stats struct {
	// Listeners, in config order.
	Listeners []ListenerStats `json:"listeners"`
	// Backends with at least one connection ever opened, sorted by cluster,
	// node and address.
	Backends []BackendStats `json:"backends"`
}

// ListenerStats describes one listener.
type ListenerStats struct {
	Name    string `json:"name"`
	Address string `json:"address"` // bound address ("" before Start)
	Cluster string `json:"cluster"`
	Role    string `json:"role"`
	// Sessions is the number of client sessions currently open.
	Sessions int64 `json:"sessions"`
}

// BackendStats describes the proxy's connections to one node.
type BackendStats struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	Address string `json:"address"`
	// Connections is the number of backend connections currently open,
	// idle pooled ones included.
	Connections int64 `json:"connections"`
	// Idle is how many of them are idle in the pool (pool.go).
	Idle int64 `json:"idle"`
}

// Stats returns sessions per listener and backend connections per node.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	for _, l := range s.listeners {
		ls := ListenerStats{Name: l.name, Cluster: l.cluster, Role: l.role, Sessions: l.sessions.Load()}
		if l.ln != nil {
			ls.Address = l.ln.Addr().String()
		}
		st.Listeners = append(st.Listeners, ls)
	}
	for _, bc := range s.backends {
		bc.mu.Lock()
		idle := int64(len(bc.idle))
		bc.mu.Unlock()
		st.Backends = append(st.Backends, BackendStats{Cluster: bc.cluster, Node: bc.node, Address: bc.addr, Connections: bc.open.Load(), Idle: idle})
	}
	sort.Slice(st.Backends, func(i, j int) bool {
		a, b := st.Backends[i], st.Backends[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Address < b.Address
	})
	return st
}
