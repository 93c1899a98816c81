package controller

import (
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestObserveProgress checks how reads between rounds date a replica's
// progress: a changed mark is dated by the end of the read that saw it, an
// unchanged one keeps its date, failed reads and other sources record
// nothing, and a round is asked for once per silence of every replica.
func TestObserveProgress(t *testing.T) {
	const src = "127.0.0.1:3306"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	read := func(at time.Time, hb int64) topo.Probe {
		return topo.Probe{At: at, LatencyMS: 1, Reachable: true, Replicating: true, IORunning: "Yes",
			SourceHost: "127.0.0.1", SourcePort: 3306, HeartbeatsReceived: hb, HeartbeatPeriod: 0.1}
	}
	m := &clusterMemory{ioSig: map[string]string{}, ioAt: map[string]time.Time{}}
	names := []string{"node2", "node3"}
	quiet := 300 * time.Millisecond

	// Progress on both: dated by the reads' ends, no round asked for.
	if m.observeProgress(names, []topo.Probe{read(t0, 1), read(t0, 1)}, src, quiet, t0) {
		t.Fatal("round asked for on fresh progress")
	}
	if !m.ioAt["node2"].Equal(t0) {
		t.Fatalf("node2 progress dated %v, want %v", m.ioAt["node2"], t0)
	}
	// 200ms later, node2 progressed, node3 did not: node3 keeps t0.
	t1 := t0.Add(200 * time.Millisecond)
	if m.observeProgress(names, []topo.Probe{read(t1, 2), read(t1, 1)}, src, quiet, t1) {
		t.Fatal("round asked for while node2 progresses")
	}
	if !m.ioAt["node2"].Equal(t1) || !m.ioAt["node3"].Equal(t0) {
		t.Fatalf("progress dated node2 %v node3 %v, want %v and %v", m.ioAt["node2"], m.ioAt["node3"], t1, t0)
	}
	// A failed read and a read of another source record nothing.
	other := read(t1.Add(time.Millisecond), 9)
	other.SourcePort = 3307
	failed := topo.Probe{At: t1.Add(time.Millisecond), Error: "timeout"}
	m.observeProgress(names, []topo.Probe{failed, other}, src, quiet, t1)
	if !m.ioAt["node2"].Equal(t1) || !m.ioAt["node3"].Equal(t0) {
		t.Fatal("a failed read or another source's read changed the recorded progress")
	}
	// Both silent for 400ms (from t1 for node2): one round asked for, once.
	t2 := t1.Add(400 * time.Millisecond)
	if !m.observeProgress(names, []topo.Probe{read(t2, 2), read(t2, 1)}, src, quiet, t2) {
		t.Fatal("no round asked for when every replica is quiet")
	}
	if m.observeProgress(names, []topo.Probe{read(t2.Add(200*time.Millisecond), 2), read(t2.Add(200*time.Millisecond), 1)}, src, quiet, t2) {
		t.Fatal("a second round asked for in the same silence")
	}
	// Progress again, then silence again: asked for again.
	t3 := t2.Add(time.Second)
	m.observeProgress(names, []topo.Probe{read(t3, 3), read(t3, 2)}, src, quiet, t3)
	t4 := t3.Add(500 * time.Millisecond)
	if !m.observeProgress(names, []topo.Probe{read(t4, 3), read(t4, 2)}, src, quiet, t4) {
		t.Fatal("no round asked for in a new silence")
	}
	// A replica whose heartbeat period is long needs two periods of quiet.
	slow := func(at time.Time, hb int64) topo.Probe { p := read(at, hb); p.HeartbeatPeriod = 1; return p }
	m = &clusterMemory{ioSig: map[string]string{}, ioAt: map[string]time.Time{}}
	m.observeProgress(names[:1], []topo.Probe{slow(t0, 1)}, src, quiet, t0)
	if m.observeProgress(names[:1], []topo.Probe{slow(t0.Add(time.Second), 1)}, src, quiet, t0.Add(time.Second)) {
		t.Fatal("round asked for within two heartbeat periods")
	}
	if !m.observeProgress(names[:1], []topo.Probe{slow(t0.Add(2100*time.Millisecond), 1)}, src, quiet, t0.Add(2100*time.Millisecond)) {
		t.Fatal("no round asked for after two heartbeat periods")
	}
}
