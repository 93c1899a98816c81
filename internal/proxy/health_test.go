package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestListenerHealth: what each listener reports from the routing state
// and this proxy's own backend check (no server needed: the proxy is not
// started).
func TestListenerHealth(t *testing.T) {
	c := &config.Config{
		Clusters: []config.Cluster{{Name: "c", Nodes: []config.Node{
			{Name: "n1", Address: "127.0.0.1:1"}, {Name: "n2", Address: "127.0.0.1:2"}}}},
		Listeners: []config.Listener{
			{Name: "rw", Address: "127.0.0.1:0", Cluster: "c", Role: "primary"},
			{Name: "ro", Address: "127.0.0.1:0", Cluster: "c", Role: "replica"},
		},
	}
	c.ApplyDefaults()
	s, err := New(Options{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	byName := func() map[string]ListenerHealth {
		out := map[string]ListenerHealth{}
		for _, h := range s.Health() {
			out[h.Listener] = h
		}
		return out
	}
	h := byName()
	if !strings.Contains(h["rw"].Problem, "no routing state") || !strings.Contains(h["ro"].Problem, "no routing state") {
		t.Fatalf("before any state: %+v", h)
	}
	now := time.Now()
	epoch := int64(0)
	state := func(primary string, analysis ...topo.AnalysisEntry) topo.ClusterState {
		epoch++
		st := topo.ClusterState{Cluster: "c", Primary: primary, Epoch: epoch, Phase: topo.PhaseStable, Analysis: analysis}
		for _, n := range c.Clusters[0].Nodes {
			ns := topo.NodeState{Name: n.Name, Address: n.Address, Role: topo.RoleReplica, Serving: n.Name != primary,
				Probe: topo.Probe{Reachable: true, At: now}}
			if n.Name == primary {
				ns.Role = topo.RolePrimary
			}
			st.Nodes = append(st.Nodes, ns)
		}
		return st
	}
	check := func(what string, rwOK, roOK bool, rwWhy string) {
		t.Helper()
		h := byName()
		if (h["rw"].Problem == "") != rwOK || (h["ro"].Problem == "") != roOK || !strings.Contains(h["rw"].Problem, rwWhy) {
			t.Fatalf("%s: rw %+v, ro %+v; want rw ready %v (%q), ro ready %v", what, h["rw"], h["ro"], rwOK, rwWhy, roOK)
		}
	}
	s.SetClusterState(state("n1"))
	check("primary n1, n2 serving", true, true, "")
	if h := byName()["rw"]; h.Primary != "n1" || !h.PrimaryOK || h.Replicas != 1 || h.Epoch != 1 {
		t.Fatalf("rw: %+v", h)
	}
	// Only the controller lost the primary: this proxy still writes.
	s.SetClusterState(state("n1", topo.AnalysisEntry{Code: "UnreachablePrimary", Node: "n1"}))
	check("UnreachablePrimary only", true, true, "")
	s.SetClusterState(state("n1", topo.AnalysisEntry{Code: "DeadPrimary", Node: "n1"}))
	check("DeadPrimary", false, true, "reports primary n1 dead")
	// This proxy's own check fails.
	s.SetClusterState(state("n1"))
	s.reach.init()
	s.reach.mu.Lock()
	s.reach.nodes["c/n1"] = topo.BackendReach{Cluster: "c", Node: "n1", Reachable: false}
	s.reach.mu.Unlock()
	check("this proxy cannot reach n1", false, true, "this proxy cannot reach primary n1")
	s.reach.mu.Lock()
	s.reach.nodes["c/n1"] = topo.BackendReach{Cluster: "c", Node: "n1", Reachable: true}
	s.reach.mu.Unlock()
	// The primary's latest probe says read_only=ON: writes fail.
	ro := state("n1")
	ro.Nodes[0].Probe.ReadOnly = true
	s.SetClusterState(ro)
	check("primary read_only", false, true, "primary n1 is read_only")
	if h := byName()["rw"]; h.PrimaryOK {
		t.Fatalf("rw with a read_only primary: %+v", h)
	}
	// A probe older than the role (just after a switchover) says nothing.
	ro = state("n1")
	ro.Nodes[0].Probe.ReadOnly = true
	ro.Nodes[0].RoleSince = now.Add(time.Second)
	s.SetClusterState(ro)
	check("read_only probe older than the role", true, true, "")
	// During a switchover the old primary is read-only on purpose.
	ro = state("n1")
	ro.Nodes[0].Probe.ReadOnly = true
	ro.Phase = topo.PhaseSwitching
	s.SetClusterState(ro)
	check("read_only during a switchover", true, true, "")
	s.SetClusterState(state(""))
	check("no primary", false, true, "has no primary")
}
