package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// alarmDurabilityDrift is the alarm raised when a node's semi-sync settings
// drifted from clusters[].durability (someone changed them, a restart reset
// them, the primary fell back to asynchronous replication) or could not be
// applied. It stays in the state until the settings have held for
// durabilityQuiet.
const alarmDurabilityDrift = "durability_drift"

// durabilityQuiet is how long a node's durability settings must hold after
// a repair before its drift alarm is cleared.
const durabilityQuiet = time.Minute

// durabilityRetry bounds how often the settings of one node are applied
// while they do not take (a failing SET GLOBAL, a replica whose semi-sync
// status stays OFF); a node seen right in between is repaired at once.
const durabilityRetry = 5 * time.Second

// primaryDrift lists how a primary's semi-sync state differs from what
// mode requires ("" entries never appear). MariaDB 10.11 variables.
func primaryDrift(mode string, ss *topo.SemiSync) []string {
	var d []string
	if !ss.MasterEnabled {
		d = append(d, "rpl_semi_sync_master_enabled=OFF (want ON)")
	}
	if ss.WaitPoint != "AFTER_SYNC" {
		d = append(d, fmt.Sprintf("rpl_semi_sync_master_wait_point=%s (want AFTER_SYNC)", orDash(ss.WaitPoint)))
	}
	if mode != config.DurabilitySemiSyncDurable {
		return d
	}
	if ss.MasterTimeoutMS < probe.DurableSemiSyncTimeoutMS {
		d = append(d, fmt.Sprintf("rpl_semi_sync_master_timeout=%d ms (want %d: a primary waiting longer falls back to async)",
			ss.MasterTimeoutMS, probe.DurableSemiSyncTimeoutMS))
	}
	if !ss.WaitNoSlave {
		d = append(d, "rpl_semi_sync_master_wait_no_slave=OFF (want ON)")
	}
	if ss.MasterEnabled && !ss.MasterStatus {
		d = append(d, "Rpl_semi_sync_master_status=OFF: the primary fell back to asynchronous replication")
	}
	return d
}

// replicaDrift lists how a replica's semi-sync state differs from a
// semi-sync replica's, and whether fixing it needs an IO thread restart.
func replicaDrift(p topo.Probe) (drift []string, restartIO bool) {
	ss := p.SemiSync
	if ss.MasterEnabled {
		// A replica with the master switch on makes its own applier wait
		// for acknowledgements it never gets (checked on 10.11: the SQL
		// thread sits in "Waiting for semi-sync ACK from slave").
		drift = append(drift, "rpl_semi_sync_master_enabled=ON on a replica (its applier would wait for acknowledgements)")
	}
	if !ss.SlaveEnabled {
		drift = append(drift, "rpl_semi_sync_slave_enabled=OFF (want ON)")
		restartIO = p.IORunning == "Yes"
	} else if p.IORunning == "Yes" && !ss.SlaveStatus {
		drift = append(drift, "Rpl_semi_sync_slave_status=OFF with the IO thread running (it connected before semi-sync was enabled)")
		restartIO = true
	}
	if ss.SlaveEnabled && ss.SlaveKillConnTimeout > probe.SemiSyncKillConnTimeout {
		drift = append(drift, fmt.Sprintf("rpl_semi_sync_slave_kill_conn_timeout=%d s (want %d: a failover from an unreachable primary waits that long for this replica's cut IO thread to exit before it can repoint it)",
			ss.SlaveKillConnTimeout, probe.SemiSyncKillConnTimeout))
	}
	return drift, restartIO
}

// durableSettings are the primary settings for mode.
func durableSettings(mode string) probe.SemiSyncSettings {
	on := true
	s := probe.SemiSyncSettings{MasterEnabled: &on, WaitPoint: "AFTER_SYNC"}
	if mode == config.DurabilitySemiSyncDurable {
		to := probe.DurableSemiSyncTimeoutMS
		s.TimeoutMS, s.WaitNoSlave = &to, &on
	} else {
		// No commit waits the timeout for a replica that is not there
		// (alignWaitNoSlave switches it ON once one attaches).
		s.NoWaitAlone = true
	}
	return s
}

// enforceDurability checks every probed node's semi-sync settings against
// clusters[].durability and applies them where they differ: replicas
// first (so a durable primary has a replica to acknowledge), then the
// published primary. A node seen with the right settings before and
// differing now is drift: alarm, event and metric, then re-applied (the
// event says so). The first application to a node in a role is an event
// only. Mode async touches nothing.
func (t *term) enforceDurability(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, probes map[string]topo.Probe) {
	mode := cl.Durability
	if mode == "" || mode == config.DurabilityAsync || ctx.Err() != nil {
		t.c.metrics.durabilityOK.DeleteLabelValues(cl.Name)
		return
	}
	if st.Phase != topo.PhaseStable || st.Primary == "" {
		return
	}
	allOK := true
	for _, n := range cl.Nodes {
		p, ok := probes[n.Name]
		if !ok || !complete(p) || p.SemiSync == nil || st.Quarantined[n.Name] != "" {
			continue
		}
		switch {
		case n.Name == st.Primary:
			// handled below, after the replicas. Never as a replica: a
			// node just promoted by a failover still shows its old
			// replication (reset after the repointing) for a round or two,
			// and "fixing" it as a replica would switch its semi-sync
			// primary side off.
		case p.Replicating:
			drift, restart := replicaDrift(p)
			if !t.durabilityCheck(ctx, cfg, cl, cr, n, topo.RoleReplica, drift, func(pr *nodeProber, ctx context.Context) error {
				if p.SemiSync.MasterEnabled {
					if err := pr.DisableSemiSyncPrimary(ctx); err != nil {
						return err
					}
				}
				if !p.SemiSync.SlaveEnabled || restart {
					return pr.EnableSemiSyncReplica(ctx, restart)
				}
				if p.SemiSync.SlaveKillConnTimeout > probe.SemiSyncKillConnTimeout {
					return pr.SetSemiSyncKillConnTimeout(ctx)
				}
				return nil
			}) {
				allOK = false
			}
		}
	}
	if n := cl.Node(st.Primary); n != nil {
		if p, ok := probes[n.Name]; ok && complete(p) && p.SemiSync != nil && !p.ReadOnly && !p.Replicating {
			drift := primaryDrift(mode, p.SemiSync)
			if mode == config.DurabilitySemiSync {
				t.reportFallback(ctx, cl, st, n.Name, p.SemiSync)
			}
			if !t.durabilityCheck(ctx, cfg, cl, cr, *n, topo.RolePrimary, drift, func(pr *nodeProber, ctx context.Context) error {
				// semi_sync: wait_no_slave OFF first when no replica
				// is connected (durableSettings, NoWaitAlone).
				return pr.ApplySemiSyncPrimary(ctx, durableSettings(mode))
			}) {
				allOK = false
			}
			if mode == config.DurabilitySemiSync {
				t.alignWaitNoSlave(ctx, cfg, cl, cr, *n, p, probes)
			}
		}
	}
	v := 0.0
	if allOK {
		v = 1
	}
	t.c.metrics.durabilityOK.WithLabelValues(cl.Name).Set(v)
}

// durabilityCheck handles one node's drift list; it reports whether the
// node's settings were right this round.
func (t *term) durabilityCheck(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, n config.Node, role string,
	drift []string, apply func(*nodeProber, context.Context) error) bool {
	h := &t.fo.health
	now := t.c.now()
	h.mu.Lock()
	ch := h.cluster(cl.Name)
	prevRole := ch.durability[n.Name]
	repairedAt, alarmed := ch.driftAt[n.Name]
	if len(drift) == 0 {
		ch.durability[n.Name] = role
		delete(ch.applyAt, n.Name) // a new drift is repaired at once
		delete(ch.lastDrift, n.Name)
		clear := alarmed && now.Sub(repairedAt) >= durabilityQuiet
		if clear {
			delete(ch.driftAt, n.Name)
		}
		h.mu.Unlock()
		if clear {
			t.clearDurabilityAlarm(ctx, cr, n.Name, role)
		}
		return true
	}
	if last, ok := ch.applyAt[n.Name]; ok && now.Sub(last) < durabilityRetry {
		h.mu.Unlock()
		return false
	}
	what := strings.Join(drift, "; ")
	// The same drift again (a setting that does not take, a fallback
	// that lasts until a replica catches up) is re-applied quietly; it is
	// reported again when it changes or after eventRelog.
	quiet := ch.lastDrift[n.Name] == what && now.Sub(ch.reportedAt[n.Name]) < eventRelog
	if !quiet {
		ch.lastDrift[n.Name], ch.reportedAt[n.Name] = what, now
	}
	ch.applyAt[n.Name] = now
	isDrift := prevRole == role
	h.mu.Unlock()

	pr, err := t.c.prober(cfg, cl, &n)
	if err == nil {
		actx, cancel := context.WithTimeout(ctx, stepTimeout)
		err = apply(pr, actx)
		cancel()
	}
	for _, d := range drift {
		setting, _, _ := strings.Cut(d, "=")
		t.c.metrics.durabilityDrift.WithLabelValues(cl.Name, n.Name, setting).Inc()
	}
	ev := topo.Event{Cluster: cl.Name, Code: "durability", Node: n.Name, Epoch: epochOf(cr)}
	outcome := "re-applied"
	if err != nil {
		outcome = "could not re-apply: " + err.Error()
	}
	switch {
	case quiet:
	case err != nil || isDrift:
		msg := fmt.Sprintf("durability %s drifted on %s %s: %s; %s", cl.Durability, role, n.Name, what, outcome)
		if !isDrift {
			msg = fmt.Sprintf("durability %s not in force on %s %s (%s); %s", cl.Durability, role, n.Name, what, strings.Replace(outcome, "re-apply", "apply", 1))
		}
		h.mu.Lock()
		h.cluster(cl.Name).driftAt[n.Name] = now
		h.mu.Unlock()
		// The alarm goes into the state; every drift is its own event (the
		// alarm event of raiseAlarm is rate-limited).
		a := topo.Alarm{Code: alarmDurabilityDrift, Node: n.Name, Message: msg, Since: now}
		if _, uerr := t.update(ctx, cr, func(st *topo.ClusterState) error {
			st.Alarms = addAlarm(st.Alarms, a)
			return nil
		}); uerr != nil && ctx.Err() == nil {
			t.log.Error("cannot record alarm in the cluster state", "cluster", cl.Name, "alarm", a.Code, "err", uerr)
		}
		ev.Kind, ev.Message = topo.EventAlarm, msg
		if eerr := t.fo.events.emit(ctx, ev); eerr != nil && ctx.Err() == nil {
			t.log.Warn("cannot write event", "err", eerr)
		}
	default:
		ev.Kind = topo.EventRecovery
		ev.Message = fmt.Sprintf("applying durability %s to %s %s: %s; applied", cl.Durability, role, n.Name, what)
		if eerr := t.fo.events.emit(ctx, ev); eerr != nil && ctx.Err() == nil {
			t.log.Warn("cannot write event", "err", eerr)
		}
	}
	if err == nil {
		h.mu.Lock()
		h.cluster(cl.Name).durability[n.Name] = role
		h.mu.Unlock()
	}
	return false
}

// clearDurabilityAlarm removes a node's drift alarm once its settings held
// for durabilityQuiet, with an event.
func (t *term) clearDurabilityAlarm(ctx context.Context, cr *clusterRun, node, role string) {
	_, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		st.Alarms = removeNodeAlarm(st.Alarms, alarmDurabilityDrift, node)
		return nil
	})
	if err != nil {
		return
	}
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: cr.name, Kind: topo.EventRecovery, Code: "durability", Node: node, Epoch: epochOf(cr),
		Message: fmt.Sprintf("durability settings on %s %s held for %s since the last repair; alarm cleared", role, node, durabilityQuiet)})
}

// reportFallback writes an event when a semi_sync primary falls back to
// asynchronous replication (rpl_semi_sync_master_timeout expired without an
// acknowledgement) and when it is semi-synchronous again. In mode
// semi_sync that is the documented contract, so it is not an alarm.
func (t *term) reportFallback(ctx context.Context, cl *config.Cluster, st *topo.ClusterState, node string, ss *topo.SemiSync) {
	h := &t.fo.health
	fell := ss.MasterEnabled && !ss.MasterStatus
	h.mu.Lock()
	ch := h.cluster(cl.Name)
	was := ch.fellBack[node]
	ch.fellBack[node] = fell
	h.mu.Unlock()
	if fell == was {
		return
	}
	msg := fmt.Sprintf("semi-sync on primary %s fell back to asynchronous replication after rpl_semi_sync_master_timeout=%d ms without an acknowledgement "+
		"(Rpl_semi_sync_master_no_tx=%d): commits are not protected until a replica catches up; durability semi_sync_durable never falls back",
		node, ss.MasterTimeoutMS, ss.NoTx)
	if !fell {
		msg = fmt.Sprintf("semi-sync on primary %s is synchronous again (%d semi-sync replica(s))", node, ss.Clients)
	}
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: cl.Name, Kind: topo.EventNoAction, Code: "semi_sync_fallback", Node: node, Epoch: st.Epoch, Message: msg})
}

// applyDurability applies clusters[].durability right after a promotion:
// the new primary gets the primary settings and every other node has the
// master switch turned off (a demoted primary with it on would stall its
// own applier). Called by switchover and failover once the new primary is
// published; failures are events (the next probe round retries).
func (t *term) applyDurability(ctx context.Context, cfg *config.Config, cl *config.Cluster, primary string) {
	mode := cl.Durability
	if mode == "" || mode == config.DurabilityAsync || ctx.Err() != nil {
		return
	}
	cr, err := t.cluster(ctx, cl.Name)
	if err != nil {
		return
	}
	// The new primary first: until it has the settings it commits with
	// the server's own timeout. Then every other node at once, each
	// bounded by the probe timeout, so that an unreachable or frozen old
	// primary delays nothing (the probe rounds apply them when it answers).
	var mu sync.Mutex
	var done, failed []string
	apply := func(n config.Node, bound time.Duration) {
		pr, err := t.c.prober(cfg, cl, &n)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, bound)
			if n.Name == primary {
				err = pr.ApplySemiSyncPrimary(actx, durableSettings(mode))
			} else if err = pr.DisableSemiSyncPrimary(actx); err == nil {
				err = pr.EnableSemiSyncReplica(actx, false)
			}
			cancel()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", n.Name, err))
			return
		}
		done = append(done, n.Name)
	}
	for _, n := range cl.Nodes {
		if n.Name == primary {
			apply(n, stepTimeout)
		}
	}
	var wg sync.WaitGroup
	for _, n := range cl.Nodes {
		if n.Name != primary {
			wg.Go(func() { apply(n, max(cfg.Probe.Timeout.D(), time.Second)) })
		}
	}
	wg.Wait()
	sort.Strings(done)
	sort.Strings(failed)
	h := &t.fo.health
	h.mu.Lock()
	ch := h.cluster(cl.Name)
	for _, name := range done {
		role := topo.RoleReplica
		if name == primary {
			role = topo.RolePrimary
		}
		ch.durability[name] = role
	}
	h.mu.Unlock()
	msg := fmt.Sprintf("durability %s applied after the promotion of %s (primary: semi-sync master ON, AFTER_SYNC", mode, primary)
	if mode == config.DurabilitySemiSyncDurable {
		msg += fmt.Sprintf(", timeout %d ms, wait_no_slave ON", probe.DurableSemiSyncTimeoutMS)
	}
	msg += "; others: semi-sync replica, master switch OFF) on " + strings.Join(done, ", ")
	if len(failed) > 0 {
		msg += "; not applied (the next probe round retries): " + strings.Join(failed, "; ")
	}
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: cl.Name, Kind: topo.EventRecovery, Code: "durability", Node: primary, Epoch: epochOf(cr), Message: msg})
}

// semiSyncAttached reports whether a semi-sync replica is attached to
// primary n (probe p: Rpl_semi_sync_master_clients), or replicates from it
// with its IO thread running or reconnecting (probes).
func semiSyncAttached(n config.Node, p topo.Probe, probes map[string]topo.Probe) bool {
	if p.SemiSync != nil && p.SemiSync.Clients > 0 {
		return true
	}
	for name, rp := range probes {
		if name != n.Name && complete(rp) && rp.Replicating && rp.IORunning != "No" && rp.SemiSync != nil &&
			rp.SemiSync.SlaveEnabled && sameAddress(rp.SourceHost, rp.SourcePort, n.Address) {
			return true
		}
	}
	return false
}

// alignWaitNoSlave keeps, in durability semi_sync, the primary's
// rpl_semi_sync_master_wait_no_slave ON while a semi-sync replica is
// attached to it (or replicates from it and is reconnecting) and OFF while
// none is. With none attached and the switch ON, a commit waits
// rpl_semi_sync_master_timeout for nobody before the primary falls back to
// asynchronous replication (MariaDB's Repl_semi_sync_master::commit_trx);
// with it OFF the commit does not wait, and the first replica that
// attaches makes commits wait for acknowledgements again. This is the
// case after a failover that left no replica to repoint (the others down
// or quarantined). semi_sync_durable keeps the switch ON (its commits wait
// for a replica, by design).
func (t *term) alignWaitNoSlave(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, n config.Node, p topo.Probe, probes map[string]topo.Probe) {
	attached := semiSyncAttached(n, p, probes)
	if attached == p.SemiSync.WaitNoSlave {
		return
	}
	pr, err := t.c.prober(cfg, cl, &n)
	if err == nil {
		actx, cancel := context.WithTimeout(ctx, stepTimeout)
		err = pr.ApplySemiSyncPrimary(actx, probe.SemiSyncSettings{WaitNoSlave: &attached})
		cancel()
	}
	if err != nil {
		t.c.warnRepeated(cl.Name, "setting rpl_semi_sync_master_wait_no_slave failed", "cluster", cl.Name, "node", n.Name, "err", err)
		return
	}
	msg := fmt.Sprintf("a semi-sync replica is attached to primary %s again: rpl_semi_sync_master_wait_no_slave=ON", n.Name)
	if !attached {
		msg = fmt.Sprintf("no semi-sync replica is attached to primary %s: rpl_semi_sync_master_wait_no_slave=OFF, so that its commits do not each wait rpl_semi_sync_master_timeout (%d ms) for a replica that is not there; they are on %s alone until a replica attaches (then ON again)",
			n.Name, p.SemiSync.MasterTimeoutMS, n.Name)
	}
	t.log.Info(msg, "cluster", cl.Name, "node", n.Name)
	ev := topo.Event{Cluster: cl.Name, Kind: topo.EventRecovery, Code: "durability", Node: n.Name, Epoch: epochOf(cr), Message: msg}
	if eerr := t.fo.events.emit(ctx, ev); eerr != nil && ctx.Err() == nil {
		t.log.Warn("cannot write event", "err", eerr)
	}
}
