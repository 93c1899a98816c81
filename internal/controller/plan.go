package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// SwitchoverPlan is what a planned switchover of a cluster would do, as
// far as the published state tells: the leader probes afresh and checks
// again when it runs the switchover, so a plan that is OK may still be
// refused (and the reverse).
type SwitchoverPlan struct {
	Cluster string `json:"cluster"`
	// From is the current primary; To the node that would be promoted
	// ("" when none may be).
	From  string `json:"from"`
	To    string `json:"to,omitempty"`
	Epoch int64  `json:"epoch"`
	// Steps are the switchover's steps in order.
	Steps []string `json:"steps"`
	// Refusals say why the switchover would be refused (empty: it would
	// run).
	Refusals []string `json:"refusals"`
}

// PlanSwitchover returns the plan of a switchover of cluster to target
// ("" lets the controller choose), from the published cluster state, the
// current config revision and the drained nodes. It changes nothing.
// Errors wrap ErrUnknownCluster for a cluster without a published state,
// or the store's error.
func PlanSwitchover(ctx context.Context, st topo.Store, keys topo.Keys, cluster, target string) (SwitchoverPlan, error) {
	p := SwitchoverPlan{Cluster: cluster, Refusals: []string{}}
	cs, err := publishedState(ctx, st, keys, cluster)
	if err != nil {
		return p, err
	}
	p.From, p.Epoch = cs.Primary, cs.Epoch
	_, cfg, _, err := configstore.Current(ctx, st, keys)
	if err != nil {
		return p, fmt.Errorf("read the current config: %w", err)
	}
	cl := cfg.Cluster(cluster)
	if cl == nil {
		return p, fmt.Errorf("cluster %s: %w (not in the current config revision)", cluster, ErrUnknownCluster)
	}
	if err := checkStable(cs); err != nil {
		p.Refusals = append(p.Refusals, err.Error())
	}
	drained, _, err := drainedNodes(ctx, st, keys, cluster)
	if err != nil {
		return p, err
	}
	if cand, err := chooseCandidate(withoutDrained(cl, drained), cs, target); err != nil {
		p.Refusals = append(p.Refusals, err.Error())
	} else {
		p.To = cand
	}
	to := orDash(p.To)
	p.Steps = []string{
		"check: probe every node afresh, verify the cluster is stable and the candidate " + to + " eligible",
		"warmth " + to + ": measure the candidate's buffer pool (raise it first with warm)",
		"pre-catch-up " + to + ": the candidate applies what it received",
		"prepare: proxies hold new statements at transaction boundaries",
		"drain: open transactions finish (switchover.drain_timeout, drain_mode)",
		"fence " + orDash(p.From) + ": read_only=ON, client sessions killed",
		"catch up " + to + ": apply every GTID of the old primary (switchover.catchup_timeout)",
		"promote " + to + ": read_only=OFF",
		fmt.Sprintf("publish primary %s: epoch %d, proxies move sessions and release held statements", to, p.Epoch+1),
		"repoint the other replicas and the old primary to " + to,
	}
	return p, nil
}

var recordSeq atomic.Uint64

// RecordEvent writes an operator event (kind operator unless set) to the
// event log of ev.Cluster from outside the controller leader: for the
// changes that do not go through a leader request (drain, undrain, a
// session killed through the admin API). At, ID and Leader are filled in
// (Leader is by, the process that wrote it). The leader trims the log as
// it writes its own events.
func RecordEvent(ctx context.Context, st topo.Store, keys topo.Keys, by string, ev topo.Event) error {
	if ev.Kind == "" {
		ev.Kind = topo.EventOperator
	}
	ev.At = time.Now().UTC()
	ev.ID = topo.EventID(ev.At, recordSeq.Add(1))
	ev.Leader = by
	data, err := topo.EncodeEvent(&ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	key := keys.Event(ev.Cluster, ev.ID)
	if _, err := st.Create(ctx, key, data); err != nil {
		return fmt.Errorf("write event %s: %w", key, err)
	}
	return nil
}
