package controller

import (
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestPrimaryDrift(t *testing.T) {
	durable := topo.SemiSync{MasterEnabled: true, MasterStatus: true, WaitPoint: "AFTER_SYNC", WaitNoSlave: true,
		MasterTimeoutMS: probe.DurableSemiSyncTimeoutMS}
	with := func(f func(*topo.SemiSync)) *topo.SemiSync { s := durable; f(&s); return &s }
	cases := []struct {
		name string
		mode string
		ss   *topo.SemiSync
		want []string // substrings, one per expected drift entry
	}{
		{"durable ok", config.DurabilitySemiSyncDurable, &durable, nil},
		{"timeout set back", config.DurabilitySemiSyncDurable, with(func(s *topo.SemiSync) { s.MasterTimeoutMS = 1000 }),
			[]string{"rpl_semi_sync_master_timeout=1000 ms"}},
		{"fell back to async", config.DurabilitySemiSyncDurable, with(func(s *topo.SemiSync) { s.MasterStatus = false }),
			[]string{"Rpl_semi_sync_master_status=OFF"}},
		{"switched off", config.DurabilitySemiSyncDurable, with(func(s *topo.SemiSync) { s.MasterEnabled, s.MasterStatus = false, false }),
			[]string{"rpl_semi_sync_master_enabled=OFF"}},
		{"wait point and no_slave", config.DurabilitySemiSyncDurable, with(func(s *topo.SemiSync) { s.WaitPoint, s.WaitNoSlave = "AFTER_COMMIT", false }),
			[]string{"wait_point=AFTER_COMMIT", "wait_no_slave=OFF"}},
		{"semi_sync keeps the server timeout", config.DurabilitySemiSync, with(func(s *topo.SemiSync) { s.MasterTimeoutMS, s.WaitNoSlave = 10000, false }), nil},
		{"semi_sync fallback is not drift", config.DurabilitySemiSync, with(func(s *topo.SemiSync) { s.MasterStatus = false }), nil},
		{"semi_sync wants AFTER_SYNC", config.DurabilitySemiSync, with(func(s *topo.SemiSync) { s.WaitPoint = "AFTER_COMMIT" }),
			[]string{"wait_point=AFTER_COMMIT"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := primaryDrift(c.mode, c.ss)
			if len(got) != len(c.want) {
				t.Fatalf("primaryDrift = %q, want %d entries %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("entry %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestReplicaDrift(t *testing.T) {
	rep := func(io string, ss topo.SemiSync) topo.Probe {
		return topo.Probe{Reachable: true, Replicating: true, IORunning: io, SQLRunning: true, SemiSync: &ss}
	}
	cases := []struct {
		name    string
		p       topo.Probe
		n       int
		restart bool
	}{
		{"ok", rep("Yes", topo.SemiSync{SlaveEnabled: true, SlaveStatus: true}), 0, false},
		{"slave off, IO running", rep("Yes", topo.SemiSync{}), 1, true},
		{"slave off, IO stopped by an operator: not restarted", rep("No", topo.SemiSync{}), 1, false},
		{"enabled but IO connected before", rep("Yes", topo.SemiSync{SlaveEnabled: true}), 1, true},
		{"master switch on a replica", rep("Yes", topo.SemiSync{MasterEnabled: true, SlaveEnabled: true, SlaveStatus: true}), 1, false},
		{"kill timeout 1s", rep("Yes", topo.SemiSync{SlaveEnabled: true, SlaveStatus: true, SlaveKillConnTimeout: 1}), 0, false},
		{"kill timeout at MariaDB's default 5s", rep("Yes", topo.SemiSync{SlaveEnabled: true, SlaveStatus: true, SlaveKillConnTimeout: 5}), 1, false},
	}
	for _, c := range cases {
		d, restart := replicaDrift(c.p)
		if len(d) != c.n || restart != c.restart {
			t.Errorf("%s: replicaDrift = %q restart=%v, want %d entries restart=%v", c.name, d, restart, c.n, c.restart)
		}
	}
}
