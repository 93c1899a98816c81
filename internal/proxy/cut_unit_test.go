package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// cutReason decides which commands in flight are cut: only a route change
// on primary listeners, only unreachable or quarantined nodes on replica
// listeners; never busy, lagging or drained nodes.
func TestCutReason(t *testing.T) {
	addr := func(n string) string { return "127.0.0.1:" + map[string]string{"n1": "1", "n2": "2", "n3": "3"}[n] }
	state := func(primary string, mut ...func(*topo.ClusterState)) topo.ClusterState {
		st := topo.ClusterState{Cluster: "c", Primary: primary, Epoch: 2, Phase: topo.PhaseStable}
		for _, n := range []string{"n1", "n2", "n3"} {
			st.Nodes = append(st.Nodes, topo.NodeState{Name: n, Address: addr(n), Serving: n != primary,
				Probe: topo.Probe{Reachable: true, At: time.Now()}})
		}
		for _, m := range mut {
			m(&st)
		}
		return st
	}
	node := func(name string, f func(*topo.NodeState)) func(*topo.ClusterState) {
		return func(st *topo.ClusterState) { f(st.Node(name)) }
	}
	down := func(kind string) func(*topo.NodeState) {
		return func(n *topo.NodeState) {
			n.Serving = false
			n.Probe = topo.Probe{Reachable: false, At: time.Now(), Error: "x", ErrorKind: kind}
		}
	}
	tgt := func(n string) *target { return &target{cluster: "c", node: n, addr: addr(n)} }
	cases := []struct {
		name    string
		st      topo.ClusterState
		drained map[string]bool
		fenced  string
		role    string
		node    string
		want    string // "" = not cut, else a substring of the reason
	}{
		{"primary unchanged", state("n1"), nil, "", rolePrimary, "n1", ""},
		{"primary slow (probe timeout)", state("n1", node("n1", down("timeout"))), nil, "", rolePrimary, "n1", ""},
		{"primary 1040", state("n1", node("n1", down("too_many_connections"))), nil, "", rolePrimary, "n1", ""},
		{"new primary", state("n2"), nil, "", rolePrimary, "n1", "no longer the primary (epoch 2: the primary is n2)"},
		{"failover phase", state("", func(st *topo.ClusterState) { st.Phase = topo.PhaseFailover }), nil, "", rolePrimary, "n1", "failover in progress"},
		{"primary quarantined", state("n1", func(st *topo.ClusterState) { st.Quarantined = map[string]string{"n1": "errant"} }), nil, "", rolePrimary, "n1", "quarantined"},
		{"write fence", state("n1"), nil, "lease lost", rolePrimary, "n1", "stopped routing writes (lease lost)"},
		{"replica healthy", state("n1"), nil, "", roleReplica, "n2", ""},
		{"replica lagging", state("n1", node("n2", func(n *topo.NodeState) { n.Serving, n.Reason = false, "lag 20s" })), nil, "", roleReplica, "n2", ""},
		{"replica drained", state("n1"), map[string]bool{"n2": true}, "", roleReplica, "n2", ""},
		{"replica 1040", state("n1", node("n2", down("too_many_connections"))), nil, "", roleReplica, "n2", ""},
		{"replica timeout", state("n1", node("n2", down("timeout"))), nil, "", roleReplica, "n2", "unreachable"},
		{"replica refused", state("n1", node("n2", down("refused"))), nil, "", roleReplica, "n2", "unreachable"},
		{"replica never probed", state("n1", node("n2", func(n *topo.NodeState) { n.Probe = topo.Probe{} })), nil, "", roleReplica, "n2", ""},
		{"replica quarantined", state("n1", func(st *topo.ClusterState) { st.Quarantined = map[string]string{"n3": "errant"} }), nil, "", roleReplica, "n3", "quarantined"},
		{"fallback primary unreachable", state("n1", node("n1", down("timeout"))), nil, "", roleReplica, "n1", "unreachable"},
		{"replica listener, primary changed", state("n2"), nil, "", roleReplica, "n1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := buildSnapshot(c.st, addr, c.drained)
			if c.fenced != "" {
				snap.primary, snap.fenced = nil, c.fenced
			}
			got := snap.cutReason(c.role, tgt(c.node))
			switch {
			case c.want == "" && got != "":
				t.Fatalf("cut: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("reason %q, want one containing %q", got, c.want)
			}
			// A node whose commands are cut is never a valid route (the
			// session reroutes instead of looping).
			if got != "" && snap.valid(c.role, true, &backend{t: tgt(c.node)}) {
				t.Fatalf("%s is cut but still a valid route", c.node)
			}
		})
	}
}
