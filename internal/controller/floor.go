package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// The promotion floor (topo.PromotionFloor): the leader raises it after
// every probe round in which the published primary's position advanced (one
// leader-conditioned compare-and-swap per round at most), the failover
// plan refuses candidates behind it, and a failover forced past it resets
// it to the new primary's position.

// floorMemory is the leader's copy of a cluster's floor document (guarded
// by clusterMemory.mu).
type floorMemory struct {
	loaded  bool
	doc     topo.PromotionFloor
	version topo.Version // 0: the key is absent
	// binlogState is the published primary's @@gtid_binlog_state read
	// after the last round's probes; binlogStateOf names that primary.
	binlogState, binlogStateOf string
}

// floor returns the cluster's floor document, reading it from the store on
// first use in the term (or always with fresh).
func (t *term) floor(ctx context.Context, cluster string, m *clusterMemory, fresh bool) (topo.PromotionFloor, error) {
	m.mu.Lock()
	if m.floor.loaded && !fresh {
		doc := m.floor.doc
		m.mu.Unlock()
		return doc, nil
	}
	m.mu.Unlock()
	kv, err := t.c.store.Get(ctx, t.c.keys.Floor(cluster))
	var doc topo.PromotionFloor
	var v topo.Version
	switch {
	case errors.Is(err, topo.ErrNotFound):
	case err != nil:
		return topo.PromotionFloor{}, fmt.Errorf("read the promotion floor of cluster %s: %w", cluster, err)
	default:
		v = kv.Version
		if err := json.Unmarshal(kv.Value, &doc); err != nil {
			// Plan refuses an unparsable floor; the next raise replaces it.
			t.log.Error("promotion floor in the store is not valid JSON; failovers are refused until the primary's next position replaces it",
				"cluster", cluster, "err", err)
			doc = topo.PromotionFloor{Cluster: cluster, GTID: "unreadable"}
		}
	}
	m.mu.Lock()
	m.floor.loaded, m.floor.doc, m.floor.version = true, doc, v
	m.mu.Unlock()
	return doc, nil
}

// writeFloor stores doc with the leader's compare-and-swap; on a conflict
// the next read reloads it.
func (t *term) writeFloor(ctx context.Context, cluster string, m *clusterMemory, doc topo.PromotionFloor) error {
	m.mu.Lock()
	expect := m.floor.version
	m.mu.Unlock()
	doc.Cluster, doc.Leader, doc.UpdatedAt = cluster, t.c.id, t.c.now()
	v, err := topo.PutJSON(ctx, t.leader, t.c.keys.Floor(cluster), doc, expect)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.floor.loaded = false
		return fmt.Errorf("write the promotion floor of cluster %s: %w", cluster, err)
	}
	m.floor.doc, m.floor.version, m.floor.loaded = doc, v, true
	return nil
}

// raiseFloor raises the floor to the published primary's executed set when
// the round's probe of it is complete and it advanced.
func (t *term) raiseFloor(ctx context.Context, cl *config.Cluster, st *topo.ClusterState, probes map[string]topo.Probe, m *clusterMemory) {
	if st.Phase != topo.PhaseStable || st.Primary == "" {
		return
	}
	p, ok := probes[st.Primary]
	if !ok || !complete(p) || p.Replicating {
		return
	}
	pos, err := analysis.Executed(cl.Flavor, p)
	if err != nil {
		return
	}
	doc, err := t.floor(ctx, cl.Name, m, false)
	if err != nil {
		if ctx.Err() == nil {
			t.c.warnRepeated(cl.Name, "cannot read the promotion floor; next round retries", "cluster", cl.Name, "err", err)
		}
		return
	}
	cur, err := analysis.ParseFloor(cl.Flavor, doc.GTID)
	if err != nil {
		t.log.Error("promotion floor does not parse; replacing it with the primary's position", "cluster", cl.Name, "floor", doc.GTID, "err", err)
		cur = nil
	}
	next, changed := analysis.RaiseFloor(cur, pos)
	if !changed {
		return
	}
	doc.GTID, doc.Primary, doc.Epoch = next.String(), st.Primary, st.Epoch
	if err := t.writeFloor(ctx, cl.Name, m, doc); err != nil && ctx.Err() == nil {
		t.c.warnRepeated(cl.Name, "promotion floor not raised; next round retries", "cluster", cl.Name, "err", err)
	}
}

// readPrimaryBinlogState remembers the published primary's
// @@gtid_binlog_state (MariaDB) for errant detection per (domain,
// server_id); read after the round's probes, so a replica's probe can never
// be ahead of it for the primary's own transactions.
func (t *term) readPrimaryBinlogState(ctx context.Context, cfg *config.Config, cl *config.Cluster, st *topo.ClusterState, probes map[string]topo.Probe, m *clusterMemory) {
	if cl.Flavor == probe.FlavorMySQL || st.Primary == "" || !complete(probes[st.Primary]) {
		return
	}
	n := cl.Node(st.Primary)
	if n == nil {
		return
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err != nil {
		return
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.Probe.Timeout.D())
	state, err := pr.BinlogState(bctx)
	cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.floor.binlogState, m.floor.binlogStateOf = "", ""
		return
	}
	m.floor.binlogState, m.floor.binlogStateOf = state, st.Primary
}

// floorAfterFailover records the new primary's position in the floor: a
// normal failover raises it (the candidate held it); one forced past it
// resets it, recording the floor it gave up and why.
func (f *failoverRun) floorAfterFailover(ctx context.Context) (string, error) {
	cand := f.plan.Candidate
	p := f.probes[cand]
	pos, err := analysis.Executed(f.cl.Flavor, p)
	if err != nil || pos == nil {
		return "", fmt.Errorf("position of %s unknown: %v", cand, err)
	}
	doc, err := f.t.floor(ctx, f.cl.Name, f.m, true)
	if err != nil {
		return "", err
	}
	cur, _ := analysis.ParseFloor(f.cl.Flavor, doc.GTID)
	if cur != nil && !pos.Contains(cur) {
		now := f.t.c.now()
		doc.Lowered, doc.ResetAt = doc.GTID, &now
		doc.ResetReason = fmt.Sprintf("%s failover to %s forced past the floor by %s: %s", modeLabel(f.o.auto), cand, orDash(f.o.by), orDash(f.o.reason))
		doc.GTID, doc.Primary, doc.Epoch = pos.String(), cand, f.toEpoch
		if err := f.t.writeFloor(ctx, f.cl.Name, f.m, doc); err != nil {
			return "", err
		}
		return fmt.Sprintf("floor reset from %s to %s (forced: the difference is lost)", doc.Lowered, doc.GTID), nil
	}
	next, changed := analysis.RaiseFloor(cur, pos)
	if !changed {
		return "floor " + orDash(doc.GTID) + " unchanged", nil
	}
	doc.GTID, doc.Primary, doc.Epoch = next.String(), cand, f.toEpoch
	if err := f.t.writeFloor(ctx, f.cl.Name, f.m, doc); err != nil {
		return "", err
	}
	return "floor raised to " + doc.GTID, nil
}

// floorResetAction is the Request.Action of an ack that resets the floor.
const floorResetAction = "reset_floor"

// RequestFloorReset asks the leader to set cluster's promotion floor to
// the primary's current position (after a cluster was rebuilt, the floor
// may stand above anything the nodes will ever hold and refuse every
// failover). It is an acknowledgement request (topo.RequestAck with Action
// "reset_floor"); reason is required and recorded in the floor and the
// events. The error wraps ErrRequestFailed when the leader refused (the
// primary must be reachable).
func RequestFloorReset(ctx context.Context, st topo.Store, keys topo.Keys, cluster, reason, by string) (topo.Request, error) {
	if strings.TrimSpace(reason) == "" {
		return topo.Request{}, errors.New("ack --reset-floor: a --reason is required (it is recorded with the floor and in the events)")
	}
	return Submit(ctx, st, keys, topo.Request{Kind: topo.RequestAck, Cluster: cluster, Action: floorResetAction, Reason: reason, By: by})
}

// serveFloorReset sets the floor to the published primary's executed set,
// read afresh, recording the floor it replaced.
func (t *term) serveFloorReset(ctx context.Context, req *topo.Request) bool {
	cfg := t.c.config()
	cl := cfg.Cluster(req.Cluster)
	cr, err := t.cluster(ctx, req.Cluster)
	if err != nil || cl == nil {
		req.Message = fmt.Sprintf("unknown cluster %q or state unreadable: %v", req.Cluster, err)
		return false
	}
	cr.mu.Lock()
	var primary string
	if cr.state != nil && cr.state.Phase == topo.PhaseStable {
		primary = cr.state.Primary
	}
	cr.mu.Unlock()
	n := cl.Node(primary)
	if n == nil {
		req.Message = fmt.Sprintf("cluster %s has no stable published primary: the floor is reset to a live primary's position only", req.Cluster)
		return false
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err != nil {
		req.Message = err.Error()
		return false
	}
	p := pr.Probe(ctx)
	if !complete(p) || p.Replicating {
		req.Message = fmt.Sprintf("primary %s cannot be probed completely (%s) or replicates: floor not reset", primary, orDash(p.Error))
		return false
	}
	pos, err := analysis.Executed(cl.Flavor, p)
	if err != nil {
		req.Message = fmt.Sprintf("position of primary %s does not parse: %v", primary, err)
		return false
	}
	m := t.fo.memory(cl.Name)
	doc, err := t.floor(ctx, cl.Name, m, true)
	if err != nil {
		req.Message = err.Error()
		return false
	}
	now := t.c.now()
	doc.Lowered, doc.ResetAt = doc.GTID, &now
	doc.ResetReason = fmt.Sprintf("reset to primary %s's position by %s: %s", primary, orDash(req.By), req.Reason)
	doc.GTID, doc.Primary, doc.Epoch = pos.String(), primary, epochOf(cr)
	if err := t.writeFloor(ctx, cl.Name, m, doc); err != nil {
		req.Message = "floor not reset: " + err.Error()
		return false
	}
	req.Message = fmt.Sprintf("promotion floor of %s reset from %s to %s (primary %s) by %s: %s", cl.Name, orDash(doc.Lowered), doc.GTID, primary, orDash(req.By), req.Reason)
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: cl.Name, Kind: topo.EventOperator, Code: "floor_reset", Node: primary, Message: req.Message, Epoch: doc.Epoch, Actor: req.By})
	return true
}
