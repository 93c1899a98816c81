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
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/probe"
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
	cluster  string
	auto     bool
	target   string
	force    bool
	reason   string
	by       string
	planOnly bool
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
	f := &failoverRun{t: t, cfg: cfg, cl: cl, cr: cr, m: t.fo.memory(cl.Name), o: o, start: t.c.now(),
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
		Message: fmt.Sprintf("%s failover %s: %s", modeLabel(f.o.auto), result, msg), Epoch: f.toEpoch}
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
	cr.mu.Lock()
	busy := cr.switching
	if !busy {
		cr.switching = true
	}
	var st topo.ClusterState
	if cr.state != nil {
		st = *cr.state
	}
	cr.mu.Unlock()
	if busy {
		return foRefused, "another switchover or failover of this cluster is running"
	}
	defer func() {
		cr.mu.Lock()
		cr.switching = false
		cr.mu.Unlock()
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
		return foRefused, err.Error()
	}
	if f.o.planOnly {
		return foPlanned, analysis.FormatPlan(f.plan)
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
	// 5. Stop receiving from the old primary everywhere.
	_ = f.step(ctx, "stop replication IO threads", f.stopIO)
	// 6. Without a fence, wait until no proxy routes to the old primary.
	if !f.fenced {
		if err := f.step(ctx, "wait for proxies", f.waitProxies); err != nil {
			return f.rollback(ctx, "wait for proxies: "+err.Error())
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
		Message: fmt.Sprintf("promoting %s (epoch %d)", cand, f.toEpoch), Epoch: f.toEpoch}); err != nil {
		return f.rollback(ctx, "leadership checkpoint before promotion: "+err.Error())
	}
	// 9–10. Promote and verify.
	if err := f.step(ctx, "promote "+cand, f.promote); err != nil {
		return f.rollback(ctx, "promote: "+err.Error())
	}
	if err := f.step(ctx, "verify "+cand+" writable", f.verify); err != nil {
		return f.rollback(ctx, "verify: "+err.Error())
	}
	// 11. Repoint the other replicas (failures are reported; repair retries),
	// then keep semi-sync lossless on the new primary.
	_ = f.step(ctx, "repoint replicas", f.repointAll)
	if f.semiSync {
		_ = f.step(ctx, "semi-sync on "+cand, f.enableSemiSync)
	}
	// 12. Publish the new primary.
	if err := f.step(ctx, "publish primary "+cand, f.publishPrimary); err != nil {
		return foFailed, fmt.Sprintf("%s was promoted and verified but the new state could not be published (%v); the next leader publishes it", cand, err)
	}
	_ = f.step(ctx, "proxies on epoch", f.proxiesOnEpoch)
	f.afterPublish(ctx)
	msg := fmt.Sprintf("failed over from %s to %s, epoch %d → %d, in %s", f.old, cand, f.fromEpoch, f.toEpoch,
		f.t.c.now().Sub(f.start).Round(time.Millisecond))
	if f.plan.Lost != "" {
		msg += "; estimated lost GTIDs: " + f.plan.Lost
	}
	if len(f.plan.Ahead) > 0 {
		msg += "; quarantined (ahead of the new primary): " + strings.Join(f.plan.Ahead, ", ")
	}
	return foDone, msg
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
	f.plan = f.makePlan(snap.Nodes)
	if f.plan.Candidate == "" {
		return "", fmt.Errorf("no safe candidate: %s\n%s", f.plan.Refusal, analysis.FormatPlan(f.plan))
	}
	if f.plan.Forced && strings.TrimSpace(f.o.reason) == "" {
		return "", fmt.Errorf("candidate %s passes only with --force-stale, which needs a --reason", f.plan.Candidate)
	}
	if f.plan.Forced {
		_ = t.fo.events.emit(ctx, topo.Event{Cluster: f.cl.Name, Kind: topo.EventOperator, Code: "force_stale", Node: f.plan.Candidate,
			Message: fmt.Sprintf("operator %s forced failover to %s past the staleness checks: %s (estimated loss %s)",
				orDash(f.o.by), f.plan.Candidate, f.o.reason, orDash(f.plan.Lost)), Epoch: f.fromEpoch})
	}
	return fmt.Sprintf("candidate %s, estimated loss %s, fence by %s", f.plan.Candidate, orDash(f.plan.Lost), f.plan.Fence), nil
}

func (f *failoverRun) makePlan(nodes []analysis.Node) topo.FailoverPlan {
	last := f.m.lastComplete[f.old]
	if p := f.probes[f.old]; complete(p) {
		last = p
	}
	return analysis.Plan(analysis.PlanInput{
		Cluster: f.cl.Name, Flavor: f.cl.Flavor, OldPrimary: f.old, OldPrimaryLast: last, Nodes: nodes,
		MaxLag: f.cl.Failover.MaxLag.D(), Target: f.o.target, Force: f.o.force,
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
		return nil
	})
	if err != nil {
		return "", err
	}
	f.published, f.toEpoch = true, st.Epoch
	return fmt.Sprintf("epoch %d, %s → %s, no primary routed until published", st.Epoch, f.old, f.plan.Candidate), nil
}

// stopIO stops the IO thread of every reachable replica in parallel.
func (f *failoverRun) stopIO(ctx context.Context) (string, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed []string
	for _, n := range f.cl.Nodes {
		p := f.probes[n.Name]
		if n.Name == f.old || !complete(p) || !p.Replicating {
			continue
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			pr, err := f.prober(name)
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, stepTimeout)
				err = pr.StopReplicaIO(sctx)
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
		}(n.Name)
	}
	wg.Wait()
	detail := "stopped on " + orDash(strings.Join(f.stoppedIO, ", "))
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
			if decodeJSON(kv.Value, &reg) != nil {
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

// replan probes the replicas again (their received positions are final now
// that IO threads are stopped) and plans again with the same options.
func (f *failoverRun) replan(ctx context.Context) (string, error) {
	var names []string
	for _, n := range f.cl.Nodes {
		if n.Name != f.old {
			names = append(names, n.Name)
		}
	}
	for k, v := range f.t.probeNodes(ctx, f.cfg, f.cl, names) {
		f.probes[k] = v
	}
	f.cr.mu.Lock()
	st := *f.cr.state
	f.cr.mu.Unlock()
	snap := f.t.analysisSnapshot(f.cfg, f.cl, &st, f.probes, f.m, f.t.c.now())
	before := f.plan.Candidate
	plan := f.makePlan(snap.Nodes)
	if plan.Candidate == "" {
		return "", fmt.Errorf("no safe candidate after stopping IO threads: %s", plan.Refusal)
	}
	if plan.Forced && strings.TrimSpace(f.o.reason) == "" {
		return "", fmt.Errorf("candidate %s passes only with --force-stale, which needs a --reason", plan.Candidate)
	}
	f.plan = plan
	if plan.Candidate != before {
		_, err := f.t.update(ctx, f.cr, func(st *topo.ClusterState) error {
			if st.Phase != topo.PhaseFailover || st.Epoch != f.toEpoch {
				return fmt.Errorf("cluster state changed meanwhile (phase %s, epoch %d)", st.Phase, st.Epoch)
			}
			st.Target = plan.Candidate
			return nil
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("candidate changed %s → %s (more advanced once IO threads stopped)", before, plan.Candidate), nil
	}
	return fmt.Sprintf("candidate %s, received %s", plan.Candidate, receivedOf(plan)), nil
}

func receivedOf(p topo.FailoverPlan) string {
	for _, c := range p.Candidates {
		if c.Node == p.Candidate {
			return orDash(c.Received)
		}
	}
	return "-"
}

// applyRelay waits until the candidate applied its whole relay log
// (Gtid_IO_Pos), bounded by what is left of the recovery timeout.
func (f *failoverRun) applyRelay(ctx context.Context) (string, error) {
	cand := f.plan.Candidate
	pr, err := f.prober(cand)
	if err != nil {
		return "", err
	}
	want := receivedOf(f.plan)
	if want == "-" || want == "" {
		return "nothing received", nil
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl)-time.Second, 100*time.Millisecond)
	}
	res, err := pr.WaitForGTID(ctx, want, timeout)
	if err != nil {
		return "", err
	}
	if res != 0 {
		return "", fmt.Errorf("%s did not apply its relay log up to %s within %s", cand, want, timeout.Round(time.Millisecond))
	}
	p := pr.Probe(ctx)
	if !complete(p) {
		return "", fmt.Errorf("cannot verify %s after the wait: %s", cand, p.Error)
	}
	have, err := analysis.Executed(f.cl.Flavor, p)
	if err != nil {
		return "", err
	}
	wantSet, err := gtid.Parse(gtid.Flavor(flavorOrDefault(f.cl.Flavor)), want)
	if err != nil {
		return "", err
	}
	if !have.Contains(wantSet) {
		return "", fmt.Errorf("%s at %s does not contain its received %s", cand, have, want)
	}
	f.probes[cand] = p
	return "applied " + want, nil
}

// promote stops and forgets the candidate's replication, makes it writable
// and verifies read_only=OFF; a semi-sync replica becomes a semi-sync
// primary so acknowledged writes stay lossless.
func (f *failoverRun) promote(ctx context.Context) (string, error) {
	pr, err := f.prober(f.plan.Candidate)
	if err != nil {
		return "", err
	}
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	// Semi-sync is turned on after the replicas are repointed: with no
	// semi-sync replica attached every commit would wait
	// rpl_semi_sync_master_timeout.
	f.semiSync = pr.SemiSyncReplica(sctx)
	f.promoting = true
	if err := pr.StopReplica(sctx); err != nil {
		return "", err
	}
	if err := pr.ResetReplicaAll(sctx); err != nil {
		return "", err
	}
	if err := pr.SetReadOnly(sctx, false); err != nil {
		return "", err
	}
	ro, err := pr.ReadOnly(sctx)
	if err != nil {
		return "", err
	}
	if ro {
		return "", errors.New("read_only is still ON after SET GLOBAL read_only=OFF (check READ_ONLY ADMIN)")
	}
	return "replication reset, read_only=OFF", nil
}

// enableSemiSync makes the new primary a semi-sync primary (it was a
// semi-sync replica, so the cluster runs semi-sync) once at least one
// repointed replica is a semi-sync replica.
func (f *failoverRun) enableSemiSync(ctx context.Context) (string, error) {
	var semiReplicas []string
	for _, name := range f.repointed {
		if pr, err := f.prober(name); err == nil && pr.SemiSyncReplica(ctx) {
			semiReplicas = append(semiReplicas, name)
		}
	}
	if len(semiReplicas) == 0 {
		return "", errors.New("no repointed replica is a semi-sync replica: the new primary stays asynchronous (acknowledged writes are not protected until one is)")
	}
	pr, err := f.prober(f.plan.Candidate)
	if err != nil {
		return "", err
	}
	if err := pr.EnableSemiSyncPrimary(ctx); err != nil {
		return "", err
	}
	return "rpl_semi_sync_master_enabled=ON, semi-sync replicas " + strings.Join(semiReplicas, ", "), nil
}

// verify proves the new primary writable by the application account.
func (f *failoverRun) verify(ctx context.Context) (string, error) {
	return verifyAppWritable(ctx, f.cfg, f.cl, f.plan.Candidate, f.toEpoch)
}

// verifyAppWritable logs in to node as the first application user whose
// password the config holds and writes the heartbeat row (see
// probe.VerifyWritable). Without such a user it checks read_only only and
// says so.
func verifyAppWritable(ctx context.Context, cfg *config.Config, cl *config.Cluster, node string, epoch int64) (string, error) {
	n := cl.Node(node)
	if n == nil {
		return "", fmt.Errorf("%s is not a node of cluster %s", node, cl.Name)
	}
	for _, u := range cfg.Users {
		pw, ok, err := u.Secret()
		if err != nil || !ok {
			continue
		}
		skipped, err := probe.VerifyWritable(ctx, n.Address, probe.Credentials{User: u.Name, Password: pw},
			max(2*cfg.Probe.Timeout.D(), 2*time.Second), probe.Heartbeat{Cluster: cl.Name, Node: node, Epoch: epoch})
		if err != nil {
			return "", err
		}
		if skipped != "" {
			return skipped, nil
		}
		return fmt.Sprintf("application user %s wrote %s", u.Name, probe.HeartbeatTable), nil
	}
	return "read_only=OFF (no application user with a password in the config to test a write)", nil
}

// repointAll points every other reachable replica at the new primary in
// parallel, except those ahead of it (quarantined instead, never reset).
func (f *failoverRun) repointAll(ctx context.Context) (string, error) {
	cand := f.cl.Node(f.plan.Candidate)
	ahead := map[string]bool{}
	for _, a := range f.plan.Ahead {
		ahead[a] = true
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var done, failed []string
	for _, n := range f.cl.Nodes {
		p := f.probes[n.Name]
		if n.Name == f.old || n.Name == cand.Name || ahead[n.Name] || !complete(p) || !p.Replicating {
			continue
		}
		wg.Add(1)
		go func(n config.Node) {
			defer wg.Done()
			pr, err := f.t.c.prober(f.cfg, f.cl, &n)
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, stepTimeout)
				_, err = pointAt(sctx, f.cfg, pr, cand, false)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", n.Name, err))
			} else {
				done = append(done, n.Name)
				f.repointed = append(f.repointed, n.Name)
			}
		}(n)
	}
	wg.Wait()
	detail := "repointed " + orDash(strings.Join(done, ", "))
	if len(failed) > 0 {
		return detail, errors.New(strings.Join(failed, "; ") + " (repair retries)")
	}
	return detail, nil
}

// publishPrimary publishes the verified candidate as primary of toEpoch,
// blocks automatic failover for block_period and quarantines replicas
// ahead of it.
func (f *failoverRun) publishPrimary(ctx context.Context) (string, error) {
	now := f.t.c.now()
	cand := f.plan.Candidate
	_, err := f.t.update(ctx, f.cr, func(st *topo.ClusterState) error {
		if st.Phase != topo.PhaseFailover || st.Epoch != f.toEpoch || st.Target != cand {
			return fmt.Errorf("cluster state changed meanwhile (phase %s, epoch %d, target %s)", st.Phase, st.Epoch, st.Target)
		}
		f.publishInto(st, now)
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("epoch %d, automatic failover blocked until %s", f.toEpoch, now.Add(f.cl.Failover.BlockPeriod.D()).UTC().Format(time.RFC3339)), nil
}

// publishInto writes the outcome of a completed failover into st.
func (f *failoverRun) publishInto(st *topo.ClusterState, now time.Time) {
	cand := f.plan.Candidate
	st.Primary, st.Phase, st.Target, st.OldPrimary = cand, topo.PhaseStable, "", ""
	st.FailoverBlock = &topo.FailoverBlock{Until: now.Add(f.cl.Failover.BlockPeriod.D()),
		Reason: fmt.Sprintf("%s failover %s → %s at %s", modeLabel(f.o.auto), f.old, cand, now.UTC().Format(time.RFC3339))}
	st.LastFailover = &topo.FailoverRecord{From: f.old, To: cand, Epoch: f.toEpoch, At: now, Auto: f.o.auto,
		Lost: f.plan.Lost, DurationMS: now.Sub(f.start).Milliseconds()}
	q := map[string]string{}
	for k, v := range st.Quarantined {
		q[k] = v
	}
	for _, a := range f.plan.Ahead {
		q[a] = fmt.Sprintf("ahead of new primary %s after failover (holds GTIDs it lacks)", cand)
	}
	if len(q) > 0 {
		st.Quarantined = q
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		switch {
		case n.Name == cand:
			n.Role, n.Serving, n.Reason = topo.RolePrimary, false, ""
		case q[n.Name] != "":
			n.Role, n.Serving, n.Reason = topo.RoleUnknown, false, "quarantined: "+q[n.Name]
		default:
			n.Role, n.Serving, n.Reason = topo.RoleReplica, false, "repointed, not probed yet"
		}
	}
}

// proxiesOnEpoch waits briefly for the proxies to route by the new epoch
// (information for the operator; not a condition of success).
func (f *failoverRun) proxiesOnEpoch(ctx context.Context) (string, error) {
	t := f.t
	deadline := t.c.now().Add(2 * time.Second)
	for {
		kvs, err := t.c.store.List(ctx, t.c.keys.Proxies())
		if err != nil {
			return "", err
		}
		on := 0
		for _, kv := range kvs {
			var reg topo.ProxyRegistration
			if decodeJSON(kv.Value, &reg) == nil && reg.Epochs[f.cl.Name] >= f.toEpoch {
				on++
			}
		}
		if on == len(kvs) || t.c.now().After(deadline) || ctx.Err() != nil {
			return fmt.Sprintf("%d of %d proxies route by epoch %d", on, len(kvs), f.toEpoch), nil
		}
		sleep(ctx, proxyAckPoll)
	}
}

// afterPublish raises the alarms of a completed failover.
func (f *failoverRun) afterPublish(ctx context.Context) {
	for _, a := range f.plan.Ahead {
		f.t.raiseAlarm(ctx, f.cr, topo.Alarm{Code: topo.AlarmAheadOfPrimary, Node: a, Message: fmt.Sprintf(
			"%s holds transactions the new primary %s lacks (it was ahead of the promoted candidate): quarantined, not reset; reconcile or rebuild it",
			a, f.plan.Candidate)})
	}
}

// rollback undoes a failover that failed before the new primary was
// published: replicas resume receiving, a fenced old primary is made
// writable again (it was reachable and nothing was promoted), a promoted
// candidate is made read-only again, and the old primary is published
// again (the epoch stays bumped: epochs never go back).
func (f *failoverRun) rollback(ctx context.Context, reason string) (string, string) {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return foAborted, reason
	}
	if !f.fenced && !f.published {
		return foRefused, reason
	}
	// The recovery deadline may be what ended the failover: the rollback
	// gets its own bounded context.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*stepTimeout)
	defer cancel()
	var problems []string
	candSafe := !f.promoting // the candidate cannot take writes
	if f.promoting {
		_ = f.step(rctx, "make "+f.plan.Candidate+" read-only again", func(ctx context.Context) (string, error) {
			pr, err := f.prober(f.plan.Candidate)
			if err == nil {
				err = pr.SetReadOnly(ctx, true)
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s may still be writable: %v", f.plan.Candidate, err))
				return "", err
			}
			candSafe = true
			return "read_only=ON (its replication was reset: repair rejoins it)", nil
		})
	}
	for _, name := range f.stoppedIO {
		if name == f.plan.Candidate && f.promoting {
			continue
		}
		if pr, err := f.prober(name); err == nil {
			if err := pr.StartReplicaIO(rctx); err != nil {
				problems = append(problems, fmt.Sprintf("%s IO thread not restarted: %v", name, err))
			}
		}
	}
	if f.fenced && candSafe {
		if err := f.step(rctx, "unfence "+f.old, func(ctx context.Context) (string, error) {
			pr, err := f.prober(f.old)
			if err != nil {
				return "", err
			}
			if err := pr.SetReadOnly(ctx, false); err != nil {
				return "", err
			}
			return "read_only=OFF", nil
		}); err != nil {
			problems = append(problems, fmt.Sprintf("OLD PRIMARY %s IS STILL READ-ONLY: run SET GLOBAL read_only=OFF on it", f.old))
		}
	}
	if f.published {
		if err := f.step(rctx, "publish primary "+f.old+" again", func(ctx context.Context) (string, error) {
			_, err := f.t.update(ctx, f.cr, func(st *topo.ClusterState) error {
				if st.Phase != topo.PhaseFailover || st.Epoch != f.toEpoch {
					return fmt.Errorf("cluster state changed meanwhile (phase %s, epoch %d)", st.Phase, st.Epoch)
				}
				st.Primary, st.Phase, st.Target, st.OldPrimary = f.old, topo.PhaseStable, "", ""
				return nil
			})
			return fmt.Sprintf("primary %s, epoch %d", f.old, f.toEpoch), err
		}); err != nil {
			problems = append(problems, "state not republished: "+err.Error())
		}
	}
	msg := "aborted and rolled back: " + reason
	if len(problems) > 0 {
		msg += "; ROLLBACK INCOMPLETE: " + strings.Join(problems, "; ")
	}
	return foFailed, msg
}
