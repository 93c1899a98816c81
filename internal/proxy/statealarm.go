package proxy

import (
	"maps"
	"sync"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Cluster state validation on the proxy side. Follow decodes every cluster
// state document it reads from the store with topo.DecodeState against the
// state it applied last and the configured nodes; a state that fails is not
// applied — routing goes on with the last known good state — and the
// proxy raises an alarm: topo.ProxyRegistration.StateAlarms (shown by
// `switchyard status`), the gauge switchyard_cluster_state_alarm and the
// counter switchyard_cluster_state_rejected_total, and a log line. The
// alarm clears when a valid state is applied. A state refused because it
// names nodes the proxy's config does not have yet is checked again when
// the config changes (SetConfig).

// stateAlarms are the clusters whose latest state was refused.
type stateAlarms struct {
	mu      sync.Mutex
	alarms  map[string]string // cluster → why the latest state was refused
	pending map[string][]byte // cluster → the refused document, checked again on a config change
}

// rejectState records that the state document raw of cluster was refused.
func (s *Server) rejectState(cluster string, raw []byte, err error) {
	s.metrics.stateRejected.WithLabelValues(cluster).Inc()
	s.metrics.stateAlarm.WithLabelValues(cluster).Set(1)
	msg := err.Error()
	s.stateAlarm.mu.Lock()
	if s.stateAlarm.alarms == nil {
		s.stateAlarm.alarms, s.stateAlarm.pending = map[string]string{}, map[string][]byte{}
	}
	changed := s.stateAlarm.alarms[cluster] != msg
	s.stateAlarm.alarms[cluster] = msg
	s.stateAlarm.pending[cluster] = append([]byte(nil), raw...)
	s.stateAlarm.mu.Unlock()
	epoch := int64(-1)
	if snap := s.route(cluster).snap.Load(); snap != nil {
		epoch = snap.state.Epoch
	}
	s.log.Error("cluster state in the store refused; routing by the last known good state", "cluster", cluster,
		"err", msg, "applied_epoch", epoch)
	if changed {
		s.registrationChanged()
	}
}

// clearStateAlarm lifts cluster's alarm after a valid state was applied.
func (s *Server) clearStateAlarm(cluster string) {
	s.stateAlarm.mu.Lock()
	_, had := s.stateAlarm.alarms[cluster]
	delete(s.stateAlarm.alarms, cluster)
	delete(s.stateAlarm.pending, cluster)
	s.stateAlarm.mu.Unlock()
	if had {
		s.metrics.stateAlarm.WithLabelValues(cluster).Set(0)
		s.log.Info("cluster state in the store valid again; alarm cleared", "cluster", cluster)
		s.registrationChanged()
	}
}

// StateAlarms returns, per cluster, why the latest state in the store was
// refused (nil when every cluster's state was applied).
func (s *Server) StateAlarms() map[string]string {
	s.stateAlarm.mu.Lock()
	defer s.stateAlarm.mu.Unlock()
	if len(s.stateAlarm.alarms) == 0 {
		return nil
	}
	return maps.Clone(s.stateAlarm.alarms)
}

// recheckStates checks the refused state documents again (after a config
// change).
func (s *Server) recheckStates() {
	s.stateAlarm.mu.Lock()
	pending := maps.Clone(s.stateAlarm.pending)
	s.stateAlarm.mu.Unlock()
	for cluster, raw := range pending {
		s.applyState(cluster, raw)
	}
}

// applyState decodes, checks and applies the state document raw of cluster.
func (s *Server) applyState(cluster string, raw []byte) {
	cr := s.route(cluster)
	cr.mu.Lock()
	var last *topo.ClusterState
	if cr.state != nil {
		c := *cr.state
		last = &c
	}
	cr.mu.Unlock()
	st, err := topo.DecodeState(raw, cluster, last, s.rc.Load().nodeAddrs(cluster))
	if err != nil {
		s.rejectState(cluster, raw, err)
		return
	}
	s.clearStateAlarm(cluster)
	s.SetClusterState(st)
}

// registrationChanged asks the registration loop to rewrite the
// registration.
func (s *Server) registrationChanged() {
	s.reach.init()
	select {
	case s.reach.changed <- struct{}{}:
	default:
	}
}

// nodeAddrs returns the configured nodes of cluster (nil when the cluster is
// not configured: only the state's own consistency is checked).
func (rc *runtimeConfig) nodeAddrs(cluster string) topo.NodeAddrs {
	cl := rc.clusters[cluster]
	if cl == nil {
		return nil
	}
	out := make(topo.NodeAddrs, len(cl.Nodes))
	for _, n := range cl.Nodes {
		out[n.Name] = n.Address
	}
	return out
}
