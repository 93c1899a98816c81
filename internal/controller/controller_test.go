package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// unreachableConfig is a 3-node cluster whose nodes refuse connections.
func unreachableConfig(t *testing.T) *config.Config {
	cfg := &config.Config{
		Credentials: config.Credentials{
			Monitor:     config.Credential{User: "mon", Password: "pw"},
			Replication: config.Credential{User: "repl", Password: "pw"},
		},
		Clusters: []config.Cluster{{Name: "main", Nodes: []config.Node{
			{Name: "node1", Address: closedAddr(t)},
			{Name: "node2", Address: closedAddr(t)},
			{Name: "node3", Address: closedAddr(t)},
		}}},
		Probe: config.ProbeConfig{Interval: config.Duration(50 * time.Millisecond), Timeout: config.Duration(40 * time.Millisecond)},
	}
	cfg.ApplyDefaults()
	return cfg
}

func TestNewValidatesOptions(t *testing.T) {
	st := topo.NewMemory()
	cfg := unreachableConfig(t)
	for name, o := range map[string]Options{
		"no config": {Store: st, ID: "a"},
		"no store":  {Config: cfg, ID: "a"},
		"no id":     {Config: cfg, Store: st},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	bad := unreachableConfig(t)
	bad.Credentials.Monitor = config.Credential{User: "mon", PasswordEnv: "SWITCHYARD_TEST_UNSET_VARIABLE"}
	if _, err := New(Options{Config: bad, Store: st, ID: "a"}); err == nil || !strings.Contains(err.Error(), "credentials.monitor") {
		t.Errorf("unresolvable monitor password: %v", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Config: cfg, Store: st, ID: "a", Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Config: cfg, Store: st, ID: "b", Registry: reg}); err == nil {
		t.Error("registering two controllers' metrics in one registry must fail clearly")
	}
}

func TestRequestSwitchoverWithoutLeader(t *testing.T) {
	st := topo.NewMemory()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := RequestSwitchover(ctx, st, testKeys, "main", "")
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("err = %v, want ErrNoLeader", err)
	}
	kvs, _ := st.List(ctx, testKeys.Requests("main"))
	if len(kvs) != 0 {
		t.Fatalf("a request was created without a leader: %v", kvs)
	}
}

func start(t *testing.T, cfg *config.Config, st topo.Store, id string) (*Controller, context.CancelFunc) {
	t.Helper()
	c, err := New(Options{Config: cfg, Store: st, Keys: testKeys, ID: id, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("controller did not stop")
		}
	})
	return c, cancel
}

// withNodes fills s.Nodes with every configured node of its cluster, as a
// controller publishes them.
func withNodes(cfg *config.Config, s topo.ClusterState) topo.ClusterState {
	for _, n := range cfg.Cluster(s.Cluster).Nodes {
		s.Nodes = append(s.Nodes, topo.NodeState{Name: n.Name, Address: n.Address, Role: topo.RoleUnknown})
	}
	return s
}

func putState(t *testing.T, st topo.Store, s topo.ClusterState) {
	t.Helper()
	b, _ := json.Marshal(s)
	if _, err := st.Create(context.Background(), testKeys.ClusterState(s.Cluster), b); err != nil {
		t.Fatal(err)
	}
}

func waitMem(t *testing.T, st topo.Store, what string, ok func(topo.ClusterState) bool) topo.ClusterState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last topo.ClusterState
	for time.Now().Before(deadline) {
		var s topo.ClusterState
		if _, err := topo.GetJSON(context.Background(), st, testKeys.ClusterState("main"), &s); err == nil {
			last = s
			if ok(s) {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last state %+v", what, last)
	return last
}

func TestUnreachableClusterAndRequests(t *testing.T) {
	st := topo.NewMemory()
	c, _ := start(t, unreachableConfig(t), st, "ctl-a")

	s := waitMem(t, st, "a state", func(topo.ClusterState) bool { return true })
	if !c.IsLeader() || s.Primary != "" || s.Epoch != 0 || s.Leader != "ctl-a" {
		t.Fatalf("state %+v leader %v; want no primary, epoch 0, written by ctl-a", s, c.IsLeader())
	}
	for _, n := range s.Nodes {
		if n.Probe.Reachable || n.Serving || !strings.HasPrefix(n.Reason, "unreachable: connection refused") {
			t.Errorf("%s: %+v", n.Name, n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := RequestSwitchover(ctx, st, testKeys, "main", "node2")
	if !errors.Is(err, ErrRequestFailed) || req.State != topo.RequestFailed || !strings.Contains(req.Message, "no published primary") {
		t.Fatalf("switchover of a cluster without primary: %v %+v", err, req)
	}
	// A mistyped cluster is refused before anything is written, naming the
	// known clusters.
	_, err = RequestSwitchover(ctx, st, testKeys, "nosuch", "")
	if !errors.Is(err, ErrUnknownCluster) || !strings.Contains(err.Error(), `unknown cluster "nosuch"`) || !strings.Contains(err.Error(), "known clusters: main") {
		t.Fatalf("switchover of an unknown cluster: %v", err)
	}
	if kvs, err := st.List(ctx, testKeys.Requests("nosuch")); err != nil || len(kvs) != 0 {
		t.Fatalf("request keys left for the unknown cluster: %v %v", kvs, err)
	}
	if _, err := Undrain(ctx, st, testKeys, "main", "node9"); err == nil || !strings.Contains(err.Error(), "node9 is not a node of cluster main (its nodes: node1, node2") {
		t.Fatalf("undrain of an unknown node: %v", err)
	}
}

// A published primary that is unreachable stays primary (no failover), and
// the epoch is kept across leadership changes.
func TestUnreachablePrimaryKeptAcrossLeadershipLoss(t *testing.T) {
	st := topo.NewMemory()
	cfg := unreachableConfig(t)
	putState(t, st, withNodes(cfg, topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 5, Phase: topo.PhaseStable}))
	c, _ := start(t, cfg, st, "ctl-a")
	s := waitMem(t, st, "a write by ctl-a", func(s topo.ClusterState) bool { return s.Leader == "ctl-a" })
	if s.Primary != "node1" || s.Epoch != 5 || !strings.HasPrefix(s.Node("node1").Reason, "primary unreachable") {
		t.Fatalf("state %+v; want node1 kept at epoch 5 with reason primary unreachable", s)
	}
	kv, _ := st.Get(context.Background(), testKeys.ClusterState("main"))

	st.(*topo.Memory).ExpireLeases()
	// The controller notices, stops, campaigns again and wins again.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		now, _ := st.Get(context.Background(), testKeys.ClusterState("main"))
		if now.Version > kv.Version && c.IsLeader() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s = waitMem(t, st, "state after re-election", func(s topo.ClusterState) bool { return s.Primary == "node1" })
	if s.Epoch != 5 || !c.IsLeader() {
		t.Fatalf("after leadership loss: epoch %d leader %v", s.Epoch, c.IsLeader())
	}
}

// A switchover left in phase switching by a previous leader, with the old
// primary unreachable, returns to stable with the old primary and epoch; a
// request it left Running is failed.
func TestAbandonedSwitchoverResolved(t *testing.T) {
	st := topo.NewMemory()
	cfg := unreachableConfig(t)
	putState(t, st, withNodes(cfg, topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Phase: topo.PhaseSwitching, Target: "node2"}))
	req := topo.Request{ID: "r1", Kind: topo.RequestSwitchover, Cluster: "main", Target: "node2", State: topo.RequestRunning}
	b, _ := json.Marshal(req)
	if _, err := st.Create(context.Background(), testKeys.Request("main", "r1"), b); err != nil {
		t.Fatal(err)
	}
	start(t, cfg, st, "ctl-b")
	s := waitMem(t, st, "phase stable", func(s topo.ClusterState) bool { return s.Phase == topo.PhaseStable })
	if s.Primary != "node1" || s.Epoch != 3 || s.Target != "" {
		t.Fatalf("resolved state %+v; want node1 epoch 3", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var r topo.Request
		if _, err := topo.GetJSON(context.Background(), st, testKeys.Request("main", "r1"), &r); err != nil {
			t.Fatal(err)
		}
		if r.State == topo.RequestFailed && strings.Contains(r.Message, "leader changed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("abandoned request not failed: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Nodes added by SetConfig are probed and published at the next round.
func TestSetConfigAddsNode(t *testing.T) {
	st := topo.NewMemory()
	cfg := unreachableConfig(t)
	c, _ := start(t, cfg, st, "ctl-a")
	waitMem(t, st, "three nodes", func(s topo.ClusterState) bool { return len(s.Nodes) == 3 })
	next := unreachableConfig(t)
	next.Clusters[0].Nodes = append(cfg.Clusters[0].Nodes, config.Node{Name: "node4", Address: closedAddr(t), Promotion: "neutral"})
	c.SetConfig(next)
	waitMem(t, st, "four nodes", func(s topo.ClusterState) bool { return len(s.Nodes) == 4 && s.Node("node4") != nil })
}
