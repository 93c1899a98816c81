package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func planNodes(db2, db3, db4 topo.Probe) []Node {
	return []Node{
		{Name: "db1", Address: "127.0.0.1:3301", Promotion: "neutral", Probe: refused()},
		{Name: "db2", Address: "127.0.0.1:3302", Promotion: "neutral", Probe: db2, LastLag: lag(0)},
		{Name: "db3", Address: "127.0.0.1:3303", Promotion: "neutral", Probe: db3, LastLag: lag(0)},
		{Name: "db4", Address: "127.0.0.1:3304", Promotion: "neutral", Probe: db4, LastLag: lag(0)},
	}
}

func stopped(p topo.Probe) topo.Probe {
	return with(p, func(p *topo.Probe) { p.IORunning, p.SQLRunning, p.LagSeconds = "No", false, nil })
}

func received(p topo.Probe, io string) topo.Probe {
	return with(p, func(p *topo.Probe) { p.GTIDIO = io })
}

func TestPlan(t *testing.T) {
	oldLast := primaryOK("0-1-120")
	tests := []struct {
		name      string
		nodes     []Node
		mod       func(in *PlanInput)
		candidate string
		refusal   string
		lost      string
		lostCount uint64
		ahead     []string
		rejected  map[string]string // node → substring of its rejection
	}{
		{
			name:      "most advanced wins over promotion rule",
			nodes:     planNodes(replicaOK(2, "0-1-110"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-115")),
			mod:       func(in *PlanInput) { in.Nodes[1].Promotion = "prefer" },
			candidate: "db3",
			rejected:  map[string]string{"db2": "stale: behind db3", "db4": "stale: behind db3"},
		},
		{
			name:      "equal positions: prefer, then config order",
			nodes:     planNodes(replicaOK(2, "0-1-120"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod:       func(in *PlanInput) { in.Nodes[3].Promotion = "prefer" },
			candidate: "db4",
		},
		{
			name:      "relay log counts: received but not yet applied",
			nodes:     planNodes(received(replicaOK(2, "0-1-100"), "0-1-120"), replicaOK(3, "0-1-110"), replicaOK(4, "0-1-110")),
			candidate: "db2",
		},
		{
			name:      "stale node with stopped replication is never promoted (S4)",
			nodes:     planNodes(stopped(replicaOK(2, "0-1-50")), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-119")),
			candidate: "db3",
			rejected:  map[string]string{"db2": "SQL thread stopped", "db4": "stale"},
		},
		{
			name:      "drained node is not a candidate",
			nodes:     planNodes(replicaOK(2, "0-1-120"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod:       func(in *PlanInput) { in.Nodes[1].Drained = true },
			candidate: "db3",
			rejected:  map[string]string{"db2": "drained"},
		},
		{
			name:      "must_not and unreachable excluded",
			nodes:     planNodes(replicaOK(2, "0-1-120"), refused(), replicaOK(4, "0-1-118")),
			mod:       func(in *PlanInput) { in.Nodes[1].Promotion = "must_not" },
			refusal:   "no eligible candidate",
			rejected:  map[string]string{"db2": "must_not", "db3": "unreachable", "db4": "stale: behind db2"},
			candidate: "",
		},
		{
			name:      "errant GTIDs excluded",
			nodes:     planNodes(replicaOK(2, "0-2-121"), replicaOK(3, "0-1-119"), replicaOK(4, "0-1-119")),
			candidate: "db3",
			lost:      "0-1-120",
			ahead:     []string{"db2"},
			rejected:  map[string]string{"db2": "errant"},
		},
		{
			name:  "lag over max_lag excluded while the old primary is reachable",
			nodes: planNodes(replicaOK(2, "0-1-120"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod: func(in *PlanInput) {
				in.Nodes[0].Probe = primaryOK("0-1-120")
				in.Nodes[1].LastLag = lag(60)
				in.Nodes[2].LastLag = lag(60)
			},
			candidate: "db4",
			rejected:  map[string]string{"db2": "lag 60s", "db3": "lag 60s"},
		},
		{
			name:      "quarantined excluded",
			nodes:     planNodes(replicaOK(2, "0-1-120"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod:       func(in *PlanInput) { in.Nodes[1].Quarantined = "errant GTIDs 0-2-5" },
			candidate: "db3",
			rejected:  map[string]string{"db2": "quarantined"},
		},
		{
			name:     "target behind another replica refused without force",
			nodes:    planNodes(replicaOK(2, "0-1-110"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod:      func(in *PlanInput) { in.Target = "db2" },
			refusal:  "--force-stale",
			rejected: map[string]string{"db2": "stale"},
		},
		{
			name:      "target behind another replica accepted with force; loss and ahead reported",
			nodes:     planNodes(replicaOK(2, "0-1-110"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-115")),
			mod:       func(in *PlanInput) { in.Target, in.Force = "db2", true },
			candidate: "db2",
			lost:      "0-1-120",
			lostCount: 10,
			ahead:     []string{"db3", "db4"},
		},
		{
			name:      "force never overrides a stopped SQL thread",
			nodes:     planNodes(stopped(replicaOK(2, "0-1-120")), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod:       func(in *PlanInput) { in.Target, in.Force = "db2", true },
			refusal:   "SQL thread stopped",
			candidate: "",
		},
		{
			name:      "loss estimate includes what the old primary had",
			nodes:     planNodes(replicaOK(2, "0-1-118"), replicaOK(3, "0-1-118"), replicaOK(4, "0-1-118")),
			candidate: "db2",
			lost:      "0-1-120",
		},
		{
			name:      "target that is the old primary",
			nodes:     planNodes(replicaOK(2, "0-1-120"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120")),
			mod:       func(in *PlanInput) { in.Target = "db1" },
			refusal:   "primary being replaced",
			candidate: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := PlanInput{Cluster: "main", OldPrimary: "db1", OldPrimaryLast: oldLast, Nodes: tc.nodes, MaxLag: 10 * time.Second}
			if tc.mod != nil {
				tc.mod(&in)
			}
			p := Plan(in)
			text := FormatPlan(p)
			if p.Candidate != tc.candidate {
				t.Errorf("candidate %q, want %q\n%s", p.Candidate, tc.candidate, text)
			}
			if tc.refusal != "" && !strings.Contains(p.Refusal, tc.refusal) {
				t.Errorf("refusal %q, want it to contain %q", p.Refusal, tc.refusal)
			}
			if tc.candidate != "" && p.Lost != tc.lost {
				t.Errorf("lost %q, want %q\n%s", p.Lost, tc.lost, text)
			}
			if tc.lostCount != 0 && p.LostCount != tc.lostCount {
				t.Errorf("lost count %d, want %d", p.LostCount, tc.lostCount)
			}
			if tc.ahead != nil && strings.Join(p.Ahead, ",") != strings.Join(tc.ahead, ",") {
				t.Errorf("ahead %v, want %v", p.Ahead, tc.ahead)
			}
			for node, want := range tc.rejected {
				found := false
				for _, c := range p.Candidates {
					if c.Node == node {
						found = true
						if c.Eligible || !strings.Contains(c.Rejected, want) {
							t.Errorf("%s: eligible %v rejected %q, want rejected with %q", node, c.Eligible, c.Rejected, want)
						}
					}
				}
				if !found {
					t.Errorf("%s not listed", node)
				}
			}
			if len(p.Candidates) != 3 {
				t.Errorf("%d candidates listed, want 3 (every node but the old primary)", len(p.Candidates))
			}
		})
	}
}

func TestPlanFence(t *testing.T) {
	in := PlanInput{Cluster: "main", OldPrimary: "db1", Nodes: planNodes(replicaOK(2, "0-1-1"), replicaOK(3, "0-1-1"), replicaOK(4, "0-1-1"))}
	if p := Plan(in); p.Fence != "proxies" {
		t.Errorf("unreachable old primary: fence %q, want proxies", p.Fence)
	}
	in.Nodes[0].Probe = primaryOK("0-1-1")
	if p := Plan(in); p.Fence != "read_only" || !strings.Contains(FormatPlan(p), "read_only=ON") {
		t.Errorf("reachable old primary: fence %q, want read_only", p.Fence)
	}
}

// TestPlanUnseen: commits an asynchronous old primary acknowledged after its
// last probe are named as outside the estimate; a primary whose commits
// waited for a semi-sync replica at its last probe has none.
func TestPlanUnseen(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 1, 234e6, time.UTC)
	base := with(primaryOK("0-1-120"), func(p *topo.Probe) { p.At = at })
	nodes := planNodes(replicaOK(2, "0-1-120"), replicaOK(3, "0-1-120"), replicaOK(4, "0-1-120"))
	tests := []struct {
		name string
		last topo.Probe
		want string // substring of Unseen; "" for none
	}{
		{"asynchronous replication", base, "replication was asynchronous"},
		{"semi-sync with a replica attached", with(base, func(p *topo.Probe) {
			p.SemiSync = &topo.SemiSync{MasterEnabled: true, MasterStatus: true, Clients: 1}
		}), ""},
		{"semi-sync fallen back", with(base, func(p *topo.Probe) {
			p.SemiSync = &topo.SemiSync{MasterEnabled: true, MasterStatus: false, Clients: 0}
		}), "semi-sync had fallen back"},
		{"semi-sync on, no replica connected", with(base, func(p *topo.Probe) {
			p.SemiSync = &topo.SemiSync{MasterEnabled: true, MasterStatus: true, Clients: 0}
		}), "no semi-sync replica was attached"},
		{"semi-sync not enabled on the primary", with(base, func(p *topo.Probe) {
			p.SemiSync = &topo.SemiSync{SlaveEnabled: true}
		}), "replication was asynchronous"},
		{"never probed", topo.Probe{}, ""},
		{"last probe failed", with(base, func(p *topo.Probe) { p.Error = "i/o timeout" }), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan(PlanInput{Cluster: "main", OldPrimary: "db1", OldPrimaryLast: tc.last, Nodes: nodes, MaxLag: 10 * time.Second})
			if p.Candidate == "" {
				t.Fatalf("no candidate: %s", p.Refusal)
			}
			text := FormatPlan(p)
			if tc.want == "" {
				if p.Unseen != "" || strings.Contains(text, "not in the estimate") {
					t.Errorf("unseen %q, want none\n%s", p.Unseen, text)
				}
				return
			}
			if !strings.Contains(p.Unseen, tc.want) || !strings.Contains(p.Unseen, "12:00:01.234 UTC") || !strings.Contains(p.Unseen, "db1") {
				t.Errorf("unseen %q, want it to name db1, its last read at 12:00:01.234 UTC and %q", p.Unseen, tc.want)
			}
			if !strings.Contains(text, "estimated data loss: none known") || !strings.Contains(text, "not in the estimate: "+p.Unseen) {
				t.Errorf("plan text lacks the estimate or what it leaves out:\n%s", text)
			}
		})
	}
}
