package controller

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// repairBackoff is the least time between two repair attempts on one node.
const repairBackoff = 5 * time.Second

// repair keeps the topology consistent with the published primary, in
// every mode and in maintenance (maintenance blocks automatic failover
// only):
//   - a node other than the primary that is writable and not replicating (a
//     returning old primary, which the sandbox and many init scripts start
//     writable) is fenced at once: read_only=ON, client sessions killed —
//     Switchyard never leaves a second writable node;
//   - a read-only node with no replication (a fenced old primary) rejoins as
//     a replica of the primary when failover.rejoin_old_primary is on and
//     the primary's binlog holds everything it has; otherwise, with
//     transactions the primary lacks, it is quarantined (never routed,
//     never promoted) and an alarm raised;
//   - a replica replicating from another node than the primary is repointed
//     to the primary (or quarantined, as above);
//   - a quarantined node that replicates cleanly from the primary and holds
//     nothing the primary lacks is released.
//
// A replica whose threads an operator stopped is left alone (it is
// reported and not served).
//
// Two more cases concern restarts:
//   - a replica that is writable (read_only=OFF while replicating, e.g. an
//     init script or option file that starts it writable) is fenced like a
//     stray node: a writable replica would take writes meant for nobody and
//     break replication with errant GTIDs;
//   - the published primary that restarted (its Uptime says it started
//     after the last probe that saw it writable) and came back read-only and
//     not replicating — read_only=ON in its option file, the safe setting —
//     is made writable again, because it is still the primary of the current
//     epoch and no other node is writable. A primary set read-only while
//     it stayed up (reported as primary_read_only) is made writable again
//     only in auto mode and when that is safe (see unsetReadOnly).
func (t *term) repair(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, probes map[string]topo.Probe, m *clusterMemory) {
	if st.Phase != topo.PhaseStable || st.Primary == "" {
		return
	}
	t.restorePrimary(ctx, cfg, cl, cr, st, probes, m)
	pp, ok := probes[st.Primary]
	primaryNode := cl.Node(st.Primary)
	primaryUp := ok && complete(pp) && !pp.ReadOnly && !pp.Replicating && primaryNode != nil
	now := t.c.now()
	for _, n := range cl.Nodes {
		if n.Name == st.Primary {
			continue
		}
		p, ok := probes[n.Name]
		if !ok || !complete(p) {
			continue
		}
		if now.Sub(m.repairAt[n.Name]) < repairBackoff {
			continue
		}
		stray := !p.ReadOnly
		wrongSource := p.Replicating && primaryNode != nil && !analysis.SameAddress(p.SourceHost, p.SourcePort, primaryNode.Address)
		idle := !p.Replicating && p.ReadOnly
		quarantined := st.Quarantined[n.Name] != ""
		// A failed attempt is retried after repairBackoff; after a success
		// the next step (a fenced node rejoining) may follow at once.
		switch {
		case stray:
			// Fencing never needs the primary to be up.
			m.repairAt[n.Name] = now
			if t.fenceStray(ctx, cfg, cl, cr, st, n) {
				delete(m.repairAt, n.Name)
			}
		case quarantined:
			if primaryUp && p.Replicating && !wrongSource && p.IORunning == "Yes" && p.SQLRunning {
				m.repairAt[n.Name] = now
				t.maybeRelease(ctx, cfg, cl, cr, st, n, p)
			}
		case (idle || wrongSource) && primaryUp:
			m.repairAt[n.Name] = now
			t.rejoin(ctx, cfg, cl, cr, st, n, p, idle)
		}
	}
}

// restartSlack is how many seconds below its expected Uptime the primary's
// must be to count as a restart.
const restartSlack = 2

// restorePrimary makes the published primary writable again after it
// restarted with read_only=ON, when it is not replicating and no other node
// is writable; see repair.
func (t *term) restorePrimary(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, probes map[string]topo.Probe, m *clusterMemory) {
	pp, ok := probes[st.Primary]
	if ok && !pp.Reachable {
		m.primaryDown = true
	}
	if !ok || !complete(pp) {
		return
	}
	now := t.c.now()
	if !pp.ReadOnly {
		m.primaryWritable, m.primaryWritableAt, m.primaryUptime, m.primaryDown = st.Primary, now, pp.UptimeSeconds, false
		return
	}
	code := string(analysis.PrimaryReadOnly)
	if pp.UptimeSeconds == 0 {
		return // just started, or no uptime: the next round tells a restart apart
	}
	// A restart since the round that saw the primary writable: a start
	// (now − Uptime) after that round, and the server seen down in
	// between or its Uptime lower than then or clearly below what it
	// would be had it stayed up. Uptime is in whole seconds and probes are
	// read a little before now, so the start alone can look later than it
	// was when the server had just started.
	started := now.Add(-time.Duration(pp.UptimeSeconds) * time.Second)
	expected := m.primaryUptime + int64(now.Sub(m.primaryWritableAt)/time.Second)
	restarted := started.After(m.primaryWritableAt) &&
		(m.primaryDown || pp.UptimeSeconds < m.primaryUptime || pp.UptimeSeconds+restartSlack < expected)
	if m.primaryWritable != st.Primary || !restarted {
		// Never seen writable by this controller, or set read-only while
		// it stayed up: made writable again only in auto mode.
		t.unsetReadOnly(ctx, cfg, cl, cr, st, probes, pp)
		return
	}
	if pp.Replicating {
		t.repairEvent(ctx, st, topo.EventNoAction, code, st.Primary, fmt.Sprintf(
			"primary %s came back read-only and replicating from %s: not making it writable; switch over or fail over to a node that should be primary",
			st.Primary, hostPort(pp.SourceHost, pp.SourcePort)))
		return
	}
	for name, p := range probes {
		if name != st.Primary && p.Reachable && !p.ReadOnly {
			t.repairEvent(ctx, st, topo.EventNoAction, code, st.Primary, fmt.Sprintf(
				"primary %s came back read-only while %s is writable: not making it writable", st.Primary, name))
			return
		}
	}
	n := cl.Node(st.Primary)
	if n == nil {
		return
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err == nil {
		err = pr.SetReadOnly(ctx, false)
	}
	if err != nil {
		t.repairEvent(ctx, st, topo.EventNoAction, code, st.Primary, fmt.Sprintf(
			"primary %s came back read-only after a restart; making it writable failed: %v", st.Primary, err))
		return
	}
	m.primaryWritableAt = now
	t.repairEvent(ctx, st, topo.EventDecision, code, st.Primary, fmt.Sprintf(
		"primary %s came back read-only after a restart and is still the primary of epoch %d with no other writable node: read_only=OFF",
		st.Primary, st.Epoch))
}

func (t *term) repairEvent(ctx context.Context, st *topo.ClusterState, kind, code, node, msg string) {
	t.fo.events.emitOnce(ctx, st.Cluster+"|repair|"+node+"|"+code, eventRelog, topo.Event{
		Cluster: st.Cluster, Kind: kind, Code: code, Node: node, Message: msg, Epoch: st.Epoch})
}

// fenceStray makes a writable non-primary node read-only and kills its
// client sessions; it reports success.
func (t *term) fenceStray(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, n config.Node) bool {
	code := string(analysis.TwoWritablePrimaries)
	pr, err := t.c.prober(cfg, cl, &n)
	if err == nil {
		err = fence(ctx, pr, cfg.Credentials.Replication.User)
	}
	if err != nil {
		t.raiseAlarm(ctx, cr, topo.Alarm{Code: "fence_failed", Node: n.Name, Message: fmt.Sprintf(
			"%s is writable besides primary %s and could not be fenced (%v): set read_only=ON on it by hand", n.Name, st.Primary, err)})
		return false
	}
	t.repairEvent(ctx, st, topo.EventDecision, code, n.Name, fmt.Sprintf(
		"fenced %s: it was writable besides primary %s (a returning old primary?); read_only=ON, client sessions killed; Switchyard never makes it writable again",
		n.Name, st.Primary))
	return true
}

// fence sets read_only=ON on a node (retrying once after killing client
// sessions if a lock blocks it), verifies it and kills client sessions.
func fence(ctx context.Context, pr *nodeProber, replUser string) error {
	fctx, cancel := context.WithTimeout(ctx, fenceLockWait)
	err := pr.SetReadOnly(fctx, true)
	cancel()
	if k := probe.Classify(err); k == probe.KindLockWait || k == probe.KindTimeout {
		if _, kerr := pr.KillClientSessions(ctx, replUser); kerr != nil {
			return fmt.Errorf("%w; then killing client sessions failed: %w", err, kerr)
		}
		err = pr.SetReadOnly(ctx, true)
	}
	if err != nil {
		return err
	}
	ro, err := pr.ReadOnly(ctx)
	if err != nil {
		return err
	}
	if !ro {
		return fmt.Errorf("read_only is still OFF after SET GLOBAL read_only=ON")
	}
	_, err = pr.KillClientSessions(ctx, replUser)
	return err
}

// contained checks with the primary's @@gtid_binlog_state whether node n
// (probed as p) holds only transactions the primary has. missing names what
// it holds beyond the primary.
func (t *term) contained(ctx context.Context, cfg *config.Config, cl *config.Cluster, primary string, p topo.Probe) (bool, string, error) {
	if cl.Flavor == probe.FlavorMySQL {
		pp, err := t.c.prober(cfg, cl, cl.Node(primary))
		if err != nil {
			return false, "", err
		}
		fresh := pp.Probe(ctx)
		if !complete(fresh) {
			return false, "", fmt.Errorf("probe primary %s: %s", primary, fresh.Error)
		}
		e := analysis.ErrantGTIDs(cl.Flavor, p, fresh)
		return e == "", e, nil
	}
	pr, err := t.c.prober(cfg, cl, cl.Node(primary))
	if err != nil {
		return false, "", err
	}
	state, err := pr.BinlogState(ctx)
	if err != nil {
		return false, "", err
	}
	// The node's binlog counts too: a returning old primary may hold
	// transactions written to its binlog that never committed elsewhere
	// (semi-sync waits cut by a partition).
	pos := p.GTIDCurrent
	if cur, err := gtid.ParseMariaDB(p.GTIDCurrent); err == nil {
		if bin, err := gtid.ParseMariaDB(p.GTIDBinlog); err == nil {
			pos = analysis.Merge(cur, bin).String()
		}
	}
	return analysis.ContainedInBinlogState(pos, state)
}

// rejoin points node n at the primary (slave_pos; a node that was not
// replicating first takes its position from its own binlog), after checking
// that the primary has everything n has; otherwise it quarantines n.
func (t *term) rejoin(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, n config.Node, p topo.Probe, idle bool) {
	code := string(analysis.ReplicaWrongSource)
	if idle {
		code = string(analysis.ReplicaNotReplicating)
		if !cl.Failover.Rejoin() {
			t.repairEvent(ctx, st, topo.EventNoAction, code, n.Name, fmt.Sprintf(
				"not rejoining %s as a replica of %s: failover.rejoin_old_primary is false; it stays read-only and is not served", n.Name, st.Primary))
			return
		}
	}
	ok, missing, err := t.contained(ctx, cfg, cl, st.Primary, p)
	if err != nil {
		t.repairEvent(ctx, st, topo.EventNoAction, code, n.Name, fmt.Sprintf("not repointing %s yet: cannot compare its GTIDs with primary %s: %v", n.Name, st.Primary, err))
		return
	}
	if !ok {
		why := fmt.Sprintf("holds transactions primary %s lacks (its GTID position %s is past the primary's in that domain: every transaction after the primary's position is extra, not only the last)", st.Primary, missing)
		if lf := st.LastFailover; lf != nil && lf.From == n.Name {
			// The old primary of the last failover: these are most likely
			// commits it made (and acknowledged to clients) that never
			// reached the promoted node, not a stray write on a replica.
			why += fmt.Sprintf("; it was the primary until the failover of %s to %s (epoch %d), so these are most likely commits it acknowledged "+
				"that never reached %s: they are missing from the cluster (the failover's estimate of lost GTIDs was: %s) — "+
				"compare them (mariadb-binlog on %s) and re-apply what must be kept",
				lf.At.UTC().Format(time.RFC3339), lf.To, lf.Epoch, lf.To, lf.Estimate(), n.Name)
		}
		if err := t.setQuarantine(ctx, cr, n.Name, "errant GTIDs: "+why); err != nil && ctx.Err() == nil {
			t.log.Error("cannot record quarantine", "node", n.Name, "err", err)
		}
		t.raiseAlarm(ctx, cr, topo.Alarm{Code: topo.AlarmQuarantined, Node: n.Name, Message: fmt.Sprintf(
			"%s quarantined: it %s; it is never routed to or promoted and was not reset: rebuild it from %s (or remove the errant transactions) and it is released once it replicates cleanly",
			n.Name, why, st.Primary)})
		return
	}
	pr, err := t.c.prober(cfg, cl, &n)
	if err != nil {
		return
	}
	detail, err := pointAt(ctx, cfg, pr, cl.Node(st.Primary), !p.Replicating, false)
	if err != nil {
		t.repairEvent(ctx, st, topo.EventRecovery, code, n.Name, fmt.Sprintf("repointing %s to primary %s failed: %v (retrying)", n.Name, st.Primary, err))
		return
	}
	verb := "repointed"
	if idle {
		verb = "rejoined"
	}
	t.repairEvent(ctx, st, topo.EventDecision, code, n.Name, fmt.Sprintf("%s %s as a replica of primary %s: %s", verb, n.Name, st.Primary, detail))
}

// pointAt makes the node behind pr a read-only replica of target
// (MASTER_USE_GTID=slave_pos); fromBinlog first sets gtid_slave_pos from the
// node's own binlog (a former primary). leaveStopped repoints without
// starting replication (an operator's STOP SLAVE stays in force).
func pointAt(ctx context.Context, cfg *config.Config, pr *nodeProber, target *config.Node, fromBinlog, leaveStopped bool) (string, error) {
	host, portStr, err := net.SplitHostPort(target.Address)
	if err != nil {
		return "", fmt.Errorf("address of %s: %w", target.Name, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", fmt.Errorf("address of %s: port %q: %w", target.Name, portStr, err)
	}
	pw, err := cfg.Credentials.Replication.Resolve()
	if err != nil {
		return "", fmt.Errorf("credentials.replication: %w", err)
	}
	if err := pr.SetReadOnly(ctx, true); err != nil {
		return "", err
	}
	if err := pr.DisableSemiSyncPrimary(ctx); err != nil {
		return "", err
	}
	if err := pr.StopReplica(ctx); err != nil {
		return "", err
	}
	how := "slave_pos"
	if fromBinlog {
		if err := pr.SetReplicaPosFromBinlog(ctx); err != nil {
			return "", err
		}
		how = "slave_pos from its binlog"
	}
	if err := pr.ChangeSource(ctx, host, port, cfg.Credentials.Replication.User, pw, probe.GTIDSlavePos); err != nil {
		return "", err
	}
	if leaveStopped {
		return fmt.Sprintf("points at %s (%s), read_only=ON; replication left stopped as it was: START SLAVE when ready", target.Address, how), nil
	}
	if err := pr.StartReplica(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("replicates from %s (%s), read_only=ON", target.Address, how), nil
}

// maybeRelease lifts a node's quarantine once it replicates cleanly from
// the primary and holds nothing the primary lacks (an operator rebuilt
// it).
func (t *term) maybeRelease(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, n config.Node, p topo.Probe) {
	ok, _, err := t.contained(ctx, cfg, cl, st.Primary, p)
	if err != nil || !ok {
		return
	}
	if err := t.setQuarantine(ctx, cr, n.Name, ""); err != nil {
		return
	}
	t.repairEvent(ctx, st, topo.EventDecision, "released", n.Name, fmt.Sprintf(
		"released %s from quarantine: it replicates from primary %s and holds nothing the primary lacks", n.Name, st.Primary))
}

// unsetReadOnly acts on a published primary of a stable cluster that
// answers with read_only=ON although it did not restart (`SET GLOBAL
// read_only=ON` by hand, or a primary this controller never saw writable):
// every write through a primary listener fails with 1290. In auto mode it
// sets read_only=OFF when that is safe: the node is still the primary of
// the current epoch, not replicating, not quarantined, no switchover or
// failover runs (those fence the old primary with read_only=ON, and repair
// does not run meanwhile; checked again just before the change), no
// maintenance, automatic failover not disabled, and no other node is
// writable. Otherwise an event says why and what the operator can run.
func (t *term) unsetReadOnly(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState,
	probes map[string]topo.Probe, pp topo.Probe) {
	// Its own dedup key: the restart repair's events are not held back.
	dedup := st.Cluster + "|repair|" + st.Primary + "|" + string(analysis.PrimaryReadOnly) + "|live"
	liveEvent := func(kind, msg string) {
		t.fo.events.emitOnce(ctx, dedup, eventRelog, topo.Event{
			Cluster: st.Cluster, Kind: kind, Code: string(analysis.PrimaryReadOnly), Node: st.Primary, Message: msg, Epoch: st.Epoch})
	}
	hint := fmt.Sprintf("run `mariadb -e 'SET GLOBAL read_only=OFF'` on %s if it should take writes, otherwise `switchyard failover` to another node (a switchover refuses a read-only primary)", st.Primary)
	why := ""
	switch {
	case pp.Replicating:
		why = fmt.Sprintf("it replicates from %s", hostPort(pp.SourceHost, pp.SourcePort))
	case cl.Failover.Mode != config.FailoverAuto:
		why = fmt.Sprintf("failover.mode is %s: an operator decides", cl.Failover.Mode)
	case st.Maintenance != nil:
		why = "maintenance mode is on: automation is blocked"
	case st.AutoDisabled != "":
		why = "automatic failover is disabled after a failed recovery (" + st.AutoDisabled + ")"
	case st.Quarantined[st.Primary] != "":
		why = st.Primary + " is quarantined: " + st.Quarantined[st.Primary]
	}
	if why == "" {
		for name, p := range probes {
			if name != st.Primary && p.Reachable && !p.ReadOnly {
				why = name + " is writable"
				break
			}
		}
	}
	n := cl.Node(st.Primary)
	if why == "" && n == nil {
		return
	}
	if why != "" {
		liveEvent(topo.EventNoAction, fmt.Sprintf(
			"primary %s has read_only=ON and writes fail with 1290; not making it writable: %s; %s", st.Primary, why, hint))
		return
	}
	cr.mu.Lock()
	busy := cr.switching
	same := cr.state != nil && cr.state.Epoch == st.Epoch && cr.state.Primary == st.Primary && cr.state.Phase == topo.PhaseStable
	cr.mu.Unlock()
	if busy || !same {
		return // a switchover or failover started: it decides
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err = pr.SetReadOnly(sctx, false)
		cancel()
	}
	if err != nil {
		liveEvent(topo.EventNoAction, fmt.Sprintf(
			"primary %s has read_only=ON; making it writable failed: %v; %s", st.Primary, err, hint))
		return
	}
	t.fo.events.forget(dedup)
	liveEvent(topo.EventDecision, fmt.Sprintf(
		"primary %s had read_only=ON and is still the primary of epoch %d, not replicating, with no other writable node and no switchover or failover running: read_only=OFF",
		st.Primary, st.Epoch))
	t.fo.events.forget(dedup)
}
