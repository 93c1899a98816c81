package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// requestKinds are the operator requests the leader serves.
var requestKinds = []string{topo.RequestSwitchover, topo.RequestFailover, topo.RequestMaintenance, topo.RequestAck}

func knownRequestKind(k string) bool { return slices.Contains(requestKinds, k) }

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }

// decodeRegistration decodes a proxy registration the controller acts on
// (failure detection, switchover acknowledgements, epochs, sessions):
// with an integrity keyring, one whose MAC does not verify is an error
// like one that does not decode, so a registration written by someone
// without the key never counts.
func decodeRegistration(b []byte, reg *topo.ProxyRegistration) error {
	r, err := topo.DecodeProxyRegistration(b)
	if err != nil {
		return err
	}
	if r.Unverified != "" {
		return fmt.Errorf("proxy registration %s: %w", r.ID, topo.ErrIntegrity)
	}
	*reg = r
	return nil
}

// FailoverOptions are the operator's choices for RequestFailover.
type FailoverOptions struct {
	// Target is the node to promote ("" lets the controller choose the most
	// advanced eligible replica).
	Target string
	// PlanOnly returns the plan (candidate, rejections, estimated loss)
	// without acting.
	PlanOnly bool
	// Force lets a candidate through the staleness checks (behind another
	// replica, lag over failover.max_lag); Reason is then required and
	// recorded.
	Force bool
	// ForceReachable lets the failover replace a healthy, reachable
	// primary (without it that is refused: use a switchover); Reason is
	// then required and recorded.
	ForceReachable bool
	Reason         string
	// By names the operator (user@host) for the events.
	By string
}

// RequestFailover asks the controller leader for an emergency failover of
// cluster (or only its plan) and waits for the result, like
// RequestSwitchover. The returned request carries the plan (Plan), the
// steps and a message; the error wraps ErrRequestFailed when the failover
// was refused or failed.
func RequestFailover(ctx context.Context, st topo.Store, keys topo.Keys, cluster string, o FailoverOptions) (topo.Request, error) {
	req, err := FailoverRequest(cluster, o)
	if err != nil {
		return req, err
	}
	return Submit(ctx, st, keys, req)
}

// FailoverPlanRefusals says why the failover that plan describes would be
// refused: no eligible candidate (the plan's refusal), or a primary that is
// healthy and reachable when forceReachable is false (use a switchover).
// Empty when it would run. The command line's --plan exit status and the
// admin API's failover plan both come from it.
func FailoverPlanRefusals(plan *topo.FailoverPlan, forceReachable bool) []string {
	out := []string{}
	if plan == nil {
		return out
	}
	if plan.Candidate == "" && plan.Refusal != "" {
		out = append(out, plan.Refusal)
	}
	if !forceReachable && strings.Contains(plan.Warning, "healthy and reachable") {
		out = append(out, plan.Warning)
	}
	return out
}

// FailoverRequest checks o (Force and ForceReachable need a Reason) and
// returns the operator request for a failover of cluster, for Submit or
// Enqueue.
func FailoverRequest(cluster string, o FailoverOptions) (topo.Request, error) {
	if o.Force && strings.TrimSpace(o.Reason) == "" {
		return topo.Request{}, errors.New("failover: --force-stale needs a --reason (it is recorded in the events)")
	}
	if o.ForceReachable && strings.TrimSpace(o.Reason) == "" {
		return topo.Request{}, errors.New("failover: --force needs a --reason (it is recorded in the events)")
	}
	return topo.Request{Kind: topo.RequestFailover, Cluster: cluster, Target: o.Target,
		PlanOnly: o.PlanOnly, Force: o.Force, ForceReachable: o.ForceReachable, Reason: o.Reason, By: o.By}, nil
}

// RequestAck acknowledges the last failover of cluster through the
// leader: the block on automatic failover is lifted, automatic failover is
// enabled again if a failed recovery disabled it, and the recovery alarms
// are cleared.
func RequestAck(ctx context.Context, st topo.Store, keys topo.Keys, cluster, reason, by string) (topo.Request, error) {
	return Submit(ctx, st, keys, topo.Request{Kind: topo.RequestAck, Cluster: cluster, Reason: reason, By: by})
}

// serveOperator executes a failover, maintenance or ack request.
func (t *term) serveOperator(ctx context.Context, key string, req topo.Request, version topo.Version) {
	req.State, req.Steps = topo.RequestRunning, nil
	if err := t.saveRequest(ctx, key, &req, &version); err != nil {
		t.log.Warn("cannot take the operator request", "request", req.ID, "err", err)
		return
	}
	var ok bool
	switch req.Kind {
	case topo.RequestFailover:
		ok = t.serveFailover(ctx, key, &req, &version)
	case topo.RequestMaintenance:
		ok = t.serveMaintenance(ctx, &req)
	case topo.RequestAck:
		ok = t.serveAck(ctx, &req)
	}
	if ctx.Err() != nil {
		return // the next leader fails the request
	}
	state := topo.RequestDone
	if !ok {
		state = topo.RequestFailed
	}
	t.finishRequest(ctx, key, &req, version, state)
}

func (t *term) serveFailover(ctx context.Context, key string, req *topo.Request, version *topo.Version) bool {
	if !req.PlanOnly {
		_ = t.fo.events.emit(ctx, topo.Event{Cluster: req.Cluster, Kind: topo.EventOperator, Code: "failover", Node: req.Target,
			Message: fmt.Sprintf("operator %s requested a failover (target %s, force-stale %v, force %v): %s", orDash(req.By), orDash(req.Target),
				req.Force, req.ForceReachable, orDash(req.Reason)), Actor: req.By})
	}
	o := failoverOptions{cluster: req.Cluster, target: req.Target, force: req.Force, forceReachable: req.ForceReachable,
		reason: req.Reason, by: req.By, planOnly: req.PlanOnly,
		progress: func(ctx context.Context, line string) {
			req.Steps = append(req.Steps, line)
			if err := t.saveRequest(ctx, key, req, version); err != nil && ctx.Err() == nil {
				t.log.Warn("cannot save failover progress", "request", req.ID, "err", err)
			}
		}}
	result, plan, _, msg := t.runFailover(ctx, o)
	if plan.Cluster != "" {
		req.Plan = &plan
	}
	req.Message, req.Result = msg, result
	if result == foRefused {
		req.Override = plan.Override
	}
	switch result {
	case foDone:
		if plan.Candidate != "" {
			req.Target = plan.Candidate
		}
		cr, err := t.cluster(ctx, req.Cluster)
		if err == nil {
			cr.mu.Lock()
			if cr.state != nil {
				req.ToEpoch = cr.state.Epoch
				req.FromEpoch = cr.state.Epoch - 1
			}
			cr.mu.Unlock()
		}
		return true
	case foPlanned:
		return true
	}
	return false
}

func (t *term) modeOf(cluster string) string {
	if cl := t.c.config().Cluster(cluster); cl != nil {
		return cl.Failover.Mode
	}
	return config.FailoverManual
}

func (t *term) serveAck(ctx context.Context, req *topo.Request) bool {
	if req.Action == floorResetAction {
		return t.serveFloorReset(ctx, req)
	}
	cr, err := t.cluster(ctx, req.Cluster)
	if err != nil {
		req.Message = err.Error()
		return false
	}
	var lifted []string
	st, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		lifted = lifted[:0]
		if st.FailoverBlock != nil {
			lifted = append(lifted, "automatic failover block lifted (it was to last until "+st.FailoverBlock.Until.UTC().Format(time.RFC3339)+"; "+st.FailoverBlock.Reason+")")
			st.FailoverBlock = nil
		}
		if st.AutoDisabled != "" {
			lifted = append(lifted, "automatic failover re-enabled (was disabled: "+st.AutoDisabled+")")
			st.AutoDisabled = ""
		}
		st.Alarms = clearAlarms(st.Alarms, topo.AlarmRecoveryFailed)
		return nil
	})
	if err != nil {
		req.Message = "ack not recorded: " + err.Error()
		return false
	}
	msg := fmt.Sprintf("acknowledged by %s: nothing to lift", orDash(req.By))
	if len(lifted) > 0 {
		msg = fmt.Sprintf("acknowledged by %s: %s", orDash(req.By), strings.Join(lifted, "; "))
	}
	if req.Reason != "" {
		msg += " (" + req.Reason + ")"
	}
	req.Message = msg
	t.fo.events.forget(req.Cluster + "|failover|")
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: req.Cluster, Kind: topo.EventOperator, Code: "ack", Message: msg, Epoch: st.Epoch, Actor: req.By})
	return true
}

// resolveAbandonedFailover finishes or undoes a failover a previous leader
// left in phase failover. Publishing the new primary happens only after the
// proxies' acknowledgements and the relay-log catch-up, so a target that is
// no longer replicating was past those steps: its promotion is completed
// (made writable if needed), verified and published. A target still
// replicating was not promoted: the old primary is published again with
// the epoch unchanged, the replicas' IO threads restarted, and the policy
// decides again from the next rounds.
func (t *term) resolveAbandonedFailover(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, probes map[string]topo.Probe) {
	cr.mu.Lock()
	if cr.switching || cr.state == nil || cr.state.Phase != topo.PhaseFailover {
		cr.mu.Unlock()
		return
	}
	cr.switching, cr.op, cr.opSince = true, "resuming a failover a previous leader left to "+cr.state.Target, t.c.now()
	st := *cr.state
	cr.mu.Unlock()
	defer cr.release()
	old, target, epoch := st.OldPrimary, st.Target, st.Epoch
	log := t.log.With("cluster", cl.Name, "old_primary", old, "target", target, "epoch", epoch)
	tp := probes[target]
	ev := func(msg string) {
		_ = t.fo.events.emit(ctx, topo.Event{Cluster: cl.Name, Kind: topo.EventRecovery, Code: "failover_resumed", Node: target, Message: msg, Epoch: epoch})
	}
	// Promoted: replication reset (the promotion's first change), or
	// already writable (an emergency promotion makes the candidate
	// writable first and resets its replication once its cut IO thread
	// exited; nothing else makes a node writable during a failover).
	if target != "" && complete(tp) && (!tp.Replicating || !tp.ReadOnly) {
		n := cl.Node(target)
		detail := ""
		var err error
		var pr *nodeProber
		switch {
		case n == nil:
			err = fmt.Errorf("%s is no longer in the config", target)
		case tp.Replicating:
			// Writable, its replication from the old primary not reset
			// yet: STOP SLAVE waits for a cut IO thread's exit.
			if pr, err = t.c.prober(cfg, cl, n); err == nil {
				sctx, cancel := context.WithTimeout(ctx, stepTimeout)
				err = pr.ForgetReplication(sctx)
				cancel()
			}
		case tp.ReadOnly:
			if pr, err = t.c.prober(cfg, cl, n); err == nil {
				err = pr.SetReadOnly(ctx, false)
			}
		}
		if err == nil {
			detail, err = verifyAppWritable(ctx, cfg, cl, target, epoch)
		}
		if err != nil {
			log.Error("cannot finish the abandoned failover", "err", err)
			ev(fmt.Sprintf("a previous leader left a failover to %s after promotion; finishing it failed: %v", target, err))
			return
		}
		f := &failoverRun{t: t, cfg: cfg, cl: cl, cr: cr, old: old, toEpoch: epoch, start: t.c.now(),
			plan: topo.FailoverPlan{Candidate: target}, o: failoverOptions{auto: st.TargetAuto}}
		_, err = t.update(ctx, cr, func(s *topo.ClusterState) error {
			if s.Phase != topo.PhaseFailover || s.Epoch != epoch || s.Target != target {
				return errors.New("state changed meanwhile")
			}
			f.publishInto(s, t.c.now())
			return nil
		})
		if err != nil {
			log.Error("cannot publish the promoted target", "err", err)
			return
		}
		ev(fmt.Sprintf("a previous leader left a failover to %s after promotion: finished (%s) and published as primary of epoch %d", target, detail, epoch))
		return
	}
	// Not promoted: restart what the failover stopped and publish the old
	// primary again. The replicas it was to repoint (st.Repoint) were
	// receiving and applying from the old primary: START SLAVE (a
	// promotion stopped short after its STOP SLAVE leaves the candidate
	// with both threads stopped). Without that list (a state written by
	// an older controller), IO threads stopped while SQL threads run.
	oldNode := cl.Node(old)
	for _, n := range cl.Nodes {
		p := probes[n.Name]
		if n.Name == old || !complete(p) || !p.Replicating || (p.IORunning != "No" && p.SQLRunning) {
			continue
		}
		pr, err := t.c.prober(cfg, cl, &n)
		if err != nil {
			continue
		}
		switch {
		case slices.Contains(st.Repoint, n.Name) && oldNode != nil && sameAddress(p.SourceHost, p.SourcePort, oldNode.Address):
			_ = pr.StartReplica(ctx)
		case len(st.Repoint) == 0 && p.IORunning == "No" && p.SQLRunning:
			_ = pr.StartReplicaIO(ctx)
		}
	}
	_, err := t.update(ctx, cr, func(s *topo.ClusterState) error {
		if s.Phase != topo.PhaseFailover || s.Epoch != epoch {
			return errors.New("state changed meanwhile")
		}
		s.Primary, s.Phase, s.Target, s.OldPrimary, s.TargetAuto, s.Repoint = old, topo.PhaseStable, "", "", false, nil
		return nil
	})
	if err != nil {
		log.Error("cannot restore the state of an abandoned failover", "err", err)
		return
	}
	ev(fmt.Sprintf("a previous leader left a failover to %s before promotion: %s published again (epoch %d); failure detection decides again",
		orDash(target), old, epoch))
}
