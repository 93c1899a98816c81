package controller

import (
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// A role kept keeps its time; a role changed by a new probe takes the
// probe's time; a role published without a new probe (a switchover) takes
// the write's time, so that the old probe reads as older than the role.
func TestStampRoles(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	since := t0.Add(-time.Hour)
	prev := &topo.ClusterState{Nodes: []topo.NodeState{
		{Name: "a", Role: topo.RolePrimary, RoleSince: since, Probe: topo.Probe{At: t0}},
		{Name: "b", Role: topo.RoleReplica, Probe: topo.Probe{At: t0}},
		{Name: "c", Role: topo.RoleReplica, Probe: topo.Probe{At: t0}},
	}}
	now := t0.Add(2 * time.Second)
	next := &topo.ClusterState{Nodes: []topo.NodeState{
		{Name: "a", Role: topo.RolePrimary, Probe: topo.Probe{At: t0.Add(time.Second)}},
		{Name: "b", Role: topo.RoleUnknown, Probe: topo.Probe{At: t0.Add(time.Second)}},
		{Name: "c", Role: topo.RolePrimary, Probe: topo.Probe{At: t0}},
		{Name: "d", Role: topo.RoleReplica},
	}}
	stampRoles(prev, next, now)
	for i, want := range []time.Time{since, t0.Add(time.Second), now, {}} {
		if got := next.Nodes[i].RoleSince; !got.Equal(want) {
			t.Errorf("%s: RoleSince %s, want %s", next.Nodes[i].Name, got, want)
		}
	}
	stampRoles(nil, next, now) // first state: nothing to compare, no panic
}
