package controller

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// finishFailover completes, in later rounds, what a failover published
// but did not finish because its leader died (or lost leadership) after
// the publication: the steps after "publish primary" — repoint the
// replicas, reset the new primary's replication once its cut IO thread
// exited — are otherwise nobody's, and the cluster would stay with a
// primary that still shows replication from the dead old primary (so
// repair never repoints anyone: it needs a primary that is not a
// replica) and replicas stopped for good, which no longer acknowledge
// semi-sync commits and fall below the promotion floor.
//
// It acts only on the failover that made the current epoch
// (LastFailover.Epoch and To are the state's) and only while no
// switchover or failover of this term runs (the caller's round is not
// busy):
//   - the published primary, writable and still replicating from the old
//     primary, gets STOP SLAVE and RESET SLAVE ALL (repair then repoints
//     the replicas of the old primary, checking their GTIDs first);
//   - a replica of ClusterState.Repoint that points at the new primary
//     with its threads stopped (repointed, not started yet) gets START
//     SLAVE, once: stopped again by an error it is left to an operator
//     (the analysis reports it); a replica an operator had stopped
//     before the failover is not in the list and stays stopped;
//   - the list is cleared once each node in it replicates from the new
//     primary, is quarantined or left the config, and whenever the epoch
//     is no longer the failover's.
func (t *term) finishFailover(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState, probes map[string]topo.Probe, m *clusterMemory) {
	if st.Phase != topo.PhaseStable || st.Primary == "" {
		return
	}
	lf := st.LastFailover
	current := lf != nil && lf.Epoch == st.Epoch && lf.To == st.Primary
	if !current {
		if len(st.Repoint) > 0 {
			t.clearRepoint(ctx, cr, st.Epoch)
		}
		return
	}
	primary, old := cl.Node(st.Primary), cl.Node(lf.From)
	t.keepWakeFence(ctx, cfg, cl, cr, lf, probes)
	pp, ok := probes[st.Primary]
	if primary == nil || !ok || !complete(pp) || pp.ReadOnly {
		return
	}
	ev := func(node, msg string) {
		t.repairEvent(ctx, st, topo.EventRecovery, "failover_finished", node, msg)
	}
	if pp.Replicating {
		if old == nil || !sameAddress(pp.SourceHost, pp.SourcePort, old.Address) {
			return // not the failover's leftover: reported (primary_replicating), not touched
		}
		pr, err := t.c.prober(cfg, cl, primary)
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, stepTimeout)
			err = pr.ForgetReplication(sctx)
			cancel()
		}
		if err != nil {
			ev(st.Primary, fmt.Sprintf("the failover %s → %s (epoch %d) left %s replicating from %s; resetting its replication failed: %v (retrying)",
				lf.From, lf.To, lf.Epoch, st.Primary, lf.From, err))
			return
		}
		ev(st.Primary, fmt.Sprintf("the failover %s → %s (epoch %d) was interrupted after the publication: reset the new primary's replication from %s (STOP SLAVE, RESET SLAVE ALL); its replicas are repointed next",
			lf.From, lf.To, lf.Epoch, lf.From))
		return // the next round sees a primary without replication
	}
	if len(st.Repoint) == 0 {
		return
	}
	var pending, started []string
	for _, name := range st.Repoint {
		n := cl.Node(name)
		if name == st.Primary || n == nil || st.Quarantined[name] != "" {
			continue
		}
		p, ok := probes[name]
		switch {
		case !ok || !complete(p) || !p.Replicating || !sameAddress(p.SourceHost, p.SourcePort, primary.Address):
			// Unreachable, or still to be repointed (repair does it).
			pending = append(pending, name)
		case p.IORunning != "No" && p.SQLRunning:
			// Replicates from the new primary: done.
		case m.startedFor[name] == st.Epoch:
			// Started once for this failover and stopped again (an
			// error): reported (ReplicaNotReplicating), left to an
			// operator.
		default:
			// Repointed, not started. A replication error it shows may
			// be the old primary's (Last_IO_Error stays until START
			// SLAVE): started once.
			pending = append(pending, name)
			if m.startedFor == nil {
				m.startedFor = map[string]int64{}
			}
			m.startedFor[name] = st.Epoch
			pr, err := t.c.prober(cfg, cl, n)
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, stepTimeout)
				err = pr.StartReplica(sctx)
				cancel()
			}
			if err != nil {
				ev(name, fmt.Sprintf("starting replication on %s from new primary %s after the interrupted failover %s → %s failed: %v (retrying)",
					name, st.Primary, lf.From, lf.To, err))
				continue
			}
			started = append(started, name)
		}
	}
	if len(started) > 0 {
		ev(strings.Join(started, ","), fmt.Sprintf("the failover %s → %s (epoch %d) repointed %s but was interrupted before starting replication there: started (START SLAVE)",
			lf.From, lf.To, lf.Epoch, strings.Join(started, ", ")))
	}
	if len(pending) == 0 {
		t.clearRepoint(ctx, cr, st.Epoch)
	}
}

// keepWakeFence keeps a fencing connection pending on the old primary of
// the failover lf while it does not answer (frozen, partitioned, or down),
// as the failover itself does from its announcement (wakefence.go): that
// failover's leader may have died, and its pending fence with it. Once per
// term, old primary and epoch; the fence is a no-op if the node is the
// primary again.
func (t *term) keepWakeFence(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, lf *topo.FailoverRecord, probes map[string]topo.Probe) {
	if p, ok := probes[lf.From]; !ok || p.Reachable || cl.Node(lf.From) == nil {
		return
	}
	if !t.markWakeFence(cl.Name, lf.From, lf.Epoch) {
		return
	}
	t.log.Info("old primary of the last failover does not answer: keeping a fence pending on it for when it wakes",
		"cluster", cl.Name, "node", lf.From, "epoch", lf.Epoch)
	t.fenceWhenAwake(ctx, cfg, cl, cr, lf.From, lf.Epoch)
}

// markWakeFence records that this term keeps a fence pending on node, the
// old primary of cluster's failover to epoch; false when it already did.
func (t *term) markWakeFence(cluster, node string, epoch int64) bool {
	key := fmt.Sprintf("%s|%s|%d", cluster, node, epoch)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wakeFenced[key] {
		return false
	}
	if t.wakeFenced == nil {
		t.wakeFenced = map[string]bool{}
	}
	t.wakeFenced[key] = true
	return true
}

// clearRepoint empties ClusterState.Repoint if the state is still at
// epoch.
func (t *term) clearRepoint(ctx context.Context, cr *clusterRun, epoch int64) {
	_, err := t.update(ctx, cr, func(s *topo.ClusterState) error {
		if s.Epoch == epoch {
			s.Repoint = nil
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		t.log.Warn("cannot clear the failover's repoint list; next round retries", "cluster", cr.name, "err", err)
	}
}
