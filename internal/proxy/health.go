package proxy

import (
	"fmt"
	"slices"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// ListenerHealth is what one listener can serve right now, as the routing
// snapshot of its cluster says: the admin endpoint's readiness, /primary
// and /replica answers (package admin) are built from it.
type ListenerHealth struct {
	// Listener, Cluster and Role are the listener's config
	// (listeners[].name, .cluster, .role: "primary" or "replica").
	Listener, Cluster, Role string
	// Epoch is the cluster state epoch the route was built from; 0 while
	// the proxy has no routing state for the cluster.
	Epoch int64
	// Primary is the primary the route names ("" when none).
	Primary string
	// PrimaryOK is true when Primary is set, this proxy's own backend
	// check reaches it, the controller does not report it dead
	// (DeadPrimary), writes are not fenced, and in a stable cluster its
	// latest probe (taken since it became primary) does not say
	// read_only=ON.
	PrimaryOK bool
	// Replicas is how many serving replicas the route has.
	Replicas int
	// Problem says why the listener cannot serve ("" when it can): a
	// primary listener needs PrimaryOK, a replica listener a serving
	// replica or, with read_routing fallback on, a reachable primary.
	Problem string
}

// Health reports every listener's ListenerHealth, in config order. It reads
// the routing snapshots (no lock on the query path) and is cheap enough for
// load-balancer health checks every second.
func (s *Server) Health() []ListenerHealth {
	s.mu.Lock()
	ls := slices.Clone(s.listeners)
	s.mu.Unlock()
	rc := s.rc.Load()
	out := make([]ListenerHealth, 0, len(ls))
	for _, l := range ls {
		h := ListenerHealth{Listener: l.name, Cluster: l.cluster, Role: l.role}
		var snap *routeSnapshot
		if l.route != nil {
			snap = l.route.snap.Load()
		}
		if snap == nil {
			h.Problem = fmt.Sprintf("no routing state for cluster %q yet (is a controller running?)", l.cluster)
			out = append(out, h)
			continue
		}
		h.Epoch = snap.state.Epoch
		h.Replicas = len(snap.replicas)
		why := ""
		switch {
		case snap.primary == nil:
			why = "the cluster has no primary"
		case snap.fenced != "":
			h.Primary = snap.primary.node
			why = "writes are fenced: " + snap.fenced
		default:
			h.Primary = snap.primary.node
			// What decides is whether this proxy's sessions can reach
			// the primary: its own backend check (kicked at once when
			// the controller publishes trouble), or the controller's
			// DeadPrimary finding (every replica and most proxies lost
			// it too). A primary only the controller cannot reach
			// (UnreachablePrimary) still takes this proxy's writes.
			switch {
			case !s.reachable(snap.primary):
				why = fmt.Sprintf("this proxy cannot reach primary %s", h.Primary)
				if u := snap.unreachable[h.Primary]; u != "" {
					why += " (nor can the controller: " + u + ")"
				}
			case reportedDead(&snap.state, h.Primary):
				why = fmt.Sprintf("the controller reports primary %s dead (DeadPrimary)", h.Primary)
			}
		}
		// A primary whose latest probe says read_only=ON can be read from
		// but every write fails with 1290: not OK for writes.
		readable := why == ""
		if why == "" && primaryReadOnly(&snap.state) {
			why = fmt.Sprintf("primary %s is read_only (writes fail with error 1290)", h.Primary)
		}
		h.PrimaryOK = why == ""
		switch {
		case l.role == rolePrimary && !h.PrimaryOK:
			h.Problem = fmt.Sprintf("listener %q (cluster %s) routes no reachable primary: %s", l.name, l.cluster, why)
		case l.role == roleReplica && h.Replicas == 0 && (rc == nil || !rc.fallback(l.cluster)):
			h.Problem = fmt.Sprintf("listener %q (cluster %s) has no serving replica and fallback to the primary is off", l.name, l.cluster)
		case l.role == roleReplica && h.Replicas == 0 && !readable:
			h.Problem = fmt.Sprintf("listener %q (cluster %s) has no serving replica and no reachable primary to fall back on: %s", l.name, l.cluster, why)
		}
		out = append(out, h)
	}
	return out
}

// reportedDead reports whether st's analysis has DeadPrimary for node.
func reportedDead(st *topo.ClusterState, node string) bool {
	for _, a := range st.Analysis {
		if a.Node == node && a.Code == string(analysis.DeadPrimary) {
			return true
		}
	}
	return false
}

// primaryReadOnly reports whether st is stable and the published primary's
// latest probe, taken since it became primary, answered with read_only=ON.
// During a switchover or failover the old primary is read-only on purpose
// and the listener holds writes instead.
func primaryReadOnly(st *topo.ClusterState) bool {
	if st.Phase != topo.PhaseStable {
		return false
	}
	n := st.Node(st.Primary)
	if n == nil {
		return false
	}
	p := n.Probe
	return p.Reachable && p.Error == "" && p.ReadOnly && !p.At.IsZero() && (n.RoleSince.IsZero() || p.At.After(n.RoleSince))
}
