package controller

import (
	"context"
	"fmt"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// noWritablePrimary acts on NoWritablePrimary (a cluster without a
// published primary whose reachable nodes are all read_only, e.g. after
// everything restarted): the finding names the node every replica
// replicates from and that holds all their transactions. In manual mode, in
// maintenance, with automatic failover disabled, or when that node is
// drained, quarantined or must_not, an event tells the operator what to
// run. In auto mode the controller sets read_only=OFF on it only when every
// configured node answered the round (an unreachable node could be a
// writable primary nobody sees; at most one writable primary, ever); the
// next round's discovery then publishes it with the next epoch.
func (t *term) noWritablePrimary(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState,
	res analysis.Result, probes map[string]topo.Probe) {
	f := res.Get(analysis.NoWritablePrimary)
	if f == nil || st.Primary != "" || st.Phase != topo.PhaseStable {
		return
	}
	dedup := cl.Name + "|nowritable|"
	ev := topo.Event{Cluster: cl.Name, Kind: topo.EventNoAction, Code: string(f.Code), Node: f.Node, Epoch: st.Epoch}
	if f.Node == "" {
		ev.Message = "no writable primary: " + f.Detail
		t.fo.events.emitOnce(ctx, dedup+"ambiguous", eventRelog, ev)
		return
	}
	why := ""
	n := cl.Node(f.Node)
	drained, _, derr := t.c.drained(ctx, cl.Name)
	_, isDrained := drained.Nodes[f.Node]
	switch {
	case n == nil:
		return
	case cl.Failover.Mode != config.FailoverAuto:
		why = fmt.Sprintf("failover.mode is %s: an operator decides", cl.Failover.Mode)
	case st.Maintenance != nil:
		why = "maintenance mode is on: automation is blocked"
	case st.AutoDisabled != "":
		why = "automatic failover is disabled after a failed recovery (" + st.AutoDisabled + ")"
	case n.Promotion == config.PromotionMustNot:
		why = f.Node + " has promotion must_not"
	case st.Quarantined[f.Node] != "":
		why = f.Node + " is quarantined: " + st.Quarantined[f.Node]
	case derr != nil:
		why = "the drained nodes cannot be read: " + derr.Error()
	case isDrained:
		why = f.Node + " is drained or in maintenance"
	}
	if why == "" {
		for _, node := range cl.Nodes {
			if p := probes[node.Name]; !complete(p) {
				why = fmt.Sprintf("%s did not answer the probe (%s): it could be a writable primary the controller does not see", node.Name, orDash(p.Error))
				break
			}
		}
	}
	if why != "" {
		ev.Message = fmt.Sprintf("not making %s writable: %s; %s", f.Node, why, f.Detail)
		t.fo.events.emitOnce(ctx, dedup+"no|"+f.Node, eventRelog, ev)
		return
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err = pr.SetReadOnly(sctx, false)
		cancel()
	}
	ev.Kind = topo.EventRecovery
	if err != nil {
		ev.Message = fmt.Sprintf("making %s writable (the replication source of every replica, no errant GTIDs, every node read_only) failed: %v; %s",
			f.Node, err, f.Detail)
		t.fo.events.emitOnce(ctx, dedup+"failed|"+f.Node, eventRelog, ev)
		return
	}
	ev.Message = fmt.Sprintf("made %s writable (read_only=OFF): every node was read_only, it is the replication source of every replica and holds all their transactions, every node answered; the next round publishes it as primary with the next epoch",
		f.Node)
	t.fo.events.forget(dedup)
	if err := t.fo.events.emit(ctx, ev); err != nil && ctx.Err() == nil {
		t.log.Warn("cannot write event", "err", err)
	}
	t.fo.extraRound()
}
