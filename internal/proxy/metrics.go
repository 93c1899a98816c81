package proxy

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a session ends, used as the "reason" label of
// switchyard_proxy_sessions_closed_total and in logs.
const (
	closeQuit           = "quit"            // client sent COM_QUIT
	closeClientGone     = "client_gone"     // client closed the connection
	closeClientProtocol = "client_protocol" // garbage, truncated or out-of-sequence packet
	closeAuthFailed     = "auth_failed"     // wrong password, unknown user, unsupported auth
	closeNoRoute        = "no_route"        // no primary / no healthy replica
	closeBackendConnect = "backend_connect" // could not open or log into a backend
	closeBackendLost    = "backend_lost"    // backend connection failed mid-session
	closeRouteChanged   = "route_changed"   // route moved and the session could not be moved with it
	closeServer         = "server_closed"   // Server.Close
	closePanic          = "panic"           // recovered panic in the session
	closeKilled         = "killed"          // KILL of the session's own connection id
)

// metrics are the proxy's Prometheus collectors. They always exist; they are
// registered only when Options.Registry is set.
type metrics struct {
	clientConns      *prometheus.GaugeVec
	clientConnsTotal *prometheus.CounterVec
	compressed       *prometheus.CounterVec
	authFailures     *prometheus.CounterVec
	queries          *prometheus.CounterVec
	backendConns     *prometheus.GaugeVec
	backendErrors    *prometheus.CounterVec // and reason (connectReasons)
	bytes            *prometheus.CounterVec
	// queryDuration: one Observe per relayed command, by listener
	// (pre-resolved in listener.latency).
	queryDuration *prometheus.HistogramVec
	// backendQueries: relayed commands by cluster and node (pre-resolved
	// in backendCounter.queries).
	backendQueries *prometheus.CounterVec
	// clientErrors: ERR packets the proxy itself sent to clients, by
	// listener and MySQL error number (clientErrorCodes pre-resolved).
	clientErrors     *prometheus.CounterVec
	routeChanges     *prometheus.CounterVec
	migrations       *prometheus.CounterVec
	sessionsClosed   *prometheus.CounterVec
	migrationsFailed *prometheus.CounterVec
	txAborted        *prometheus.CounterVec
	holdSeconds      prometheus.Histogram
	registrationLost prometheus.Gauge
	holdRefused      prometheus.Counter
	hotSamples       prometheus.Counter
	commandsCut      *prometheus.CounterVec
	stateRejected    *prometheus.CounterVec
	drainedRejected  *prometheus.CounterVec
	stateAlarm       *prometheus.GaugeVec
	// Failover hold (failoverhold.go), by cluster.
	primaryLostHeld     *prometheus.CounterVec
	primaryLostReleased *prometheus.CounterVec
	primaryLostRefused  *prometheus.CounterVec // and reason
	primaryLostInFlight *prometheus.CounterVec
	primaryLostRerun    *prometheus.CounterVec
	// Transaction replay (replay.go).
	replayAttempts      *prometheus.CounterVec
	replays             *prometheus.CounterVec
	replayReadsDiffered *prometheus.CounterVec
	outcomeUnknown      *prometheus.CounterVec
	// outcomeResolved counts COMMITs in flight resolved by their commit
	// marker (outcome.go), by listener and outcome.
	outcomeResolved *prometheus.CounterVec
	// Backend connection pools (pool.go), by cluster and node.
	poolConns *prometheus.GaugeVec // and state (idle|in_use)
	poolWaits *prometheus.CounterVec
	// poolServerEvictions: idle connections closed to make room for a
	// connection of another key, at the node's ceiling or because the
	// server refused a new one (1040, 1203).
	poolServerEvictions *prometheus.CounterVec
	poolWaitSecs        *prometheus.HistogramVec
	poolConnects        *prometheus.CounterVec
	poolCheckouts       *prometheus.CounterVec // and kind (same|clean|reset)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		clientConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_proxy_client_connections",
			Help: "Client connections currently open, by listener.",
		}, []string{"listener"}),
		clientConnsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_client_connections_total",
			Help: "Client connections accepted, by listener.",
		}, []string{"listener"}),
		compressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_compressed_sessions_total",
			Help: "Client sessions that negotiated protocol compression (CLIENT_COMPRESS), by listener.",
		}, []string{"listener"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_auth_failures_total",
			Help: "Client logins refused (wrong password, unknown user, unsupported authentication), by listener.",
		}, []string{"listener"}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_queries_total",
			Help: "Client commands relayed to a backend, by listener.",
		}, []string{"listener"}),
		backendConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_proxy_backend_connections",
			Help: "Backend connections currently open, by cluster and node.",
		}, []string{"cluster", "node"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_backend_connect_errors_total",
			Help: "Failed backend connection attempts, by cluster, node and reason (refused, timeout, network, local_resource, protocol, server_max_connections, access_denied, host_blocked, login, pool_limit).",
		}, []string{"cluster", "node", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_relayed_bytes_total",
			Help: "Bytes relayed after login, by direction (client_to_backend, backend_to_client).",
		}, []string{"direction"}),
		queryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_proxy_query_duration_seconds",
			Help:    "Time from a client command's arrival to the end of the backend's answer relayed to the client (holds and reconnects included), in seconds, by listener.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"listener"}),
		backendQueries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_backend_queries_total",
			Help: "Client commands relayed to a backend, by cluster and node.",
		}, []string{"cluster", "node"}),
		clientErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_client_errors_total",
			Help: "Error packets the proxy itself wrote to clients (its own conditions, and a backend's login error passed on at the client's login; not errors inside relayed results), by listener and MySQL error number (1105 for proxy conditions such as no primary, 1290 writes fenced, 1040 too many connections, 1045 access denied, 2013 lost connection, ...).",
		}, []string{"listener", "code"}),
		routeChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_route_changes_total",
			Help: "Routing snapshots that changed the primary or the set of serving replicas, by cluster.",
		}, []string{"cluster"}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_session_migrations_total",
			Help: "Idle sessions moved to a new backend after a route change, by listener.",
		}, []string{"listener"}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_sessions_closed_total",
			Help: "Client sessions ended, by reason.",
		}, []string{"reason"}),
		migrationsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_session_migrations_failed_total",
			Help: "Sessions that had to move to a new backend but could not (state that cannot be rebuilt, or the rebuild failed) and were closed with an error, by listener and reason (state, connect, restore).",
		}, []string{"listener", "reason"}),
		txAborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_transactions_aborted_total",
			Help: "Transactions ended with an error because their primary was switched over or failed over while they were open, by listener.",
		}, []string{"listener"}),
		replayAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_transaction_replay_attempts_total",
			Help: "Transactions (or a statement opening one) interrupted by the loss of their primary with failover.transaction_replay on, by listener.",
		}, []string{"listener"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_transaction_replays_total",
			Help: "Outcomes of transaction replays, by listener and result: replayed (the transaction continues on the new primary), or why it was rolled back instead (not_replayable, limit, mismatch, no_primary, connect, lost_again).",
		}, []string{"listener", "result"}),
		replayReadsDiffered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_replay_reads_differed_total",
			Help: "Plain consistent reads that returned a different result when their transaction was replayed and were not compared (failover.replay_checksum no_consistent_reads): the replay went on, by listener.",
		}, []string{"listener"}),
		outcomeUnknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_commit_outcome_unknown_total",
			Help: "Statements ending a transaction (COMMIT, XA, implicit commits) or autocommit writes in flight when their primary was lost, answered with the outcome-unknown error instead of being replayed, by listener.",
		}, []string{"listener"}),
		outcomeResolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_commit_outcome_resolved_total",
			Help: "COMMITs in flight when their primary was lost whose outcome the commit marker resolved (failover.commit_outcome marker), by listener and outcome: committed (the client got the COMMIT's OK), replayed (not committed: the transaction was replayed and committed on the new primary).",
		}, []string{"listener", "outcome"}),
		holdSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_proxy_hold_seconds",
			Help:    "How long statements were held during switchovers before they ran.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		holdRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_proxy_hold_refused_total",
			Help: "Statements answered with the switchover-in-progress error because a buffer limit was reached (max_hold, max_held, max_duration).",
		}),
		registrationLost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_proxy_registration_lost",
			Help: "1 while this proxy's registration lease in the topology store is lost and its primary listeners refuse writes (error 1290) except where failsafe confirms the primary, else 0.",
		}),
		hotSamples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_proxy_hot_read_samples_total",
			Help: "Read statements sampled for the hot read set.",
		}),
		commandsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_commands_cut_total",
			Help: "Commands in flight cut because their node left the route (a new primary, a failover, a node the controller reports unreachable or quarantined); the client got an error, never a late response. By listener.",
		}, []string{"listener"}),
		stateRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_cluster_state_rejected_total",
			Help: "Cluster state documents read from the store that failed validation and were not applied (the last known good state kept routing), by cluster.",
		}, []string{"cluster"}),
		drainedRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_drained_rejected_total",
			Help: "Drained nodes documents read from the store whose integrity MAC did not verify (or their deletion, with an integrity key), by cluster; ignored, the drained nodes applied last stand.",
		}, []string{"cluster"}),
		stateAlarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_cluster_state_alarm",
			Help: "1 while the latest cluster state in the store is rejected and the proxy routes by the last known good one, else 0, by cluster.",
		}, []string{"cluster"}),
		primaryLostHeld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_primary_lost_held_total",
			Help: "Statements and logins on primary listeners held because the primary was lost and an automatic failover could come, by cluster.",
		}, []string{"cluster"}),
		primaryLostReleased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_primary_lost_released_total",
			Help: "Held statements and logins that reached a primary again and ran, by cluster.",
		}, []string{"cluster"}),
		primaryLostRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_primary_lost_refused_total",
			Help: "Statements and logins failed at once (or after failover.max_hold) because the primary was lost and no automatic failover came, by cluster and reason (manual, maintenance, disabled, blocked, no_candidate, hold_off, fenced, max_hold).",
		}, []string{"cluster", "reason"}),
		primaryLostInFlight: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_primary_lost_in_flight_total",
			Help: "Statements in flight (autocommit) when their primary's connection died, answered with the outcome-unknown error, by cluster.",
		}, []string{"cluster"}),
		primaryLostRerun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_proxy_primary_lost_reads_rerun_total",
			Help: "Autocommit reads in flight when their primary's connection died that were run again on the new primary, by cluster.",
		}, []string{"cluster"}),
		poolConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_backend_pool_connections",
			Help: "Backend connections of the proxy's pools, by cluster, node and state (idle: in the pool; in_use: held by a session).",
		}, []string{"cluster", "node", "state"}),
		poolWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_backend_pool_waits_total",
			Help: "Checkouts that waited because the node had proxy.max_connections_per_backend connections open or being opened, by cluster and node.",
		}, []string{"cluster", "node"}),
		poolServerEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_backend_pool_server_evictions_total",
			Help: "Idle pooled connections closed to make room for a new connection: at the node's ceiling (proxy.max_connections_per_backend, or the server's max_connections less proxy.pool.server_reserve_percent and the connections of other clients), or because the server refused a new connection with error 1040 (max_connections) or 1203 (max_user_connections), by cluster and node.",
		}, []string{"cluster", "node"}),
		poolWaitSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_backend_pool_wait_seconds",
			Help:    "How long checkouts that waited for a backend connection waited (until they got one or proxy.pool.wait_timeout passed), by cluster and node.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 60},
		}, []string{"cluster", "node"}),
		poolConnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_backend_pool_connects_total",
			Help: "Backend connections opened and logged in, by cluster and node.",
		}, []string{"cluster", "node"}),
		poolCheckouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_backend_pool_checkouts_total",
			Help: "Idle pooled connections taken by a session, by cluster, node and kind (same: the session's own previous connection, used as it was; clean: a connection without session state, no reset; reset: COM_RESET_CONNECTION and the session's state re-created).",
		}, []string{"cluster", "node", "kind"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	reg1 := func(c **prometheus.CounterVec) {
		if err == nil {
			*c, err = register(reg, *c)
		}
	}
	reg2 := func(g **prometheus.GaugeVec) {
		if err == nil {
			*g, err = register(reg, *g)
		}
	}
	reg2(&m.clientConns)
	reg1(&m.clientConnsTotal)
	reg1(&m.compressed)
	reg1(&m.authFailures)
	reg1(&m.queries)
	reg2(&m.backendConns)
	reg1(&m.backendErrors)
	reg1(&m.bytes)
	reg1(&m.backendQueries)
	reg1(&m.clientErrors)
	reg1(&m.routeChanges)
	reg1(&m.migrations)
	reg1(&m.sessionsClosed)
	reg1(&m.migrationsFailed)
	reg1(&m.txAborted)
	reg1(&m.commandsCut)
	reg1(&m.stateRejected)
	reg1(&m.drainedRejected)
	reg2(&m.stateAlarm)
	reg1(&m.primaryLostHeld)
	reg1(&m.primaryLostReleased)
	reg1(&m.primaryLostRefused)
	reg1(&m.primaryLostInFlight)
	reg1(&m.primaryLostRerun)
	reg1(&m.replayAttempts)
	reg1(&m.replays)
	reg1(&m.replayReadsDiffered)
	reg1(&m.outcomeUnknown)
	reg1(&m.outcomeResolved)
	reg2(&m.poolConns)
	reg1(&m.poolWaits)
	reg1(&m.poolServerEvictions)
	reg1(&m.poolConnects)
	reg1(&m.poolCheckouts)
	if err == nil {
		m.poolWaitSecs, err = register(reg, m.poolWaitSecs)
	}
	if err == nil {
		m.queryDuration, err = register(reg, m.queryDuration)
	}
	if err == nil {
		m.holdSeconds, err = register(reg, m.holdSeconds)
	}
	if err == nil {
		m.holdRefused, err = register(reg, m.holdRefused)
	}
	if err == nil {
		m.hotSamples, err = register(reg, m.hotSamples)
	}
	if err == nil {
		m.registrationLost, err = register(reg, m.registrationLost)
	}
	if err != nil {
		return nil, fmt.Errorf("proxy: register metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same name (a second Server in one process shares the series).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// Reasons a backend connection attempt failed (label "reason" of
// switchyard_proxy_backend_connect_errors_total).
const (
	connRefused       = "refused"                // TCP connection refused
	connTimeout       = "timeout"                // connect or greeting timed out
	connNetwork       = "network"                // other socket error (reset, unreachable)
	connLocalResource = "local_resource"         // this host's descriptors or ports (localres.go)
	connProtocol      = "protocol"               // no or bad greeting, missing capabilities
	connServerMax     = "server_max_connections" // the server's 1040
	connAccessDenied  = "access_denied"          // 1045, 1044, 1698: the login's password or grants
	connHostBlocked   = "host_blocked"           // 1129, 1130: the server refuses this host
	connLogin         = "login"                  // another error the server sent at login
	connPoolLimit     = "pool_limit"             // proxy.max_connections_per_backend reached
)

// dialReason classifies a dial or greeting error.
func dialReason(err error) string {
	var ne net.Error
	switch {
	case localResource(err):
		return connLocalResource
	case errors.Is(err, syscall.ECONNREFUSED):
		return connRefused
	case errors.As(err, &ne) && ne.Timeout():
		return connTimeout
	}
	return connNetwork
}

// loginReason classifies an error packet a server sent at login by its
// MySQL error number.
func loginReason(code uint16) string {
	switch code {
	case 1040:
		return connServerMax
	case 1044, 1045, 1698:
		return connAccessDenied
	case 1129, 1130:
		return connHostBlocked
	}
	return connLogin
}

// clientErrorCodes are the error numbers the proxy itself sends, resolved
// once per listener so that counting one costs no map lookup of labels;
// others are counted under their number through the vector.
var clientErrorCodes = []uint16{1105, 1290, 1040, 1045, 1047, 2013}

// clientErrorCounters are one listener's pre-resolved counters of
// switchyard_proxy_client_errors_total.
type clientErrorCounters struct {
	vec      *prometheus.CounterVec
	listener string
	byCode   map[uint16]prometheus.Counter // read-only after newClientErrorCounters
}

func newClientErrorCounters(vec *prometheus.CounterVec, listener string) *clientErrorCounters {
	c := &clientErrorCounters{vec: vec, listener: listener, byCode: make(map[uint16]prometheus.Counter, len(clientErrorCodes))}
	for _, code := range clientErrorCodes {
		c.byCode[code] = vec.WithLabelValues(listener, strconv.Itoa(int(code)))
	}
	return c
}

// inc counts one error packet with code sent to a client.
func (c *clientErrorCounters) inc(code uint16) {
	if c == nil {
		return
	}
	if ctr, ok := c.byCode[code]; ok {
		ctr.Inc()
		return
	}
	c.vec.WithLabelValues(c.listener, strconv.Itoa(int(code))).Inc()
}

// connectReason classifies the error of the session's last dialAndLogin:
// the socket error it noted, else the server's error number; an error the
// proxy made up (missing capabilities, unexpected data) is protocol.
func (s *session) connectReason(merr *mysql.MyError) string {
	switch {
	case s.dialWhy != "":
		return s.dialWhy
	case merr.Code == mysql.ER_UNKNOWN_ERROR:
		return connProtocol
	}
	return loginReason(merr.Code)
}

// listenerReadyDesc is switchyard_proxy_listener_ready, computed from
// Server.Health at each scrape.
var listenerReadyDesc = prometheus.NewDesc("switchyard_proxy_listener_ready",
	"1 when the listener's route has what its role needs (a primary listener: a reachable primary, writes not fenced, not read_only; a replica listener: a serving replica or a primary to fall back on), else 0: what /readyz/listener/<name> answers. By listener, cluster and role.",
	[]string{"listener", "cluster", "role"}, nil)

// listenerPrimaryDesc is switchyard_proxy_listener_primary_routed.
var listenerPrimaryDesc = prometheus.NewDesc("switchyard_proxy_listener_primary_routed",
	"1 when the listener's route names a primary that this proxy's backend check reaches and the controller does not report dead (ListenerHealth.PrimaryOK), else 0, by listener, cluster and role.",
	[]string{"listener", "cluster", "role"}, nil)

// healthCollector exports the listeners' health at scrape time.
type healthCollector struct{ s *Server }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- listenerReadyDesc
	ch <- listenerPrimaryDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, h := range c.s.Health() {
		ch <- prometheus.MustNewConstMetric(listenerReadyDesc, prometheus.GaugeValue, b(h.Problem == ""), h.Listener, h.Cluster, h.Role)
		ch <- prometheus.MustNewConstMetric(listenerPrimaryDesc, prometheus.GaugeValue, b(h.PrimaryOK), h.Listener, h.Cluster, h.Role)
	}
}
