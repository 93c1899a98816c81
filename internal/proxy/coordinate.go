package proxy

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// The proxy's side of the coordinated switchover (the controller's is in
// package controller). The leader writes a topo.SwitchoverProgress for the
// cluster and moves its state to PhaseSwitching; every proxy then holds new
// statements on the cluster's primary listeners (hold.go) and acknowledges
// in its registration (topo.ProxyRegistration.Switchovers): Holding once no
// new statement can start on the old primary, and Busy, the sessions still
// running a statement or holding a transaction open there. The leader
// fences the old primary when every live proxy reports Holding with Busy 0
// (or the drain bound passes), and publishes the new primary, which ends
// the hold.

// holdPoll is how often the drain monitor counts busy sessions.
const holdPoll = 2 * time.Millisecond

// ackRefresh bounds how often an unchanged-but-moving acknowledgement
// (Busy and Held going up and down) is rewritten.
const ackRefresh = 100 * time.Millisecond

// ackState is the acknowledgements the proxy publishes.
type ackState struct {
	mu      sync.Mutex
	acks    map[string]topo.SwitchoverAck // by cluster
	changed chan struct{}
}

func (a *ackState) set(cluster string, ack *topo.SwitchoverAck) {
	a.mu.Lock()
	if ack == nil {
		delete(a.acks, cluster)
	} else {
		if a.acks == nil {
			a.acks = map[string]topo.SwitchoverAck{}
		}
		a.acks[cluster] = *ack
	}
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

func (a *ackState) snapshot() map[string]topo.SwitchoverAck {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.acks) == 0 {
		return nil
	}
	return maps.Clone(a.acks)
}

// SetSwitchover installs the leader's switchover document for p.Cluster.
// Together with the cluster state it decides whether primary listeners hold
// statements (see topo.SwitchoverProgress.Active).
func (s *Server) SetSwitchover(p topo.SwitchoverProgress) {
	if p.Cluster == "" {
		return
	}
	cr := s.route(p.Cluster)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.progress = &p
	s.rebuild(cr)
}

// SetDrained installs the drained nodes of d.Cluster: they leave the
// replica listeners' routes at once (idle sessions on them move at their
// next command; their backend connections are closed right away).
func (s *Server) SetDrained(d topo.DrainedNodes) {
	if d.Cluster == "" {
		return
	}
	set := map[string]bool{}
	for n := range d.Nodes {
		set[n] = true
	}
	cr := s.route(d.Cluster)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if maps.Equal(set, cr.drained) {
		return
	}
	s.log.Info("drained nodes changed", "cluster", d.Cluster, "drained", slices.Sorted(maps.Keys(set)))
	cr.drained = set
	s.rebuild(cr)
}

// goBackground runs f in a goroutine that Close waits for, unless the
// server is closed.
func (s *Server) goBackground(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// monitorHold publishes this proxy's acknowledgement of hp until it ends:
// Holding at once, and Busy — the primary-listener sessions of the cluster
// running a statement or holding a transaction open on the old primary —
// as it changes (at once when it reaches 0), and Fenced at once when the
// fence step's snapshot is installed and no statement is in flight there.
func (s *Server) monitorHold(hp *holdPeriod) {
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	var last topo.SwitchoverAck
	var lastAt time.Time
	for {
		// Read before counting: a command started after the fence's
		// snapshot was installed sees it and never reaches the old primary.
		fenceApplied := hp.fenceApplied.Load()
		busy, inFlight := s.countBusy(hp.cluster, hp.from)
		ack := topo.SwitchoverAck{ID: hp.id, Holding: true, Busy: busy, Held: int(hp.held.Load()), At: s.now(),
			Fenced: fenceApplied && inFlight == 0}
		drained := busy == 0
		if lastAt.IsZero() || drained != (last.Busy == 0) || ack.Fenced != last.Fenced ||
			((ack.Busy != last.Busy || ack.Held != last.Held) && time.Since(lastAt) >= ackRefresh) {
			s.acks.set(hp.cluster, &ack)
			if lastAt.IsZero() || drained || ack.Fenced != last.Fenced {
				s.log.Info("switchover: acknowledged", "cluster", hp.cluster, "switchover", hp.id, "busy", busy, "held", ack.Held,
					"fenced", ack.Fenced)
			}
			last, lastAt = ack, time.Now()
		}
		select {
		case <-hp.done:
			s.acks.set(hp.cluster, nil)
			return
		case <-s.closing:
			return
		case <-t.C:
		}
	}
}

// countBusy counts the sessions of cluster's primary listeners that run a
// statement or hold a transaction open on node, or run a command without a
// backend connection yet (busy), and among them those running a command
// (inFlight).
func (s *Server) countBusy(cluster, node string) (busy, inFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sess := range s.sessions {
		if sess.l.cluster != cluster || sess.l.role != rolePrimary {
			continue
		}
		b := sess.busy.Load()
		if b&(busyCmd|busyTx) == 0 {
			continue
		}
		sess.mu.Lock()
		be := sess.be
		sess.mu.Unlock()
		// A command with no backend yet (a transaction-pooled session
		// between transactions, a session connecting) may have read the
		// snapshot before the hold and be taking a connection to node:
		// it counts until it holds or its backend shows where it runs.
		if be == nil || be.t.node == node {
			busy++
			if b&busyCmd != 0 {
				inFlight++
			}
		}
	}
	return busy, inFlight
}

// sweep closes, right away, the backend connections of idle sessions of
// cluster whose backend is no longer a valid route (a switched-over
// primary, a drained or unserving replica), so a node is emptied without
// waiting for each client's next command. The session notices at its next
// command (busyDetached) and moves. A session running a command is left
// alone, and so is one in a transaction on a replica listener (it ends
// where it is); on a primary listener a transaction open on a former
// primary is gone already (the fence killed its connection), so its
// connection is closed too and the client gets the error at its next
// statement.
func (s *Server) sweep(cluster string) {
	cr := s.route(cluster)
	snap := cr.snap.Load()
	rc := s.rc.Load()
	fallback := rc.fallback(cluster)
	s.mu.Lock()
	var list []*session
	for sess := range s.sessions {
		if sess.l.cluster == cluster {
			list = append(list, sess)
		}
	}
	s.mu.Unlock()
	swept := 0
	for _, sess := range list {
		sess.mu.Lock()
		be := sess.be
		sess.mu.Unlock()
		if be == nil || snap.valid(sess.l.role, fallback, be) {
			continue
		}
		inTx := false
		if !sess.busy.CompareAndSwap(0, busyDetached) {
			if sess.l.role != rolePrimary || snap.primary == nil || snap.primary.same(be.t) ||
				!sess.busy.CompareAndSwap(busyTx, busyTx|busyDetached) {
				continue
			}
			inTx = true
		}
		be.close(true)
		swept++
		if cl := s.cfg.Load().Cluster(cluster); inTx && cl != nil && cl.Failover.TransactionReplay {
			// Replayed now, before the statements released on the new
			// primary run (idleclose.go, replayIdleTx).
			s.parker.nudgeReplay(sess)
		}
	}
	if swept > 0 {
		s.log.Info("closed idle sessions' connections to backends that left the route", "cluster", cluster, "sessions", swept)
	}
}

// backendSessions counts sessions per node from the open backend
// connections, for the registration.
func (s *Server) backendSessions() []topo.BackendSessions {
	s.mu.Lock()
	defer s.mu.Unlock()
	per := map[[2]string]int{}
	for _, bc := range s.backends {
		per[[2]string{bc.cluster, bc.node}] += int(bc.open.Load())
	}
	out := make([]topo.BackendSessions, 0, len(per))
	for k, n := range per {
		out = append(out, topo.BackendSessions{Cluster: k[0], Node: k[1], Sessions: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cluster != out[j].Cluster {
			return out[i].Cluster < out[j].Cluster
		}
		return out[i].Node < out[j].Node
	})
	return out
}
