package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func testCluster() config.Cluster {
	c := config.Config{Clusters: []config.Cluster{{
		Name: "main",
		Nodes: []config.Node{
			{Name: "node1", Address: "127.0.0.1:3301"},
			{Name: "node2", Address: "127.0.0.1:3302"},
			{Name: "node3", Address: "127.0.0.1:3303"},
		},
	}}}
	c.ApplyDefaults() // max_lag 10s, flavor mariadb, promotion neutral
	return c.Clusters[0]
}

func lagp(n int64) *int64 { return &n }

func primaryProbe(gtidPos string) topo.Probe {
	return topo.Probe{Reachable: true, GTIDCurrent: gtidPos, GTIDBinlog: gtidPos}
}

func replicaProbe(host string, port int, gtidPos string) topo.Probe {
	return topo.Probe{Reachable: true, ReadOnly: true, Replicating: true, SourceHost: host, SourcePort: port,
		IORunning: "Yes", SQLRunning: true, LagSeconds: lagp(0), GTIDCurrent: gtidPos, GTIDSlave: gtidPos, GTIDBinlog: gtidPos}
}

func healthy() map[string]topo.Probe {
	return map[string]topo.Probe{
		"node1": primaryProbe("0-1-10"),
		"node2": replicaProbe("127.0.0.1", 3301, "0-1-10"),
		"node3": replicaProbe("localhost", 3301, "0-1-9"),
	}
}

func stable(primary string, epoch int64) *topo.ClusterState {
	return &topo.ClusterState{Cluster: "main", Primary: primary, Epoch: epoch, Phase: topo.PhaseStable}
}

// servingPrev is stable(primary, epoch) with the named replicas serving.
func servingPrev(primary string, epoch int64, serving ...string) *topo.ClusterState {
	st := stable(primary, epoch)
	for _, n := range serving {
		st.Nodes = append(st.Nodes, topo.NodeState{Name: n, Role: topo.RoleReplica, Serving: true})
	}
	return st
}

func with(ps map[string]topo.Probe, name string, f func(*topo.Probe)) map[string]topo.Probe {
	p := ps[name]
	f(&p)
	ps[name] = p
	return ps
}

func TestBuildState(t *testing.T) {
	type nodeWant struct {
		role    string
		serving bool
		reason  string // substring; "" means no reason
	}
	tests := []struct {
		name     string
		probes   map[string]topo.Probe
		prev     *topo.ClusterState
		primary  string
		epoch    int64
		nodes    map[string]nodeWant
		findings []string
	}{
		{
			name: "first discovery", probes: healthy(), prev: nil, primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{
				"node1": {role: topo.RolePrimary},
				"node2": {role: topo.RoleReplica, serving: true},
				"node3": {role: topo.RoleReplica, serving: true}, // localhost == 127.0.0.1
			},
		},
		{
			name:   "writable replica is not served",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.ReadOnly = false }),
			prev:   stable("node1", 3), primary: "node1", epoch: 3,
			nodes: map[string]nodeWant{
				"node2": {role: topo.RoleReplica, serving: false, reason: "writable replica"},
				"node3": {role: topo.RoleReplica, serving: true},
			},
		},
		{
			name: "replicas keep serving while the primary is unreachable",
			probes: with(with(with(healthy(), "node1", func(p *topo.Probe) { *p = topo.Probe{Error: "connection refused"} }),
				"node2", func(p *topo.Probe) { p.IORunning, p.LagSeconds = "Connecting", nil }),
				"node3", func(p *topo.Probe) { p.IORunning, p.LagSeconds, p.SQLRunning = "Connecting", nil, false }),
			prev: servingPrev("node1", 3, "node2", "node3"), primary: "node1", epoch: 3,
			nodes: map[string]nodeWant{
				"node2": {role: topo.RoleReplica, serving: true},
				"node3": {role: topo.RoleReplica, serving: false, reason: "replication stopped"},
			},
			findings: []string{FindingPrimaryUnreachable},
		},
		{
			name: "a replica that was not serving when the primary was lost does not start serving (stale node back alone)",
			probes: with(with(with(healthy(), "node1", func(p *topo.Probe) { *p = topo.Probe{Error: "connection refused"} }),
				"node2", func(p *topo.Probe) { *p = topo.Probe{Error: "connection refused"} }),
				"node3", func(p *topo.Probe) { p.IORunning, p.LagSeconds = "Connecting", nil }),
			prev: servingPrev("node1", 3, "node2"), primary: "node1", epoch: 3,
			nodes: map[string]nodeWant{
				"node3": {role: topo.RoleReplica, serving: false, reason: "primary unreachable and this replica was not serving when it was lost (its data may be stale)"},
			},
			findings: []string{FindingPrimaryUnreachable},
		},
		{
			name: "IO thread stopped by hand is not served even while the primary is unreachable",
			probes: with(with(healthy(), "node1", func(p *topo.Probe) { *p = topo.Probe{Error: "connection refused"} }),
				"node2", func(p *topo.Probe) { p.IORunning, p.LagSeconds = "No", nil }),
			prev: stable("node1", 3), primary: "node1", epoch: 3,
			nodes: map[string]nodeWant{
				"node2": {role: topo.RoleReplica, serving: false, reason: "IO thread No"},
			},
			findings: []string{FindingPrimaryUnreachable},
		},
		{
			name: "normal keeps epoch", probes: healthy(), prev: stable("node1", 7), primary: "node1", epoch: 7,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleReplica, serving: true}},
		},
		{
			name: "replica stopped",
			probes: with(healthy(), "node2", func(p *topo.Probe) {
				p.IORunning, p.SQLRunning, p.LagSeconds = "No", false, nil
			}),
			prev: stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{
				"node2": {role: topo.RoleReplica, reason: "replication stopped"},
				"node3": {role: topo.RoleReplica, serving: true},
			},
		},
		{
			name: "IO thread connecting",
			probes: with(healthy(), "node2", func(p *topo.Probe) {
				p.IORunning, p.LagSeconds, p.LastIOError = "Connecting", nil, "error connecting to master"
			}),
			prev: stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleReplica, reason: "IO thread Connecting: error connecting"}},
		},
		{
			name: "SQL thread stopped",
			probes: with(healthy(), "node3", func(p *topo.Probe) {
				p.SQLRunning, p.LastSQLError = false, "duplicate key"
			}),
			prev: stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node3": {role: topo.RoleReplica, reason: "SQL thread stopped: duplicate key"}},
		},
		{
			name:   "lag over limit",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.LagSeconds = lagp(42) }),
			prev:   stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleReplica, reason: "lag 42s > max 10s"}},
		},
		{
			name:   "lag at limit serves",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.LagSeconds = lagp(10) }),
			prev:   stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleReplica, serving: true}},
		},
		{
			name:   "lag NULL",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.LagSeconds = nil }),
			prev:   stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleReplica, reason: "lag unknown"}},
		},
		{
			name:   "wrong source",
			probes: with(healthy(), "node3", func(p *topo.Probe) { p.SourcePort = 3302 }),
			prev:   stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node3": {role: topo.RoleReplica, reason: "replicating from localhost:3302 not current primary node1"}},
		},
		{
			name: "primary unreachable keeps primary",
			probes: with(healthy(), "node1", func(p *topo.Probe) {
				*p = topo.Probe{Reachable: false, Error: "connection refused"}
			}),
			prev: stable("node1", 3), primary: "node1", epoch: 3,
			nodes: map[string]nodeWant{
				"node1": {role: topo.RolePrimary, reason: "primary unreachable: connection refused"},
				"node2": {role: topo.RoleReplica, serving: true},
			},
			findings: []string{FindingPrimaryUnreachable},
		},
		{
			name: "replica unreachable",
			probes: with(healthy(), "node3", func(p *topo.Probe) {
				*p = topo.Probe{Reachable: false, Error: "too many connections (MySQL error 1040)"}
			}),
			prev: stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node3": {role: topo.RoleUnknown, reason: "unreachable: too many connections"}},
		},
		{
			name: "two writable nodes keep the published primary",
			probes: with(healthy(), "node3", func(p *topo.Probe) {
				*p = primaryProbe("0-3-1")
			}),
			prev: stable("node1", 2), primary: "node1", epoch: 2,
			nodes: map[string]nodeWant{
				"node1": {role: topo.RolePrimary},
				"node3": {role: topo.RoleUnknown, reason: "writable but not the primary"},
			},
			findings: []string{FindingMultipleWritable},
		},
		{
			name: "first discovery with two writable nodes follows the replicas",
			probes: with(with(healthy(), "node3", func(p *topo.Probe) { *p = primaryProbe("0-3-1") }),
				"node2", func(p *topo.Probe) {}),
			prev: nil, primary: "node1", epoch: 1,
			findings: []string{FindingMultipleWritable},
		},
		{
			name: "first discovery with two writable nodes and no replica names none",
			probes: map[string]topo.Probe{
				"node1": primaryProbe("0-1-1"), "node2": primaryProbe("0-2-1"),
				"node3": {Reachable: false, Error: "connection refused"},
			},
			prev: nil, primary: "", epoch: 0,
			nodes:    map[string]nodeWant{"node1": {role: topo.RoleUnknown, reason: "writable but not the primary"}},
			findings: []string{FindingNoPrimary},
		},
		{
			name: "first discovery refuses a writable node when replicas point elsewhere",
			probes: map[string]topo.Probe{
				"node1": {Reachable: false, Error: "connection refused"},
				"node2": replicaProbe("127.0.0.1", 3301, "0-1-10"),
				"node3": primaryProbe("0-3-1"),
			},
			prev: nil, primary: "", epoch: 0,
			nodes:    map[string]nodeWant{"node2": {role: topo.RoleReplica, reason: "no primary known"}},
			findings: []string{FindingNoPrimary},
		},
		{
			name: "first discovery with everything read-only",
			probes: with(healthy(), "node1", func(p *topo.Probe) {
				p.ReadOnly = true
			}),
			prev: nil, primary: "", epoch: 0, findings: []string{FindingNoPrimary},
		},
		{
			name:   "discovery after an empty state bumps the epoch",
			probes: healthy(), prev: &topo.ClusterState{Cluster: "main", Epoch: 4}, primary: "node1", epoch: 5,
		},
		{
			name:   "read-only primary outside a switchover is reported",
			probes: with(healthy(), "node1", func(p *topo.Probe) { p.ReadOnly = true }),
			prev:   stable("node1", 1), primary: "node1", epoch: 1, findings: []string{FindingPrimaryReadOnly},
		},
		{
			name:    "read-only primary during a switchover is expected",
			probes:  with(healthy(), "node1", func(p *topo.Probe) { p.ReadOnly = true }),
			prev:    &topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 1, Phase: topo.PhaseSwitching, Target: "node2"},
			primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleReplica, serving: true}},
		},
		{
			name:   "probe incomplete",
			probes: with(healthy(), "node2", func(p *topo.Probe) { p.Error = "SHOW ALL SLAVES STATUS: MySQL error 1227" }),
			prev:   stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleUnknown, reason: "probe failed: SHOW ALL SLAVES STATUS"}},
		},
		{
			name:   "not probed yet",
			probes: map[string]topo.Probe{"node1": primaryProbe("0-1-1")},
			prev:   stable("node1", 1), primary: "node1", epoch: 1,
			nodes: map[string]nodeWant{"node2": {role: topo.RoleUnknown, reason: "not probed yet"}},
		},
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, findings := BuildState(BuildInput{Cluster: testCluster(), Probes: tc.probes, Prev: tc.prev, Leader: "c1", Now: now})
			if st.Primary != tc.primary || st.Epoch != tc.epoch {
				t.Fatalf("primary %q epoch %d, want %q epoch %d (findings %+v)", st.Primary, st.Epoch, tc.primary, tc.epoch, findings)
			}
			if st.Cluster != "main" || st.Leader != "c1" || !st.UpdatedAt.Equal(now) || len(st.Nodes) != 3 {
				t.Fatalf("state header = %+v", st)
			}
			for name, w := range tc.nodes {
				n := st.Node(name)
				if n.Role != w.role || n.Serving != w.serving {
					t.Errorf("%s: role %s serving %v (reason %q), want role %s serving %v", name, n.Role, n.Serving, n.Reason, w.role, w.serving)
				}
				if (w.reason == "") != (n.Reason == "") || !strings.Contains(n.Reason, w.reason) {
					t.Errorf("%s: reason %q, want %q", name, n.Reason, w.reason)
				}
			}
			var codes []string
			for _, f := range findings {
				codes = append(codes, f.Code)
			}
			if strings.Join(codes, ",") != strings.Join(tc.findings, ",") {
				t.Errorf("findings %+v, want codes %v", findings, tc.findings)
			}
			for _, n := range st.Nodes {
				if n.Role == topo.RolePrimary && n.Serving {
					t.Errorf("primary %s marked serving", n.Name)
				}
			}
		})
	}
}

func TestSameAddress(t *testing.T) {
	tests := []struct {
		host string
		port int
		addr string
		want bool
	}{
		{"127.0.0.1", 3306, "127.0.0.1:3306", true},
		{"localhost", 3306, "127.0.0.1:3306", true},
		{"127.0.0.1", 3306, "localhost:3306", true},
		{"::1", 3306, "127.0.0.1:3306", true},
		{"LOCALHOST", 3306, "localhost:3306", true},
		{"127.0.0.1", 3307, "127.0.0.1:3306", false},
		{"db1", 3306, "db2:3306", false},
		{"db1", 3306, "127.0.0.1:3306", false},
		{"db1", 3306, "garbage", false},
	}
	for _, tc := range tests {
		if got := sameAddress(tc.host, tc.port, tc.addr); got != tc.want {
			t.Errorf("sameAddress(%s, %d, %s) = %v, want %v", tc.host, tc.port, tc.addr, got, tc.want)
		}
	}
}

func TestRoutingChanged(t *testing.T) {
	a, _ := BuildState(BuildInput{Cluster: testCluster(), Probes: healthy(), Prev: stable("node1", 1)})
	b, _ := BuildState(BuildInput{Cluster: testCluster(), Probes: with(healthy(), "node2", func(p *topo.Probe) {
		p.GTIDCurrent, p.LatencyMS = "0-1-11", 3 // not routing-relevant
	}), Prev: stable("node1", 1), Now: time.Now()})
	if routingChanged(&a, &b) {
		t.Fatal("a GTID/latency change must not count as a routing change")
	}
	c, _ := BuildState(BuildInput{Cluster: testCluster(), Probes: with(healthy(), "node2", func(p *topo.Probe) {
		p.SQLRunning = false
	}), Prev: stable("node1", 1)})
	if !routingChanged(&a, &c) {
		t.Fatal("a replica that stopped serving must count as a routing change")
	}
	if !routingChanged(nil, &a) || routingChanged(nil, nil) {
		t.Fatal("nil handling")
	}
}
