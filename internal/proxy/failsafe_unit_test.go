package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestFailsafeVerdict: the failsafe rule confirms a primary only when it is
// writable and every other node is read-only and replicating from it with
// its IO thread running and recent progress (or quarantined and
// read-only).
func TestFailsafeVerdict(t *testing.T) {
	cl := &config.Cluster{Name: "main", Nodes: []config.Node{
		{Name: "n1", Address: "10.0.0.1:3306"}, {Name: "n2", Address: "10.0.0.2:3306"}, {Name: "n3", Address: "10.0.0.3:3306"},
	}}
	primary := topo.Probe{Reachable: true}
	replica := topo.Probe{Reachable: true, ReadOnly: true, Replicating: true, SourceHost: "10.0.0.1", SourcePort: 3306, IORunning: "Yes", SQLRunning: true,
		HeartbeatPeriod: 0.2}
	start := time.Unix(1000, 0)
	recent := func() map[string]*progressMark {
		return map[string]*progressMark{
			"n2": {mark: "a", readStart: start, changedAfter: start.Add(-300 * time.Millisecond)},
			"n3": {mark: "b", readStart: start, changedAfter: start.Add(-300 * time.Millisecond)},
		}
	}
	healthy := func() map[string]topo.Probe {
		return map[string]topo.Probe{"n1": primary, "n2": replica, "n3": replica}
	}
	st := topo.ClusterState{Cluster: "main", Primary: "n1", Epoch: 3}
	cases := []struct {
		name   string
		edit   func(map[string]topo.Probe, *topo.ClusterState)
		hist   func(map[string]*progressMark)
		refuse string // "" = confirmed
		soft   bool   // a node did not answer: the last confirmation only expires
	}{
		{"healthy", nil, nil, "", false},
		{"primary fenced", func(p map[string]topo.Probe, _ *topo.ClusterState) { x := p["n1"]; x.ReadOnly = true; p["n1"] = x }, nil, "n1: primary is read_only=ON", false},
		{"primary unreachable", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			p["n1"] = topo.Probe{Error: "i/o timeout", ErrorKind: "timeout"}
		}, nil, "n1: unreachable", true},
		{"primary refuses connections", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			p["n1"] = topo.Probe{Error: "connection refused", ErrorKind: "refused"}
		}, nil, "n1: primary refuses connections", false},
		{"replica refuses connections", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			p["n3"] = topo.Probe{Error: "connection refused", ErrorKind: "refused"}
		}, nil, "n3: unreachable", true},
		{"replica promoted", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n2"] = primary }, nil, "n2: writable", false},
		{"candidate IO stopped", func(p map[string]topo.Probe, _ *topo.ClusterState) { x := p["n2"]; x.IORunning = "No"; p["n2"] = x }, nil, `n2: IO thread "No"`, false},
		{"replica reconnecting", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			x := p["n3"]
			x.IORunning = "Connecting"
			p["n3"] = x
		}, nil, `n3: IO thread "Connecting"`, false},
		{"replica repointed", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			x := p["n3"]
			x.SourceHost = "10.0.0.2"
			p["n3"] = x
		}, nil, "n3: replicates from 10.0.0.2:3306", false},
		{"replica reset", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			p["n3"] = topo.Probe{Reachable: true, ReadOnly: true}
		}, nil, "n3: not replicating", false},
		{"replica unreachable", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n3"] = topo.Probe{Error: "timeout"} }, nil, "n3: unreachable", true},
		{"replica not checked", func(p map[string]topo.Probe, _ *topo.ClusterState) { delete(p, "n3") }, nil, "n3: not checked", true},
		{"quarantined read-only", func(p map[string]topo.Probe, st *topo.ClusterState) {
			p["n3"] = topo.Probe{Reachable: true, ReadOnly: true}
			st.Quarantined = map[string]string{"n3": "errant GTIDs"}
		}, nil, "", false},
		{"quarantined writable", func(p map[string]topo.Probe, st *topo.ClusterState) {
			p["n3"] = primary
			st.Quarantined = map[string]string{"n3": "errant GTIDs"}
		}, nil, "n3: writable", false},
		{"primary replicates", func(p map[string]topo.Probe, _ *topo.ClusterState) { p["n1"] = replica }, nil, "n1: primary is read_only=ON", false},
		{"baseline only", nil, func(h map[string]*progressMark) { h["n3"].changedAfter = time.Time{} }, "n3: no progress from the primary seen yet", true},
		{"no history", nil, func(h map[string]*progressMark) { delete(h, "n2") }, "n2: no progress from the primary seen yet", true},
		{"replica silent", nil, func(h map[string]*progressMark) { h["n2"].changedAfter = start.Add(-600 * time.Millisecond) }, "n2: nothing received from the primary for over 600ms", true},
		{"progress just within bound", nil, func(h map[string]*progressMark) { h["n2"].changedAfter = start.Add(-550 * time.Millisecond) }, "", false},
		{"silent and IO stopped", func(p map[string]topo.Probe, _ *topo.ClusterState) { x := p["n3"]; x.IORunning = "No"; p["n3"] = x },
			func(h map[string]*progressMark) { h["n2"].changedAfter = time.Time{} }, `n3: IO thread "No"`, false},
		{"heartbeats off: no progress required", func(p map[string]topo.Probe, _ *topo.ClusterState) {
			x := p["n2"]
			x.HeartbeatPeriod = 0
			p["n2"] = x
		}, func(h map[string]*progressMark) { delete(h, "n2") }, "", false},
		{"quarantined needs no progress", func(p map[string]topo.Probe, st *topo.ClusterState) {
			p["n3"] = topo.Probe{Reachable: true, ReadOnly: true}
			st.Quarantined = map[string]string{"n3": "errant GTIDs"}
		}, func(h map[string]*progressMark) { delete(h, "n3") }, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, s, h := healthy(), st, recent()
			if c.edit != nil {
				c.edit(p, &s)
			}
			if c.hist != nil {
				c.hist(h)
			}
			err := failsafeVerdict(cl, s, p, h, start)
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
	if err := failsafeVerdict(cl, topo.ClusterState{Primary: "n9"}, healthy(), recent(), start); err == nil {
		t.Fatal("an unknown primary was confirmed")
	}
}

// TestProgressMark: the progress bound comes only from two checks that read
// different marks, and is the earlier of their starts whatever order
// concurrent rounds finish in; a mark read again only moves the baseline.
func TestProgressMark(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		mark  string
		start int // ms
		want  int // changedAfter in ms; -1 = none yet
	}{
		{"hb=1", 0, -1},    // baseline
		{"hb=1", 150, -1},  // unchanged
		{"hb=2", 300, 150}, // changed after the last check that read hb=1
		{"hb=2", 450, 150},
		{"hb=3", 750, 450},
		{"hb=2", 600, 600}, // a slower round that started earlier: a change after 600 is still proven
		{"hb=3", 900, 600},
		{"hb=4", 1050, 900},
	}
	var m progressMark
	for i, s := range steps {
		m.observe(s.mark, at(s.start))
		got := -1
		if !m.changedAfter.IsZero() {
			got = int(m.changedAfter.Sub(t0) / time.Millisecond)
		}
		if got != s.want {
			t.Fatalf("step %d (%s at %dms): changed after %dms, want %dms", i, s.mark, s.start, got, s.want)
		}
	}
	if m.mark != "hb=4" || !m.readStart.Equal(at(1050)) {
		t.Fatalf("latest read %s at %s, want hb=4 at 1050ms", m.mark, m.readStart.Sub(t0))
	}
}
