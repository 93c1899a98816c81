package controller

import (
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func built(t *testing.T, cl config.Cluster, probes map[string]topo.Probe) *topo.ClusterState {
	t.Helper()
	st, _ := BuildState(BuildInput{Cluster: cl, Probes: probes, Prev: stable("node1", 1)})
	return &st
}

func TestChooseCandidate(t *testing.T) {
	tests := []struct {
		name    string
		rules   map[string]string
		probes  map[string]topo.Probe
		quar    map[string]string // quarantined nodes
		target  string
		want    string
		wantErr string
	}{
		{
			name:   "quarantined target named as such",
			probes: healthy(), quar: map[string]string{"node2": "errant GTIDs: 0-9-1"},
			target: "node2", wantErr: "node2 is quarantined (errant GTIDs: 0-9-1)",
		},
		{
			name:   "quarantined node never chosen",
			probes: healthy(), quar: map[string]string{"node2": "ahead of new primary"}, want: "node3",
		},
		{name: "most advanced GTID wins", probes: healthy(), want: "node2"},
		{
			name:   "most advanced GTID wins (other order)",
			probes: with(healthy(), "node3", func(p *topo.Probe) { p.GTIDCurrent = "0-1-10" }),
			want:   "node2", // equal: config order
		},
		{
			name:   "prefer before neutral even if behind",
			rules:  map[string]string{"node3": "prefer"},
			probes: healthy(), want: "node3",
		},
		{
			name:   "must_not never chosen",
			rules:  map[string]string{"node2": "must_not"},
			probes: healthy(), want: "node3",
		},
		{
			name:   "must_not as explicit target",
			rules:  map[string]string{"node2": "must_not"},
			probes: healthy(), target: "node2", wantErr: "must_not",
		},
		{
			name:   "target is the primary",
			probes: healthy(), target: "node1", wantErr: "already the primary",
		},
		{
			name:   "unknown target",
			probes: healthy(), target: "node9", wantErr: "not a node",
		},
		{
			name:   "target with stopped SQL thread",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.SQLRunning = false }),
			target: "node2", wantErr: "replication threads not running (IO Yes, SQL No)",
		},
		{
			name:   "target lagging",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.LagSeconds = lagp(60) }),
			target: "node2", wantErr: "lag 60s > max 10s",
		},
		{
			name:   "target unreachable",
			probes: with(healthy(), "node2", func(p *topo.Probe) { *p = topo.Probe{Error: "connection refused"} }),
			target: "node2", wantErr: "unreachable",
		},
		{
			name:   "target replicating from elsewhere",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.SourcePort = 3303 }),
			target: "node2", wantErr: "not from primary node1",
		},
		{
			name:   "errant GTID refused",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.GTIDCurrent = "0-1-10,1-2-3" }),
			target: "node2", wantErr: "errant GTIDs 1-2-3",
		},
		{
			name: "skips ineligible replicas",
			probes: with(with(healthy(), "node2", func(p *topo.Probe) { p.IORunning = "No" }),
				"node3", func(p *topo.Probe) {}),
			want: "node3",
		},
		{
			name: "none eligible lists every reason",
			probes: with(with(healthy(), "node2", func(p *topo.Probe) { p.IORunning = "No" }),
				"node3", func(p *topo.Probe) { p.LagSeconds = lagp(99) }),
			wantErr: "no eligible candidate in cluster main: node2 replication threads not running (IO No, SQL Yes); node3: lag 99s > max 10s",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := testCluster()
			for i := range cl.Nodes {
				if r, ok := tc.rules[cl.Nodes[i].Name]; ok {
					cl.Nodes[i].Promotion = r
				}
			}
			st := built(t, cl, tc.probes)
			st.Quarantined = tc.quar
			got, err := chooseCandidate(&cl, st, tc.target)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("chooseCandidate = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCheckStable(t *testing.T) {
	cl := testCluster()
	if err := checkStable(built(t, cl, healthy())); err != nil {
		t.Fatalf("healthy cluster: %v", err)
	}
	st := built(t, cl, with(healthy(), "node1", func(p *topo.Probe) { *p = topo.Probe{Error: "connection refused"} }))
	if err := checkStable(st); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("unreachable primary: %v", err)
	}
	st = built(t, cl, with(healthy(), "node1", func(p *topo.Probe) { p.ReadOnly = true }))
	if err := checkStable(st); err == nil || !strings.Contains(err.Error(), "read_only=ON") {
		t.Fatalf("read-only primary: %v", err)
	}
	st = built(t, cl, healthy())
	st.Phase, st.Target = topo.PhaseSwitching, "node2"
	if err := checkStable(st); err == nil || !strings.Contains(err.Error(), "not stable") {
		t.Fatalf("switching cluster: %v", err)
	}
}
