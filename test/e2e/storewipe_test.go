package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestStoreWipeEpochsMoveOn: the proxy never lowers its epoch, so a state
// published again from epoch 1 would be refused by it from then on,
// failovers and switchovers included. Two ways the state can go missing
// while a proxy routes by epoch 2:
//   - every key of the store is deleted (etcdctl del --prefix) while the
//     controller runs;
//   - the state key is deleted while no controller runs, and a controller
//     that never saw the cluster starts (a leader frozen or restarted, the
//     other one taking over).
//
// Each time the state comes back at an epoch the proxy accepts (never
// below its own), the proxy applies it, writes go on, and a switchover
// afterwards reaches the proxy.
func TestStoreWipeEpochsMoveOn(t *testing.T) {
	s := startSwitchStack(t, 1, nil)
	if out, err := s.switchover("node2"); err != nil {
		t.Fatalf("switchover to node2: %v\n%s", err, out)
	}
	s.waitServing("node2")
	db := s.open("primary", "sbtest")
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS wipe_t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// 1. Every key deleted, the controller running.
	before := s.proxy.Epochs()["main"]
	kvs, err := s.store.List(ctx, s.keys.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if err := s.store.Delete(ctx, kv.Key, 0); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatalf("delete %s: %v", kv.Key, err)
		}
	}
	t.Logf("deleted %d keys under %s; the proxy routes by epoch %d", len(kvs), s.keys.Prefix, before)
	after := s.backAbove(before, "node2")
	s.writeAndSwitch(db, 1, "node1", after)

	// 2. The state key deleted while no controller runs; a new one starts.
	s.stopCtrl()
	before = s.proxy.Epochs()["main"]
	if err := s.store.Delete(ctx, s.keys.ClusterState("main"), 0); err != nil {
		t.Fatal(err)
	}
	ctrl2, err := controller.New(controller.Options{Config: s.cfg, Store: topotest.Connect(t, s.endpoints), Keys: s.keys, ID: "ctrl-2",
		Log: topotest.Logger(t).With("role", "controller-2")})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = ctrl2.Run(cctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	t.Logf("state key deleted with no controller running; the proxy routes by epoch %d; ctrl-2 started", before)
	after = s.backAbove(before, "node1")
	if after.Epoch <= before {
		t.Fatalf("a controller that never saw the cluster published epoch %d, the proxy routes by %d", after.Epoch, before)
	}
	s.writeAndSwitch(db, 2, "node2", after)
}

// backAbove waits until the state names primary at an epoch at least
// before and the proxy routes by it, and returns it.
func (s *swStack) backAbove(before int64, primary string) topo.ClusterState {
	s.t.Helper()
	took := s.waitFor("a state at or above the proxy's epoch, applied by it", 30*time.Second, func(st topo.ClusterState) bool {
		return st.Epoch >= before && st.Primary == primary && st.Phase == topo.PhaseStable && s.proxy.Epochs()["main"] == st.Epoch
	})
	st := s.state()
	s.t.Logf("state back at epoch %d (primary %s) after %s", st.Epoch, st.Primary, took.Round(time.Millisecond))
	return st
}

// writeAndSwitch writes row id through the proxy, switches over to to and
// checks that the proxy follows to a later epoch than cur and that a
// write reaches to.
func (s *swStack) writeAndSwitch(db *sql.DB, id int, to string, cur topo.ClusterState) {
	s.t.Helper()
	if _, err := db.Exec("INSERT INTO wipe_t VALUES (?)", id); err != nil {
		s.t.Fatalf("write through the proxy: %v", err)
	}
	s.waitServing(cur.Primary)
	if out, err := s.switchover(to); err != nil {
		s.t.Fatalf("switchover to %s: %v\n%s", to, err, out)
	}
	s.waitFor("the proxy on the switchover's epoch", 15*time.Second, func(st topo.ClusterState) bool {
		return st.Primary == to && st.Epoch > cur.Epoch && s.proxy.Epochs()["main"] == st.Epoch
	})
	if _, err := db.Exec("INSERT INTO wipe_t VALUES (?)", id+100); err != nil {
		s.t.Fatalf("write through the proxy after the switchover to %s: %v", to, err)
	}
}
