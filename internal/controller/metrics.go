package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	events       *prometheus.CounterVec
	// stateRejected counts cluster states read from the store that failed
	// topo.CheckState and were not adopted.
	stateRejected *prometheus.CounterVec

	// Write-path health and durability (health.go, durability.go).
	heartbeats       *prometheus.CounterVec
	heartbeatLatency *prometheus.GaugeVec
	loginRefusals    *prometheus.CounterVec
	findings         *prometheus.GaugeVec
	durabilityOK     *prometheus.GaugeVec
	durabilityDrift  *prometheus.CounterVec
}

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
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_events_total",
			Help: "Events written to the cluster event log by cluster and kind (decision, no_action, recovery, alarm, operator).",
		}, []string{"cluster", "kind"}),
		stateRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_controller_cluster_state_rejected_total",
			Help: "Cluster states read from the store that no controller could have written (unparsable, epoch going back, primary dropped outside a failover, unknown nodes), by cluster; never adopted.",
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
			Name: "switchyard_controller_finding",
			Help: "1 while the last probe round's analysis has the code (PrimaryWritesBlocked, ApplicationLoginsRefused, ...) for the cluster, else 0.",
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
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.probes, m.probeLatency, m.leader, m.switchovers, m.publishes, m.failovers, m.events, m.stateRejected,
		m.heartbeats, m.heartbeatLatency, m.loginRefusals, m.findings, m.durabilityOK, m.durabilityDrift} {
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
