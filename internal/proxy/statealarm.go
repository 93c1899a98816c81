package proxy

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Cluster state validation on the proxy side. Follow decodes every cluster
// state document it reads from the store with topo.DecodeState against the
// state it applied last and the configured nodes; a state that fails is not
// applied — routing goes on with the last known good state — and the
// proxy raises an alarm: topo.ProxyRegistration.StateAlarms (shown by
// `switchyard status`), the gauge switchyard_cluster_state_alarm and the
// counter switchyard_cluster_state_rejected_total, and a log line. The
// alarm stays visible for stateAlarmHold after the last refused document,
// also once a valid state has replaced it (the controller overwrites a
// foreign write within milliseconds, and an operator must still learn that
// someone wrote the key), saying so; then it clears. A state refused because it
// names nodes the proxy's config does not have yet is checked again when
// the config changes (SetConfig).

// stateAlarmHold is how long a refused state's alarm stays visible after
// the refusal.
const stateAlarmHold = time.Minute

// stateAlarms are the clusters whose latest state was refused.
type stateAlarms struct {
	mu         sync.Mutex
	alarms     map[string]stateAlarm
	pending    map[string][]byte // cluster → the refused document, checked again on a config change
	superseded map[string]bool   // cluster → a valid state was applied after the refusal
}

type stateAlarm struct {
	msg string    // why the document was refused
	at  time.Time // when
}

// rejectState records that the state document raw of cluster was refused.
func (s *Server) rejectState(cluster string, raw []byte, err error) {
	s.metrics.stateRejected.WithLabelValues(cluster).Inc()
	s.metrics.stateAlarm.WithLabelValues(cluster).Set(1)
	msg := err.Error()
	at := time.Now()
	s.stateAlarm.mu.Lock()
	if s.stateAlarm.alarms == nil {
		s.stateAlarm.alarms, s.stateAlarm.pending, s.stateAlarm.superseded = map[string]stateAlarm{}, map[string][]byte{}, map[string]bool{}
	}
	changed := s.stateAlarm.alarms[cluster].msg != msg || s.stateAlarm.superseded[cluster]
	s.stateAlarm.alarms[cluster] = stateAlarm{msg: msg, at: at}
	s.stateAlarm.pending[cluster] = append([]byte(nil), raw...)
	delete(s.stateAlarm.superseded, cluster)
	s.stateAlarm.mu.Unlock()
	time.AfterFunc(stateAlarmHold, func() { s.expireStateAlarm(cluster, at) })
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

// clearStateAlarm records that a valid state of cluster was applied: the
// refused document is forgotten and the alarm, still shown until
// stateAlarmHold after the refusal, says that it was superseded.
func (s *Server) clearStateAlarm(cluster string) {
	s.stateAlarm.mu.Lock()
	_, had := s.stateAlarm.alarms[cluster]
	first := had && !s.stateAlarm.superseded[cluster]
	delete(s.stateAlarm.pending, cluster)
	if had {
		s.stateAlarm.superseded[cluster] = true
	}
	s.stateAlarm.mu.Unlock()
	if first {
		s.log.Info("cluster state in the store valid again; routing by it", "cluster", cluster)
		s.registrationChanged()
	}
}

// expireStateAlarm lifts cluster's alarm raised at at, unless a later
// refusal raised it again or the refused document is still the latest.
func (s *Server) expireStateAlarm(cluster string, at time.Time) {
	s.stateAlarm.mu.Lock()
	a, ok := s.stateAlarm.alarms[cluster]
	lift := ok && a.at.Equal(at) && s.stateAlarm.superseded[cluster]
	if lift {
		delete(s.stateAlarm.alarms, cluster)
		delete(s.stateAlarm.superseded, cluster)
	}
	s.stateAlarm.mu.Unlock()
	if lift {
		s.metrics.stateAlarm.WithLabelValues(cluster).Set(0)
		s.log.Info("cluster state alarm cleared", "cluster", cluster)
		s.registrationChanged()
	}
}

// StateAlarms returns, per cluster, why a state in the store was refused
// within the last stateAlarmHold, with the time and whether a valid state
// has been applied since (nil when none was refused).
func (s *Server) StateAlarms() map[string]string {
	s.stateAlarm.mu.Lock()
	defer s.stateAlarm.mu.Unlock()
	if len(s.stateAlarm.alarms) == 0 {
		return nil
	}
	out := make(map[string]string, len(s.stateAlarm.alarms))
	for c, a := range s.stateAlarm.alarms {
		if s.stateAlarm.superseded[c] {
			out[c] = fmt.Sprintf("%s (refused at %s; a valid state has been applied since)", a.msg, a.at.UTC().Format("15:04:05"))
		} else {
			out[c] = fmt.Sprintf("%s (refused at %s; routing by the last good state)", a.msg, a.at.UTC().Format("15:04:05"))
		}
	}
	return out
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
