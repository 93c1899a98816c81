package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestAutoFailoverReadiness(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cluster := func(mode string, promos ...string) *config.Cluster {
		cl := &config.Cluster{Name: "main", Failover: config.FailoverConfig{Mode: mode}}
		for i, addr := range []string{"127.0.0.1:3301", "127.0.0.1:3302", "127.0.0.1:3303"} {
			p := "neutral"
			if i < len(promos) {
				p = promos[i]
			}
			cl.Nodes = append(cl.Nodes, config.Node{Name: "node" + string(rune('1'+i)), Address: addr, Promotion: p})
		}
		return cl
	}
	replica := func(name string, port int, sql bool) topo.NodeState {
		return topo.NodeState{Name: name, Probe: topo.Probe{Reachable: true, At: now, Replicating: true,
			SourceHost: "127.0.0.1", SourcePort: port, IORunning: "Yes", SQLRunning: sql}}
	}
	state := func(mut ...func(*topo.ClusterState)) *topo.ClusterState {
		st := &topo.ClusterState{Cluster: "main", Primary: "node1", Phase: topo.PhaseStable, Nodes: []topo.NodeState{
			{Name: "node1", Probe: topo.Probe{Reachable: true, At: now}},
			replica("node2", 3301, true), replica("node3", 3301, true)}}
		for _, m := range mut {
			m(st)
		}
		return st
	}
	cases := []struct {
		name      string
		cl        *config.Cluster
		st        *topo.ClusterState
		class     string // "" = ready
		candidate string
		says      string
		recent    func(string) (topo.Probe, bool)
	}{
		{"auto, healthy replicas", cluster("auto"), state(), "", "node2", "", nil},
		{"prefer wins", cluster("auto", "neutral", "neutral", "prefer"), state(), "", "node3", "", nil},
		{"manual", cluster("manual"), state(), topo.AutoNotAuto, "", "switchyard failover --cluster main", nil},
		{"maintenance", cluster("auto"), state(func(s *topo.ClusterState) { s.Maintenance = &topo.Maintenance{Reason: "upgrade"} }), topo.AutoMaintenance, "", "maintenance mode is on (upgrade)", nil},
		{"disabled", cluster("auto"), state(func(s *topo.ClusterState) { s.AutoDisabled = "promotion timed out" }), topo.AutoDisabledOff, "", "promotion timed out", nil},
		{"blocked", cluster("auto"), state(func(s *topo.ClusterState) {
			s.FailoverBlock = &topo.FailoverBlock{Until: now.Add(time.Hour), Reason: "failover at epoch 3"}
		}), topo.AutoBlocked, "", "blocked until 2026-01-01T01:00:00Z", nil},
		{"block expired", cluster("auto"), state(func(s *topo.ClusterState) {
			s.FailoverBlock = &topo.FailoverBlock{Until: now.Add(-time.Second), Reason: "old"}
		}), "", "node2", "", nil},
		{"every replica must_not", cluster("auto", "neutral", "must_not", "must_not"), state(), topo.AutoNoCandidate, "", "no replica of node1", nil},
		{"replicas quarantined or stopped", cluster("auto"), state(func(s *topo.ClusterState) {
			s.Quarantined = map[string]string{"node2": "errant GTIDs"}
			s.Nodes[2] = replica("node3", 3301, false)
		}), topo.AutoNoCandidate, "", "could be promoted", nil},
		{"replica of another source", cluster("auto"), state(func(s *topo.ClusterState) {
			s.Nodes[1] = replica("node2", 3309, true)
			s.Nodes[2].Probe.Reachable = false
		}), topo.AutoNoCandidate, "", "could be promoted", nil},
		{"no primary", cluster("auto"), state(func(s *topo.ClusterState) { s.Primary = "" }), topo.AutoNoCandidate, "", "no known primary", nil},
		{"replicas missed one round, recent probes good", cluster("auto"), state(func(s *topo.ClusterState) {
			s.Nodes[1].Probe = topo.Probe{Error: "timeout", ErrorKind: "timeout", At: now}
			s.Nodes[2].Probe = topo.Probe{Error: "timeout", ErrorKind: "timeout", At: now}
		}), "", "node2", "", func(n string) (topo.Probe, bool) { return replica(n, 3301, true).Probe, true }},
		{"replicas missed rounds, nothing recent", cluster("auto"), state(func(s *topo.ClusterState) {
			s.Nodes[1].Probe = topo.Probe{Error: "timeout", ErrorKind: "timeout", At: now}
			s.Nodes[2].Probe = topo.Probe{Error: "timeout", ErrorKind: "timeout", At: now}
		}), topo.AutoNoCandidate, "", "could be promoted", func(string) (topo.Probe, bool) { return topo.Probe{}, false }},
		{"a recent probe never overrides a complete one", cluster("auto"), state(func(s *topo.ClusterState) {
			s.Nodes[1] = replica("node2", 3301, false)
			s.Nodes[2] = replica("node3", 3301, false)
		}), topo.AutoNoCandidate, "", "could be promoted", func(n string) (topo.Probe, bool) { return replica(n, 3301, true).Probe, true }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := autoFailoverReadiness(c.cl, c.st, now, c.recent)
			if a.Ready != (c.class == "") || a.Class != c.class || a.Candidate != c.candidate {
				t.Fatalf("got %+v, want class %q candidate %q", a, c.class, c.candidate)
			}
			if !strings.Contains(a.Reason, c.says) {
				t.Fatalf("reason %q does not say %q", a.Reason, c.says)
			}
			st := *c.st
			st.AutoFailover = &a
			if err := topo.CheckState(st, "main", nil, nil); err != nil {
				t.Fatalf("published readiness fails the state check: %v", err)
			}
		})
	}
}
