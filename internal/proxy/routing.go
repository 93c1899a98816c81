package proxy

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Listener roles (config.Listener.Role).
const (
	rolePrimary = "primary"
	roleReplica = "replica"
)

// target is one backend a session can be routed to.
type target struct {
	cluster string
	node    string
	addr    string
}

func (t *target) same(o *target) bool {
	return t != nil && o != nil && t.node == o.node && t.addr == o.addr
}

// routeSnapshot is an immutable routing table for one cluster, built from a
// ClusterState. Sessions read it through an atomic pointer; nothing on the
// query path takes a lock.
type routeSnapshot struct {
	state    topo.ClusterState
	primary  *target   // nil when no primary is known
	replicas []*target // serving replicas, in state order
	rr       atomic.Uint64
	fenced   string // why primary listeners refuse writes (lease lost, lease.go); "" normally
}

// clusterRoute holds the current snapshot and what the proxy learnt about a
// cluster's servers.
type clusterRoute struct {
	name     string
	snap     atomic.Pointer[routeSnapshot]
	greeting atomic.Pointer[greetingInfo]
}

// greetingInfo is what the proxy tells clients in its own handshake, taken
// from the last backend handshake seen for the cluster.
type greetingInfo struct {
	version string
	caps    uint32
	charset byte
}

func buildSnapshot(st topo.ClusterState, addrOf func(node string) string) *routeSnapshot {
	st.Nodes = slices.Clone(st.Nodes)
	snap := &routeSnapshot{state: st}
	addr := func(n *topo.NodeState) string {
		if n.Address != "" {
			return n.Address
		}
		return addrOf(n.Name)
	}
	if p := st.Node(st.Primary); p != nil && addr(p) != "" {
		snap.primary = &target{cluster: st.Cluster, node: p.Name, addr: addr(p)}
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if !n.Serving || n.Name == st.Primary || addr(n) == "" {
			continue
		}
		snap.replicas = append(snap.replicas, &target{cluster: st.Cluster, node: n.Name, addr: addr(n)})
	}
	return snap
}

// sameRoutes reports whether two snapshots route every role identically.
func sameRoutes(a, b *routeSnapshot) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.primary == nil) != (b.primary == nil) || (a.primary != nil && !a.primary.same(b.primary)) {
		return false
	}
	return slices.EqualFunc(a.replicas, b.replicas, (*target).same)
}

// pick chooses the backend for a new session on a listener of role. Replica
// listeners round-robin over serving replicas and fall back to the primary
// when none serves and fallback is true.
func (snap *routeSnapshot) pick(role string, fallback bool) (*target, *mysql.MyError) {
	if snap == nil {
		return nil, errNoRoute("switchyard: no routing state for this cluster yet (the controller has not published one); retry shortly")
	}
	switch role {
	case roleReplica:
		if n := uint64(len(snap.replicas)); n > 0 {
			return snap.replicas[(snap.rr.Add(1)-1)%n], nil
		}
		if fallback && snap.primary != nil {
			return snap.primary, nil
		}
		return nil, errNoRoute(fmt.Sprintf("switchyard: no healthy replica in cluster %s (none is replicating from the current primary within the lag limit) and fallback to the primary is off", snap.state.Cluster))
	default:
		if snap.fenced != "" {
			return nil, errWritesFenced(snap.fenced)
		}
		if snap.primary == nil {
			return nil, errNoRoute(fmt.Sprintf("switchyard: no primary known for cluster %s; writes are refused until the controller names one", snap.state.Cluster))
		}
		return snap.primary, nil
	}
}

// valid reports whether a session already connected to t may stay there
// under snap.
func (snap *routeSnapshot) valid(role string, fallback bool, t *target) bool {
	if snap == nil {
		return false
	}
	switch role {
	case roleReplica:
		for _, r := range snap.replicas {
			if r.same(t) {
				return true
			}
		}
		return len(snap.replicas) == 0 && fallback && snap.primary.same(t)
	default:
		return snap.primary.same(t)
	}
}

func errNoRoute(msg string) *mysql.MyError {
	return &mysql.MyError{Code: mysql.ER_UNKNOWN_ERROR, State: mysql.DEFAULT_MYSQL_STATE, Message: msg}
}

// route returns the clusterRoute for name, creating it if needed.
func (s *Server) route(name string) *clusterRoute {
	s.mu.Lock()
	defer s.mu.Unlock()
	cr, ok := s.clusters[name]
	if !ok {
		cr = &clusterRoute{name: name}
		s.clusters[name] = cr
	}
	return cr
}

// SetClusterState installs a new routing snapshot for st.Cluster. The swap is
// atomic: sessions pick it up at their next command without locking. A state
// with a lower epoch than the one applied is ignored (logged): epochs never go
// back. New sessions use the new snapshot at once; existing sessions whose
// backend is no longer a valid route move (idle) or are closed with an error
// (in a transaction or holding prepared statements) at their next command.
func (s *Server) SetClusterState(st topo.ClusterState) {
	if st.Cluster == "" {
		s.log.Warn("ignoring cluster state without a cluster name")
		return
	}
	cr := s.route(st.Cluster)
	rc := s.rc.Load()
	snap := buildSnapshot(st, func(node string) string { return rc.nodeAddr(st.Cluster, node) })
	s.applyFence(snap)
	for {
		old := cr.snap.Load()
		if old != nil && st.Epoch < old.state.Epoch {
			s.log.Warn("ignoring cluster state with an older epoch", "cluster", st.Cluster,
				"epoch", st.Epoch, "applied_epoch", old.state.Epoch)
			return
		}
		if !cr.snap.CompareAndSwap(old, snap) {
			continue
		}
		if !sameRoutes(old, snap) {
			s.metrics.routeChanges.WithLabelValues(st.Cluster).Inc()
			s.log.Info("route changed", "cluster", st.Cluster, "epoch", st.Epoch,
				"primary", st.Primary, "serving_replicas", len(snap.replicas))
		}
		if old == nil || old.state.Epoch != st.Epoch {
			select {
			case s.epochChanged <- struct{}{}:
			default:
			}
		}
		return
	}
}

// Epochs returns the epoch of the routing snapshot applied per cluster
// (clusters without a snapshot are absent).
func (s *Server) Epochs() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.clusters))
	for name, cr := range s.clusters {
		if snap := cr.snap.Load(); snap != nil {
			out[name] = snap.state.Epoch
		}
	}
	return out
}
