package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// RegistrationTTL is the lease TTL of the proxy's registration in the store.
const RegistrationTTL = 10 * time.Second

// sessionsReportEvery is how often the per-node session counts are
// compared with the published ones (and republished when they changed).
const sessionsReportEvery = 250 * time.Millisecond

// Backoff bounds for re-watching and re-registering after store errors.
const (
	followBackoffMin = 100 * time.Millisecond
	followBackoffMax = 5 * time.Second
)

func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "proxy"
	}
	return "proxy-" + h
}

// Follow keeps s's routing current from the store until ctx ends:
//   - it watches keys.ClustersPrefix() and applies every
//     "<prefix>/clusters/<cluster>/state" document with SetClusterState (other
//     keys under the prefix, e.g. requests/, are ignored; a document that does
//     not pass topo.DecodeState — unparsable, empty, another cluster, an
//     epoch going back, a primary dropped without a failover, unknown nodes
//     — is not applied: the last good snapshot is kept and an alarm raised,
//     see statealarm.go);
//   - it registers a topo.ProxyRegistration under keys.Proxy(s.ID()) with a
//     lease of RegistrationTTL and rewrites it when the applied epochs change;
//     a lost lease is registered again;
//   - watch and registration errors are retried with backoff (100 ms → 5 s).
//
// It returns nil when ctx ends (after revoking the registration), or an error
// only for invalid arguments.
func Follow(ctx context.Context, st topo.Store, keys topo.Keys, s *Server) error {
	if st == nil || s == nil {
		return errors.New("proxy: Follow needs a store and a server")
	}
	s.reach.init()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.register(ctx, st, keys)
	}()
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		s.checkBackends(ctx)
	}()
	hot := make(chan struct{})
	go func() {
		defer close(hot)
		s.publishHotReads(ctx, st, keys)
	}()
	s.watchClusters(ctx, st, keys)
	<-done
	s.stopFailsafe("proxy stopping")
	<-checked
	<-hot
	return nil
}

// watchClusters runs the watch loop, re-watching with backoff on errors.
func (s *Server) watchClusters(ctx context.Context, st topo.Store, keys topo.Keys) {
	prefix := keys.ClustersPrefix()
	backoff := followBackoffMin
	for ctx.Err() == nil {
		kvs, events, err := st.Watch(ctx, prefix)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("watching cluster state failed; retrying", "prefix", prefix, "err", err, "retry_in", backoff)
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, followBackoffMax)
			continue
		}
		backoff = followBackoffMin
		for _, kv := range kvs {
			s.applyStateKV(prefix, kv)
		}
		for ev := range events {
			if ev.Err != nil {
				s.log.Warn("cluster state watch ended; re-watching", "err", ev.Err)
				break
			}
			switch ev.Type {
			case topo.EventPut:
				s.applyStateKV(prefix, ev.KV)
			case topo.EventDelete:
				name, doc, ok := clusterKey(prefix, ev.KV.Key)
				switch {
				case !ok:
				case doc == "state":
					s.log.Warn("cluster state deleted from the store; keeping the last known routing", "cluster", name)
				case doc == "switchover":
					s.SetSwitchover(topo.SwitchoverProgress{Cluster: name})
				case doc == "drained" && topo.Integrity() != nil:
					// Nothing deletes the document (an undrain rewrites it):
					// a deletion is not the controller's nor an operator's.
					s.rejectDrained(name, ev.KV.Version, fmt.Errorf("%w: the drained nodes document was deleted", topo.ErrIntegrity))
				case doc == "drained":
					s.SetDrained(topo.DrainedNodes{Cluster: name})
				}
			}
		}
		if ctx.Err() == nil && !sleepCtx(ctx, followBackoffMin) {
			return
		}
	}
}

// clusterKey splits a "<prefix><cluster>/<doc>" key (doc: state,
// switchover, drained); ok is false for other keys (requests, ...).
func clusterKey(prefix, key string) (cluster, doc string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", false
	}
	cluster, doc, found = strings.Cut(rest, "/")
	if !found || cluster == "" {
		return "", "", false
	}
	switch doc {
	case "state", "switchover", "drained":
		return cluster, doc, true
	}
	return "", "", false
}

// stateKeyCluster returns the cluster name of a "<prefix><cluster>/state" key.
func stateKeyCluster(prefix, key string) (string, bool) {
	name, doc, ok := clusterKey(prefix, key)
	return name, ok && doc == "state"
}

func (s *Server) applyStateKV(prefix string, kv topo.KV) {
	name, doc, ok := clusterKey(prefix, kv.Key)
	if !ok {
		return
	}
	switch doc {
	case "switchover":
		var p topo.SwitchoverProgress
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			s.log.Warn("switchover document does not decode; ignoring it", "cluster", name, "err", err)
			p = topo.SwitchoverProgress{}
		}
		p.Cluster = name
		s.SetSwitchover(p)
		return
	case "drained":
		d, err := topo.DecodeDrained(kv.Value)
		if errors.Is(err, topo.ErrIntegrity) {
			s.rejectDrained(name, kv.Version, err)
			return
		}
		if err != nil {
			s.log.Warn("drained nodes document does not decode; keeping the last one", "cluster", name, "err", err)
			return
		}
		d.Cluster = name
		s.SetDrained(d)
		return
	}
	s.applyState(name, kv.Value)
}

// rejectDrained ignores a drained nodes document of cluster whose MAC did
// not verify (or its deletion, with a keyring): the drained nodes applied
// last stand, so a forged drain or undrain never changes routing. It is
// counted in switchyard_drained_rejected_total and logged at ERROR once per
// document version.
func (s *Server) rejectDrained(cluster string, v topo.Version, err error) {
	s.metrics.drainedRejected.WithLabelValues(cluster).Inc()
	s.drainedBadMu.Lock()
	if s.drainedBad == nil {
		s.drainedBad = map[string]int64{}
	}
	first := s.drainedBad[cluster] != int64(v)
	s.drainedBad[cluster] = int64(v)
	s.drainedBadMu.Unlock()
	if first {
		s.log.Error("the drained nodes document in the store fails its integrity check; it is ignored and the drained nodes applied last stand",
			"cluster", cluster, "err", err)
	}
}

// register keeps the proxy's registration alive until ctx ends.
func (s *Server) register(ctx context.Context, st topo.Store, keys topo.Keys) {
	key := keys.Proxy(s.id)
	started := s.now()
	backoff := followBackoffMin
	for ctx.Err() == nil {
		epochs := s.Epochs()
		val, err := s.registration(started, epochs)
		if err != nil {
			s.log.Error("cannot encode proxy registration", "err", err)
			return
		}
		lease, err := registerBounded(ctx, st, key, val)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("registering the proxy failed; retrying", "key", key, "err", err, "retry_in", backoff)
			if !sleepCtx(ctx, backoff) {
				return
			}
			// Without a registration writes depend on failsafe checks:
			// retry at least every second to return to the store soon.
			backoff = min(2*backoff, followBackoffMax)
			if s.WritesFenced() != "" {
				backoff = min(backoff, time.Second)
			}
			continue
		}
		backoff = followBackoffMin
		go s.watchLease(ctx, lease)
		if s.WritesFenced() != "" && s.resync(ctx, st, keys) == nil {
			s.unfenceWrites()
			// Rewrite the registration: it was made while failsafe still
			// ran, and now says when it ended.
			s.updateReach(ctx, lease, started)
		}
		s.log.Info("proxy registered", "key", key, "epochs", epochs)
		if s.keepRegistration(ctx, lease, started, epochs) {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := lease.Revoke(rctx); err != nil {
				s.log.Warn("revoking the proxy registration failed; it expires with its lease", "err", err)
			}
			cancel()
			return
		}
		s.log.Warn("proxy registration lease lost; registering again", "key", key)
		s.fenceWrites(ctx, "registration lease lost")
	}
}

// keepRegistration updates the registration when epochs change. It returns
// true when ctx ended, false when the lease was lost.
func (s *Server) keepRegistration(ctx context.Context, lease topo.Lease, started time.Time, epochs map[string]int64) bool {
	sessTick := time.NewTicker(sessionsReportEvery)
	defer sessTick.Stop()
	lastSessions, lastListeners := s.backendSessions(), s.listenerSessions()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-lease.Done():
			return false
		case <-s.reach.changed:
			s.updateReach(ctx, lease, started)
		case <-s.acks.changed:
			// A switchover acknowledgement: the leader waits for it.
			s.updateReach(ctx, lease, started)
		case <-sessTick.C:
			bs, ls := s.backendSessions(), s.listenerSessions()
			if !slices.Equal(bs, lastSessions) || !maps.Equal(ls, lastListeners) {
				lastSessions, lastListeners = bs, ls
				s.updateReach(ctx, lease, started)
			}
		case <-s.epochChanged:
			now := s.Epochs()
			if maps.Equal(now, epochs) {
				continue
			}
			val, err := s.registration(started, now)
			if err != nil {
				continue
			}
			if err := lease.Update(ctx, val); err != nil {
				if ctx.Err() != nil {
					return true
				}
				s.log.Warn("updating the proxy registration failed; will retry on the next change", "err", err)
				// Retry soon: re-signal ourselves.
				go func() {
					if sleepCtx(ctx, time.Second) {
						select {
						case s.epochChanged <- struct{}{}:
						default:
						}
					}
				}()
				continue
			}
			epochs = now
			s.log.Info("proxy registration updated", "epochs", epochs)
		}
	}
}

func (s *Server) registration(started time.Time, epochs map[string]int64) ([]byte, error) {
	reg := topo.ProxyRegistration{
		ID:        s.id,
		Epochs:    epochs,
		StartedAt: started,
		UpdatedAt: s.now(),
		Backends:  s.backendReport(),

		StateAlarms:     s.StateAlarms(),
		Switchovers:     s.acks.snapshot(),
		BackendSessions: s.backendSessions(),
		Sessions:        s.listenerSessions(),
		Failsafe:        s.Failsafe(),
	}
	s.mu.Lock()
	for _, l := range s.listeners {
		if l.ln != nil {
			reg.Listeners = append(reg.Listeners, l.ln.Addr().String())
		} else {
			reg.Listeners = append(reg.Listeners, l.address)
		}
	}
	s.mu.Unlock()
	b, err := topo.EncodeSigned(topo.IntegrityProxyRegistration, reg)
	if err != nil {
		return nil, fmt.Errorf("proxy: encode registration: %w", err)
	}
	return b, nil
}

// listenerSessions returns the open client sessions per listener name, every
// listener present (0 when idle), for topo.ProxyRegistration.Sessions.
func (s *Server) listenerSessions() map[string]int {
	out := make(map[string]int, len(s.listeners))
	for _, l := range s.listeners { // fixed after New
		out[l.name] = int(l.sessions.Load())
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
