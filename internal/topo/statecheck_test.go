package topo

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckState(t *testing.T) {
	cfg := NodeAddrs{"node1": "127.0.0.1:3301", "node2": "127.0.0.1:3302", "node3": "127.0.0.1:3303"}
	nodes := func(names ...string) []NodeState {
		if len(names) == 0 {
			names = []string{"node1", "node2", "node3"}
		}
		var out []NodeState
		for _, n := range names {
			out = append(out, NodeState{Name: n, Address: cfg[n]})
		}
		return out
	}
	st := func(primary string, epoch int64, phase string, mut ...func(*ClusterState)) ClusterState {
		s := ClusterState{Cluster: "main", Primary: primary, Epoch: epoch, Phase: phase, Nodes: nodes()}
		for _, m := range mut {
			m(&s)
		}
		return s
	}
	target := func(n string) func(*ClusterState) { return func(s *ClusterState) { s.Target = n } }
	oldPrimary := func(n string) func(*ClusterState) { return func(s *ClusterState) { s.OldPrimary = n } }
	auto := func(a *AutoFailover) func(*ClusterState) { return func(s *ClusterState) { s.AutoFailover = a } }
	lost := func(l *PrimaryLost) func(*ClusterState) { return func(s *ClusterState) { s.PrimaryLost = l } }
	stable5 := st("node1", 5, PhaseStable)
	failover6 := st("", 6, PhaseFailover, oldPrimary("node1"), target("node2"))
	switching5 := st("node1", 5, PhaseSwitching, target("node2"))
	noPrimary := st("", 0, PhaseStable)

	cases := []struct {
		name  string
		next  ClusterState
		last  *ClusterState
		nodes NodeAddrs
		want  string // "" = valid, else a substring of the error
	}{
		// Every write the controller makes.
		{"first state, no primary yet", noPrimary, nil, cfg, ""},
		{"first state after discovery", st("node1", 1, PhaseStable), nil, cfg, ""},
		{"discovery", st("node1", 1, PhaseStable), &noPrimary, cfg, ""},
		{"probe round republish", stable5, &stable5, cfg, ""},
		{"empty phase is stable", st("node1", 5, ""), &stable5, cfg, ""},
		{"switchover announced", switching5, &stable5, cfg, ""},
		{"switchover published", st("node2", 6, PhaseStable), &switching5, cfg, ""},
		{"switchover rolled back", stable5, &switching5, cfg, ""},
		{"failover phase", failover6, &stable5, cfg, ""},
		{"failover phase republished", failover6, &failover6, cfg, ""},
		{"failover published", st("node2", 6, PhaseStable), &failover6, cfg, ""},
		{"failover rolled back", st("node1", 6, PhaseStable), &failover6, cfg, ""},
		{"missed the failover phase", st("node2", 6, PhaseStable), &stable5, cfg, ""},
		{"missed a rolled back failover", st("node1", 6, PhaseStable), &stable5, cfg, ""},
		{"missed several epochs", st("node3", 9, PhaseStable), &stable5, cfg, ""},
		{"first state is a failover phase", failover6, nil, cfg, ""},
		{"removed primary dropped", st("", 5, PhaseStable, func(s *ClusterState) { s.Nodes = nodes("node2", "node3") }),
			&stable5, NodeAddrs{"node2": cfg["node2"], "node3": cfg["node3"]}, ""},
		{"without config", stable5, &stable5, nil, ""},
		{"auto failover ready", st("node1", 5, PhaseStable, auto(&AutoFailover{Ready: true, Candidate: "node2"})), &stable5, cfg, ""},
		{"auto failover not ready", st("node1", 5, PhaseStable, auto(&AutoFailover{Class: AutoNotAuto, Reason: "failover.mode is manual"})), &stable5, cfg, ""},

		// Bad writes.
		{"other cluster", st("node1", 5, PhaseStable, func(s *ClusterState) { s.Cluster = "other" }), &stable5, cfg, "names cluster"},
		{"no cluster name", st("node1", 5, PhaseStable, func(s *ClusterState) { s.Cluster = "" }), &stable5, cfg, "names cluster"},
		{"epoch regresses", st("node1", 4, PhaseStable), &stable5, cfg, "lower than the applied epoch"},
		{"negative epoch", st("node1", -1, PhaseStable), nil, cfg, "negative"},
		{"unknown phase", st("node1", 5, "exploding"), &stable5, cfg, "unknown phase"},
		{"no nodes (a primary-dropping write)", st("", 6, PhaseStable, func(s *ClusterState) { s.Nodes = nil }), &stable5, cfg, "no nodes"},
		{"drops the primary without failover", st("", 6, PhaseStable), &stable5, cfg, "drops primary node1"},
		{"drops the primary, same epoch", st("", 5, PhaseStable), &stable5, cfg, "drops primary node1"},
		{"drops the primary in phase switching", st("", 5, PhaseSwitching, target("node2")), &stable5, cfg, "without a primary"},
		{"unknown primary", st("node9", 6, PhaseStable), &stable5, cfg, "primary node9 is not a configured node"},
		{"unknown target", st("node1", 5, PhaseSwitching, target("node9")), &stable5, cfg, "target node9"},
		{"unknown old primary", st("", 6, PhaseFailover, oldPrimary("node9"), target("node2")), &stable5, cfg, "old primary node9"},
		{"unknown node", st("node1", 5, PhaseStable, func(s *ClusterState) {
			s.Nodes = append(s.Nodes, NodeState{Name: "node9", Address: "10.9.9.9:3306"})
		}), &stable5, cfg, "node node9 is not a configured node"},
		{"forged address", st("node1", 5, PhaseStable, func(s *ClusterState) { s.Nodes[0].Address = "10.9.9.9:3306" }),
			&stable5, cfg, "has address 10.9.9.9:3306"},
		{"duplicate node", st("node1", 5, PhaseStable, func(s *ClusterState) { s.Nodes = append(s.Nodes, s.Nodes[0]) }),
			&stable5, cfg, "listed twice"},
		{"unnamed node", st("node1", 5, PhaseStable, func(s *ClusterState) { s.Nodes[1].Name = "" }), &stable5, cfg, "no name"},
		{"other primary, same epoch", st("node2", 5, PhaseStable), &stable5, cfg, "in the same epoch"},
		{"failover phase with a primary", st("node2", 6, PhaseFailover, oldPrimary("node1")), &stable5, cfg, "phase failover with primary"},
		{"failover phase without old primary", st("", 6, PhaseFailover, target("node2")), &stable5, cfg, "without the old primary"},
		{"failover phase without epoch bump", st("", 5, PhaseFailover, oldPrimary("node1")), &stable5, cfg, "bumps the epoch"},
		{"switching without target", st("node1", 5, PhaseSwitching), &stable5, cfg, "without a target"},
		{"switching to itself", st("node1", 5, PhaseSwitching, target("node1")), &stable5, cfg, "without a target"},
		{"auto failover ready with a reason", st("node1", 5, PhaseStable, auto(&AutoFailover{Ready: true, Class: AutoBlocked, Reason: "x"})), &stable5, cfg, "ready but gives a reason"},
		{"auto failover unknown class", st("node1", 5, PhaseStable, auto(&AutoFailover{Class: "bored", Reason: "x"})), &stable5, cfg, "unknown class"},
		{"auto failover without reason", st("node1", 5, PhaseStable, auto(&AutoFailover{Class: AutoBlocked})), &stable5, cfg, "without a reason"},
		{"auto failover unknown candidate", st("node1", 5, PhaseStable, auto(&AutoFailover{Ready: true, Candidate: "node9"})), &stable5, cfg, "candidate node9"},
		{"primary lost", st("node1", 5, PhaseStable, lost(&PrimaryLost{Node: "node1", Epoch: 5, Class: AutoNotAuto, Reason: "failover.mode is manual"})), &stable5, cfg, ""},
		{"primary lost without a node", st("node1", 5, PhaseStable, lost(&PrimaryLost{Class: AutoNotAuto, Reason: "x"})), &stable5, cfg, "names no node"},
		{"primary lost unknown node", st("node1", 5, PhaseStable, lost(&PrimaryLost{Node: "node9", Class: AutoNotAuto, Reason: "x"})), &stable5, cfg, "node9"},
		{"primary lost unknown class", st("node1", 5, PhaseStable, lost(&PrimaryLost{Node: "node1", Class: "bored", Reason: "x"})), &stable5, cfg, "unknown class"},
		{"primary lost without reason", st("node1", 5, PhaseStable, lost(&PrimaryLost{Node: "node1", Class: AutoBlocked})), &stable5, cfg, "without a reason"},
		{"without config, primary not listed", st("node9", 6, PhaseStable), &stable5, nil, "not among the state's nodes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckState(c.next, "main", c.last, c.nodes)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("legitimate state refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("bad state accepted, want an error containing %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not contain %q", err, c.want)
			case err != nil && !errors.Is(err, ErrStateInvalid):
				t.Fatalf("error %v does not wrap ErrStateInvalid", err)
			}
		})
	}
}

func TestDecodeState(t *testing.T) {
	cfg := NodeAddrs{"node1": "a:1", "node2": "a:2"}
	good := `{"cluster":"main","primary":"node1","epoch":3,"phase":"stable","nodes":[{"name":"node1","address":"a:1"},{"name":"node2"}]}`
	cases := []struct {
		name, raw, want string
	}{
		{"valid", good, ""},
		{"empty", "", "empty"},
		{"spaces", "  \n", "empty"},
		{"null", "null", "empty"},
		{"garbage", "{not json", "does not decode"},
		{"wrong type", `{"cluster":"main","epoch":"three"}`, "does not decode"},
		{"trailing data", good + `{}`, "after its JSON object"},
		{"array", `[1,2]`, "does not decode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := DecodeState([]byte(c.raw), "main", nil, cfg)
			if c.want == "" {
				if err != nil || st.Primary != "node1" || st.Epoch != 3 {
					t.Fatalf("DecodeState = %+v, %v; want primary node1 epoch 3", st, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrStateInvalid) {
				t.Fatalf("DecodeState error = %v, want ErrStateInvalid containing %q", err, c.want)
			}
		})
	}
}
