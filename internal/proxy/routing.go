package proxy

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	replicas []*target // serving replicas, in state order (drained nodes left out)
	rr       atomic.Uint64
	fenced   string // why primary listeners refuse writes (lease lost, lease.go); "" normally
	// hold is set while primary listeners hold statements for a
	// coordinated switchover (hold.go).
	hold *holdPeriod
	// gen is the primary's generation: it changes when a switchover that
	// fenced the old primary (killing its client connections) ends, so that
	// sessions reconnect even when the primary stayed the same.
	gen uint64
	// drained are the nodes drained by an operator.
	drained map[string]bool
	// quarantined and unreachable name the nodes the controller reports
	// quarantined (never routed to) or unreachable (its last probe failed),
	// with the reason. Commands in flight on them are cut (cut.go); they
	// are never a route.
	quarantined map[string]string
	unreachable map[string]string
	// replaced is closed when the next snapshot of the cluster is
	// installed (sessions waiting for a new primary wake on it).
	replaced chan struct{}
	// holdOn: primary listeners would hold statements if the primary were
	// lost now (failoverhold.go holdable); lossCheck: failover.hold is on,
	// so they look for a lost primary before forwarding (peerGone).
	holdOn, lossCheck bool
	// lost is set while the controller declares the primary dead with no
	// automatic failover coming (topo.ClusterState.PrimaryLost; see
	// failoverhold.go lostNow); nil otherwise.
	lost *lostPrimary
}

// clusterRoute holds the current snapshot and what the proxy learnt about a
// cluster's servers.
type clusterRoute struct {
	name string
	snap atomic.Pointer[routeSnapshot]
	// first is closed when the cluster's first snapshot is installed:
	// logins that come before it wait for it (awaitRoute).
	first    chan struct{}
	greeting atomic.Pointer[greetingInfo]

	// The inputs a snapshot is built from, under mu (never taken per
	// query): the published state, the switchover in progress, the drained
	// nodes, the hold period and the primary generation.
	// acked is the snapshot whose epoch the proxy acknowledges in its
	// registration (Epochs): installed after the commands in flight on
	// nodes that left the route were cut (cut.go).
	acked atomic.Pointer[routeSnapshot]
	// replaying counts the sessions of the cluster replaying a transaction
	// after the loss of its primary (waiting for the primary, or
	// re-executing its statements): a replayed COMMIT waits, briefly,
	// until none is (outcome.go awaitReplays).
	replaying atomic.Int64
	// unsnapped counts the sessions of the cluster that will replay a
	// transaction and whose replay has not taken its snapshot yet
	// (replay_snap.go): statements outside transactions wait, briefly,
	// until none is.
	unsnapped atomic.Int64
	// txCur and txPrev count the sessions with a recorded transaction
	// open, by the node it began on (the current and the previous one):
	// a replay-to-be that has not noticed the loss of its primary yet
	// is still counted there (replay_snap.go).
	txCur, txPrev atomic.Pointer[txGen]

	mu       sync.Mutex
	state    *topo.ClusterState
	progress *topo.SwitchoverProgress
	drained  map[string]bool
	hold     *holdPeriod
	gen      uint64
	// lostKey identifies the PrimaryLost verdict applied last, lostSeen
	// when this proxy first applied it.
	lostKey  string
	lostSeen time.Time
}

// greetingInfo is what the proxy tells clients in its own handshake, taken
// from the last backend handshake seen for the cluster.
type greetingInfo struct {
	version string
	caps    uint32
	ext     uint32 // MariaDB extended capabilities (0 unless CLIENT_MYSQL is clear)
	charset byte
}

// offer returns the capabilities the proxy announces to clients from g:
// its own (proxyCaps), the relayed ones the backend has and, when the
// backend is a MariaDB server announcing extended capabilities (CLIENT_MYSQL
// clear), CLIENT_MYSQL clear too and the relayed extended ones
// (relayExtCaps) it has: a client sees what it would see from the backend.
func (g *greetingInfo) offer() (caps, ext uint32) {
	caps = proxyCaps | (relayCaps & g.caps)
	if g.caps&mysql.CLIENT_LONG_PASSWORD != 0 || g.caps&mysql.CLIENT_PROTOCOL_41 == 0 {
		return caps, 0
	}
	return caps &^ mysql.CLIENT_LONG_PASSWORD, g.ext & relayExtCaps
}

func buildSnapshot(st topo.ClusterState, addrOf func(node string) string, drained map[string]bool) *routeSnapshot {
	st.Nodes = slices.Clone(st.Nodes)
	snap := &routeSnapshot{state: st, drained: drained, replaced: make(chan struct{})}
	addr := func(n *topo.NodeState) string {
		if n.Address != "" {
			return n.Address
		}
		return addrOf(n.Name)
	}
	for name, why := range st.Quarantined {
		if snap.quarantined == nil {
			snap.quarantined = map[string]string{}
		}
		snap.quarantined[name] = why
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		// A node never probed (Probe.At zero: a hand-written state, the
		// first state of a new leader) is not reported unreachable, nor
		// one that answered with an error (too many connections, access
		// denied, a query error): it is alive.
		if !n.Probe.Reachable && !n.Probe.At.IsZero() && unreachableKind(n.Probe.ErrorKind) {
			if snap.unreachable == nil {
				snap.unreachable = map[string]string{}
			}
			snap.unreachable[n.Name] = orText(n.Probe.Error, "its last probe failed")
		}
	}
	if p := st.Node(st.Primary); p != nil && addr(p) != "" && snap.quarantined[p.Name] == "" {
		snap.primary = &target{cluster: st.Cluster, node: p.Name, addr: addr(p)}
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if !n.Serving || n.Name == st.Primary || addr(n) == "" || drained[n.Name] ||
			snap.quarantined[n.Name] != "" || snap.unreachable[n.Name] != "" {
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
		if fallback {
			return nil, errNoRoute(fmt.Sprintf("switchyard: no healthy replica in cluster %s and no primary known to fall back to; reads are refused until the controller names a serving replica or a primary", snap.state.Cluster))
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

// pickAvoiding is pick for a replica listener that skips replicas avoid
// rejects (known unreachable, already tried), falling back to the primary
// when every replica is skipped and fallback is on. With nothing left it
// returns pick's choice (the proxy's view may be stale).
func (snap *routeSnapshot) pickAvoiding(role string, fallback bool, avoid func(*target) bool) (*target, *mysql.MyError) {
	if snap == nil || role != roleReplica || len(snap.replicas) == 0 {
		return snap.pick(role, fallback)
	}
	n := uint64(len(snap.replicas))
	start := snap.rr.Add(1) - 1
	for i := range n {
		if t := snap.replicas[(start+i)%n]; !avoid(t) {
			return t, nil
		}
	}
	if fallback && snap.primary != nil && !avoid(snap.primary) {
		return snap.primary, nil
	}
	return nil, errNoRoute(fmt.Sprintf("switchyard: no reachable replica in cluster %s", snap.state.Cluster))
}

// valid reports whether a session already connected through be may stay
// there under snap.
func (snap *routeSnapshot) valid(role string, fallback bool, be *backend) bool {
	if snap == nil || be == nil {
		return false
	}
	t := be.t
	switch role {
	case roleReplica:
		for _, r := range snap.replicas {
			if r.same(t) {
				return true
			}
		}
		return len(snap.replicas) == 0 && fallback && snap.primary.same(t) && be.gen == snap.gen &&
			snap.unreachable[t.node] == ""
	default:
		return snap.primary.same(t) && be.gen == snap.gen
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
		cr = &clusterRoute{name: name, first: make(chan struct{})}
		s.clusters[name] = cr
	}
	return cr
}

// SetClusterState installs a new routing snapshot for st.Cluster. The swap is
// atomic: sessions pick it up at their next command without locking. A state
// with a lower epoch than the one applied is ignored (logged): epochs never go
// back. New sessions use the new snapshot at once; existing sessions whose
// backend is no longer a valid route move at their next command (idle ones
// keep their session state and prepared statements, see migrate.go); a
// session in a transaction on a primary listener gets one error (its
// transaction is gone with the old primary's connection) and continues.
// Commands in flight on a node that st no longer allows (cutReason: a
// former primary, a node reported unreachable on replica listeners, a
// quarantined node) are cut before SetClusterState returns and before the
// epoch is acknowledged (Epochs; cut.go). st is not validated here: Follow
// checks every state it reads with topo.DecodeState first.
// While st is in PhaseSwitching and the switchover document
// (SetSwitchover) announces the same epoch, primary listeners hold
// statements (hold.go).
func (s *Server) SetClusterState(st topo.ClusterState) {
	if st.Cluster == "" {
		s.log.Warn("ignoring cluster state without a cluster name")
		return
	}
	cr := s.route(st.Cluster)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.state != nil && st.Epoch < cr.state.Epoch {
		s.log.Warn("ignoring cluster state with an older epoch", "cluster", st.Cluster,
			"epoch", st.Epoch, "applied_epoch", cr.state.Epoch)
		return
	}
	cr.state = &st
	s.rebuild(cr)
	if primaryInTrouble(&st) {
		// The controller is losing the primary: its quorum waits for
		// this proxy's view, so check now rather than at the interval.
		s.backendTrouble()
	}
}

// rebuild builds and installs the snapshot of cr from its inputs (cr.mu
// held), starting or ending the hold period of a switchover.
func (s *Server) rebuild(cr *clusterRoute) {
	if cr.state == nil {
		return
	}
	st := *cr.state
	rc := s.rc.Load()
	snap := buildSnapshot(st, func(node string) string { return rc.nodeAddr(st.Cluster, node) }, cr.drained)
	s.applyFence(snap)
	active := cr.progress.Active(cr.state)
	var ended, startMonitor *holdPeriod
	if cr.hold != nil && (!active || cr.hold.id != cr.progress.ID) {
		ended = cr.hold
		cr.hold = nil
		if ended.fencing() {
			cr.gen++ // the old primary's client connections were killed
		}
	}
	if active && cr.hold == nil {
		lim := s.limits.Load()
		now := time.Now()
		p := cr.progress
		cr.hold = &holdPeriod{id: p.ID, cluster: cr.name, from: p.From, to: p.To, epoch: p.Epoch,
			since: now, end: now.Add(lim.maxDuration), done: make(chan struct{})}
		s.log.Info("switchover: holding statements on primary listeners", "cluster", cr.name,
			"switchover", p.ID, "from", p.From, "to", p.To, "epoch", p.Epoch)
		startMonitor = cr.hold
	}
	if active && cr.progress.Step == topo.SwitchStepFence {
		cr.hold.fenced.Store(true)
	}
	snap.hold = cr.hold
	snap.gen = cr.gen
	snap.holdOn = holdable(&snap.state, rc.clusters[cr.name], s.now())
	snap.lossCheck = rc.clusters[cr.name] != nil && rc.clusters[cr.name].Failover.HoldOn()
	snap.lost = cr.lostVerdict(snap, rc.clusters[cr.name], s.now())
	s.notePrimary(cr.snap.Load(), snap)
	old := cr.snap.Swap(snap)
	if old != nil {
		close(old.replaced) // wakes sessions waiting for a primary (failoverhold.go)
	}
	select {
	case <-cr.first:
	default:
		// The first snapshot: wakes logins waiting for the routing state
		// (awaitRoute). Closed once even if the snapshot is ever cleared
		// and installed again.
		close(cr.first)
	}
	// Commands in flight on nodes that stopped being a route are cut
	// before the snapshot is acknowledged (Epochs).
	s.cutInFlight(cr.name, snap)
	if lp := s.lostNow(snap); lp != nil {
		s.cutLostPrimary(cr.name, lp)
	}
	cr.acked.Store(snap)
	if active && cr.progress.Step == topo.SwitchStepFence {
		// Only after the swap: a session starting a command from now on
		// sees the fence and ends its transaction without sending it.
		cr.hold.fenceApplied.Store(true)
	}
	if startMonitor != nil {
		// Only after the swap: a session that starts a command from now
		// on sees the hold, so a count of 0 by the monitor means drained.
		// Counted before the swap, a session that had just loaded the old
		// snapshot would be missed and its statement could reach the old
		// primary after the fence.
		s.goBackground(func() { s.monitorHold(startMonitor) })
	}
	if ended != nil {
		close(ended.done) // after the swap: released sessions see the new snapshot
		s.log.Info("switchover: released held statements", "cluster", cr.name, "switchover", ended.id,
			"primary", st.Primary, "epoch", st.Epoch, "held_for", time.Since(ended.since).Round(time.Millisecond))
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
	if old != nil && (!sameRoutes(old, snap) || old.gen != snap.gen) {
		name := cr.name
		s.goBackground(func() { s.sweep(name); s.purgePools(name, old, snap) })
	}
}

// Epochs returns the epoch of the routing snapshot applied per cluster
// (clusters without a snapshot are absent). A snapshot counts as applied
// once every command in flight on a node it no longer routes to was cut
// (cut.go), so a controller that waits for this acknowledgement knows no
// response from the old primary reaches a client after it.
func (s *Server) Epochs() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.clusters))
	for name, cr := range s.clusters {
		if cr.snap.Load() == nil {
			continue
		}
		if snap := cr.acked.Load(); snap != nil {
			out[name] = snap.state.Epoch
		}
	}
	return out
}

// unreachableKind reports whether a failed probe's error kind (probe.Kind)
// means the node did not answer: refused, timeout, network, or not
// classified.
func unreachableKind(kind string) bool {
	switch kind {
	case "", "refused", "timeout", "network":
		return true
	}
	return false
}
