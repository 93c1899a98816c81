package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func gauge(t *testing.T, g *prometheus.GaugeVec, labels ...string) (float64, bool) {
	t.Helper()
	c, err := g.GetMetricWithLabelValues(labels...)
	if err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := c.(prometheus.Gauge).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue(), true
}

// count is how many series g has.
func count(g *prometheus.GaugeVec) int {
	ch := make(chan prometheus.Metric, 64)
	g.Collect(ch)
	close(ch)
	return len(ch)
}

// TestObserveRound: the node and cluster gauges follow the published state
// and the round's probes; lag is absent for the primary and for NULL;
// forgetClusters drops them all.
func TestObserveRound(t *testing.T) {
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lag := int64(7)
	st := &topo.ClusterState{Cluster: "c", Primary: "n1", Epoch: 4,
		Maintenance:   &topo.Maintenance{Reason: "x"},
		FailoverBlock: &topo.FailoverBlock{Until: now.Add(time.Minute)},
		AutoFailover:  &topo.AutoFailover{Ready: false, Class: topo.AutoBlocked},
		Nodes: []topo.NodeState{{Name: "n1", Role: topo.RolePrimary}, {Name: "n2", Role: topo.RoleReplica},
			{Name: "n3", Role: topo.RoleReplica}, {Name: "n4", Role: topo.RoleUnknown}}}
	probes := map[string]topo.Probe{
		"n1": {Reachable: true, LagSeconds: &lag},
		"n2": {Reachable: true, ReadOnly: true, LagSeconds: &lag},
		"n3": {Reachable: true, ReadOnly: true},                     // Seconds_Behind_Master NULL
		"n4": {Reachable: false, ErrorKind: "too_many_connections"}, // alive
	}
	m.observeRound(st, probes, now)
	for _, c := range []struct {
		g      *prometheus.GaugeVec
		labels []string
		want   float64
	}{
		{m.nodeUp, []string{"c", "n1"}, 1},
		{m.nodeUp, []string{"c", "n4"}, 1},
		{m.nodeRole, []string{"c", "n1", "primary"}, 1},
		{m.nodeRole, []string{"c", "n1", "replica"}, 0},
		{m.nodeRole, []string{"c", "n4", "unknown"}, 1},
		{m.nodeReadOnly, []string{"c", "n1"}, 0},
		{m.nodeReadOnly, []string{"c", "n2"}, 1},
		{m.nodeLag, []string{"c", "n2"}, 7},
		{m.epoch, []string{"c"}, 4},
		{m.maintenance, []string{"c"}, 1},
		{m.blocked, []string{"c"}, 1},
		{m.autoFailover, []string{"c"}, 0},
		{m.primaryKnown, []string{"c"}, 1},
	} {
		if v, _ := gauge(t, c.g, c.labels...); v != c.want {
			t.Errorf("%v = %v, want %v", c.labels, v, c.want)
		}
	}
	// Lag only for n2: the primary and a NULL have none; read_only absent
	// for the node that did not answer.
	if n := count(m.nodeLag); n != 1 {
		t.Errorf("%d lag series, want 1 (n2)", n)
	}
	if n := count(m.nodeReadOnly); n != 3 {
		t.Errorf("%d read_only series, want 3", n)
	}
	// n1 dies: up 0, read_only gone.
	probes["n1"] = topo.Probe{Reachable: false, ErrorKind: "refused"}
	st.Maintenance, st.FailoverBlock = nil, nil
	m.observeRound(st, probes, now)
	if v, _ := gauge(t, m.nodeUp, "c", "n1"); v != 0 {
		t.Errorf("refused n1 up = %v", v)
	}
	if n := count(m.nodeReadOnly); n != 2 {
		t.Errorf("%d read_only series after n1 died, want 2", n)
	}
	if v, _ := gauge(t, m.blocked, "c"); v != 0 {
		t.Errorf("blocked = %v with no block", v)
	}
	m.forgetClusters()
	if n := count(m.nodeUp) + count(m.epoch) + count(m.findings); n != 0 {
		t.Errorf("%d series left after forgetClusters", n)
	}
}
