package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// autoFailoverReadiness answers, from the cluster state of a probe round,
// whether a primary found dead now would be failed over automatically
// (topo.ClusterState.AutoFailover). The checks are decideFailover's, in its
// order — mode, maintenance, disable after a failed recovery, block period
// — plus a promotable replica: configured without promotion must_not, not
// quarantined, probed completely, replicating from the primary with its SQL
// thread running. The failover plans again when it runs (GTID order, the
// floor, drained nodes); Candidate is the best-ranked such replica in
// config order, a hint for people. A replica whose probe this round did
// not complete (frozen, slow, briefly unreachable) is judged by recent,
// its last complete probe within readinessGrace, when there is one: a
// round that missed every replica must not make the proxies refuse at
// once a failover that comes when they answer the next round. Pure: no
// I/O.
func autoFailoverReadiness(cl *config.Cluster, st *topo.ClusterState, now time.Time, recent func(node string) (topo.Probe, bool)) topo.AutoFailover {
	no := func(class, why string) topo.AutoFailover { return topo.AutoFailover{Class: class, Reason: why} }
	switch {
	case cl.Failover.Mode != config.FailoverAuto:
		return no(topo.AutoNotAuto, fmt.Sprintf("failover.mode is %s: an operator must run `switchyard failover --cluster %s`", cl.Failover.Mode, cl.Name))
	case st.Maintenance != nil:
		return no(topo.AutoMaintenance, fmt.Sprintf("maintenance mode is on (%s): automatic failover is blocked; an operator must run `switchyard failover --cluster %s`",
			orDash(st.Maintenance.Reason), cl.Name))
	case st.AutoDisabled != "":
		return no(topo.AutoDisabledOff, fmt.Sprintf("automatic failover is disabled after a failed recovery (%s): an operator must run `switchyard failover --cluster %s`, then `switchyard ack`",
			st.AutoDisabled, cl.Name))
	case st.FailoverBlock != nil && now.Before(st.FailoverBlock.Until):
		return no(topo.AutoBlocked, fmt.Sprintf("automatic failover is blocked until %s after %s (failover.block_period): an operator must run `switchyard failover --cluster %s` or `switchyard ack --cluster %s`",
			st.FailoverBlock.Until.UTC().Format(time.RFC3339), st.FailoverBlock.Reason, cl.Name, cl.Name))
	}
	primary := cl.Node(st.Primary)
	if primary == nil {
		return no(topo.AutoNoCandidate, fmt.Sprintf("cluster %s has no known primary", cl.Name))
	}
	best, bestRank := "", 0
	for _, n := range cl.Nodes {
		if n.Name == st.Primary || n.Promotion == promotionMustNot || st.Quarantined[n.Name] != "" {
			continue
		}
		ns := st.Node(n.Name)
		if ns == nil {
			continue
		}
		p := ns.Probe
		if !complete(p) && recent != nil {
			if last, ok := recent(n.Name); ok {
				p = last
			}
		}
		if !complete(p) || !p.Replicating || !p.SQLRunning || !sameAddress(p.SourceHost, p.SourcePort, primary.Address) {
			continue
		}
		if r := promotionRank(n.Promotion); best == "" || r < bestRank {
			best, bestRank = n.Name, r
		}
	}
	if best == "" {
		return no(topo.AutoNoCandidate, fmt.Sprintf("no replica of %s could be promoted (none is reachable and replicating from it with its SQL thread running, outside must_not and quarantine): an operator must repair a replica or run `switchyard failover --cluster %s --force-stale`",
			st.Primary, cl.Name))
	}
	return topo.AutoFailover{Ready: true, Candidate: best}
}

// readinessGrace is how many probe intervals a replica's last complete
// probe still counts for the readiness when its latest probe did not
// complete.
const readinessGrace = 3

// publishAutoFailover rewrites the state's AutoFailover when the round's
// answer differs from the published one.
func (t *term) publishAutoFailover(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState) {
	now := t.c.now()
	grace := readinessGrace * cfg.Probe.Interval.D()
	m := t.fo.memory(cl.Name)
	recent := func(node string) (topo.Probe, bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		p, ok := m.lastComplete[node]
		return p, ok && !p.At.IsZero() && now.Sub(p.At) <= grace
	}
	a := autoFailoverReadiness(cl, st, now, recent)
	if cur := st.AutoFailover; cur != nil && *cur == a {
		return
	}
	if _, err := t.update(ctx, cr, func(next *topo.ClusterState) error {
		next.AutoFailover = &a
		return nil
	}); err != nil {
		t.c.warnRepeated(cl.Name, "publishing automatic failover readiness failed", "cluster", cl.Name, "err", err)
		return
	}
	st.AutoFailover = &a
}
