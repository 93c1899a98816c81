package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// While a failover holds the cluster's operation slot, a plan (failover
// --plan, the dead_primary hook's) is still computed, and an operator's
// failover is refused with what is running and since when; once the slot
// is released the plan-only run left nothing held.
func TestPlanDoesNotTakeTheOperationSlot(t *testing.T) {
	st := topo.NewMemory()
	cfg := unreachableConfig(t)
	putState(t, st, withNodes(cfg, topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Phase: topo.PhaseStable}))
	c, err := New(Options{Config: cfg, Store: st, Keys: testKeys, ID: "ctl-slot", Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader, err := st.Campaign(ctx, testKeys.Election(), "ctl-slot")
	if err != nil {
		t.Fatal(err)
	}
	tm := newTerm(c, leader)
	defer tm.fo.wg.Wait()
	cr, err := tm.cluster(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cr.claim("automatic failover", c.now().Add(-1500*time.Millisecond)); !ok {
		t.Fatal("the slot of an idle cluster could not be claimed")
	}

	result, plan, _, msg := tm.runFailover(ctx, failoverOptions{cluster: "main", planOnly: true})
	if strings.Contains(msg, "another switchover or failover") || plan.OldPrimary != "node1" || len(plan.Candidates) != 2 {
		t.Fatalf("plan while a failover runs: result %s, plan %+v, message %q; want the plan computed", result, plan, msg)
	}
	t.Logf("plan while a failover runs: %s: %s", result, firstLine(msg))

	result, _, _, msg = tm.runFailover(ctx, failoverOptions{cluster: "main", by: "ops@host"})
	if result != foRefused || !strings.Contains(msg, "another switchover or failover of cluster main is running: automatic failover (started 1.") {
		t.Fatalf("operator failover while a failover runs: %s %q; want refused naming what runs and since when", result, msg)
	}
	t.Logf("operator failover while a failover runs: %s: %s", result, msg)

	cr.release()
	if busy, ok := cr.claim("manual failover requested by ops@host", c.now()); !ok {
		t.Fatalf("after release the slot is still held: %s", busy)
	}
	if busy, ok := cr.claim("switchover request x", c.now()); ok || !strings.Contains(busy, "manual failover requested by ops@host") {
		t.Fatalf("second claim: ok %v, %q", ok, busy)
	}
	cr.release()
}
