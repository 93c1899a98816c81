package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestFailsafeClearAt: the failsafe window ends at the latest replica's
// last progress plus FailsafeProgress of its heartbeat period plus
// FailsafeValidity, and only when every replica proves its last progress.
func TestFailsafeClearAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hb := 200 * time.Millisecond // FailsafeProgress 550ms
	cases := []struct {
		name string
		ev   []progressEvidence
		want time.Duration // after t0; -1 = no proof
		why  string
	}{
		{"no replica", nil, -1, "no replica"},
		{"one replica", []progressEvidence{{node: "n2", lastBy: t0, period: hb}}, 1200 * time.Millisecond, "n2"},
		{"the latest progress decides", []progressEvidence{
			{node: "n2", lastBy: t0, period: hb},
			{node: "n3", lastBy: t0.Add(100 * time.Millisecond), period: hb},
		}, 1300 * time.Millisecond, "n3"},
		{"longer heartbeat period", []progressEvidence{
			{node: "n2", lastBy: t0, period: hb},
			{node: "n3", lastBy: t0, period: time.Second}, // 2.15s
		}, 2800 * time.Millisecond, "n3"},
		{"short period floors at 450ms", []progressEvidence{{node: "n2", lastBy: t0, period: 50 * time.Millisecond}}, 1100 * time.Millisecond, "n2"},
		{"a replica without proof", []progressEvidence{
			{node: "n2", lastBy: t0, period: hb},
			{node: "n3", why: `IO thread Yes, not stopped`},
		}, -1, "n3: IO thread Yes"},
		{"heartbeats off", []progressEvidence{{node: "n2", lastBy: t0}}, -1, "n2: heartbeats off"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at, why := failsafeClearAt(c.ev)
			switch {
			case c.want < 0 && !at.IsZero():
				t.Fatalf("clear at %s, want no proof", at.Sub(t0))
			case c.want >= 0 && !at.Equal(t0.Add(c.want)):
				t.Fatalf("clear at %v, want %s after t0", at, c.want)
			case !strings.Contains(why, c.why):
				t.Fatalf("why %q, want it to name %q", why, c.why)
			}
		})
	}
	// The default settings: a failover decided on silence_bound of silence
	// (with the heartbeat period the controller sets) waits nothing more.
	var fo config.FailoverConfig
	if d := topo.FailsafeProgress(fo.HeartbeatPeriod()) + topo.FailsafeValidity; d > config.DefaultSilenceBound {
		t.Fatalf("FailsafeProgress + FailsafeValidity = %s for the default heartbeat period %s, above the default silence bound %s",
			d, fo.HeartbeatPeriod(), config.DefaultSilenceBound)
	}
}
