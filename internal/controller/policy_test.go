package controller

import (
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestBuildStateKeepsFailoverState: the probe loop never decides what the
// failover policy owns: it carries maintenance, blocks, alarms, quarantine
// and the failover record over, never discovers a primary during a
// failover, and never serves a quarantined node.
func TestBuildStateKeepsFailoverState(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prev := stable("node1", 3)
	prev.Maintenance = &topo.Maintenance{Reason: "work", Since: now}
	prev.FailoverBlock = &topo.FailoverBlock{Until: now.Add(time.Hour), Reason: "x"}
	prev.AutoDisabled = "failed"
	prev.Alarms = []topo.Alarm{{Code: topo.AlarmRecoveryFailed, Message: "m"}}
	prev.Quarantined = map[string]string{"node3": "errant GTIDs 0-3-5"}
	prev.LastFailover = &topo.FailoverRecord{From: "node2", To: "node1", Epoch: 3}
	st, _ := BuildState(BuildInput{Cluster: testCluster(), Probes: healthy(), Prev: prev, Leader: "l", Now: now})
	if st.Maintenance == nil || st.FailoverBlock == nil || st.AutoDisabled != "failed" || len(st.Alarms) != 1 ||
		st.LastFailover == nil || st.Quarantined["node3"] == "" {
		t.Fatalf("policy state not carried over: %+v", st)
	}
	if n := st.Node("node3"); n.Serving || n.Reason != "quarantined: errant GTIDs 0-3-5" {
		t.Fatalf("quarantined node3: serving %v reason %q", n.Serving, n.Reason)
	}
	if !st.Node("node2").Serving {
		t.Fatalf("node2 not serving: %s", st.Node("node2").Reason)
	}

	// During a failover no primary is published and none is discovered,
	// even when a node is writable (the candidate being promoted).
	fo := &topo.ClusterState{Cluster: "main", Primary: "", OldPrimary: "node1", Target: "node2", Epoch: 4, Phase: topo.PhaseFailover}
	probes := healthy()
	probes["node1"] = topo.Probe{Error: "connection refused", ErrorKind: "refused"}
	probes["node2"] = primaryProbe("0-1-10")
	st, _ = BuildState(BuildInput{Cluster: testCluster(), Probes: probes, Prev: fo, Leader: "l", Now: now})
	if st.Primary != "" || st.Epoch != 4 || st.Phase != topo.PhaseFailover || st.OldPrimary != "node1" || st.Target != "node2" {
		t.Fatalf("failover phase disturbed by the probe loop: primary %q epoch %d phase %s old %q target %q",
			st.Primary, st.Epoch, st.Phase, st.OldPrimary, st.Target)
	}
	// Replicas of the old primary keep serving reads with their IO thread
	// stopped; a stopped SQL thread does not.
	probes = healthy()
	probes["node1"] = topo.Probe{Error: "connection refused", ErrorKind: "refused"}
	probes["node2"] = with(probes, "node2", func(p *topo.Probe) { p.IORunning, p.LagSeconds = "No", nil })["node2"]
	probes["node3"] = with(probes, "node3", func(p *topo.Probe) { p.IORunning, p.SQLRunning = "No", false })["node3"]
	st, _ = BuildState(BuildInput{Cluster: testCluster(), Probes: probes, Prev: fo, Leader: "l", Now: now})
	if n := st.Node("node2"); !n.Serving {
		t.Fatalf("node2 (IO stopped by the failover) not serving reads: %s", n.Reason)
	}
	if n := st.Node("node3"); n.Serving || n.Reason != "replication SQL thread stopped" {
		t.Fatalf("node3 (SQL stopped) serving %v reason %q", n.Serving, n.Reason)
	}
}

func TestAlarmsAndHelpers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var list []topo.Alarm
	list = addAlarm(list, topo.Alarm{Code: "a", Node: "n1", Message: "first", Since: t0})
	list = addAlarm(list, topo.Alarm{Code: "a", Node: "n1", Message: "again", Since: t0.Add(time.Hour)})
	list = addAlarm(list, topo.Alarm{Code: "b", Message: "other", Since: t0})
	if len(list) != 2 || list[0].Message != "again" || !list[0].Since.Equal(t0) {
		t.Fatalf("addAlarm: %+v; want the repeated alarm replaced in place of time, its first Since kept", list)
	}
	for i := 0; i < 2*maxAlarms; i++ {
		list = addAlarm(list, topo.Alarm{Code: "c", Node: string(rune('A' + i))})
	}
	if len(list) != maxAlarms {
		t.Fatalf("%d alarms kept, want %d", len(list), maxAlarms)
	}
	list = []topo.Alarm{{Code: "a"}, {Code: "b"}, {Code: "a"}}
	if got := clearAlarms(list, "a"); len(got) != 1 || got[0].Code != "b" {
		t.Fatalf("clearAlarms(a) = %+v", got)
	}
	if got := clearAlarms(list); len(got) != 0 {
		t.Fatalf("clearAlarms() = %+v, want none", got)
	}
	if got := removeNodeAlarm([]topo.Alarm{{Code: "q", Node: "x"}, {Code: "q", Node: "y"}}, "q", "x"); len(got) != 1 || got[0].Node != "y" {
		t.Fatalf("removeNodeAlarm = %+v", got)
	}
	if got := firstWords("probe took 131ms (limit 100ms)", 3); got != "probe took 131ms" {
		t.Fatalf("firstWords = %q", got)
	}
}

func TestTroubleRounds(t *testing.T) {
	if d := troubleSpacing(time.Second); d != 100*time.Millisecond {
		t.Errorf("spacing at a 1s interval = %s, want 100ms", d)
	}
	if d := troubleSpacing(50 * time.Millisecond); d != 50*time.Millisecond {
		t.Errorf("spacing at a 50ms interval = %s, want 50ms", d)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	probes := map[string]topo.Probe{
		"node1": {At: t0.Add(200 * time.Millisecond), LatencyMS: 200}, // timed out
		"node2": {At: t0.Add(10 * time.Millisecond), LatencyMS: 8},
	}
	if s := roundStart(probes, t0.Add(time.Second)); !s.Equal(t0) {
		t.Errorf("round start = %s, want %s", s, t0)
	}
	f := &termFailover{kick: make(chan struct{}, 1)}
	f.roundAt(t0, t0.Add(time.Millisecond)) // due: at once
	select {
	case <-f.kick:
	default:
		t.Fatal("a round already due was not kicked at once")
	}
	now := time.Now()
	f.roundAt(now.Add(time.Hour), now)
	f.roundAt(now.Add(30*time.Millisecond), now) // earlier wins
	f.roundAt(now.Add(time.Hour), now)           // later is ignored
	select {
	case <-f.kick:
	case <-time.After(5 * time.Second):
		t.Fatal("the round requested in 30ms never came")
	}
}

func TestReplicaSettingsDiffer(t *testing.T) {
	rs := probe.ReplicaSettings{HeartbeatPeriod: 200 * time.Millisecond, NetTimeout: 3}
	if d := replicaSettingsDiffer(topo.Probe{HeartbeatPeriod: 0.2, NetTimeoutSeconds: 3}, rs); d != "" {
		t.Errorf("aligned replica differs: %q", d)
	}
	if d := replicaSettingsDiffer(topo.Probe{HeartbeatPeriod: 0.2}, rs); d != "" {
		t.Errorf("an unread slave_net_timeout must not count: %q", d)
	}
	d := replicaSettingsDiffer(topo.Probe{HeartbeatPeriod: 1, NetTimeoutSeconds: 10}, rs)
	if d != "MASTER_HEARTBEAT_PERIOD 1.000s → 0.200s, slave_net_timeout 10s → 3s" {
		t.Errorf("differ = %q", d)
	}
	zero, own := int64(0), int64(2)
	rs.ParallelThreads = 4
	if d := replicaSettingsDiffer(topo.Probe{HeartbeatPeriod: 0.2, NetTimeoutSeconds: 3, ParallelThreads: &own}, rs); d != "" {
		t.Errorf("a replica with parallel threads of its own must keep them: %q", d)
	}
	if d := replicaSettingsDiffer(topo.Probe{HeartbeatPeriod: 0.2, NetTimeoutSeconds: 3}, rs); d != "" {
		t.Errorf("unread parallel threads must not count: %q", d)
	}
	if d := replicaSettingsDiffer(topo.Probe{HeartbeatPeriod: 0.2, NetTimeoutSeconds: 3, ParallelThreads: &zero}, rs); d != "slave_parallel_threads 0 → 4 (optimistic)" {
		t.Errorf("single SQL thread: differ = %q", d)
	}
}

func TestClusterMemoryProgress(t *testing.T) {
	m := &clusterMemory{ioSig: map[string]string{}, ioAt: map[string]time.Time{}, lastLag: map[string]int64{},
		lastComplete: map[string]topo.Probe{}, repairAt: map[string]time.Time{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := replicaProbe("127.0.0.1", 3301, "0-1-10")
	p.HeartbeatsReceived, p.GTIDIO = 5, "0-1-10"
	m.observe(map[string]topo.Probe{"node2": p}, t0)
	m.observe(map[string]topo.Probe{"node2": p}, t0.Add(2*time.Second))
	if !m.ioAt["node2"].Equal(t0) {
		t.Fatalf("progress at %s after an unchanged probe, want %s", m.ioAt["node2"], t0)
	}
	p.HeartbeatsReceived = 6
	m.observe(map[string]topo.Probe{"node2": p}, t0.Add(3*time.Second))
	if !m.ioAt["node2"].Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("a new heartbeat did not count as progress")
	}
	// Progress is dated by the end of the probe that saw it, not by the
	// end of the round (which waits for the slowest probe).
	p.HeartbeatsReceived, p.At = 7, t0.Add(3100*time.Millisecond)
	m.observe(map[string]topo.Probe{"node2": p}, t0.Add(3600*time.Millisecond))
	if !m.ioAt["node2"].Equal(p.At) {
		t.Fatalf("progress dated %s, want the probe's own time %s", m.ioAt["node2"], p.At)
	}
	p.At = time.Time{}
	p.LagSeconds = nil
	m.observe(map[string]topo.Probe{"node2": p, "node3": {Error: "x"}}, t0.Add(4*time.Second))
	if m.lastLag["node2"] != 0 {
		t.Fatalf("a NULL lag overwrote the last known one")
	}
	if _, ok := m.lastComplete["node3"]; ok {
		t.Fatal("an incomplete probe was remembered as complete")
	}
}
