package controller

import (
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestCutsIO(t *testing.T) {
	semi := &topo.SemiSync{SlaveEnabled: true}
	for _, tc := range []struct {
		name   string
		flavor string
		p      topo.Probe
		want   bool
	}{
		{"semi-sync replica, IO running", "", topo.Probe{IORunning: "Yes", SemiSync: semi}, true},
		{"semi-sync replica, IO connecting", "mariadb", topo.Probe{IORunning: "Connecting", SemiSync: semi}, true},
		{"semi-sync status only", "mariadb", topo.Probe{IORunning: "Yes", SemiSync: &topo.SemiSync{SlaveStatus: true}}, true},
		{"IO stopped", "mariadb", topo.Probe{IORunning: "No", SemiSync: semi}, false},
		{"asynchronous replica", "mariadb", topo.Probe{IORunning: "Yes", SemiSync: &topo.SemiSync{}}, false},
		{"semi-sync unknown", "mariadb", topo.Probe{IORunning: "Yes"}, false},
		{"MySQL", "mysql", topo.Probe{IORunning: "Yes", SemiSync: semi}, false},
	} {
		if got := cutsIO(tc.flavor, tc.p); got != tc.want {
			t.Errorf("%s: cutsIO = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReceivedAfterCut(t *testing.T) {
	f := &failoverRun{cl: &config.Cluster{Name: "main"}, plan: topo.FailoverPlan{Candidates: []topo.PlanCandidate{
		{Node: "node2", Received: "0-1-100"},
		{Node: "node3", Received: "0-1-98,1-1-7"},
	}}}
	for _, tc := range []struct {
		node, io, want string
	}{
		{"node2", "0-1-100", ""},
		{"node2", "", ""},
		{"node2", "0-1-99", ""},
		{"node2", "0-1-101", "0-1-101"},
		{"node3", "0-1-98,1-1-7", ""},
		{"node3", "0-1-98,1-1-8", "0-1-98,1-1-8"},
		{"node3", "0-1-98,2-3-1", "0-1-98,2-3-1"},
	} {
		got, err := f.receivedAfterCut(tc.node, topo.Probe{GTIDIO: tc.io})
		if err != nil {
			t.Errorf("%s Gtid_IO_Pos %q: %v", tc.node, tc.io, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s Gtid_IO_Pos %q: received after the cut %q, want %q", tc.node, tc.io, got, tc.want)
		}
	}
	if _, err := f.receivedAfterCut("node2", topo.Probe{GTIDIO: "garbage"}); err == nil {
		t.Error("an unparsable Gtid_IO_Pos gave no error")
	}
}
