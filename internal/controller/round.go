package controller

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// roundWriteMin bounds how often a cluster's probe round record is written
// whatever probe.interval is: one small write per cluster per second at
// most.
const roundWriteMin = time.Second

// stampRoles sets each node's RoleSince in st, about to be written over
// prev (cr.mu held): carried over while the role stays, and on a change the
// time of the probe that showed it or, when the change came without a new
// probe (a switchover or failover publishing roles), now. A probe older
// than RoleSince then reads as predating the role.
func stampRoles(prev, st *topo.ClusterState, now time.Time) {
	if prev == nil {
		return
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		p := prev.Node(n.Name)
		switch {
		case p == nil:
		case p.Role == n.Role:
			n.RoleSince = p.RoleSince
		case n.Probe.At.After(p.Probe.At):
			n.RoleSince = n.Probe.At
		default:
			n.RoleSince = now
		}
	}
}

// writeRound records the round's probes of cl under topo.Keys.ProbeRound,
// with the roles of the published state, at most every roundWriteMin.
// Failures are not retried: the next round writes again.
func (t *term) writeRound(ctx context.Context, cl *config.Cluster, cr *clusterRun, probes map[string]topo.Probe) {
	now := t.c.now()
	cr.mu.Lock()
	if cr.state == nil || now.Sub(cr.roundAt) < roundWriteMin*9/10 { // a round 1 s after the last may start a little early
		cr.mu.Unlock()
		return
	}
	rd := topo.ProbeRound{Cluster: cl.Name, Leader: t.c.id, Epoch: cr.state.Epoch, Primary: cr.state.Primary, At: now}
	for _, n := range cl.Nodes {
		p, ok := probes[n.Name]
		if !ok {
			continue
		}
		role := topo.RoleUnknown
		if ns := cr.state.Node(n.Name); ns != nil {
			role = ns.Role
		}
		rd.Nodes = append(rd.Nodes, topo.RoundNode{Name: n.Name, Role: role, Probe: topo.CompactProbe(p)})
	}
	version := cr.roundVersion
	cr.roundAt = now
	cr.mu.Unlock()

	b, err := json.Marshal(rd)
	if err != nil {
		return
	}
	key := t.c.keys.ProbeRound(cl.Name)
	if version == 0 {
		kv, gerr := t.c.store.Get(ctx, key)
		switch {
		case gerr == nil:
			version = kv.Version
		case !errors.Is(gerr, topo.ErrNotFound):
			return
		}
	}
	var v topo.Version
	if version == 0 {
		v, err = t.leader.Create(ctx, key, b)
	} else {
		v, err = t.leader.Update(ctx, key, b, version)
	}
	if err != nil {
		v = 0 // read the version again next time
		if ctx.Err() == nil && !errors.Is(err, topo.ErrBadVersion) && !errors.Is(err, topo.ErrExists) {
			t.log.Debug("probe round record not written", "cluster", cl.Name, "err", err)
		}
	}
	cr.mu.Lock()
	cr.roundVersion = v
	cr.mu.Unlock()
}
