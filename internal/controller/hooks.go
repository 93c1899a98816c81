package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/hooks"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// termHooks is a term's hook dispatcher: only the leader delivers
// notifications, and a new leader starts with empty queues (what the
// previous one had queued is not delivered twice, nor at all).
type termHooks struct {
	d *hooks.Dispatcher

	mu sync.Mutex
	// deadSent: clusters whose current DeadPrimary episode was notified.
	deadSent map[string]bool
}

// startHooks creates the term's dispatcher; each attempt's result is
// written to the event log as hook_ok or hook_failed.
func (t *term) startHooks(ctx context.Context) *termHooks {
	d := hooks.New(t.c.config().Hooks, hooks.Options{
		Metrics: t.c.hookMetrics,
		Log:     t.log.With("component", "hooks"),
		OnResult: func(a hooks.Attempt) {
			code := "hook_ok"
			if !a.OK() {
				code = "hook_failed"
			}
			ev := topo.Event{Cluster: a.Cluster, Kind: topo.EventHook, Code: code, Node: a.Node, Message: a.Summary(), Epoch: t.epochOf(a.Cluster)}
			// Written also after the term ended, but bounded: with etcd
			// gone the hooks' Close, and so the controller's stop, would
			// wait for it forever.
			ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), stopWriteTimeout)
			defer ecancel()
			if err := t.fo.events.emit(ectx, ev); err != nil && ctx.Err() == nil {
				t.log.Warn("cannot write hook event", "hook", a.Hook, "err", err)
			}
		},
	})
	return &termHooks{d: d, deadSent: map[string]bool{}}
}

func (h *termHooks) close() {
	if h != nil {
		h.d.Close()
	}
}

// epochOf is the published epoch of cluster (0 when unknown).
func (t *term) epochOf(cluster string) int64 {
	t.mu.Lock()
	cr := t.clusters[cluster]
	t.mu.Unlock()
	if cr == nil {
		return 0
	}
	return epochOf(cr)
}

// fill completes a payload with what every one carries.
func (t *term) fill(p hooks.Payload) hooks.Payload {
	p.Version = hooks.SchemaVersion
	if p.Time.IsZero() {
		p.Time = t.c.now().UTC()
	}
	p.Controller = t.c.id
	return p
}

// notify queues p for the hooks that fire on it; it never blocks.
func (t *term) notify(p hooks.Payload) {
	if t.hooks == nil {
		return
	}
	t.hooks.d.Update(t.c.config().Hooks)
	t.hooks.d.Notify(t.fill(p))
}

// veto runs the veto hooks of p's event and returns the refusal of the
// first that fails (nil when none is configured or all pass).
func (t *term) veto(ctx context.Context, p hooks.Payload) error {
	if t.hooks == nil {
		return nil
	}
	t.hooks.d.Update(t.c.config().Hooks)
	return t.hooks.d.Veto(ctx, t.fill(p))
}

// wantsHook reports whether a hook fires on event for cluster.
func (t *term) wantsHook(event, cluster string) bool {
	return t.hooks != nil && hooks.Wants(t.c.config().Hooks, event, cluster)
}

// deadPrimaryHook notifies dead_primary once per DeadPrimary episode of a
// cluster the controller will not fail over on its own (manual mode,
// maintenance, disabled or blocked automation), with the plan `switchyard
// failover` would run, computed from a fresh probe off the probe loop.
func (t *term) deadPrimaryHook(ctx context.Context, cl *config.Cluster, st *topo.ClusterState, dead *analysis.Finding, why string) {
	if !t.wantsHook(config.HookDeadPrimary, cl.Name) {
		return
	}
	t.hooks.mu.Lock()
	sent := t.hooks.deadSent[cl.Name]
	t.hooks.deadSent[cl.Name] = true
	t.hooks.mu.Unlock()
	if sent {
		return
	}
	p := hooks.Payload{Event: config.HookDeadPrimary, Cluster: cl.Name, Node: dead.Node, Primary: st.Primary, Epoch: st.Epoch,
		Reason: fmt.Sprintf("%s: %s; not failing over: %s", dead.Code, dead.Detail, why), Mode: string(cl.Failover.Mode),
		Time: t.c.now().UTC()}
	name := cl.Name
	t.fo.wg.Add(1)
	go func() {
		defer t.fo.wg.Done()
		result, plan, _, msg := t.runFailover(ctx, failoverOptions{cluster: name, planOnly: true})
		if result == foPlanned || plan.OldPrimary != "" {
			p.Plan = &plan
		} else {
			p.Reason += "; no plan: " + msg
		}
		if ctx.Err() == nil {
			t.notify(p)
		}
	}()
}

// deadPrimaryGone ends a cluster's DeadPrimary episode: the next one is
// notified again.
func (t *term) deadPrimaryGone(cluster string) {
	if t.hooks == nil {
		return
	}
	t.hooks.mu.Lock()
	delete(t.hooks.deadSent, cluster)
	t.hooks.mu.Unlock()
}

// stateHooks notifies alarm_raised, alarm_cleared and node_quarantined for
// what changed between two written states of a cluster (prev nil: the
// first state this term writes, nothing notified for what it carried).
func (t *term) stateHooks(prev, next *topo.ClusterState) {
	if t.hooks == nil || prev == nil || next == nil {
		return
	}
	key := func(a topo.Alarm) string { return a.Code + "|" + a.Node }
	had := map[string]bool{}
	for _, a := range prev.Alarms {
		had[key(a)] = true
	}
	has := map[string]bool{}
	for _, a := range next.Alarms {
		has[key(a)] = true
		if !had[key(a)] {
			a := a
			t.notify(hooks.Payload{Event: config.HookAlarmRaised, Cluster: next.Cluster, Node: a.Node, Primary: next.Primary,
				Epoch: next.Epoch, Reason: a.Message, Alarm: &a})
		}
	}
	for _, a := range prev.Alarms {
		if !has[key(a)] {
			a := a
			t.notify(hooks.Payload{Event: config.HookAlarmCleared, Cluster: next.Cluster, Node: a.Node, Primary: next.Primary,
				Epoch: next.Epoch, Reason: "cleared: " + a.Message, Alarm: &a})
		}
	}
	for node, why := range next.Quarantined {
		if _, ok := prev.Quarantined[node]; !ok {
			t.notify(hooks.Payload{Event: config.HookNodeQuarantined, Cluster: next.Cluster, Node: node, Primary: next.Primary,
				Epoch: next.Epoch, Reason: why})
		}
	}
}

// failoverPayload is a failover hook's payload: the plan, the steps so far.
func (f *failoverRun) hookPayload(event, result, reason string, epoch int64) hooks.Payload {
	plan := f.plan
	return hooks.Payload{Event: event, Cluster: f.cl.Name, Node: plan.Candidate, Primary: f.old, Epoch: epoch, Reason: reason,
		Result: result, Mode: modeLabel(f.o.auto), Plan: &plan, Steps: slices.Clone(f.steps)}
}

// startHooks runs the failover_start veto hooks (a refusal stops the
// failover before it changes anything) and notifies failover_start.
func (f *failoverRun) startHooks(ctx context.Context) error {
	f.hooked = true
	why := fmt.Sprintf("%s failover of %s to %s", modeLabel(f.o.auto), f.old, f.plan.Candidate)
	if f.o.reason != "" {
		why += ": " + f.o.reason
	}
	if f.o.by != "" {
		why += " (by " + f.o.by + ")"
	}
	if err := f.t.veto(ctx, f.hookPayload(config.HookFailoverStart, "", why, f.fromEpoch)); err != nil {
		return err
	}
	f.t.notify(f.hookPayload(config.HookFailoverStart, "", why, f.fromEpoch))
	return nil
}

// endHooks notifies failover_end for a failover that got as far as a plan.
func (f *failoverRun) endHooks(result, msg string) {
	if !f.hooked {
		return
	}
	f.t.notify(f.hookPayload(config.HookFailoverEnd, result, msg, epochOf(f.cr)))
}

// switchoverPayload is a switchover hook's payload.
func (s *switchover) hookPayload(event, result, reason string) hooks.Payload {
	return hooks.Payload{Event: event, Cluster: s.cl.Name, Node: s.cand, Primary: s.old, Epoch: epochOf(s.cr), Reason: reason,
		Result: result, Steps: slices.Clone(s.req.Steps)}
}

// startHooks runs the switchover_start veto hooks and notifies
// switchover_start.
func (s *switchover) startHooks(ctx context.Context) error {
	s.hooked = true
	why := fmt.Sprintf("switchover of %s to %s", s.old, s.cand)
	if s.req.By != "" {
		why += " (by " + s.req.By + ")"
	}
	if err := s.t.veto(ctx, s.hookPayload(config.HookSwitchoverStart, "", why)); err != nil {
		return err
	}
	s.t.notify(s.hookPayload(config.HookSwitchoverStart, "", why))
	return nil
}

// endHooks notifies switchover_end for a switchover whose checks passed.
func (s *switchover) endHooks(result string) {
	if s.hooked {
		s.t.notify(s.hookPayload(config.HookSwitchoverEnd, result, s.req.Message))
	}
}
