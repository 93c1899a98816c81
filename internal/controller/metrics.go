package controller

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Switchover results (label "result" of switchyard_controller_switchovers_total).
const (
	resultDone       = "done"
	resultRefused    = "refused"     // checks failed; nothing was changed
	resultRolledBack = "rolled_back" // aborted after fencing; old primary writable again
	resultFailed     = "failed"      // aborted and the rollback did not complete
)

// metrics are the controller's Prometheus collectors.
type metrics struct {
	probes       *prometheus.CounterVec
	probeLatency *prometheus.HistogramVec
	leader       prometheus.Gauge
	switchovers  *prometheus.CounterVec
	publishes    *prometheus.CounterVec
	failovers    *prometheus.CounterVec
	// primaryDeclaredLost counts the primaries declared lost with no
	// automatic failover coming (ClusterState.PrimaryLost).
	primaryDeclaredLost *prometheus.CounterVec
	events              *prometheus.CounterVec
	// stateRejected counts cluster states read from the store that failed
	// topo.CheckState and were not adopted.
	stateRejected *prometheus.CounterVec
	// drainedRejected counts drained nodes documents whose MAC did not
	// verify (ignored).
	drainedRejected *prometheus.CounterVec

	// Write-path health and durability (health.go, durability.go).
	heartbeats       *prometheus.CounterVec
	heartbeatLatency *prometheus.GaugeVec
	loginRefusals    *prometheus.CounterVec
	findings         *prometheus.GaugeVec
	durabilityOK     *prometheus.GaugeVec
	durabilityDrift  *prometheus.CounterVec

	// The leader's view of each cluster after every probe round
	// (observeRound); reset when leadership is lost so that only the
	// leader exports them.
	nodeUp       *prometheus.GaugeVec
	nodeRole     *prometheus.GaugeVec
	nodeReadOnly *prometheus.GaugeVec
	nodeLag      *prometheus.GaugeVec
	epoch        *prometheus.GaugeVec
	maintenance  *prometheus.GaugeVec
	autoFailover *prometheus.GaugeVec
	blocked      *prometheus.GaugeVec
	primaryKnown *prometheus.GaugeVec
}

// nodeRoles are the values of the role label of switchyard_node_role.
var nodeRoles = []string{topo.RolePrimary, topo.RoleReplica, topo.RoleUnknown}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_probes_total",
			Help: "Node probes by cluster, node and result (ok, refused, timeout, too_many_connections, access_denied, ...).",
		}, []string{"cluster", "node", "result"}),
		probeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_controller_probe_duration_seconds",
			Help:    "Duration of one node probe, connect included, in seconds.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"cluster"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_controller_leader",
			Help: "1 while this controller is the elected leader, else 0.",
		}),
		switchovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_switchovers_total",
			Help: "Planned switchovers by cluster and result (done, refused, rolled_back, failed).",
		}, []string{"cluster", "result"}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_state_writes_total",
			Help: "Cluster state writes to the topology store by cluster and result (ok, conflict, error).",
		}, []string{"cluster", "result"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_failovers_total",
			Help: "Emergency failovers by cluster, result (done, refused, failed, timed_out, aborted) and mode (auto, manual).",
		}, []string{"cluster", "result", "mode"}),
		primaryDeclaredLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_primary_declared_lost_total",
			Help: "Primaries declared lost (DeadPrimary confirmed in failover.confirm_rounds rounds) with no automatic failover coming, by cluster and class (manual, maintenance, disabled, blocked, no_candidate): primary listeners then refuse at once.",
		}, []string{"cluster", "class"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_events_total",
			Help: "Events written to the cluster event log by cluster and kind (decision, no_action, recovery, alarm, operator).",
		}, []string{"cluster", "kind"}),
		stateRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_cluster_state_rejected_total",
			Help: "Cluster states read from the store that no controller could have written (unparsable, epoch going back, primary dropped outside a failover, unknown nodes), by cluster; never adopted.",
		}, []string{"cluster"}),
		drainedRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_drained_rejected_total",
			Help: "Drained nodes documents read from the store whose integrity MAC did not verify (written without the integrity key), by cluster; ignored, the last verified one stands.",
		}, []string{"cluster"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_heartbeats_total",
			Help: "Heartbeat writes on the primary by cluster and result (ok, timeout, lock_wait, pending, disk_full, read_only, denied, error).",
		}, []string{"cluster", "result"}),
		heartbeatLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_controller_heartbeat_seconds",
			Help: "Duration of the last heartbeat write on the primary (until its error, if it failed), in seconds.",
		}, []string{"cluster"}),
		loginRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_app_login_refusals_total",
			Help: "Application-account logins to the primary the server refused, by cluster, user and MySQL error number (1040, 1203, 1226, 1045, ...).",
		}, []string{"cluster", "user", "code"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_cluster_finding",
			Help: "1 while the leader's last probe round's analysis has the code (DeadPrimary, UnreachablePrimary, NoPrimary, PrimaryWritesBlocked, ReplicaLagging, ...) for the cluster, else 0; written by the leader only.",
		}, []string{"cluster", "code"}),
		durabilityOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_controller_durability_ok",
			Help: "1 when every probed node had the semi-sync settings of clusters[].durability in the last round, 0 when one did not (absent for durability async).",
		}, []string{"cluster"}),
		durabilityDrift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_durability_repairs_total",
			Help: "Semi-sync settings found different from clusters[].durability and (re-)applied, by cluster, node and setting.",
		}, []string{"cluster", "node", "setting"}),
	}
	m.nodeUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_node_up",
		Help: "1 when the node answered the leader's last probe (an answer with an error such as too many connections counts as up), else 0, by cluster and node.",
	}, []string{"cluster", "node"})
	m.nodeRole = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_node_role",
		Help: "1 for the node's role in the published cluster state (role: primary, replica, unknown), 0 for the other two, by cluster and node.",
	}, []string{"cluster", "node", "role"})
	m.nodeReadOnly = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_node_read_only",
		Help: "The node's @@read_only in the leader's last probe (1 on, 0 off), by cluster and node; absent while the node does not answer.",
	}, []string{"cluster", "node"})
	m.nodeLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_node_replication_lag_seconds",
		Help: "Seconds_Behind_Master of the node in the leader's last probe (SHOW SLAVE STATUS; whole seconds), by cluster and node; absent for the primary and while it is NULL (a replication thread stopped) or the node does not answer.",
	}, []string{"cluster", "node"})
	m.epoch = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_cluster_epoch",
		Help: "Epoch of the published cluster state (increases by one on every primary change), by cluster.",
	}, []string{"cluster"})
	m.maintenance = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_cluster_maintenance",
		Help: "1 while maintenance mode is on (automatic failover blocked), else 0, by cluster.",
	}, []string{"cluster"})
	m.autoFailover = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_cluster_auto_failover_ready",
		Help: "1 when a dead primary would be failed over automatically now (failover.mode auto, no maintenance, block or disabling, a candidate exists), else 0, by cluster.",
	}, []string{"cluster"})
	m.blocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_cluster_failover_blocked",
		Help: "1 while automatic failover is blocked after a failover (failover.block_period, until `switchyard ack`) or disabled after a failed recovery, else 0, by cluster.",
	}, []string{"cluster"})
	m.primaryKnown = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_cluster_primary_known",
		Help: "1 when the published cluster state names a primary, else 0, by cluster.",
	}, []string{"cluster"})
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.probes, m.probeLatency, m.leader, m.switchovers, m.publishes, m.failovers, m.primaryDeclaredLost, m.events, m.stateRejected, m.drainedRejected,
		m.heartbeats, m.heartbeatLatency, m.loginRefusals, m.findings, m.durabilityOK, m.durabilityDrift,
		m.nodeUp, m.nodeRole, m.nodeReadOnly, m.nodeLag, m.epoch, m.maintenance, m.autoFailover, m.blocked, m.primaryKnown} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("controller: metrics already registered: use one registry per controller")
			}
			return nil, err
		}
	}
	return m, nil
}

// observeRound sets the cluster and node gauges from the published state
// st and the round's probes (by node name), at now.
func (m *metrics) observeRound(st *topo.ClusterState, probes map[string]topo.Probe, now time.Time) {
	cl := st.Cluster
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, n := range st.Nodes {
		p, ok := probes[n.Name]
		if !ok {
			p = n.Probe
		}
		// A node that answered with an error (too many connections,
		// access denied, a query error) is alive.
		up := p.Reachable
		switch p.ErrorKind {
		case "", string(probe.KindRefused), string(probe.KindTimeout), string(probe.KindNetwork):
		default:
			up = true
		}
		m.nodeUp.WithLabelValues(cl, n.Name).Set(b(up))
		role := n.Role
		if n.Name == st.Primary {
			role = topo.RolePrimary
		}
		for _, r := range nodeRoles {
			m.nodeRole.WithLabelValues(cl, n.Name, r).Set(b(r == role))
		}
		if p.Reachable {
			m.nodeReadOnly.WithLabelValues(cl, n.Name).Set(b(p.ReadOnly))
		} else {
			m.nodeReadOnly.DeleteLabelValues(cl, n.Name)
		}
		if p.Reachable && p.LagSeconds != nil && n.Name != st.Primary {
			m.nodeLag.WithLabelValues(cl, n.Name).Set(float64(*p.LagSeconds))
		} else {
			m.nodeLag.DeleteLabelValues(cl, n.Name)
		}
	}
	m.epoch.WithLabelValues(cl).Set(float64(st.Epoch))
	m.maintenance.WithLabelValues(cl).Set(b(st.Maintenance != nil))
	m.primaryKnown.WithLabelValues(cl).Set(b(st.Primary != ""))
	blocked := st.AutoDisabled != "" || (st.FailoverBlock != nil && now.Before(st.FailoverBlock.Until))
	m.blocked.WithLabelValues(cl).Set(b(blocked))
	if st.AutoFailover != nil {
		m.autoFailover.WithLabelValues(cl).Set(b(st.AutoFailover.Ready))
	}
}

// forgetClusters drops every per-cluster gauge the leader exports: a
// controller that lost leadership must not keep reporting a stale view.
func (m *metrics) forgetClusters() {
	for _, g := range []*prometheus.GaugeVec{m.findings, m.nodeUp, m.nodeRole, m.nodeReadOnly, m.nodeLag,
		m.epoch, m.maintenance, m.autoFailover, m.blocked, m.primaryKnown, m.durabilityOK} {
		g.Reset()
	}
}
