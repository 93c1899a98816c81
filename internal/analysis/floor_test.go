package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestPlanFloor: the promotion floor and the lag of a dead primary's
// replicas, as a table over the cases of the stale-node and stalled-applier
// incidents.
func TestPlanFloor(t *testing.T) {
	oldLast := primaryOK("0-1-18060")
	tests := []struct {
		name      string
		nodes     []Node
		mod       func(in *PlanInput)
		candidate string
		forced    bool
		lost      string
		lostCount uint64
		rejected  map[string]string // node → substring of its rejection
		missing   map[string]uint64 // node → MissingFloorCount
	}{
		{
			name:     "stale node returning alone is never promoted (S12)",
			nodes:    planNodes(refused(), refused(), with(replicaOK(4, "0-1-4421"), ioLost)),
			rejected: map[string]string{"db4": "behind the promotion floor 0-1-18060"},
			missing:  map[string]uint64{"db4": 13639},
		},
		{
			name:     "no old primary probe either (controller restarted): the floor alone refuses",
			nodes:    planNodes(refused(), refused(), with(replicaOK(4, "0-1-4421"), ioLost)),
			mod:      func(in *PlanInput) { in.OldPrimaryLast = topo.Probe{} },
			rejected: map[string]string{"db4": "missing 0-1-18060"},
		},
		{
			name:      "forced past the floor with a reason: loss is the floor gap",
			nodes:     planNodes(refused(), refused(), with(replicaOK(4, "0-1-4421"), ioLost)),
			mod:       func(in *PlanInput) { in.Force, in.Target = true, "db4" },
			candidate: "db4", forced: true, lost: "0-1-18060", lostCount: 13639,
		},
		{
			name:     "never seen replicating (empty position) is behind any floor",
			nodes:    planNodes(refused(), refused(), with(replicaOK(4, ""), func(p *topo.Probe) { p.GTIDIO = "" })),
			rejected: map[string]string{"db4": "no GTID position"},
		},
		{
			name:  "a missing domain is behind the floor",
			nodes: planNodes(replicaOK(2, "0-1-18060"), refused(), refused()),
			mod: func(in *PlanInput) {
				in.Floor = "0-1-18060,1-1-7"
			},
			rejected: map[string]string{"db2": "missing 1-1-7"},
			missing:  map[string]uint64{"db2": 7},
		},
		{
			name:      "several domains at the floor: eligible",
			nodes:     planNodes(replicaOK(2, "0-1-18060,1-1-7"), refused(), refused()),
			mod:       func(in *PlanInput) { in.Floor = "0-1-18060,1-1-7"; in.OldPrimaryLast = primaryOK("0-1-18060,1-1-7") },
			candidate: "db2",
		},
		{
			name:      "relay log counts toward the floor (received, not yet applied)",
			nodes:     planNodes(received(replicaOK(2, "0-1-17000"), "0-1-18060"), refused(), refused()),
			candidate: "db2",
		},
		{
			name:      "errant: a domain neither the floor nor the old primary has",
			nodes:     planNodes(replicaOK(2, "0-1-18060,5-2-3"), replicaOK(3, "0-1-18060"), refused()),
			mod:       func(in *PlanInput) { in.OldPrimaryLast = topo.Probe{} },
			rejected:  map[string]string{"db2": "errant GTIDs 5-2-3"},
			candidate: "db3",
		},
		{
			name:      "diverged from the floor (same seqno, another server_id) is errant",
			nodes:     planNodes(replicaOK(2, "0-2-18060"), replicaOK(3, "0-1-18060"), refused()),
			mod:       func(in *PlanInput) { in.OldPrimaryLast = topo.Probe{} },
			rejected:  map[string]string{"db2": "errant GTIDs 0-2-18060"},
			candidate: "db3",
		},
		{
			name:      "beyond the floor with another server_id is not errant (the floor trails a round)",
			nodes:     planNodes(replicaOK(2, "0-2-18070"), refused(), refused()),
			mod:       func(in *PlanInput) { in.OldPrimaryLast = topo.Probe{} },
			candidate: "db2",
		},
		{
			name:  "errant hidden behind a higher seqno: caught per (domain, server_id)",
			nodes: planNodes(replicaOK(2, "0-1-18060"), replicaOK(3, "0-3-18000"), refused()),
			mod: func(in *PlanInput) {
				in.OldPrimaryBinlogState = "0-3-17990,0-1-18060"
			},
			rejected:  map[string]string{"db3": "per domain and server_id"},
			candidate: "db2",
		},
		{
			name: "gtid strict-mode SQL error is an errant transaction",
			nodes: planNodes(replicaOK(2, "0-1-18060"), with(replicaOK(3, "0-1-18060"), func(p *topo.Probe) {
				p.SQLRunning = false
				p.LastSQLError = "An attempt was made to binlog GTID 0-1-18061 which would create an out-of-order sequence number with existing GTID 0-3-18061, and gtid strict mode is enabled"
			}), refused()),
			rejected:  map[string]string{"db3": "errant transaction"},
			candidate: "db2",
		},
		{
			name: "stale lag of a dead primary does not count: the backlog is applied",
			nodes: planNodes(
				with(received(replicaOK(2, "0-1-17000"), "0-1-18060"), func(p *topo.Probe) { p.LagSeconds = nil }),
				with(received(replicaOK(3, "0-1-16000"), "0-1-18060"), func(p *topo.Probe) { p.LagSeconds = nil }),
				refused()),
			mod: func(in *PlanInput) {
				in.Nodes[1].LastLag = lag(16)
				in.Nodes[2].LastLag = lag(16)
			},
			candidate: "db2",
		},
		{
			name:  "dead primary: a replica that received less than another is still refused",
			nodes: planNodes(received(replicaOK(2, "0-1-17000"), "0-1-18060"), received(replicaOK(3, "0-1-17000"), "0-1-18050"), refused()),
			mod: func(in *PlanInput) {
				in.Target, in.Floor = "db3", "0-1-18000"
			},
			rejected: map[string]string{"db3": "stale: behind db2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := PlanInput{Cluster: "main", OldPrimary: "db1", OldPrimaryLast: oldLast, Nodes: tc.nodes, MaxLag: 10 * time.Second,
				Floor: "0-1-18060"}
			if tc.mod != nil {
				tc.mod(&in)
			}
			p := Plan(in)
			text := FormatPlan(p)
			if p.Candidate != tc.candidate || p.Forced != tc.forced {
				t.Errorf("candidate %q forced %v, want %q %v\n%s", p.Candidate, p.Forced, tc.candidate, tc.forced, text)
			}
			if tc.candidate != "" && (p.Lost != tc.lost || (tc.lostCount != 0 && p.LostCount != tc.lostCount)) {
				t.Errorf("lost %q (%d), want %q (%d)\n%s", p.Lost, p.LostCount, tc.lost, tc.lostCount, text)
			}
			if !strings.Contains(text, "promotion floor: "+p.Floor) || p.Floor == "" {
				t.Errorf("plan does not name the floor:\n%s", text)
			}
			for node, want := range tc.rejected {
				for _, c := range p.Candidates {
					if c.Node == node && (c.Eligible || !strings.Contains(c.Rejected, want)) {
						t.Errorf("%s: eligible %v rejected %q, want rejected with %q\n%s", node, c.Eligible, c.Rejected, want, text)
					}
				}
			}
			for node, want := range tc.missing {
				for _, c := range p.Candidates {
					if c.Node == node && c.MissingFloorCount != want {
						t.Errorf("%s: missing floor %q (%d), want %d", node, c.MissingFloor, c.MissingFloorCount, want)
					}
				}
			}
		})
	}
}

func ioLost(p *topo.Probe) { p.IORunning, p.LagSeconds = "Connecting", nil }

func TestRaiseFloor(t *testing.T) {
	f, _ := ParseFloor("mariadb", "0-1-100")
	pos, _ := ParseFloor("mariadb", "0-1-150,1-1-3")
	next, changed := RaiseFloor(f, pos)
	if !changed || next.String() != "0-1-150,1-1-3" {
		t.Errorf("raise: %v %v", next, changed)
	}
	if _, changed := RaiseFloor(next, f); changed {
		t.Error("a lower position moved the floor")
	}
	if n, changed := RaiseFloor(nil, pos); !changed || !n.Equal(pos) {
		t.Error("no floor: the first position is the floor")
	}
	if _, err := ParseFloor("mariadb", "garbage"); err == nil {
		t.Error("garbage floor accepted")
	}
	if p := Plan(PlanInput{Cluster: "main", OldPrimary: "db1", Nodes: planNodes(replicaOK(2, "0-1-1"), refused(), refused()), Floor: "x"}); p.Refusal == "" || p.Candidate != "" {
		t.Errorf("unparsable floor: candidate %q refusal %q", p.Candidate, p.Refusal)
	}
	if p := Plan(PlanInput{Cluster: "main", OldPrimary: "db1", Nodes: planNodes(replicaOK(2, "0-1-1"), refused(), refused()), Floor: "x", Force: true}); p.Candidate != "db2" || p.Warning == "" {
		t.Errorf("unparsable floor, forced: candidate %q warning %q", p.Candidate, p.Warning)
	}
}

func TestErrantByBinlogState(t *testing.T) {
	tests := []struct {
		pos, binlog, state string
		primaryID          uint32
		want               string
	}{
		// The rejoined old primary (server 1) wrote 0-1-101 after it was
		// rejoined; the primary (server 2) has written up to 0-2-150.
		{"0-1-101", "", "0-1-50,0-2-150", 2, "0-1-101"},
		{"0-2-149", "", "0-1-50,0-2-150", 2, ""},
		{"0-2-160", "", "0-1-50,0-2-150", 2, ""}, // applied after the state was read
		{"0-1-50", "", "0-1-50,0-2-150", 2, ""},
		{"0-2-150", "1-3-7", "0-1-50,0-2-150", 2, "1-3-7"}, // binlog counts
	}
	for _, tc := range tests {
		got := ErrantByBinlogState("mariadb", topo.Probe{GTIDCurrent: tc.pos, GTIDBinlog: tc.binlog}, tc.state, tc.primaryID)
		if got != tc.want {
			t.Errorf("ErrantByBinlogState(%q, %q, %q) = %q, want %q", tc.pos, tc.binlog, tc.state, got, tc.want)
		}
	}
	if !StrictModeError("Error 'An attempt was made to binlog GTID 0-2-5 which would create an out-of-order sequence number with existing GTID 0-1-5, and gtid strict mode is enabled' on query") {
		t.Error("strict mode error not recognised")
	}
}

func TestAnalyzeErrantHiddenBehindSeqno(t *testing.T) {
	s := snap{primary: primaryOK("0-1-150"), db2: replicaOK(2, "0-1-150"), db3: replicaOK(3, "0-3-101")}.build()
	// db3 (server 3) wrote 0-3-101 after it was rejoined; the primary's
	// binlog has server 3's history only up to 0-3-90 (its last epoch).
	s.PrimaryBinlogState = "0-3-90,0-1-150"
	r := Analyze(s)
	f := r.Get(ErrantGTID)
	if f == nil || f.Node != "db3" || !strings.Contains(f.Detail, "0-3-101") {
		t.Fatalf("want ErrantGTID db3 naming 0-3-101, got %v", r.Findings)
	}
	s = snap{primary: primaryOK("0-1-150"), db2: replicaOK(2, "0-1-150"), db3: with(replicaOK(3, "0-1-120"), func(p *topo.Probe) {
		p.SQLRunning = false
		p.LastSQLError = "An attempt was made to binlog GTID 0-1-121 which would create an out-of-order sequence number with existing GTID 0-3-121, and gtid strict mode is enabled"
	})}.build()
	r = Analyze(s)
	if f := r.Get(ErrantGTID); f == nil || f.Node != "db3" || !strings.Contains(f.Detail, "gtid_strict_mode") {
		t.Fatalf("want ErrantGTID db3 for the strict-mode error, got %v", r.Findings)
	}
}

func TestPlanPrefersSmallerBacklog(t *testing.T) {
	in := PlanInput{Cluster: "main", OldPrimary: "db1", Floor: "0-1-100", Nodes: planNodes(
		received(replicaOK(2, "0-1-10"), "0-1-100"), received(replicaOK(3, "0-1-90"), "0-1-100"), refused())}
	p := Plan(in)
	if p.Candidate != "db3" {
		t.Fatalf("candidate %s, want db3 (same received set, 10 to apply instead of 90)\n%s", p.Candidate, FormatPlan(p))
	}
	for _, c := range p.Candidates {
		if c.Node == "db2" && c.RelayBacklog != 90 {
			t.Errorf("db2 backlog %d, want 90", c.RelayBacklog)
		}
	}
}

func TestPlanFloorMySQL(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	rep := func(id uint32, set string) topo.Probe {
		p := replicaOK(id, "")
		p.GTIDCurrent, p.GTIDIO, p.GTIDExecuted = "", "", set
		return p
	}
	in := PlanInput{Cluster: "main", Flavor: "mysql", OldPrimary: "db1", Floor: u + ":1-100",
		Nodes: planNodes(rep(2, u+":1-50"), refused(), refused())}
	p := Plan(in)
	if p.Candidate != "" || !strings.Contains(p.Candidates[0].Rejected, "missing "+u+":51-100") || p.Candidates[0].MissingFloorCount != 50 {
		t.Fatalf("MySQL candidate behind the floor: %+v\n%s", p.Candidates[0], FormatPlan(p))
	}
	in.Nodes[1].Probe = rep(2, u+":1-100")
	if p := Plan(in); p.Candidate != "db2" {
		t.Fatalf("MySQL candidate at the floor refused:\n%s", FormatPlan(p))
	}
}
