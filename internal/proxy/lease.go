package proxy

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// writeFence is set while the proxy's registration lease is lost. The
// controller treats a proxy whose lease expired as one that no longer
// routes writes (it stops waiting for that proxy's acknowledgement of a new
// epoch before promoting a new primary), so the proxy must make that true:
// from the moment it knows its lease is gone until it is registered again
// and has re-read every cluster state, primary listeners refuse writes —
// except to a primary that its direct checks of every node confirm
// (failsafe.go, internal/topo/FAILSAFE.md) — while replica listeners keep
// serving reads from the last known topology.
type writeFence struct {
	reason atomic.Pointer[string]
}

// errWritesFenced is what a client of a primary listener gets while the
// proxy's lease is lost: MySQL error 1290 (ER_OPTION_PREVENTS_STATEMENT,
// what a read-only server answers), SQLSTATE HY000, with a message saying
// why.
func errWritesFenced(reason string) *mysql.MyError {
	return &mysql.MyError{Code: mysql.ER_OPTION_PREVENTS_STATEMENT, State: mysql.DEFAULT_MYSQL_STATE,
		Message: "switchyard: this proxy lost its registration in the topology store (" + reason +
			"); writes are refused until it is registered again and has re-read the topology (reads on replica listeners continue)"}
}

// WritesFenced returns why primary listeners refuse writes, or "" when
// they do not.
func (s *Server) WritesFenced() string {
	if r := s.fence.reason.Load(); r != nil {
		return *r
	}
	return ""
}

// fenceWrites stops routing on primary listeners, except to the primaries
// that a direct check of every node confirms (failsafe.go): every cluster's
// snapshot is rebuilt, so on an unconfirmed cluster new sessions are
// refused and existing ones are moved off (idle) or closed (in a
// transaction) at their next command. The first round of checks runs
// before the fence goes up, so a confirmed cluster sees no gap; the checks
// then repeat until unfenceWrites.
func (s *Server) fenceWrites(ctx context.Context, reason string) {
	s.failsafe.enter.Lock()
	defer s.failsafe.enter.Unlock()
	if s.fence.reason.Load() != nil {
		return
	}
	if s.cfg.Load().Proxy.FailsafeOn() {
		s.startFailsafe(ctx)
	}
	s.fence.reason.Store(&reason)
	s.metrics.registrationLost.Set(1)
	s.log.Error("registration lease lost: writes on primary listeners only where a direct check of every node confirms the primary (failsafe), until registered again", "reason", reason)
	s.reapplySnapshots()
}

// unfenceWrites lifts the fence (after a new registration and a fresh read
// of every cluster state) and ends failsafe.
func (s *Server) unfenceWrites() {
	s.failsafe.enter.Lock() // a lease lost again meanwhile fences after this
	defer s.failsafe.enter.Unlock()
	if s.fence.reason.Swap(nil) != nil {
		s.metrics.registrationLost.Set(0)
		s.log.Info("registered again with a fresh topology: writes routed again")
		s.reapplySnapshots()
		s.stopFailsafe("registered again and re-read the topology")
	}
}

// applyFence strips the primary from a snapshot being installed while the
// fence is up, unless failsafe confirms it.
func (s *Server) applyFence(snap *routeSnapshot) {
	r := s.WritesFenced()
	if r == "" {
		return
	}
	ok, why := s.failsafeHolds(snap)
	if ok {
		return
	}
	snap.primary = nil
	snap.fenced = r
	if why != "" {
		snap.fenced = r + "; failsafe: " + why
	}
}

// reapplySnapshots rebuilds every cluster's snapshot from its state so the
// fence (or its removal) takes effect.
func (s *Server) reapplySnapshots() {
	s.mu.Lock()
	var states []topo.ClusterState
	for _, cr := range s.clusters {
		if snap := cr.snap.Load(); snap != nil {
			states = append(states, snap.state)
		}
	}
	s.mu.Unlock()
	for _, st := range states {
		s.SetClusterState(st)
	}
}

// watchLease fences writes the moment lease is lost, whatever the
// registration loop is doing (it may be blocked writing to a store it can
// no longer reach): the controller counts a proxy whose registration
// expired as one that routes no writes.
func (s *Server) watchLease(ctx context.Context, lease topo.Lease) {
	select {
	case <-ctx.Done():
	case <-lease.Done():
		if ctx.Err() == nil {
			s.fenceWrites(ctx, "registration lease lost")
		}
	}
}

// storeAttemptTimeout bounds one attempt to register or to re-read the
// cluster states: a request sent while the store had no quorum (or over a
// connection that drops packets) is given up and sent again, so the proxy
// is registered within about a second of the store answering again.
const storeAttemptTimeout = 3 * time.Second

// registerBounded registers with a deadline: during a partition a request
// to etcd can hang on a connection that drops packets, and a proxy whose
// lease was lost must keep trying so that it routes writes again once the
// store is back.
func registerBounded(ctx context.Context, st topo.Store, key string, val []byte) (topo.Lease, error) {
	rctx, cancel := context.WithTimeout(ctx, storeAttemptTimeout)
	defer cancel()
	return st.Register(rctx, key, val, RegistrationTTL)
}

// resync reads every cluster state from the store and applies it, so a
// proxy that was cut off does not route by what it knew before (the
// controller may have published a new primary meanwhile). It retries until
// it succeeds or ctx ends.
func (s *Server) resync(ctx context.Context, st topo.Store, keys topo.Keys) error {
	prefix := keys.ClustersPrefix()
	backoff := followBackoffMin
	for {
		lctx, cancel := context.WithTimeout(ctx, storeAttemptTimeout)
		kvs, err := st.List(lctx, prefix)
		cancel()
		if err == nil {
			for _, kv := range kvs {
				s.applyStateKV(prefix, kv)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("proxy: re-read cluster states: %w", ctx.Err())
		}
		s.log.Warn("re-reading cluster states failed; retrying", "err", err, "retry_in", backoff)
		if !sleepCtx(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}
