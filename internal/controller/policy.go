package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// maxAlarms bounds ClusterState.Alarms (oldest dropped).
const maxAlarms = 20

// carryPolicy copies what the probe loop never decides — maintenance,
// blocks, alarms, quarantine, the failover record, the last analysis and a
// primary declared lost —
// from the previous state into a rebuilt one.
func carryPolicy(st, prev *topo.ClusterState) {
	st.OldPrimary = prev.OldPrimary
	st.TargetAuto = prev.TargetAuto
	st.Repoint = prev.Repoint
	st.Maintenance = prev.Maintenance
	st.FailoverBlock = prev.FailoverBlock
	st.AutoDisabled = prev.AutoDisabled
	st.Alarms = prev.Alarms
	st.Analysis = prev.Analysis
	st.Quarantined = prev.Quarantined
	st.LastFailover = prev.LastFailover
	st.AutoFailover = prev.AutoFailover
	st.PrimaryLost = prev.PrimaryLost
}

// failoverReplicaReason says why a replica may not serve reads during a
// failover, or "". Replicas of the old primary keep serving what they have
// while the failover stops their IO threads and promotes one of them (the
// reads are as fresh as the old primary's last transactions, which is as
// good as it gets while no primary takes writes); a stopped SQL thread or
// another source still takes a replica out.
func failoverReplicaReason(cl config.Cluster, st topo.ClusterState, p topo.Probe) string {
	old := cl.Node(st.OldPrimary)
	switch {
	case old == nil:
		return "failover in progress, old primary unknown"
	case !sameAddress(p.SourceHost, p.SourcePort, old.Address):
		return fmt.Sprintf("replicating from %s, not from old primary %s", hostPort(p.SourceHost, p.SourcePort), st.OldPrimary)
	case !p.SQLRunning:
		return "replication SQL thread stopped"
	}
	return ""
}

// afterRound runs analysis on a round's probes and applies the policy:
// publish the analysis codes, start an extra round at the first sign of
// trouble, decide about failover (and say why not), and repair replicas.
func (t *term) afterRound(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, probes map[string]topo.Probe) {
	if ctx.Err() != nil {
		return
	}
	now := t.c.now()
	m := t.fo.memory(cl.Name)
	m.observe(probes, now)
	cr.mu.Lock()
	busy := cr.switching
	start := roundStart(probes, now)
	stale := cr.staleRound(start)
	var st topo.ClusterState
	ok := cr.state != nil
	if ok {
		st = *cr.state
	}
	cr.mu.Unlock()
	if !ok {
		return
	}
	t.expireMaintenance(ctx, cl.Name, cr, &st)
	if stale {
		// These probes began before the primary, epoch or phase last
		// changed (a failover or switchover ran meanwhile): they show the
		// new primary as the replica it was. Judging the new topology by
		// them would report a read-only primary replicating from the old
		// one, or worse; the next round, probed after the change, decides.
		t.c.metrics.observeRound(&st, probes, now)
		return
	}
	if !busy {
		t.raiseFloor(ctx, cl, &st, probes, m)
		t.readPrimaryBinlogState(ctx, cfg, cl, &st, probes, m)
	}
	res := analysis.Analyze(t.analysisSnapshot(cfg, cl, &st, probes, m, now))
	t.publishAnalysis(ctx, cr, m, res)
	t.writePathEvents(ctx, cl, &st, res)
	if busy {
		t.c.metrics.observeRound(&st, probes, now)
		return // a switchover or failover of this cluster is running; it decides
	}
	t.enforceDurability(ctx, cfg, cl, cr, &st, probes)
	t.publishAutoFailover(ctx, cfg, cl, cr, &st)
	t.c.metrics.observeRound(&st, probes, now)
	switch {
	case res.Trouble && !m.trouble:
		t.fo.extraRound()
	case res.Trouble && res.Quiet >= cl.Failover.SilenceBound.D()/4:
		// While the controller cannot reach the primary and no replica
		// has heard from it for a while, rounds start every
		// troubleSpacing: the silence is sampled that finely whatever
		// probe.interval is. A primary that is only slow (a replica
		// still hears it) is probed at the usual interval.
		t.fo.roundAt(start.Add(troubleSpacing(cfg.Probe.Interval.D())), t.c.now())
	}
	m.trouble = res.Trouble
	t.decideFailover(ctx, cl, cr, &st, res, m, start, confirmSpacing)
	t.noWritablePrimary(ctx, cfg, cl, cr, &st, res, probes)
	t.finishFailover(ctx, cfg, cl, cr, &st, probes, m)
	t.repair(ctx, cfg, cl, cr, &st, probes, m)
	t.alignReplicaSettings(ctx, cfg, cl, cr, &st, probes, res, m)
}

// publishAnalysis writes the analysis codes into the state when the set of
// codes (and nodes) changed.
func (t *term) publishAnalysis(ctx context.Context, cr *clusterRun, m *clusterMemory, res analysis.Result) {
	entries := make([]topo.AnalysisEntry, 0, len(res.Findings))
	for _, f := range res.Findings {
		entries = append(entries, topo.AnalysisEntry{Code: string(f.Code), Node: f.Node, Detail: f.Detail})
	}
	// Rewritten when the codes change, and with the periodic refresh so
	// that details (silences, latencies) shown by status stay current.
	same := slices.EqualFunc(entries, m.analysis, func(a, b topo.AnalysisEntry) bool { return a.Code == b.Code && a.Node == b.Node })
	now := t.c.now()
	if same && (len(entries) == 0 || now.Sub(m.analysisAt) < time.Duration(refreshRounds)*t.c.config().Probe.Interval.D()) {
		return
	}
	_, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		st.Analysis = entries
		return nil
	})
	if err == nil {
		m.analysis, m.analysisAt = entries, now
	}
}

// decideFailover applies the failover policy to a round's analysis. Every
// decision and non-decision is an event. start is when the round's probes
// started: a DeadPrimary that rests on a replica's silence (res.Silent) is
// counted again only in a round starting at least spacing after the last
// counted one (earlier rounds, kicked by a proxy's report, neither count
// nor reset), so that the confirmation spans that much time.
func (t *term) decideFailover(ctx context.Context, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, res analysis.Result, m *clusterMemory,
	start time.Time, spacing time.Duration) {
	ev := func(kind string, f *analysis.Finding, msg string) topo.Event {
		e := topo.Event{Cluster: cl.Name, Kind: kind, Message: msg, Epoch: st.Epoch}
		if f != nil {
			e.Code, e.Node = string(f.Code), f.Node
		}
		return e
	}
	dedup := cl.Name + "|failover|"
	dead := res.Get(analysis.DeadPrimary)
	if dead == nil {
		if m.deadRounds > 0 {
			t.fo.events.emitOnce(ctx, dedup+"cleared", 0, ev(topo.EventNoAction, nil, fmt.Sprintf(
				"not failing over: DeadPrimary seen in %d round(s) no longer holds (%s)", m.deadRounds, codes(res))))
			t.fo.events.forget(dedup)
		}
		m.deadRounds = 0
		t.deadPrimaryGone(cl.Name)
		t.clearPrimaryLost(ctx, cl, cr, st, res)
		for _, c := range []analysis.Code{analysis.UnreachablePrimary, analysis.PrimaryOverloaded} {
			if f := res.Get(c); f != nil {
				t.fo.events.emitOnce(ctx, dedup+string(c)+"|"+firstWords(f.Detail, 3), eventRelog, ev(topo.EventNoAction, f,
					fmt.Sprintf("not failing over: %s, not dead: %s", c, f.Detail)))
			}
		}
		return
	}
	if res.Silent && m.deadRounds > 0 && start.Before(m.deadRoundAt.Add(spacing)) {
		t.fo.roundAt(m.deadRoundAt.Add(spacing), t.c.now())
		return
	}
	m.deadRounds++
	m.deadRoundAt = start
	f := cl.Failover
	var why, class string
	switch {
	case f.Mode != config.FailoverAuto:
		class = "manual"
		why = fmt.Sprintf("failover.mode is %s: an operator is needed: run `switchyard failover --cluster %s` (add --plan to see what it would do)", f.Mode, cl.Name)
	case st.Maintenance != nil:
		class = "maintenance"
		why = fmt.Sprintf("maintenance mode is on since %s (%s): automatic failover is blocked; a manual `switchyard failover` still works",
			st.Maintenance.Since.Format(time.RFC3339), st.Maintenance.Reason)
	case st.AutoDisabled != "":
		class = "disabled"
		why = fmt.Sprintf("automatic failover is disabled after a failed recovery (%s): fix it, then `switchyard ack --cluster %s`", st.AutoDisabled, cl.Name)
	case st.FailoverBlock != nil && t.c.now().Before(st.FailoverBlock.Until):
		class = "blocked"
		why = fmt.Sprintf("automatic failover is blocked until %s after %s (failover.block_period); `switchyard ack --cluster %s` lifts the block",
			st.FailoverBlock.Until.Format(time.RFC3339), st.FailoverBlock.Reason, cl.Name)
	case st.Phase != topo.PhaseStable:
		class = "phase"
		why = fmt.Sprintf("phase is %s", st.Phase)
	case m.deadRounds < f.ConfirmRounds:
		t.fo.events.emitOnce(ctx, dedup+"confirm", 0, ev(topo.EventNoAction, dead, fmt.Sprintf(
			"confirming: DeadPrimary in %d of %d consecutive rounds (%s); probing again now", m.deadRounds, f.ConfirmRounds, dead.Detail)))
		if res.Silent {
			t.fo.roundAt(start.Add(spacing), t.c.now())
		} else {
			t.fo.extraRound()
		}
		return
	}
	if why != "" {
		t.fo.events.emitOnce(ctx, dedup+"no|"+class, eventRelog, ev(topo.EventNoAction, dead, "not failing over: "+why+"; "+dead.Detail))
		if class == "phase" {
			return
		}
		t.deadPrimaryHook(ctx, cl, st, dead, why)
		if m.deadRounds < f.ConfirmRounds {
			// Confirmed as an automatic failover would be before the
			// primary is declared lost to the proxies.
			t.fo.events.emitOnce(ctx, dedup+"confirm", 0, ev(topo.EventNoAction, dead, fmt.Sprintf(
				"confirming: DeadPrimary in %d of %d consecutive rounds (%s); probing again now", m.deadRounds, f.ConfirmRounds, dead.Detail)))
			if res.Silent {
				t.fo.roundAt(start.Add(spacing), t.c.now())
			} else {
				t.fo.extraRound()
			}
			return
		}
		t.declarePrimaryLost(ctx, cl, cr, st, dead, m.deadRounds, lostClass(class), why)
		return
	}
	if a := st.AutoFailover; a != nil && !a.Ready {
		// The failover runs but has nothing to promote (a hint: it plans
		// again): proxies answer at once meanwhile.
		t.declarePrimaryLost(ctx, cl, cr, st, dead, m.deadRounds, a.Class, a.Reason)
	}
	t.fo.events.emitOnce(ctx, dedup+"go", 0, ev(topo.EventDecision, dead, fmt.Sprintf(
		"failing over: DeadPrimary confirmed in %d consecutive rounds: %s", m.deadRounds, dead.Detail)))
	t.fo.events.forget(dedup)
	m.deadRounds = 0
	t.deadPrimaryGone(cl.Name)
	t.fo.wg.Add(1)
	go func() {
		defer t.fo.wg.Done()
		t.runFailover(ctx, failoverOptions{cluster: cl.Name, auto: true})
	}()
}

// firstWords returns the first n words of s: the kind of a detail without
// its changing figures ("probe took 131ms" and "probe took 196ms" are one
// condition).
func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

func codes(res analysis.Result) string {
	if len(res.Findings) == 0 {
		return "no findings"
	}
	var s []string
	for _, f := range res.Findings {
		s = append(s, string(f.Code))
	}
	return strings.Join(s, ", ")
}

// raiseAlarm adds (or refreshes) an alarm in the cluster's state and writes
// an alarm event.
func (t *term) raiseAlarm(ctx context.Context, cr *clusterRun, a topo.Alarm) {
	a.Since = t.c.now()
	_, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		st.Alarms = addAlarm(st.Alarms, a)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		t.log.Error("cannot record alarm in the cluster state", "cluster", cr.name, "alarm", a.Code, "err", err)
	}
	t.fo.events.emitOnce(ctx, cr.name+"|alarm|"+a.Code+"|"+a.Node, eventRelog, topo.Event{
		Cluster: cr.name, Kind: topo.EventAlarm, Code: a.Code, Node: a.Node, Message: a.Message, Epoch: epochOf(cr)})
}

// addAlarm replaces an alarm with the same code and node, or appends one,
// keeping at most maxAlarms.
func addAlarm(list []topo.Alarm, a topo.Alarm) []topo.Alarm {
	out := make([]topo.Alarm, 0, len(list)+1)
	for _, x := range list {
		if x.Code == a.Code && x.Node == a.Node {
			a.Since = x.Since
			continue
		}
		out = append(out, x)
	}
	out = append(out, a)
	if len(out) > maxAlarms {
		out = out[len(out)-maxAlarms:]
	}
	return out
}

// clearAlarms removes the alarms whose code is in codes (all when empty).
func clearAlarms(list []topo.Alarm, codes ...string) []topo.Alarm {
	var out []topo.Alarm
	for _, a := range list {
		if len(codes) > 0 && !slices.Contains(codes, a.Code) {
			out = append(out, a)
		}
	}
	return out
}

func epochOf(cr *clusterRun) int64 {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.state == nil {
		return 0
	}
	return cr.state.Epoch
}

// grantsMissing raises the missing-privileges alarm for a node (checked at
// start-up of each term and whenever a prober is recreated).
func (t *term) grantsMissing(ctx context.Context, cluster, node, user string, missing []string) {
	cr, err := t.cluster(ctx, cluster)
	if err != nil {
		return
	}
	t.raiseAlarm(ctx, cr, topo.Alarm{Code: topo.AlarmMissingPrivileges, Node: node, Message: fmt.Sprintf(
		"monitor account %s lacks %s on %s: switchover and failover would fail there; GRANT them ON *.* (on MariaDB 10.11 SUPER no longer implies them)",
		user, strings.Join(missing, ", "), node)})
}

// setQuarantine records (why != "") or lifts (why == "") a node's
// quarantine.
func (t *term) setQuarantine(ctx context.Context, cr *clusterRun, node, why string) error {
	_, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		q := maps.Clone(st.Quarantined)
		if q == nil {
			q = map[string]string{}
		}
		if why == "" {
			delete(q, node)
			st.Alarms = removeNodeAlarm(st.Alarms, topo.AlarmQuarantined, node)
			st.Alarms = removeNodeAlarm(st.Alarms, topo.AlarmAheadOfPrimary, node)
		} else {
			q[node] = why
		}
		if len(q) == 0 {
			q = nil
		}
		st.Quarantined = q
		for i := range st.Nodes {
			if st.Nodes[i].Name == node && why != "" {
				st.Nodes[i].Serving, st.Nodes[i].Reason = false, "quarantined: "+why
			}
		}
		return nil
	})
	return err
}

func removeNodeAlarm(list []topo.Alarm, code, node string) []topo.Alarm {
	var out []topo.Alarm
	for _, a := range list {
		if a.Code == code && a.Node == node {
			continue
		}
		out = append(out, a)
	}
	return out
}

// errStateMoved: the state changed (another primary, epoch or phase)
// before a PrimaryLost could be written for the one a round judged.
var errStateMoved = errors.New("the cluster state changed meanwhile")

// lostClass maps decideFailover's class of a refusal to the topo.Auto*
// class published in ClusterState.PrimaryLost.
func lostClass(class string) string {
	switch class {
	case "manual":
		return topo.AutoNotAuto
	case "maintenance":
		return topo.AutoMaintenance
	case "disabled":
		return topo.AutoDisabledOff
	case "blocked":
		return topo.AutoBlocked
	}
	return topo.AutoNoCandidate
}

// declarePrimaryLost publishes that the primary of st is dead — DeadPrimary
// in rounds consecutive rounds, at least failover.confirm_rounds, the rule
// an automatic failover starts on — and that no automatic failover comes
// for it (class, why): primary listeners then answer at once with why
// instead of trying the backend, and cut the statements in flight there
// (topo.ClusterState.PrimaryLost). Written once per primary and epoch,
// with an event.
func (t *term) declarePrimaryLost(ctx context.Context, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, dead *analysis.Finding,
	rounds int, class, why string) {
	if st.Primary == "" || dead.Node != st.Primary {
		return
	}
	if pl := st.PrimaryLost; pl != nil && pl.Node == st.Primary && pl.Epoch == st.Epoch && pl.Class == class {
		return
	}
	pl := &topo.PrimaryLost{Node: st.Primary, Epoch: st.Epoch, Since: t.c.now(), Rounds: rounds, Class: class, Reason: why, Detail: dead.Detail}
	next, err := t.update(ctx, cr, func(n *topo.ClusterState) error {
		if n.Primary != pl.Node || n.Epoch != pl.Epoch || n.Phase != topo.PhaseStable {
			return errStateMoved
		}
		n.PrimaryLost = pl
		return nil
	})
	if err != nil {
		if !errors.Is(err, errStateMoved) {
			t.c.warnRepeated(cl.Name, "publishing the lost primary failed", "cluster", cl.Name, "err", err)
		}
		return
	}
	*st = next
	t.c.metrics.primaryDeclaredLost.WithLabelValues(cl.Name, class).Inc()
	t.fo.events.emitOnce(ctx, cl.Name+"|failover|lost|"+pl.Node+"|"+strconv.FormatInt(pl.Epoch, 10), 0, topo.Event{
		Cluster: cl.Name, Kind: topo.EventNoAction, Code: string(analysis.DeadPrimary), Node: pl.Node, Epoch: pl.Epoch,
		Message: fmt.Sprintf("primary %s declared lost: DeadPrimary confirmed in %d consecutive rounds (%s) and no automatic failover comes (%s): "+
			"primary listeners answer new statements and logins at once and cut the statements in flight there", pl.Node, rounds, dead.Detail, why)})
	t.log.Warn("primary declared lost; no automatic failover comes", "cluster", cl.Name, "node", pl.Node, "class", class, "why", why)
}

// clearPrimaryLost removes a published PrimaryLost once DeadPrimary no
// longer holds (the primary answers again, or another one was published).
func (t *term) clearPrimaryLost(ctx context.Context, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, res analysis.Result) {
	pl := st.PrimaryLost
	if pl == nil {
		return
	}
	next, err := t.update(ctx, cr, func(n *topo.ClusterState) error {
		n.PrimaryLost = nil
		return nil
	})
	if err != nil {
		t.c.warnRepeated(cl.Name, "clearing the lost primary failed", "cluster", cl.Name, "err", err)
		return
	}
	*st = next
	msg := fmt.Sprintf("primary %s no longer declared lost: DeadPrimary no longer holds (%s)", pl.Node, codes(res))
	if st.Primary != pl.Node || st.Epoch != pl.Epoch {
		msg = fmt.Sprintf("primary %s no longer declared lost: the primary is %s (epoch %d)", pl.Node, orDash(st.Primary), st.Epoch)
	}
	t.fo.events.emit(ctx, topo.Event{Cluster: cl.Name, Kind: topo.EventRecovery, Node: pl.Node, Epoch: st.Epoch, Message: msg})
}
