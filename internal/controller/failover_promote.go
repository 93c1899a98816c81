package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// The failover steps from re-planning to publishing, and the rollback (see
// failover.go for the sequence).

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
	if f.cutPending(f.plan.Candidate) {
		return f.promoteCut(sctx, pr)
	}
	f.promoting = true
	if err := pr.ForgetReplication(sctx); err != nil {
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
	return f.t.semiSyncPrimary(ctx, f.cfg, f.cl, f.plan.Candidate, f.repointed)
}

// semiSyncPrimary makes cand a semi-sync primary once at least one of
// replicas is a semi-sync replica: with clusters[].durability semi_sync or
// semi_sync_durable the mode's settings (before the primary is published,
// so its first routed commit is protected as configured), else just the
// master switch. Shared by failover and switchover.
func (t *term) semiSyncPrimary(ctx context.Context, cfg *config.Config, cl *config.Cluster, cand string, replicas []string) (string, error) {
	var semiReplicas []string
	for _, name := range replicas {
		n := cl.Node(name)
		if n == nil {
			continue
		}
		if pr, err := t.c.prober(cfg, cl, n); err == nil && pr.SemiSyncReplica(ctx) {
			semiReplicas = append(semiReplicas, name)
		}
	}
	if len(semiReplicas) == 0 {
		return "", errors.New("no repointed replica is a semi-sync replica: the new primary stays asynchronous (acknowledged writes are not protected until one is)")
	}
	n := cl.Node(cand)
	if n == nil {
		return "", fmt.Errorf("%s is not a node of cluster %s", cand, cl.Name)
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err != nil {
		return "", err
	}
	if mode := cl.Durability; mode == config.DurabilitySemiSync || mode == config.DurabilitySemiSyncDurable {
		if err := pr.ApplySemiSyncPrimary(ctx, durableSettings(mode)); err != nil {
			return "", err
		}
		return "durability " + mode + " applied, semi-sync replicas " + strings.Join(semiReplicas, ", "), nil
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
	tc, err := config.BackendTLS(cl.TLS, "")
	if err != nil {
		return "", fmt.Errorf("clusters %s tls: %w", cl.Name, err)
	}
	for _, u := range cfg.Users {
		pw, ok, err := u.Secret()
		if err != nil || !ok {
			continue
		}
		skipped, err := probe.VerifyWritable(ctx, n.Address, probe.Credentials{User: u.Name, Password: pw, TLS: tc},
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
	var done, failed, left, skipped []string
	for _, n := range f.cl.Nodes {
		p := f.probes[n.Name]
		if n.Name == f.old || n.Name == cand.Name || ahead[n.Name] || !complete(p) || !p.Replicating {
			continue
		}
		if why := f.cr.quarantinedWhy(n.Name); why != "" {
			skipped = append(skipped, n.Name+" (quarantined: "+why+")")
		}
	}
	for _, n := range f.repointTargets() {
		stopped := f.opStopped[n.Name]
		wg.Add(1)
		go func(n config.Node) {
			defer wg.Done()
			err := f.afterCut(ctx, n.Name) // CHANGE MASTER needs its IO thread gone
			var pr *nodeProber
			if err == nil {
				pr, err = f.t.c.prober(f.cfg, f.cl, &n)
			}
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, stepTimeout)
				_, err = pointAt(sctx, f.cfg, pr, cand, false, stopped != "")
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failed = append(failed, fmt.Sprintf("%s: %v", n.Name, err))
			case stopped != "":
				left = append(left, fmt.Sprintf("%s (was %s)", n.Name, stopped))
			default:
				done = append(done, n.Name)
				f.repointed = append(f.repointed, n.Name)
			}
		}(n)
	}
	wg.Wait()
	for _, l := range left {
		_ = f.t.fo.events.emit(ctx, topo.Event{Cluster: f.cl.Name, Kind: topo.EventNoAction, Code: "left_stopped", Node: strings.Fields(l)[0],
			Message: fmt.Sprintf("repointed %s to new primary %s but left its replication stopped as it was before the failover: START SLAVE on it when ready", l, cand.Name),
			Epoch:   f.toEpoch})
	}
	detail := "repointed " + orDash(strings.Join(done, ", "))
	if len(left) > 0 {
		detail += "; repointed but left stopped (replication was stopped before the failover): " + strings.Join(left, ", ")
	}
	if len(skipped) > 0 {
		detail += "; not repointed: " + strings.Join(skipped, ", ")
	}
	if len(failed) > 0 {
		return detail, errors.New(strings.Join(failed, "; ") + " (repair retries)")
	}
	return detail, nil
}

// repointTargets are the replicas repointAll points at the new primary:
// the reachable replicas other than the old primary and the candidate,
// neither ahead of the candidate nor quarantined.
func (f *failoverRun) repointTargets() []config.Node {
	ahead := map[string]bool{}
	for _, a := range f.plan.Ahead {
		ahead[a] = true
	}
	var out []config.Node
	for _, n := range f.cl.Nodes {
		p := f.probes[n.Name]
		if n.Name == f.old || n.Name == f.plan.Candidate || ahead[n.Name] || !complete(p) || !p.Replicating || f.cr.quarantinedWhy(n.Name) != "" {
			continue
		}
		out = append(out, n)
	}
	return out
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
	st.Primary, st.Phase, st.Target, st.OldPrimary, st.TargetAuto = cand, topo.PhaseStable, "", "", false
	// The last analysis judged the old primary: the next round judges the
	// new one (status would otherwise show the old one dead as if it were
	// the primary, should no round follow).
	st.Analysis, st.PrimaryLost = nil, nil
	st.FailoverBlock = &topo.FailoverBlock{Until: now.Add(f.cl.Failover.BlockPeriod.D()),
		Reason: fmt.Sprintf("%s failover %s → %s at %s", modeLabel(f.o.auto), f.old, cand, now.UTC().Format(time.RFC3339))}
	st.LastFailover = &topo.FailoverRecord{From: f.old, To: cand, Epoch: f.toEpoch, At: now, Auto: f.o.auto,
		Lost: f.plan.Lost, Unseen: f.plan.Unseen, DurationMS: now.Sub(f.start).Milliseconds()}
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
			if decodeRegistration(kv.Value, &reg) == nil && reg.Epochs[f.cl.Name] >= f.toEpoch {
				on++
			}
		}
		if on == len(kvs) || t.c.now().After(deadline) || ctx.Err() != nil {
			return fmt.Sprintf("%d of %d proxies route by epoch %d", on, len(kvs), f.toEpoch), nil
		}
		sleep(ctx, proxyAckPoll)
	}
}

// afterPublish raises the alarms of a completed failover and applies
// clusters[].durability to the new primary.
func (f *failoverRun) afterPublish(ctx context.Context) {
	defer f.t.applyDurability(ctx, f.cfg, f.cl, f.plan.Candidate)
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
	if f.cancelWakeFence != nil {
		f.cancelWakeFence() // the old primary stays primary
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
		// A cut IO thread starts again only once it has exited.
		if c := f.cut(name); c != nil {
			if err := c.wait(rctx); err != nil {
				problems = append(problems, fmt.Sprintf("%s IO thread not restarted: %v", name, err))
				continue
			}
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
				st.Primary, st.Phase, st.Target, st.OldPrimary, st.TargetAuto, st.Repoint = f.old, topo.PhaseStable, "", "", false, nil
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
