package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestFailsafeVerdict: the failsafe rule confirms a primary only when it is
// writable and every other node is read-only and replicating from it with
// its IO thread running (or quarantined and read-only).
func TestFailsafeVerdict(t *testing.T) {
	cl := &config.Cluster{Name: "main", Nodes: []config.Node{
		{Name: "n1", Address: "10.0.0.1:3306"}, {Name: "n2", Address: "10.0.0.2:3306"}, {Name: "n3", Address: "10.0.0.3:3306"},
	}}
	primary := topo.Probe{Reachable: true}
	replica := topo.Probe{Reachable: true, ReadOnly: true, Replicating: true, SourceHost: "10.0.0.1", SourcePort: 3306, IORunning: "Yes", SQLRunning: true}
	healthy := func() map[string]topo.Probe {
		return map[string]topo.Probe{"n1": primary, "n2": replica, "n3": replica}
	}
	st := topo.ClusterState{Cluster: "main", Primary: "n1", Epoch: 3}
	cases := []struct {
		name   string
		edit   func(map[string]topo.Probe, *topo.ClusterState)
		refuse string // "" = confirmed
		soft   bool   // a node did not answer: the last confirmation only expires
	}{
		{"healthy", nil, "", false},
		{"primary fenced", func(p map[string]topo.Probe, _ *topo.ClusterState) { x := p["n1"]; x.ReadOnly = true; p["n1"] = x }, "n1: primary is read_only=ON", false},
		{"primary unreachable", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n1"] = topo.Probe{Error: "connection refused"} }, "n1: unreachable", true},
		{"replica promoted", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n2"] = primary }, "n2: writable", false},
		{"candidate IO stopped", func(p map[string]topo.Probe, _ *topo.ClusterState) { x := p["n2"]; x.IORunning = "No"; p["n2"] = x }, `n2: IO thread "No"`, false},
		{"replica reconnecting", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			x := p["n3"]
			x.IORunning = "Connecting"
			p["n3"] = x
		}, `n3: IO thread "Connecting"`, false},
		{"replica repointed", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			x := p["n3"]
			x.SourceHost = "10.0.0.2"
			p["n3"] = x
		}, "n3: replicates from 10.0.0.2:3306", false},
		{"replica reset", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			p["n3"] = topo.Probe{Reachable: true, ReadOnly: true}
		}, "n3: not replicating", false},
		{"replica unreachable", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n3"] = topo.Probe{Error: "timeout"} }, "n3: unreachable", true},
		{"replica not checked", func(p map[string]topo.Probe, _ *topo.ClusterState) { delete(p, "n3") }, "n3: not checked", true},
		{"quarantined read-only", func(p map[string]topo.Probe, st *topo.ClusterState) {
			p["n3"] = topo.Probe{Reachable: true, ReadOnly: true}
			st.Quarantined = map[string]string{"n3": "errant GTIDs"}
		}, "", false},
		{"quarantined writable", func(p map[string]topo.Probe, st *topo.ClusterState) {
			p["n3"] = primary
			st.Quarantined = map[string]string{"n3": "errant GTIDs"}
		}, "n3: writable", false},
		{"primary replicates", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n1"] = replica }, "n1: primary is read_only=ON", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, s := healthy(), st
			if c.edit != nil {
				c.edit(p, &s)
			}
			err := failsafeVerdict(cl, s, p)
			switch {
			case c.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse)):
				t.Fatalf("got %v, want a refusal naming %q", err, c.refuse)
			case err != nil:
				var r *failsafeRefusal
				if !errors.As(err, &r) || r.definitive == c.soft {
					t.Fatalf("refusal %v: definitive %v, want %v", err, r != nil && r.definitive, !c.soft)
				}
			}
		})
	}
	if err := failsafeVerdict(cl, topo.ClusterState{Primary: "n9"}, healthy()); err == nil {
		t.Fatal("an unknown primary was confirmed")
	}
}
