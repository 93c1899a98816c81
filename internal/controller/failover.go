package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Failover results (label "result" of switchyard_controller_failovers_total).
const (
	foDone    = "done"
	foPlanned = "planned"   // plan only; nothing changed
	foRefused = "refused"   // checks failed; nothing changed
	foFailed  = "failed"    // something changed and the failover did not complete
	foAborted = "aborted"   // leadership lost or controller stopping
	foTimeout = "timed_out" // failover.recovery_timeout exceeded
)

// Bounds of the wait for proxies to apply a new epoch when the old primary
// could not be fenced: a proxy either acknowledges or its registration
// lease (proxy.RegistrationTTL, 10 s) expires; leaseGoneGrace covers the
// proxy noticing the expiry a little after etcd (its keepalive deadline is
// measured from the last response it received).
const (
	proxyWaitMax   = 13 * time.Second
	leaseGoneGrace = 2 * time.Second
	proxyAckPoll   = 20 * time.Millisecond
)

// failoverOptions say what to fail over and on whose behalf.
type failoverOptions struct {
	cluster string
	auto    bool
	target  string
	force   bool
	// forceReachable lets a manual failover replace a healthy, reachable
	// primary (needs reason).
	forceReachable bool
	reason         string
	by             string
	planOnly       bool
	// progress is called with each step line (manual requests save it).
	progress func(ctx context.Context, line string)
}

// failoverRun is one emergency failover in progress.
type failoverRun struct {
	t     *term
	cfg   *config.Config
	cl    *config.Cluster
	cr    *clusterRun
	m     *clusterMemory
	log   *slog.Logger
	o     failoverOptions
	start time.Time
	// termCtx is the term's context (rather than the failover's bounded
	// one), for work that outlives the failover run.
	termCtx context.Context

	old                string
	fromEpoch, toEpoch int64
	plan               topo.FailoverPlan
	steps              []string
	oldReachable       bool
	fenced             bool // old primary set read-only
	published          bool // phase failover published
	stoppedIO          []string
	promoting          bool // candidate's replication about to be reset
	semiSync           bool // the candidate was a semi-sync replica
	repointed          []string
	probes             map[string]topo.Probe
	floorDoc           topo.PromotionFloor
	cancelWakeFence    func() // stops the fence pending on an unreachable old primary
	// opStopped are the replicas whose replication was stopped (IO No or
	// SQL not running) before the failover touched them: repointed but
	// left stopped, as a switchover does.
	opStopped map[string]string
	// cuts are the replicas whose IO thread was cut rather than stopped
	// (see ioCut); cutMu guards the map.
	cutMu sync.Mutex
	cuts  map[string]*ioCut
	// resetPending: the promoted candidate's replication is reset once its
	// cut IO thread exited (promoteCut, resetAfterCut).
	resetPending bool
	// semiSyncEarly: the candidate was made a semi-sync primary before
	// its replicas were repointed (semiSyncAhead).
	semiSyncEarly bool
	// waitNoSlaveOff: semiSyncAhead switched the candidate's
	// rpl_semi_sync_master_wait_no_slave off until a semi-sync replica is
	// attached again (restoreWaitNoSlave switches it back on).
	waitNoSlaveOff bool
	// hooked: the failover got as far as a plan; failover_end is notified.
	hooked bool
}

// runFailover runs (or, with planOnly, plans) an emergency failover and
// returns its result label, the plan, the steps and a message.
func (t *term) runFailover(ctx context.Context, o failoverOptions) (string, topo.FailoverPlan, []string, string) {
	cfg := t.c.config()
	cl := cfg.Cluster(o.cluster)
	if cl == nil {
		return foRefused, topo.FailoverPlan{}, nil, fmt.Sprintf("unknown cluster %q", o.cluster)
	}
	cr, err := t.cluster(ctx, cl.Name)
	if err != nil {
		return foRefused, topo.FailoverPlan{}, nil, err.Error()
	}
	f := &failoverRun{t: t, cfg: cfg, cl: cl, cr: cr, m: t.fo.memory(cl.Name), o: o, start: t.c.now(), termCtx: ctx,
		log: t.log.With("cluster", cl.Name, "failover", map[bool]string{true: "auto", false: "manual"}[o.auto])}
	rctx, cancel := context.WithTimeout(ctx, cl.Failover.RecoveryTimeout.D())
	defer cancel()
	result, msg := f.run(rctx)
	if ctx.Err() != nil && result != foDone {
		result, msg = foAborted, "leadership lost or controller stopping: "+msg+"; the next leader resolves the cluster"
	} else if rctx.Err() != nil && result != foDone && result != foRefused {
		result = foTimeout
		msg = fmt.Sprintf("exceeded failover.recovery_timeout %s: %s", cl.Failover.RecoveryTimeout, msg)
	}
	if !o.planOnly {
		t.c.metrics.failovers.WithLabelValues(cl.Name, result, modeLabel(o.auto)).Inc()
	}
	f.finish(ctx, result, msg)
	return result, f.plan, f.steps, msg
}

func modeLabel(auto bool) string {
	if auto {
		return "auto"
	}
	return "manual"
}

// finish records the outcome: events, and for a failed or timed-out
// recovery (or an automatic one that found no safe candidate) an alarm and
// automatic failover disabled for the cluster.
func (f *failoverRun) finish(ctx context.Context, result, msg string) {
	t := f.t
	ev := topo.Event{Cluster: f.cl.Name, Kind: topo.EventRecovery, Code: "failover_" + result, Node: f.plan.Candidate,
		Message: fmt.Sprintf("%s failover %s: %s", modeLabel(f.o.auto), result, msg), Epoch: f.toEpoch, Actor: f.o.by}
	var rejected []string
	for _, c := range f.plan.Candidates {
		if !c.Eligible {
			rejected = append(rejected, c.Node+" rejected: "+c.Rejected)
		}
	}
	if len(rejected) > 0 && result == foDone {
		ev.Message += "; " + strings.Join(rejected, "; ")
	}
	if len(f.steps) > 0 {
		ev.Message += "; steps: " + strings.Join(f.steps, " | ")
	}
	f.endHooks(result, msg)
	if result == foAborted {
		f.log.Warn("failover aborted", "message", msg)
		return
	}
	if result == foPlanned {
		return
	}
	if err := t.fo.events.emit(ctx, ev); err != nil && ctx.Err() == nil {
		f.log.Warn("cannot write failover event", "err", err)
	}
	disable := result == foFailed || result == foTimeout || (result == foRefused && f.o.auto && f.plan.OldPrimary != "" && f.plan.Candidate == "")
	if !disable {
		return
	}
	reason := fmt.Sprintf("%s failover of %s %s at %s: %s", modeLabel(f.o.auto), f.old, result, t.c.now().UTC().Format(time.RFC3339), msg)
	_, err := t.update(ctx, f.cr, func(st *topo.ClusterState) error {
		st.AutoDisabled = reason
		return nil
	})
	if err != nil && ctx.Err() == nil {
		f.log.Error("cannot disable automatic failover in the cluster state", "err", err)
	}
	t.raiseAlarm(ctx, f.cr, topo.Alarm{Code: topo.AlarmRecoveryFailed, Message: reason +
		"; automatic failover is disabled for this cluster until `switchyard ack --cluster " + f.cl.Name + "`"})
}

// step runs fn as one audited step: recorded in the steps, logged, written
// as a recovery event, passed to the progress callback.
func (f *failoverRun) step(ctx context.Context, name string, fn func(ctx context.Context) (string, error)) error {
	if h := f.t.c.stepHook; h != nil {
		h(ctx, name)
	}
	begin := f.t.c.now()
	detail, err := fn(ctx)
	took := f.t.c.now().Sub(begin).Round(100 * time.Microsecond)
	line := name
	if detail != "" {
		line += ": " + detail
	}
	if err != nil {
		line = fmt.Sprintf("%s: failed after %s: %v", line, took, err)
		f.log.Warn("failover step failed", "step", name, "took", took, "err", err)
	} else {
		line = fmt.Sprintf("%s (%s)", line, took)
		f.log.Info("failover step", "step", name, "detail", detail, "took", took)
	}
	f.steps = append(f.steps, line)
	if f.o.progress != nil {
		f.o.progress(ctx, line)
	}
	return err
}

// run performs the failover; see the package documentation of the steps.
func (f *failoverRun) run(ctx context.Context) (string, string) {
	cr := f.cr
	// A plan changes nothing: it does not take the operation slot, so
	// computing one (failover --plan, the dead_primary hook's) never makes
	// an operator's failover or switchover wait or be refused.
	if !f.o.planOnly {
		if busy, ok := cr.claim(f.opName(), f.t.c.now()); !ok {
			return foRefused, busy
		}
		defer cr.release()
	}
	var st topo.ClusterState
	cr.mu.Lock()
	if cr.state != nil {
		st = *cr.state
	}
	cr.mu.Unlock()
	// A failover that ended before semiSyncAfterRepoint (a failed
	// publication, a rollback) still switches the candidate's
	// rpl_semi_sync_master_wait_no_slave back on.
	defer func() {
		if f.waitNoSlaveOff {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
			defer cancel()
			_ = f.step(rctx, "semi-sync wait_no_slave on "+f.plan.Candidate, f.restoreWaitNoSlave)
		}
	}()
	if st.Phase != topo.PhaseStable {
		return foRefused, fmt.Sprintf("cluster %s is in phase %s: wait for it to finish", f.cl.Name, st.Phase)
	}
	if st.Primary == "" {
		return foRefused, fmt.Sprintf("cluster %s has no published primary to fail over from", f.cl.Name)
	}
	f.old, f.fromEpoch = st.Primary, st.Epoch

	// 1–2. Refresh, re-check, plan.
	if err := f.step(ctx, "refresh and plan", func(ctx context.Context) (string, error) {
		return f.refreshAndPlan(ctx, &st)
	}); err != nil {
		f.hooked = !f.o.planOnly && f.plan.OldPrimary != ""
		return foRefused, err.Error()
	}
	if f.o.planOnly {
		return foPlanned, analysis.FormatPlan(f.plan)
	}
	// Veto hooks may refuse before anything changes; the others are told.
	if err := f.startHooks(ctx); err != nil {
		return foRefused, err.Error()
	}
	// 3. Fence the old primary if it can be reached.
	if f.oldReachable {
		if err := f.step(ctx, "fence "+f.old, f.fenceOld); err != nil {
			return f.rollback(ctx, "fence "+f.old+": "+err.Error())
		}
	}
	// 4. Announce: no primary takes writes in the new epoch until published.
	if err := f.step(ctx, "publish phase failover", f.publishFailoverPhase); err != nil {
		return f.rollback(ctx, "publish phase failover: "+err.Error())
	}
	// An old primary that could not be fenced is fenced the moment it
	// answers again (a frozen server waking up), from now on; a rollback
	// cancels it.
	if !f.fenced {
		f.t.markWakeFence(f.cl.Name, f.old, f.toEpoch) // keepWakeFence: already pending
		f.cancelWakeFence = f.t.fenceWhenAwake(f.termCtx, f.cfg, f.cl, f.cr, f.old, f.toEpoch)
	}
	// 5. A fenced (reachable) old primary takes no more writes: let the
	// candidate receive all it has before cutting replication.
	if f.fenced {
		_ = f.step(ctx, "catch up with fenced "+f.old, f.catchUpFenced)
	}
	// 6. Stop receiving from the old primary everywhere.
	_ = f.step(ctx, "stop replication IO threads", f.stopIO)
	ioStopped := f.t.c.now()
	// 7. Without a fence, wait until no proxy routes to the old primary:
	// registered ones acknowledge, and one in failsafe sees the stopped IO
	// threads within the failsafe window (or its replicas' silence already
	// ended its confirmation).
	if !f.fenced {
		if err := f.step(ctx, "wait for proxies", f.waitProxies); err != nil {
			return f.rollback(ctx, "wait for proxies: "+err.Error())
		}
		if f.cfg.Proxy.FailsafeOn() {
			if err := f.step(ctx, "failsafe window", func(ctx context.Context) (string, error) {
				return f.waitFailsafeWindow(ctx, ioStopped)
			}); err != nil {
				return f.rollback(ctx, "failsafe window: "+err.Error())
			}
		}
	}
	// 7. Re-plan with final received positions, apply the relay log.
	if err := f.step(ctx, "re-plan after IO stop", f.replan); err != nil {
		return f.rollback(ctx, err.Error())
	}
	cand := f.plan.Candidate
	if err := f.step(ctx, "apply relay log on "+cand, f.applyRelay); err != nil {
		return f.rollback(ctx, "apply relay log: "+err.Error())
	}
	// 8. Leadership checkpoint: a leader-conditioned write right before the
	// step that cannot be undone by publishing.
	if err := f.t.fo.events.emit(ctx, topo.Event{Cluster: f.cl.Name, Kind: topo.EventRecovery, Code: "promote", Node: cand,
		Message: fmt.Sprintf("promoting %s (epoch %d)", cand, f.toEpoch), Epoch: f.toEpoch, Actor: f.o.by}); err != nil {
		return f.rollback(ctx, "leadership checkpoint before promotion: "+err.Error())
	}
	// 9–10. Promote and verify.
	if err := f.step(ctx, "promote "+cand, f.promote); err != nil {
		return f.rollback(ctx, "promote: "+err.Error())
	}
	if err := f.step(ctx, "verify "+cand+" writable", f.verify); err != nil {
		return f.rollback(ctx, "verify: "+err.Error())
	}
	var targets []string
	for _, n := range f.repointTargets() {
		targets = append(targets, n.Name)
	}
	if !f.semiSync || f.cutPending(append(targets, cand)...) {
		// 11–12 when nothing needs the replicas attached first — an
		// asynchronous new primary, or IO threads cut and still exiting
		// (each waits for the dump-thread kill on the unreachable old
		// primary): semi-sync on the new primary first (its commits wait
		// for the first replica to attach), publish, then repoint (as the
		// cut threads exit) and reset the candidate's replication.
		if f.semiSync {
			_ = f.step(ctx, "semi-sync on "+cand, f.semiSyncAhead)
		}
		if err := f.step(ctx, "publish primary "+cand, f.publishPrimary); err != nil {
			return foFailed, fmt.Sprintf("%s was promoted and verified but the new state could not be published (%v); the next leader publishes it", cand, err)
		}
		_ = f.step(ctx, "repoint replicas", f.repointAll)
		if f.semiSyncEarly {
			_ = f.step(ctx, "semi-sync replica on "+cand, f.semiSyncAfterRepoint)
		}
		if f.resetPending {
			_ = f.step(ctx, "reset replication on "+cand, f.resetAfterCut)
		}
	} else {
		// 11. Repoint the other replicas (failures are reported; repair
		// retries), then keep semi-sync lossless on the new primary.
		_ = f.step(ctx, "repoint replicas", f.repointAll)
		if f.semiSync {
			_ = f.step(ctx, "semi-sync on "+cand, f.enableSemiSync)
		}
		// 12. Publish the new primary.
		if err := f.step(ctx, "publish primary "+cand, f.publishPrimary); err != nil {
			return foFailed, fmt.Sprintf("%s was promoted and verified but the new state could not be published (%v); the next leader publishes it", cand, err)
		}
	}
	_ = f.step(ctx, "promotion floor", f.floorAfterFailover)
	_ = f.step(ctx, "proxies on epoch", f.proxiesOnEpoch)
	f.afterPublish(ctx)
	msg := fmt.Sprintf("failed over from %s to %s, epoch %d → %d, in %s", f.old, cand, f.fromEpoch, f.toEpoch,
		f.t.c.now().Sub(f.start).Round(time.Millisecond))
	if f.plan.Lost != "" {
		msg += "; estimated lost GTIDs: " + f.plan.Lost
	}
	if f.plan.Unseen != "" {
		msg += "; not in the estimate: " + f.plan.Unseen
	}
	if len(f.plan.Ahead) > 0 {
		msg += "; quarantined (ahead of the new primary): " + strings.Join(f.plan.Ahead, ", ")
	}
	return foDone, msg
}

// opName words the failover for a refusal of another operation meanwhile.
func (f *failoverRun) opName() string {
	what := modeLabel(f.o.auto) + " failover"
	if f.o.by != "" {
		what += " requested by " + f.o.by
	}
	return what
}

// refreshAndPlan probes every node afresh, re-runs analysis (an automatic
// failover needs DeadPrimary still) and plans.
func (f *failoverRun) refreshAndPlan(ctx context.Context, st *topo.ClusterState) (string, error) {
	t := f.t
	f.probes = t.probeNodes(ctx, f.cfg, f.cl, nodeNames(f.cl))
	now := t.c.now()
	f.m.observe(f.probes, now)
	snap := t.analysisSnapshot(f.cfg, f.cl, st, f.probes, f.m, now)
	if f.o.auto {
		res := analysis.Analyze(snap)
		if !res.Has(analysis.DeadPrimary) {
			return "", fmt.Errorf("primary %s is no longer dead (%s): not failing over", f.old, codes(res))
		}
	}
	f.oldReachable = complete(f.probes[f.old])
	f.opStopped = map[string]string{}
	for name, p := range f.probes {
		if name != f.old && complete(p) && p.Replicating && (p.IORunning == "No" || !p.SQLRunning) {
			f.opStopped[name] = fmt.Sprintf("IO %s, SQL %s", orDash(p.IORunning), yesNo(p.SQLRunning))
		}
	}
	floor, err := t.floor(ctx, f.cl.Name, f.m, true)
	if err != nil {
		return "", fmt.Errorf("%w: failing over without the floor could promote a node missing acknowledged writes", err)
	}
	f.floorDoc = floor
	healthy := ""
	if op := f.probes[f.old]; !f.o.auto && complete(op) && !op.ReadOnly && !op.Replicating {
		healthy = fmt.Sprintf("primary %s is healthy and reachable: use `switchyard switchover` (or --force --reason to fail over anyway)", f.old)
	}
	drained, _, err := t.c.drained(ctx, f.cl.Name)
	if err != nil {
		return "", fmt.Errorf("read drained nodes: %w", err)
	}
	for i := range snap.Nodes {
		_, snap.Nodes[i].Drained = drained.Nodes[snap.Nodes[i].Name]
	}
	f.plan = f.makePlan(snap.Nodes)
	if healthy != "" {
		f.plan.Warning = strings.TrimSuffix(healthy+"; "+f.plan.Warning, "; ")
	}
	if healthy != "" && !f.o.forceReachable {
		switch {
		case f.plan.Candidate == "" && f.plan.Override == "":
			// No flag gives a candidate (an errant or unreachable
			// target): --force would only lead to that refusal.
			healthy += "; and no flag makes a candidate: " + f.plan.Refusal
		case f.plan.Override == analysis.OverrideForceStale:
			f.plan.Override = "--force --force-stale --reason TEXT"
		default:
			f.plan.Override = analysis.OverrideForceReachable
		}
	}
	if healthy != "" && !f.o.planOnly {
		if !f.o.forceReachable || strings.TrimSpace(f.o.reason) == "" {
			return "", errors.New(healthy)
		}
		_ = t.fo.events.emit(ctx, topo.Event{Cluster: f.cl.Name, Kind: topo.EventOperator, Code: "force_reachable", Node: f.old,
			Message: fmt.Sprintf("operator %s forced a failover of healthy, reachable primary %s: %s", orDash(f.o.by), f.old, f.o.reason), Epoch: f.fromEpoch, Actor: f.o.by})
	}
	if f.plan.Candidate == "" {
		return "", fmt.Errorf("no safe candidate: %s\n%s", f.plan.Refusal, analysis.FormatPlan(f.plan))
	}
	if f.plan.Forced && strings.TrimSpace(f.o.reason) == "" {
		f.plan.Override = "--reason TEXT"
		return "", fmt.Errorf("candidate %s passes only with --force-stale, which needs a --reason", f.plan.Candidate)
	}
	if f.plan.Forced {
		_ = t.fo.events.emit(ctx, topo.Event{Cluster: f.cl.Name, Kind: topo.EventOperator, Code: "force_stale", Node: f.plan.Candidate,
			Message: fmt.Sprintf("operator %s forced failover to %s past the staleness checks: %s (estimated loss %s)",
				orDash(f.o.by), f.plan.Candidate, f.o.reason, orDash(f.plan.Lost)), Epoch: f.fromEpoch, Actor: f.o.by})
	}
	return fmt.Sprintf("candidate %s, estimated loss %s, fence by %s", f.plan.Candidate, orDash(f.plan.Lost), f.plan.Fence), nil
}

func (f *failoverRun) makePlan(nodes []analysis.Node) topo.FailoverPlan {
	f.m.mu.Lock()
	last := f.m.lastComplete[f.old]
	var state string
	if f.m.floor.binlogStateOf == f.old {
		state = f.m.floor.binlogState
	}
	f.m.mu.Unlock()
	if p := f.probes[f.old]; complete(p) {
		last = p
	}
	return analysis.Plan(analysis.PlanInput{
		Cluster: f.cl.Name, Flavor: f.cl.Flavor, OldPrimary: f.old, OldPrimaryLast: last, Nodes: nodes,
		MaxLag: f.cl.Failover.MaxLag.D(), Target: f.o.target, Force: f.o.force,
		Floor: f.floorDoc.GTID, OldPrimaryBinlogState: state,
	})
}

func (f *failoverRun) prober(name string) (*nodeProber, error) {
	n := f.cl.Node(name)
	if n == nil {
		return nil, fmt.Errorf("%s is not a node of cluster %s", name, f.cl.Name)
	}
	return f.t.c.prober(f.cfg, f.cl, n)
}

func (f *failoverRun) fenceOld(ctx context.Context) (string, error) {
	pr, err := f.prober(f.old)
	if err != nil {
		return "", err
	}
	f.fenced = true // from here on, rollback restores read_only=OFF
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := fence(sctx, pr, f.cfg.Credentials.Replication.User); err != nil {
		return "", err
	}
	return "read_only=ON, client sessions killed", nil
}

func (f *failoverRun) publishFailoverPhase(ctx context.Context) (string, error) {
	st, err := f.t.update(ctx, f.cr, func(st *topo.ClusterState) error {
		if st.Primary != f.old || st.Epoch != f.fromEpoch || st.Phase != topo.PhaseStable {
			return fmt.Errorf("cluster state changed meanwhile (primary %s, epoch %d, phase %s)", st.Primary, st.Epoch, st.Phase)
		}
		st.Primary, st.OldPrimary, st.Phase, st.Target, st.Epoch = "", f.old, topo.PhaseFailover, f.plan.Candidate, f.fromEpoch+1
		st.TargetAuto, st.Repoint = f.o.auto, f.toRepoint()
		return nil
	})
	if err != nil {
		return "", err
	}
	f.published, f.toEpoch = true, st.Epoch
	return fmt.Sprintf("epoch %d, %s → %s, no primary routed until published", st.Epoch, f.old, f.plan.Candidate), nil
}

// toRepoint are the replicas this failover stops and must leave
// replicating from the new primary (ClusterState.Repoint): every replica
// receiving and applying at the plan, the candidate included (it may be
// replaced at the re-plan), in config order.
func (f *failoverRun) toRepoint() []string {
	var out []string
	for _, n := range f.cl.Nodes {
		p := f.probes[n.Name]
		if n.Name != f.old && complete(p) && p.Replicating && f.opStopped[n.Name] == "" {
			out = append(out, n.Name)
		}
	}
	return out
}

// catchUpFenced waits (bounded by switchover.catchup_timeout) until the
// candidate applied everything the fenced old primary wrote; on timeout the
// failover goes on with what the candidate has (the loss is in the plan).
func (f *failoverRun) catchUpFenced(ctx context.Context) (string, error) {
	old, err := f.prober(f.old)
	if err != nil {
		return "", err
	}
	pos, err := old.WrittenGTIDs(ctx)
	if err != nil || pos == "" {
		return "", err
	}
	cand, err := f.prober(f.plan.Candidate)
	if err != nil {
		return "", err
	}
	timeout := f.cfg.Switchover.CatchupTimeout.D()
	res, err := cand.WaitForGTID(ctx, pos, timeout)
	if err != nil {
		return "", err
	}
	if res != 0 {
		return "", fmt.Errorf("%s did not apply %s within switchover.catchup_timeout %s; going on with what it has", f.plan.Candidate, pos, timeout)
	}
	return fmt.Sprintf("%s applied %s", f.plan.Candidate, pos), nil
}

// stopIO stops the IO thread of every reachable replica in parallel. The
// IO thread of a semi-sync replica of an old primary that cannot be
// reached is cut instead (see ioCut): stopping it would wait for its
// dump-thread kill on the old primary.
func (f *failoverRun) stopIO(ctx context.Context) (string, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed []string
	for _, n := range f.cl.Nodes {
		p := f.probes[n.Name]
		if n.Name == f.old || !complete(p) || !p.Replicating || p.IORunning == "No" {
			continue // an IO thread already stopped stays so (and rollback leaves it)
		}
		wg.Add(1)
		go func(name string, p topo.Probe) {
			defer wg.Done()
			pr, err := f.prober(name)
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, stepTimeout)
				cut := false
				if !f.oldReachable && cutsIO(f.cl.Flavor, p) {
					cut, err = f.cutIO(ctx, name, pr, p)
				}
				if err == nil && !cut {
					err = pr.StopReplicaIO(sctx)
				}
				// A replica left a semi-sync primary (a demoted old
				// primary) stalls its own applier; the candidate gets
				// semi-sync back once it has replicas.
				if err == nil {
					err = pr.DisableSemiSyncPrimary(sctx)
				}
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", name, err))
				return
			}
			f.stoppedIO = append(f.stoppedIO, name)
		}(n.Name, p)
	}
	wg.Wait()
	detail := "stopped on " + orDash(strings.Join(f.stoppedIO, ", "))
	if cut := f.cutNames(); cut != "" {
		detail += " (cut by KILL on " + cut + ": they read nothing more; their exit, the semi-sync dump-thread kill on the unreachable " + f.old + ", goes on in the background)"
	}
	if len(failed) > 0 {
		return detail, errors.New(strings.Join(failed, "; "))
	}
	return detail, nil
}

// waitProxies waits until every proxy registered applied toEpoch or lost
// its lease (plus leaseGoneGrace), bounded by proxyWaitMax.
func (f *failoverRun) waitProxies(ctx context.Context) (string, error) {
	t := f.t
	deadline := t.c.now().Add(proxyWaitMax)
	goneAt := map[string]time.Time{}
	var seen map[string]bool
	for {
		kvs, err := t.c.store.List(ctx, t.c.keys.Proxies())
		if err != nil {
			return "", fmt.Errorf("list proxies: %w", err)
		}
		now := t.c.now()
		live := map[string]bool{}
		var waiting []string
		acked := 0
		for _, kv := range kvs {
			id := strings.TrimPrefix(kv.Key, t.c.keys.Proxies())
			live[id] = true
			var reg topo.ProxyRegistration
			if err := decodeRegistration(kv.Value, &reg); err != nil {
				if errors.Is(err, topo.ErrIntegrity) {
					delete(live, id) // not written by a proxy holding the key: not waited for
					continue
				}
				waiting = append(waiting, id+" (unreadable registration)")
				continue
			}
			if reg.Epochs[f.cl.Name] >= f.toEpoch {
				acked++
				continue
			}
			waiting = append(waiting, fmt.Sprintf("%s (epoch %d)", id, reg.Epochs[f.cl.Name]))
		}
		if seen == nil {
			seen = live
		}
		for id := range seen {
			if !live[id] {
				if _, ok := goneAt[id]; !ok {
					goneAt[id] = now
				}
				if now.Sub(goneAt[id]) < leaseGoneGrace {
					waiting = append(waiting, id+" (lease gone, grace)")
				}
			}
		}
		if len(waiting) == 0 {
			return fmt.Sprintf("%d proxies on epoch %d, %d lost their lease", acked, f.toEpoch, len(goneAt)), nil
		}
		if now.After(deadline) {
			return "", fmt.Errorf("after %s these proxies neither applied epoch %d nor lost their lease: %s", proxyWaitMax, f.toEpoch, strings.Join(waiting, ", "))
		}
		sleep(ctx, proxyAckPoll)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
}
