package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func lag(n int64) *int64 { return &n }

// Probe builders for a three-node cluster: db1 127.0.0.1:3301 (primary),
// db2 :3302, db3 :3303.
func primaryOK(gtid string) topo.Probe {
	return topo.Probe{Reachable: true, ServerID: 1, GTIDCurrent: gtid, LatencyMS: 1, ThreadsRunning: 2}
}

func replicaOK(id uint32, gtid string) topo.Probe {
	return topo.Probe{Reachable: true, ServerID: id, ReadOnly: true, Replicating: true, SourceHost: "127.0.0.1", SourcePort: 3301,
		IORunning: "Yes", SQLRunning: true, LagSeconds: lag(0), GTIDCurrent: gtid, GTIDIO: gtid, HeartbeatPeriod: 1, LatencyMS: 1}
}

func refused() topo.Probe {
	return topo.Probe{Error: "connection refused", ErrorKind: "refused"}
}

func with(p topo.Probe, f func(*topo.Probe)) topo.Probe { f(&p); return p }

type snap struct {
	primary topo.Probe
	db2     topo.Probe
	db3     topo.Probe
	// progress is how long ago each replica's IO thread last made progress.
	progress2, progress3 time.Duration
	proxies              []Proxy
	phase                string
	publish              string // published primary; default db1
}

func (s snap) build() Snapshot {
	pub := s.publish
	if pub == "" {
		pub = "db1"
	}
	if pub == "-" {
		pub = ""
	}
	nodes := []Node{
		{Name: "db1", Address: "127.0.0.1:3301", Probe: s.primary},
		{Name: "db2", Address: "127.0.0.1:3302", Probe: s.db2, IOProgressAt: t0.Add(-s.progress2)},
		{Name: "db3", Address: "127.0.0.1:3303", Probe: s.db3, IOProgressAt: t0.Add(-s.progress3)},
	}
	return Snapshot{
		Cluster: "main", Primary: pub, Phase: s.phase, Nodes: nodes, Proxies: s.proxies, Now: t0,
		Limits: Limits{MaxLag: 10 * time.Second, SlowProbe: 250 * time.Millisecond, MaxThreadsRunning: 100,
			SilenceBound: 1200 * time.Millisecond},
	}
}

func proxies(reach ...bool) []Proxy {
	var out []Proxy
	for i, r := range reach {
		br := topo.BackendReach{Cluster: "main", Node: "db1", Reachable: r}
		if !r {
			br.Error = "connection refused"
		}
		out = append(out, Proxy{ID: string(rune('a' + i)), Reach: map[string]topo.BackendReach{"db1": br}})
	}
	return out
}

func ioConnecting(p topo.Probe) topo.Probe {
	return with(p, func(p *topo.Probe) {
		p.IORunning = "Connecting"
		p.LagSeconds = nil
		p.LastIOError = "error reconnecting to master 'repl@127.0.0.1:3301' - retry-time: 1"
	})
}

func TestAnalyze(t *testing.T) {
	g := "0-1-100"
	tests := []struct {
		name string
		s    snap
		// want lists "Code" or "Code node" entries that must be found; none
		// lists codes that must not be.
		want    []string
		none    []Code
		trouble bool
	}{
		{
			name: "healthy",
			s:    snap{primary: primaryOK(g), db2: replicaOK(2, g), db3: replicaOK(3, g), proxies: proxies(true, true)},
			none: []Code{DeadPrimary, UnreachablePrimary, PrimaryOverloaded, ReplicaNotReplicating, ReplicaLagging, ErrantGTID},
		},
		{
			name:    "dead primary: refused, replicas connecting, every proxy refused",
			s:       snap{primary: refused(), db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false, false)},
			want:    []string{"DeadPrimary db1"},
			none:    []Code{UnreachablePrimary},
			trouble: true,
		},
		{
			name:    "dead primary with no proxies registered",
			s:       snap{primary: refused(), db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g))},
			want:    []string{"DeadPrimary db1"},
			trouble: true,
		},
		{
			name: "dead primary by silence: IO thread Yes but no heartbeat for 4s (period 1s)",
			s: snap{primary: with(refused(), func(p *topo.Probe) { p.Error, p.ErrorKind = "connect: timeout", "timeout" }),
				db2: replicaOK(2, g), db3: replicaOK(3, g), progress2: 4 * time.Second, progress3: 5 * time.Second, proxies: proxies(false)},
			want:    []string{"DeadPrimary db1"},
			trouble: true,
		},
		{
			name:    "unreachable from the controller only: replicas still hear heartbeats",
			s:       snap{primary: refused(), db2: replicaOK(2, g), db3: replicaOK(3, g), progress2: 300 * time.Millisecond, proxies: proxies(false, false)},
			want:    []string{"UnreachablePrimary db1"},
			none:    []Code{DeadPrimary},
			trouble: true,
		},
		{
			name: "stopped SQL thread is not evidence of a dead primary",
			s: snap{primary: refused(), db2: with(replicaOK(2, g), func(p *topo.Probe) { p.SQLRunning = false; p.LagSeconds = nil }),
				db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false)},
			want:    []string{"UnreachablePrimary db1", "ReplicaNotReplicating db2"},
			none:    []Code{DeadPrimary},
			trouble: true,
		},
		{
			name:    "proxies still reach it: no quorum",
			s:       snap{primary: refused(), db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false, true, true)},
			want:    []string{"UnreachablePrimary db1"},
			none:    []Code{DeadPrimary},
			trouble: true,
		},
		{
			name: "a proxy that has not checked yet does not count as agreeing",
			s: snap{primary: refused(), db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g)),
				proxies: append(proxies(false), Proxy{ID: "new", Reach: map[string]topo.BackendReach{}})},
			want: []string{"UnreachablePrimary db1"},
			none: []Code{DeadPrimary},
		},
		{
			name:    "no reachable replica to confirm",
			s:       snap{primary: refused(), db2: refused(), db3: refused(), proxies: proxies(false)},
			want:    []string{"UnreachablePrimary db1"},
			none:    []Code{DeadPrimary},
			trouble: true,
		},
		{
			name: "replicas of another source are no witnesses",
			s: snap{primary: refused(), db2: with(replicaOK(2, g), func(p *topo.Probe) { p.SourcePort = 3303 }),
				db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false)},
			want: []string{"DeadPrimary db1", "ReplicaWrongSource db2"},
		},
		{
			name: "too many connections: overloaded, alive",
			s: snap{primary: topo.Probe{Error: "too many connections (MySQL error 1040)", ErrorKind: "too_many_connections"},
				db2: replicaOK(2, g), db3: replicaOK(3, g), proxies: proxies(true)},
			want:    []string{"PrimaryOverloaded db1"},
			none:    []Code{DeadPrimary, UnreachablePrimary},
			trouble: true,
		},
		{
			name: "too many connections even with replicas disconnected is never dead",
			s: snap{primary: topo.Probe{Error: "too many connections (MySQL error 1040)", ErrorKind: "too_many_connections"},
				db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false)},
			want: []string{"PrimaryOverloaded db1"},
			none: []Code{DeadPrimary},
		},
		{
			name: "access denied: alive",
			s: snap{primary: topo.Probe{Error: "access denied", ErrorKind: "access_denied"},
				db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false)},
			want: []string{"UnreachablePrimary db1"},
			none: []Code{DeadPrimary},
		},
		{
			name: "slow probe and many running threads: overloaded",
			s: snap{primary: with(primaryOK(g), func(p *topo.Probe) { p.LatencyMS = 400; p.ThreadsRunning = 150 }),
				db2: replicaOK(2, g), db3: replicaOK(3, g)},
			want: []string{"PrimaryOverloaded db1"},
		},
		{
			name: "probe timeout with replicas connected: unreachable, not dead",
			s: snap{primary: topo.Probe{Error: "connect: timeout", ErrorKind: "timeout"},
				db2: replicaOK(2, g), db3: replicaOK(3, g), proxies: proxies(false)},
			want: []string{"UnreachablePrimary db1"},
			none: []Code{DeadPrimary},
		},
		{
			name: "primary read-only",
			s:    snap{primary: with(primaryOK(g), func(p *topo.Probe) { p.ReadOnly = true }), db2: replicaOK(2, g), db3: replicaOK(3, g)},
			want: []string{"PrimaryReadOnly db1"},
		},
		{
			name: "read-only primary during a switchover is expected",
			s:    snap{primary: with(primaryOK(g), func(p *topo.Probe) { p.ReadOnly = true }), db2: replicaOK(2, g), db3: replicaOK(3, g), phase: topo.PhaseSwitching},
			none: []Code{PrimaryReadOnly},
		},
		{
			name: "no primary",
			s:    snap{primary: primaryOK(g), db2: replicaOK(2, g), db3: replicaOK(3, g), publish: "-"},
			want: []string{"NoPrimary"},
		},
		{
			name: "returning old primary is writable: two writable primaries",
			s: snap{primary: primaryOK(g), db2: replicaOK(2, g),
				db3: with(primaryOK(g), func(p *topo.Probe) { p.ServerID = 3 })},
			want: []string{"TwoWritablePrimaries db3"},
		},
		{
			name: "several writable nodes and none published",
			s:    snap{primary: primaryOK(g), db2: primaryOK(g), db3: replicaOK(3, g), publish: "-"},
			want: []string{"TwoWritablePrimaries db1,db2", "NoPrimary"},
		},
		{
			name: "replica lagging",
			s:    snap{primary: primaryOK(g), db2: with(replicaOK(2, g), func(p *topo.Probe) { p.LagSeconds = lag(30) }), db3: replicaOK(3, g)},
			want: []string{"ReplicaLagging db2"},
		},
		{
			name: "replica stopped by hand",
			s: snap{primary: primaryOK(g), db2: with(replicaOK(2, g), func(p *topo.Probe) { p.IORunning, p.SQLRunning = "No", false }),
				db3: replicaOK(3, g)},
			want: []string{"ReplicaNotReplicating db2"},
		},
		{
			name: "read-only node without replication",
			s:    snap{primary: primaryOK(g), db2: with(primaryOK(g), func(p *topo.Probe) { p.ReadOnly = true }), db3: replicaOK(3, g)},
			want: []string{"ReplicaNotReplicating db2"},
		},
		{
			name: "replica with the wrong source",
			s:    snap{primary: primaryOK(g), db2: with(replicaOK(2, g), func(p *topo.Probe) { p.SourcePort = 3303 }), db3: replicaOK(3, g)},
			want: []string{"ReplicaWrongSource db2"},
		},
		{
			name: "errant GTID written on a replica",
			s:    snap{primary: primaryOK("0-1-100"), db2: replicaOK(2, "0-2-101"), db3: replicaOK(3, "0-1-100")},
			want: []string{"ErrantGTID db2"},
		},
		{
			name: "a replica ahead with the primary's own GTID is a probe race, not errant",
			s:    snap{primary: primaryOK("0-1-100"), db2: replicaOK(2, "0-1-101"), db3: replicaOK(3, "0-1-100")},
			none: []Code{ErrantGTID},
		},
		{
			name: "diverged at the same seqno",
			s:    snap{primary: primaryOK("0-1-100"), db2: replicaOK(2, "0-2-100"), db3: replicaOK(3, "0-1-100")},
			want: []string{"ErrantGTID db2"},
		},
		{
			name: "domain the primary lacks",
			s:    snap{primary: primaryOK("0-1-100"), db2: replicaOK(2, "0-1-100,5-2-3"), db3: replicaOK(3, "0-1-100")},
			want: []string{"ErrantGTID db2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Analyze(tc.s.build())
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.String())
			}
			for _, w := range tc.want {
				code, node, _ := strings.Cut(w, " ")
				found := false
				for _, f := range r.Findings {
					if string(f.Code) == code && (node == "" || f.Node == node) {
						found = true
					}
				}
				if !found {
					t.Errorf("missing %s; got:\n  %s", w, strings.Join(got, "\n  "))
				}
			}
			for _, c := range tc.none {
				if r.Has(c) {
					t.Errorf("unexpected %s; got:\n  %s", c, strings.Join(got, "\n  "))
				}
			}
			if tc.trouble && !r.Trouble {
				t.Errorf("Trouble = false, want true")
			}
			for _, f := range r.Findings {
				if f.Detail == "" {
					t.Errorf("%s has no detail", f.Code)
				}
			}
		})
	}
}

// TestDeadPrimaryDetailExplains checks that the verdicts say why, since
// they are what events and status show.
func TestDeadPrimaryDetailExplains(t *testing.T) {
	g := "0-1-100"
	r := Analyze(snap{primary: refused(), db2: replicaOK(2, g), db3: ioConnecting(replicaOK(3, g)), progress2: 200 * time.Millisecond, proxies: proxies(false)}.build())
	f := r.Get(UnreachablePrimary)
	if f == nil || !strings.Contains(f.Detail, "replica db2 IO thread connected") {
		t.Fatalf("UnreachablePrimary detail = %+v, want it to name the witness db2", f)
	}
	r = Analyze(snap{primary: refused(), db2: ioConnecting(replicaOK(2, g)), db3: ioConnecting(replicaOK(3, g)), proxies: proxies(false, true, true)}.build())
	f = r.Get(UnreachablePrimary)
	if f == nil || !strings.Contains(f.Detail, "only 1 of 3 proxies") {
		t.Fatalf("UnreachablePrimary detail = %+v, want the proxy count", f)
	}
}

func TestIOSilenceBound(t *testing.T) {
	s := Snapshot{Limits: Limits{SilenceBound: 1200 * time.Millisecond}}
	if b := s.ioSilenceBound(topo.Probe{HeartbeatPeriod: 0.2}); b != 1200*time.Millisecond {
		t.Errorf("bound with heartbeat 0.2s = %s, want the silence bound 1.2s", b)
	}
	// A replica not aligned yet (period 1s): an idle primary is silent up
	// to 1s between heartbeats, so 3 periods.
	if b := s.ioSilenceBound(topo.Probe{HeartbeatPeriod: 1}); b != 3*time.Second {
		t.Errorf("bound with heartbeat 1s = %s, want 3s", b)
	}
	if b := s.ioSilenceBound(topo.Probe{}); b != 10*time.Second {
		t.Errorf("bound without heartbeat = %s, want 10s", b)
	}
	if b := (Snapshot{}).ioSilenceBound(topo.Probe{HeartbeatPeriod: 0.2}); b != 10*time.Second {
		t.Errorf("bound with no SilenceBound = %s, want 10s", b)
	}
}

// silentPrimary builds a cluster whose primary times out for the
// controller and every proxy while both replicas' IO threads still show Yes
// (a partitioned or frozen primary): probed at t0 with latency 5ms, last
// progress silence2/silence3 before the start of that probe, heartbeat
// period hb; the analysis runs at t0+now (the end of the round, after the
// primary's probe timed out).
func silentPrimary(silence2, silence3 time.Duration, hb float64, now time.Duration) Snapshot {
	g := "0-1-100"
	timeout := with(refused(), func(p *topo.Probe) { p.Error, p.ErrorKind = "connect: i/o timeout", "timeout" })
	rep := func(id uint32) topo.Probe {
		return with(replicaOK(id, g), func(p *topo.Probe) { p.HeartbeatPeriod, p.At, p.LatencyMS = hb, t0, 5 })
	}
	s := snap{primary: timeout, db2: rep(2), db3: rep(3), proxies: proxies(false, false)}.build()
	start := t0.Add(-5 * time.Millisecond)
	s.Nodes[1].IOProgressAt = start.Add(-silence2)
	s.Nodes[2].IOProgressAt = start.Add(-silence3)
	s.Now = t0.Add(now)
	return s
}

// TestSilenceBound checks the silence rule against failover.silence_bound
// (1.2s here, heartbeat 0.2s): a pause shorter than the bound never makes
// DeadPrimary, a longer silence of every replica does, and the silence is
// measured to the start of the replica's own probe, not to the end of the
// round.
func TestSilenceBound(t *testing.T) {
	tests := []struct {
		name               string
		silence2, silence3 time.Duration
		hb                 float64
		now                time.Duration
		dead, silent       bool
	}{
		{name: "1s freeze: both replicas silent 1.1s (a heartbeat period more)", silence2: 1100 * time.Millisecond, silence3: 1100 * time.Millisecond, hb: 0.2},
		{name: "one replica still hears it", silence2: 1500 * time.Millisecond, silence3: 100 * time.Millisecond, hb: 0.2},
		{name: "isolated: both silent 1.3s", silence2: 1300 * time.Millisecond, silence3: 1300 * time.Millisecond, hb: 0.2, dead: true, silent: true},
		{name: "replica not aligned yet (period 1s): 2s is within 3 periods", silence2: 2 * time.Second, silence3: 2 * time.Second, hb: 1},
		{name: "replica not aligned yet (period 1s): 3.5s", silence2: 3500 * time.Millisecond, silence3: 3500 * time.Millisecond, hb: 1, dead: true, silent: true},
		// The round ended 1s after the replicas were probed (the primary's
		// probe timed out): what the replicas received meanwhile is not
		// known, so that second is not silence.
		{name: "silence measured at the replica's probe, not at the round's end", silence2: 1100 * time.Millisecond, silence3: 1100 * time.Millisecond, hb: 0.2, now: time.Second},
	}
	for _, tc := range tests {
		r := Analyze(silentPrimary(tc.silence2, tc.silence3, tc.hb, tc.now))
		if r.Has(DeadPrimary) != tc.dead || r.Silent != tc.silent {
			t.Errorf("%s: DeadPrimary %v Silent %v, want %v %v; findings %v", tc.name, r.Has(DeadPrimary), r.Silent, tc.dead, tc.silent, r.Findings)
		}
		if !tc.dead && !r.Has(UnreachablePrimary) {
			t.Errorf("%s: want UnreachablePrimary naming the witness, got %v", tc.name, r.Findings)
		}
		if !r.Trouble {
			t.Errorf("%s: a primary the controller cannot reach is trouble", tc.name)
		}
	}
	// A crash: every IO thread dropped its connection; no silence needed,
	// and the verdict does not rest on silence.
	s := silentPrimary(0, 0, 0.2, 0)
	s.Nodes[1].Probe, s.Nodes[2].Probe = ioConnecting(s.Nodes[1].Probe), ioConnecting(s.Nodes[2].Probe)
	if r := Analyze(s); !r.Has(DeadPrimary) || r.Silent {
		t.Errorf("crash: DeadPrimary %v Silent %v, want true false: %v", r.Has(DeadPrimary), r.Silent, r.Findings)
	}
	// One replica dropped its connection, the other is silent: rests on
	// silence.
	s = silentPrimary(1300*time.Millisecond, 0, 0.2, 0)
	s.Nodes[2].Probe = ioConnecting(s.Nodes[2].Probe)
	if r := Analyze(s); !r.Has(DeadPrimary) || !r.Silent {
		t.Errorf("mixed: DeadPrimary %v Silent %v, want true true: %v", r.Has(DeadPrimary), r.Silent, r.Findings)
	}
	// Quiet: the shortest silence among the replicas while the primary
	// cannot be reached; 0 when it can.
	if q := Analyze(silentPrimary(1100*time.Millisecond, 400*time.Millisecond, 0.1, 0)).Quiet; q != 400*time.Millisecond {
		t.Errorf("Quiet = %s, want the shortest silence 400ms", q)
	}
	if q := Analyze(snap{primary: primaryOK("0-1-100"), db2: replicaOK(2, "0-1-100"), db3: replicaOK(3, "0-1-100")}.build()).Quiet; q != 0 {
		t.Errorf("Quiet with a reachable primary = %s, want 0", q)
	}
	f := Analyze(silentPrimary(1300*time.Millisecond, 1300*time.Millisecond, 0.2, 0)).Get(DeadPrimary)
	if f == nil || !strings.Contains(f.Detail, "nothing received for 1.3s (bound 1.2s)") {
		t.Errorf("DeadPrimary detail = %+v, want the silence and the bound", f)
	}
}

func TestContainedInBinlogState(t *testing.T) {
	tests := []struct {
		pos, state string
		ok         bool
		missing    string
	}{
		{"0-1-100", "0-1-100,0-2-150", true, ""},
		{"0-1-99", "0-1-100,0-2-150", true, ""},
		// The old primary wrote 0-1-101, which never replicated; the new
		// primary's later 0-2-150 hides it in a position comparison.
		{"0-1-101", "0-1-100,0-2-150", false, "0-1-101"},
		{"0-1-100,1-1-5", "0-1-100", false, "1-1-5"},
		{"", "0-1-100", true, ""},
	}
	for _, tc := range tests {
		ok, missing, err := ContainedInBinlogState(tc.pos, tc.state)
		if err != nil || ok != tc.ok || missing != tc.missing {
			t.Errorf("ContainedInBinlogState(%q, %q) = %v, %q, %v; want %v, %q", tc.pos, tc.state, ok, missing, err, tc.ok, tc.missing)
		}
	}
	if _, _, err := ContainedInBinlogState("x", ""); err == nil {
		t.Error("bad position accepted")
	}
}
