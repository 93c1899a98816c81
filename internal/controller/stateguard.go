package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// The cluster state key is written by the leader only, with compare-and-swap
// conditioned on its leadership, so while a term holds a cluster's state
// (cr.state, loaded at the start of the term or written by it) any later
// write to the key came from outside the controller: an operator or a tool
// writing etcd directly. Such a write is never adopted, however plausible
// it looks (a forged primary at a higher epoch would otherwise make this
// controller fence the real primary): the leader overwrites it at once
// with its own state. Proxies refuse what topo.CheckState rejects and keep
// their last good state; a plausible forgery they may have applied is
// superseded because the overwrite carries a higher epoch than the forged
// one.

// guardStates watches every cluster's state key during the term and
// overwrites writes that did not come from it.
func (t *term) guardStates(ctx context.Context) {
	prefix := t.c.keys.ClustersPrefix()
	for ctx.Err() == nil {
		_, events, err := t.c.store.Watch(ctx, prefix)
		if err != nil {
			if ctx.Err() == nil {
				t.log.Warn("cannot watch the cluster states; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for ev := range events {
			if ev.Err != nil {
				break
			}
			name, ok := strings.CutPrefix(ev.KV.Key, prefix)
			if !ok {
				continue
			}
			cluster, ok := strings.CutSuffix(name, "/state")
			if !ok || strings.Contains(cluster, "/") {
				continue
			}
			t.foreignWrite(ctx, cluster, ev.KV, ev.Type == topo.EventDelete)
		}
	}
}

// foreignWrite overwrites the state of cluster when kv (or its deletion)
// is a write this term did not make.
func (t *term) foreignWrite(ctx context.Context, cluster string, kv topo.KV, deleted bool) {
	t.mu.Lock()
	cr := t.clusters[cluster]
	t.mu.Unlock()
	if cr == nil {
		return
	}
	cr.mu.Lock()
	// Versions only grow: an event for one of this term's own writes is
	// at most the version it last wrote.
	foreign := cr.loaded && cr.state != nil && (deleted || kv.Version > cr.version)
	var report func()
	if foreign {
		if deleted {
			kv.Version = 0
		}
		report = t.disown(ctx, cr, kv.Value, kv.Version)
	}
	cr.mu.Unlock()
	if !foreign {
		return
	}
	_, err := t.update(ctx, cr, func(*topo.ClusterState) error { return nil })
	if errors.Is(err, topo.ErrNotLeader) {
		// The write was the controller that leads now (this one was
		// frozen past its session and learns it only now): not a
		// forgery.
		t.log.Info("the cluster state was written by the controller that leads now; this one lost its leadership", "cluster", cluster)
		return
	}
	report()
	if err != nil && ctx.Err() == nil {
		t.log.Warn("cannot overwrite the cluster state written outside the controller; the next round retries", "cluster", cluster, "err", err)
	}
}

// disown records that the stored state (raw, at version; version 0: the
// key was deleted) was written outside the controller, keeps cr.state, and
// makes the next write replace it (cr.mu held). When the foreign document
// carries a higher epoch than cr.state, cr.state moves past it so that
// proxies that applied the foreign state accept the overwrite. It returns
// the report (error log, metric, invalid_state alarm): the caller runs it,
// unless the overwrite found this term no longer leading (the write was
// the new leader's).
func (t *term) disown(ctx context.Context, cr *clusterRun, raw []byte, version topo.Version) (report func()) {
	why := "the key was deleted"
	if version != 0 {
		if _, err := topo.DecodeState(raw, cr.name, cr.state, t.nodeAddrs(cr.name)); err != nil {
			why = err.Error()
		} else {
			why = "it is well formed but no controller wrote it"
		}
	}
	var forged struct {
		Epoch int64 `json:"epoch"`
	}
	next := *cr.state
	if json.Unmarshal(raw, &forged) == nil && forged.Epoch >= next.Epoch && forged.Epoch < math.MaxInt64 {
		next.Epoch = forged.Epoch + 1
	}
	cr.state, cr.version = &next, version
	return func() {
		t.c.metrics.stateRejected.WithLabelValues(cr.name).Inc()
		t.log.Error("cluster state written outside the controller; not adopted, overwritten with the controller's state",
			"cluster", cr.name, "why", why, "store_version", version, "epoch", next.Epoch)
		t.invalidState(ctx, cr.name, why, next.Epoch, fmt.Sprintf(
			"the cluster state was not written by a controller (%s): not adopted; overwritten with primary %q at epoch %d; find who writes %s",
			why, next.Primary, next.Epoch, t.c.keys.ClusterState(cr.name)))
	}
}
