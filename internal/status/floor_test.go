package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestWriteTableFloorAndDrainedPrimary(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cs := topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Phase: topo.PhaseStable, Nodes: []topo.NodeState{
		{Name: "node1", Role: topo.RolePrimary, Probe: topo.Probe{Reachable: true, GTIDCurrent: "0-1-100"}},
		{Name: "node2", Role: topo.RoleReplica, Serving: true, Probe: topo.Probe{Reachable: true, Replicating: true, GTIDCurrent: "0-1-90", GTIDIO: "0-1-100"}},
		{Name: "node3", Role: topo.RoleReplica, Probe: topo.Probe{Reachable: true, Replicating: true, GTIDCurrent: "0-1-40"}},
		{Name: "node4", Role: topo.RoleUnknown, Probe: topo.Probe{Error: "connection refused"}},
	}}
	r := &Report{CollectedAt: now, Clusters: []topo.ClusterState{cs},
		Floors:  map[string]topo.PromotionFloor{"main": {Cluster: "main", GTID: "0-1-100", Primary: "node1", Epoch: 3, UpdatedAt: now.Add(-time.Second)}},
		Drained: map[string]map[string]topo.DrainRecord{"main": {"node1": {Since: now.Add(-time.Minute)}}}}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"promotion floor: 0-1-100 (highest position seen on primary node1, epoch 3",
		"node2: replicating from the primary (serving)",
		"node3: behind the floor at 0-1-40: missing 0-1-100 (60 transaction(s)",
		"node4: position unknown",
		"drained: node1",
		"NOT safe to stop: still the writable primary",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(safe to stop)") {
		t.Errorf("status calls the drained primary safe to stop:\n%s", out)
	}
	// With the primary lost every replica's gap to the floor is shown.
	cs.Nodes[0].Probe = topo.Probe{Error: "connection refused"}
	r.Clusters = []topo.ClusterState{cs}
	b.Reset()
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "node2: holds the floor (received 0-1-100)") {
		t.Errorf("with the primary unreachable, status lacks node2's floor line:\n%s", out)
	}
}
