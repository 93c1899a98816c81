package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// The leader's side of the coordinated switchover (the proxies' side is in
// package proxy, coordinate.go and hold.go):
//
//	prepare  write topo.SwitchoverProgress{Step: hold} for epoch E, then
//	         the state in PhaseSwitching; every live proxy holds new
//	         statements of the primary listeners and acknowledges;
//	drain    wait until every registered proxy acknowledged with no session
//	         busy on the old primary, or its lease is gone, at most
//	         switchover.drain_timeout; at the bound "abort" rolls back and
//	         "fail" announces Step fence (open transactions get an error);
//	fence, catch up, promote (switchover.go);
//	release  publish primary=candidate, epoch E+1, phase stable (proxies
//	         move held and idle sessions and release held statements),
//	         then Step done.
//
// Every step is an event (kind "switchover") and a line of the request;
// both are written by a background writer so that the pause clients see
// does not include them. The whole of it, from prepare to release, is
// bounded by switchover.max_duration; any failure rolls back so that a
// writable primary always exists.

// progressWriter writes events and request progress in order, off the
// switchover's critical path.
type progressWriter struct {
	queue chan func(ctx context.Context)
	done  chan struct{}
}

func newProgressWriter(ctx context.Context) *progressWriter {
	w := &progressWriter{queue: make(chan func(context.Context), 256), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for f := range w.queue {
			f(ctx)
		}
	}()
	return w
}

// add queues f (dropped if the queue is full: progress is advisory).
func (w *progressWriter) add(f func(ctx context.Context)) {
	select {
	case w.queue <- f:
	default:
	}
}

// close waits until everything queued was written.
func (w *progressWriter) close() {
	close(w.queue)
	<-w.done
}

// event queues a switchover event.
func (s *switchover) event(code, node, msg string) {
	ev := topo.Event{Cluster: s.cl.Name, Kind: topo.EventSwitchover, Code: code, Node: node, Message: msg, Epoch: s.fromEpoch, Actor: s.req.By}
	s.pw.add(func(ctx context.Context) {
		if err := s.t.fo.events.emit(ctx, ev); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot write switchover event", "code", code, "err", err)
		}
	})
}

// publishProgress writes the switchover document at step.
func (s *switchover) publishProgress(ctx context.Context, step string) error {
	p := topo.SwitchoverProgress{ID: s.holdID, Cluster: s.cl.Name, Epoch: s.fromEpoch, From: s.old, To: s.cand,
		Step: step, Since: s.holdSince, Leader: s.t.c.id}
	key := s.t.c.keys.Switchover(s.cl.Name)
	for range 3 {
		if s.progressVersion == 0 {
			kv, err := s.t.c.store.Get(ctx, key)
			switch {
			case err == nil:
				s.progressVersion = kv.Version
			case !errors.Is(err, topo.ErrNotFound):
				return fmt.Errorf("read switchover document: %w", err)
			}
		}
		v, err := topo.PutJSON(ctx, s.t.leader, key, p, s.progressVersion)
		if err == nil {
			s.progressVersion = v
			return nil
		}
		if !errors.Is(err, topo.ErrBadVersion) && !errors.Is(err, topo.ErrExists) && !errors.Is(err, topo.ErrNotFound) {
			return fmt.Errorf("write switchover document: %w", err)
		}
		s.progressVersion = 0
	}
	return errors.New("write switchover document: it kept changing")
}

// proxyWait is what the drain wait saw when it ended.
type proxyWait struct {
	proxies    int      // live registrations
	notHolding []string // proxies that did not acknowledge holding
	busy       []string // "proxy (n sessions)" still busy on the old primary
	busyTotal  int
	notFenced  []string // proxies that did not acknowledge the fence step (fence waits)
}

func (w proxyWait) ready() bool {
	return len(w.notHolding) == 0 && len(w.busy) == 0 && len(w.notFenced) == 0
}

// FenceAckBound bounds how long a switchover whose drain bound passed with
// drain_mode fail waits, after announcing the fence step, for every proxy
// to acknowledge it (topo.SwitchoverAck.Fenced) before it fences the old
// primary. Fencing is safe without the acknowledgement (read_only and the
// killed connections stop every write); waiting only gives the clients of
// the transactions being ended the proxy's "rolled back" error instead of
// the server's 1290 or a lost connection.
const FenceAckBound = time.Second

// waitProxies waits until every live proxy acknowledged the switchover
// (holding, no session busy on the old primary; with fence, the fence
// step applied and no statement in flight there) or bound passes. A proxy
// whose registration disappears (lease lost) no longer counts: a proxy
// without its lease refuses writes on its own.
func (s *switchover) waitProxies(ctx context.Context, bound time.Duration, fence bool) (proxyWait, error) {
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	prefix := s.t.c.keys.Proxies()
	regs := map[string]topo.ProxyRegistration{}
	put := func(kv topo.KV) {
		var reg topo.ProxyRegistration
		if decodeRegistration(kv.Value, &reg) == nil {
			regs[strings.TrimPrefix(kv.Key, prefix)] = reg
		}
	}
	eval := func() proxyWait {
		w := proxyWait{proxies: len(regs)}
		for id, reg := range regs {
			a, ok := reg.Switchovers[s.cl.Name]
			switch {
			case fence:
				if !ok || a.ID != s.holdID || !a.Fenced {
					w.notFenced = append(w.notFenced, id)
				} else {
					w.busyTotal += a.Busy // still open when it applied the fence step
				}
			case !ok || a.ID != s.holdID || !a.Holding:
				w.notHolding = append(w.notHolding, id)
			case a.Busy > 0:
				w.busy = append(w.busy, fmt.Sprintf("%s (%d sessions)", id, a.Busy))
				w.busyTotal += a.Busy
			}
		}
		sort.Strings(w.notHolding)
		sort.Strings(w.busy)
		sort.Strings(w.notFenced)
		return w
	}
	for {
		initial, events, err := s.t.c.store.Watch(wctx, prefix)
		if err != nil {
			if wctx.Err() != nil {
				return eval(), nil
			}
			return proxyWait{}, fmt.Errorf("watch proxy registrations: %w", err)
		}
		clear(regs)
		for _, kv := range initial {
			put(kv)
		}
		if w := eval(); w.ready() {
			return w, nil
		}
		for ev := range events {
			if ev.Err != nil {
				break
			}
			switch ev.Type {
			case topo.EventPut:
				put(ev.KV)
			case topo.EventDelete:
				delete(regs, strings.TrimPrefix(ev.KV.Key, prefix))
			}
			if w := eval(); w.ready() {
				return w, nil
			}
		}
		if wctx.Err() != nil {
			if ctx.Err() != nil {
				return eval(), ctx.Err()
			}
			return eval(), nil
		}
	}
}

// drain runs the prepare and drain steps: it waits for the proxies and
// applies switchover.drain_mode at the bound. It returns an error when the
// switchover must roll back.
func (s *switchover) drain(ctx context.Context) (string, error) {
	sw := s.cfg.Switchover
	// A primary that dies while its sessions drain will never drain: the
	// switchover gives up at once, so that the failover policy can act,
	// instead of holding every statement until the drain bound.
	mctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(drainDownPoll)
		defer t.Stop()
		for {
			select {
			case <-mctx.Done():
				return
			case <-t.C:
			}
			if why := s.oldPrimaryDown(); why != "" {
				cancel(&oldPrimaryDownError{node: s.old, why: why})
				return
			}
		}
	}()
	w, err := s.waitProxies(mctx, sw.DrainTimeout.D(), false)
	var down *oldPrimaryDownError
	if cause := context.Cause(mctx); errors.As(cause, &down) {
		s.oldDown = down.why
		return "", down
	}
	if err != nil {
		return "", err
	}
	if w.ready() {
		return fmt.Sprintf("%d proxies hold new statements, no session busy on %s", w.proxies, s.old), nil
	}
	if len(w.notHolding) > 0 {
		return "", fmt.Errorf("after switchover.drain_timeout %s these proxies had not acknowledged holding: %s",
			sw.DrainTimeout, strings.Join(w.notHolding, ", "))
	}
	if sw.DrainMode != config.DrainFail {
		return "", fmt.Errorf("%d sessions still had a statement or transaction open on %s after switchover.drain_timeout %s (%s); drain_mode abort",
			w.busyTotal, s.old, sw.DrainTimeout, strings.Join(w.busy, ", "))
	}
	s.event("drain_bound", s.old, fmt.Sprintf("drain bound %s reached with %d sessions still in a transaction on %s (%s): drain_mode fail ends them",
		sw.DrainTimeout, w.busyTotal, s.old, strings.Join(w.busy, ", ")))
	if err := s.publishProgress(ctx, topo.SwitchStepFence); err != nil {
		return "", err
	}
	fw, err := s.waitProxies(ctx, FenceAckBound, true)
	if err != nil {
		return "", err
	}
	if len(fw.notFenced) > 0 {
		// Fencing goes on: read_only and the killed connections stop
		// those proxies' writes; their clients may see the server's error.
		s.event("fence_unacknowledged", s.old, fmt.Sprintf("%d proxies did not acknowledge the fence step within %s (%s): their sessions still in a transaction on %s may get the server's read-only error or a lost connection instead of the rolled-back error",
			len(fw.notFenced), FenceAckBound, strings.Join(fw.notFenced, ", "), s.old))
	}
	ended := fmt.Sprintf("%d", fw.busyTotal)
	if len(fw.notFenced) > 0 {
		ended = fmt.Sprintf("at least %d", fw.busyTotal)
	}
	return fmt.Sprintf("%d proxies hold; %d sessions were still busy on %s at the drain bound, %s transactions still open at the fence step are ended (drain_mode fail); %d of %d proxies acknowledged the fence step",
		w.proxies, w.busyTotal, s.old, ended, fw.proxies-len(fw.notFenced), fw.proxies), nil
}

// drainedNodes reads the cluster's drained nodes (none when the document
// is absent). With an integrity keyring, a document whose MAC does not
// verify counts as none (its version is returned, so the next drain or
// undrain replaces it with a signed one); the controller leader uses
// Controller.drained instead, which keeps the last verified document.
func drainedNodes(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) (topo.DrainedNodes, topo.Version, error) {
	d, v, verr, err := readDrained(ctx, st, keys, cluster)
	if verr != nil {
		return topo.DrainedNodes{Cluster: cluster}, v, nil
	}
	return d, v, err
}

// readDrained reads the cluster's drained nodes document: verr (wrapping
// topo.ErrIntegrity) when its MAC does not verify, d then being empty.
func readDrained(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) (d topo.DrainedNodes, v topo.Version, verr, err error) {
	kv, err := st.Get(ctx, keys.Drained(cluster))
	if errors.Is(err, topo.ErrNotFound) {
		return topo.DrainedNodes{Cluster: cluster}, 0, nil, nil
	}
	if err != nil {
		return d, 0, nil, err
	}
	d, err = topo.DecodeDrained(kv.Value)
	if errors.Is(err, topo.ErrIntegrity) {
		return topo.DrainedNodes{Cluster: cluster}, kv.Version, err, nil
	}
	if err != nil {
		return d, 0, nil, fmt.Errorf("topo: %s: %w", kv.Key, err)
	}
	d.Cluster = cluster
	return d, kv.Version, nil, nil
}

// writeDrained writes d (signed with the integrity keyring, when set) with
// compare-and-swap on version v (0: create).
func writeDrained(ctx context.Context, st topo.Store, keys topo.Keys, cluster string, d topo.DrainedNodes, v topo.Version) error {
	b, err := topo.EncodeDrained(&d)
	if err != nil {
		return err
	}
	if v == 0 {
		_, err = st.Create(ctx, keys.Drained(cluster), b)
	} else {
		_, err = st.Update(ctx, keys.Drained(cluster), b, v)
	}
	return err
}

// drained is drainedNodes for the controller: a document whose MAC does
// not verify is ignored (the last verified one of this process stands, so
// a forged drain or undrain changes no candidate choice), counted in
// switchyard_controller_drained_rejected_total and logged at ERROR once
// per document.
func (c *Controller) drained(ctx context.Context, cluster string) (topo.DrainedNodes, topo.Version, error) {
	d, v, verr, err := readDrained(ctx, c.store, c.keys, cluster)
	if err != nil {
		return d, v, err
	}
	c.drainedMu.Lock()
	defer c.drainedMu.Unlock()
	if c.drainedGood == nil {
		c.drainedGood, c.drainedBad = map[string]topo.DrainedNodes{}, map[string]topo.Version{}
	}
	if verr == nil {
		c.drainedGood[cluster] = d
		delete(c.drainedBad, cluster)
		return d, v, nil
	}
	if c.drainedBad[cluster] != v {
		c.drainedBad[cluster] = v
		c.metrics.drainedRejected.WithLabelValues(cluster).Inc()
		c.log.Error("the drained nodes document in the store fails its integrity check; it is ignored and the last verified one stands",
			"cluster", cluster, "err", verr)
	}
	good, ok := c.drainedGood[cluster]
	if !ok {
		good = topo.DrainedNodes{Cluster: cluster}
	}
	return good, v, nil
}

// withoutDrained returns a copy of cl where drained nodes may not be
// promoted.
func withoutDrained(cl *config.Cluster, d topo.DrainedNodes) *config.Cluster {
	c := *cl
	c.Nodes = append([]config.Node(nil), cl.Nodes...)
	for i := range c.Nodes {
		if rec, ok := d.Nodes[c.Nodes[i].Name]; ok {
			c.Nodes[i].Promotion = promotionDrained
			if rec.Maintenance {
				c.Nodes[i].Promotion = promotionMaintenance
			}
		}
	}
	return &c
}

// SwitchoverOptions are the operator's choices for a planned switchover.
type SwitchoverOptions struct {
	// Target is the node to promote ("" lets the leader choose).
	Target string
	// Warm replays the proxies' hot read set on the candidate first.
	Warm bool
	// RequireWarm refuses a candidate below switchover.warm_threshold.
	RequireWarm bool
	// By names the operator (user@host) for the events.
	By string
}

// RequestSwitchoverWith is RequestSwitchover with warmth options: it hands
// the request to the leader and waits for the result the same way.
func RequestSwitchoverWith(ctx context.Context, st topo.Store, keys topo.Keys, cluster string, o SwitchoverOptions) (topo.Request, error) {
	return Submit(ctx, st, keys, SwitchoverRequest(cluster, o))
}

// SwitchoverRequest is the operator request for a switchover of cluster
// with o, for Submit or Enqueue.
func SwitchoverRequest(cluster string, o SwitchoverOptions) topo.Request {
	return topo.Request{Kind: topo.RequestSwitchover, Cluster: cluster, Target: o.Target,
		Warm: o.Warm, RequireWarm: o.RequireWarm, By: o.By}
}

// drainDownPoll is how often the drain looks for the old primary's death.
const drainDownPoll = 100 * time.Millisecond

// oldPrimaryDownError ends a drain whose old primary died.
type oldPrimaryDownError struct{ node, why string }

func (e *oldPrimaryDownError) Error() string {
	return fmt.Sprintf("the old primary %s died while its sessions drained (%s)", e.node, e.why)
}

// oldPrimaryDown says why the old primary is dead while the switchover
// drains, "" when it is not: a probe round during the switchover found
// DeadPrimary on it (the controller cannot reach it and its replicas'
// IO threads lost it too: a primary that is only slow or busy never is).
func (s *switchover) oldPrimaryDown() string {
	s.cr.mu.Lock()
	defer s.cr.mu.Unlock()
	if st := s.cr.state; st != nil && st.Primary == s.old {
		for _, a := range st.Analysis {
			if a.Code == string(analysis.DeadPrimary) && a.Node == s.old {
				return "DeadPrimary: " + a.Detail
			}
		}
	}
	return ""
}
