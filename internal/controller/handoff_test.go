package controller

import (
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestTablesOf(t *testing.T) {
	cases := map[string][]string{
		"SELECT c FROM sbtest1 WHERE id=?":                             {"sbtest1"},
		"select a.c from app.t1 a join t2 b on a.id=b.id where a.k=?":  {"app.t1", "t2"},
		"SELECT * FROM (SELECT id FROM t3) x":                          {"t3"},
		"SELECT COUNT(*) FROM `weird name`, t4 x WHERE x IN (...)":     {"`weird name`", "t4"},
		"SELECT * FROM t7 AS a, s.t8 b LEFT JOIN t9 ON b.id = t9.id":   {"t7", "s.t8", "t9"},
		"SELECT @@server_id":                                           nil,
		"SELECT c FROM t5 WHERE id IN (SELECT id FROM t6 WHERE k = ?)": {"t5", "t6"},
	}
	for q, want := range cases {
		if got := tablesOf(q); !reflect.DeepEqual(got, want) {
			t.Errorf("tablesOf(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestWithoutDrained(t *testing.T) {
	cl := &config.Cluster{Name: "main", Nodes: []config.Node{{Name: "a", Promotion: "prefer"}, {Name: "b", Promotion: "neutral"}}}
	d := topo.DrainedNodes{Nodes: map[string]topo.DrainRecord{"a": {}}}
	got := withoutDrained(cl, d)
	if got.Node("a").Promotion != promotionDrained || got.Node("b").Promotion != "neutral" {
		t.Fatalf("drained node not excluded: %+v", got.Nodes)
	}
	// The refusal names the real reason, not must_not (a drained neutral
	// node).
	st := &topo.ClusterState{Cluster: "main", Primary: "b", Nodes: []topo.NodeState{{Name: "a", Probe: topo.Probe{Reachable: true}}, {Name: "b"}}}
	if _, err := chooseCandidate(got, st, ""); err == nil || !strings.Contains(err.Error(), "a is drained") || strings.Contains(err.Error(), "must_not") {
		t.Fatalf("refusal of a drained node: %v", err)
	}
	if cl.Node("a").Promotion != "prefer" {
		t.Fatal("withoutDrained changed the config it was given")
	}
	// A node in maintenance is refused as such, with the command that
	// ends it, not as drained.
	d.Nodes["a"] = topo.DrainRecord{Maintenance: true}
	_, err := chooseCandidate(withoutDrained(cl, d), st, "a")
	if err == nil || !strings.Contains(err.Error(), "a is in maintenance (`switchyard maintenance off --cluster main --node a`") || strings.Contains(err.Error(), "drained") {
		t.Fatalf("refusal of a node in maintenance: %v", err)
	}
	if _, err := chooseCandidate(withoutDrained(cl, topo.DrainedNodes{Nodes: map[string]topo.DrainRecord{"a": {}}}), st, "a"); err == nil || !strings.Contains(err.Error(), "a is drained (`switchyard undrain a --cluster main`") {
		t.Fatalf("refusal of a drained target: %v", err)
	}
}

func TestProxyWaitReady(t *testing.T) {
	if !(proxyWait{proxies: 0}).ready() {
		t.Fatal("no proxies registered: nothing to wait for")
	}
	if (proxyWait{proxies: 2, busy: []string{"p1 (1 sessions)"}}).ready() || (proxyWait{notHolding: []string{"p2"}}).ready() {
		t.Fatal("busy or silent proxies count as ready")
	}
}
