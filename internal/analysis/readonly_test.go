package analysis

import (
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// A cluster without a published primary whose nodes are all read_only
// (everything restarted): NoWritablePrimary names the node the replicas
// replicate from only when that is unambiguous and safe.
func TestNoWritablePrimary(t *testing.T) {
	ro := func(p topo.Probe) topo.Probe { return with(p, func(p *topo.Probe) { p.ReadOnly = true }) }
	from := func(p topo.Probe, port int) topo.Probe { return with(p, func(p *topo.Probe) { p.SourcePort = port }) }
	for _, c := range []struct {
		name       string
		s          snap
		node, want string // want "" : no NoWritablePrimary finding
	}{
		{"source of both replicas", snap{publish: "-", primary: ro(primaryOK("0-1-10")), db2: replicaOK(2, "0-1-10"), db3: replicaOK(3, "0-1-9")},
			"db1", "db1 is the replication source of db2, db3 and holds every transaction they have: if it is the primary, make it writable with `SET GLOBAL read_only=OFF` on db1 (127.0.0.1:3301)"},
		{"replica ahead of the source", snap{publish: "-", primary: ro(primaryOK("0-1-10")), db2: replicaOK(2, "0-1-12"), db3: replicaOK(3, "0-1-9")},
			"", "db1 is the source of every replica but db2 holds transactions it lacks"},
		{"replicas split between two sources", snap{publish: "-", primary: ro(primaryOK("0-1-10")), db2: replicaOK(2, "0-1-10"),
			db3: ro(with(primaryOK("0-1-10"), func(p *topo.Probe) { p.ServerID = 3 }))},
			"db1", "db1 is the replication source of db2"},
		{"replica points at the other read_only node", snap{publish: "-", primary: ro(primaryOK("0-1-10")), db2: from(replicaOK(2, "0-1-10"), 3303),
			db3: ro(with(primaryOK("0-1-10"), func(p *topo.Probe) { p.ServerID = 3 }))},
			"db3", "db3 is the replication source of db2"},
		{"nobody replicates", snap{publish: "-", primary: ro(primaryOK("0-1-10")), db2: ro(with(primaryOK("0-1-10"), func(p *topo.Probe) { p.ServerID = 2 })), db3: refused()},
			"", "no single node is the source of every replica"},
		{"a writable node: discovery decides", snap{publish: "-", primary: primaryOK("0-1-10"), db2: replicaOK(2, "0-1-10"), db3: replicaOK(3, "0-1-10")}, "", ""},
		{"published primary", snap{primary: ro(primaryOK("0-1-10")), db2: replicaOK(2, "0-1-10"), db3: replicaOK(3, "0-1-10")}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := Analyze(c.s.build())
			f := res.Get(NoWritablePrimary)
			if c.want == "" && c.node == "" {
				if f != nil {
					t.Fatalf("unexpected %+v", *f)
				}
				return
			}
			if f == nil {
				t.Fatalf("no NoWritablePrimary in %+v", res.Findings)
			}
			if f.Node != c.node || !strings.Contains(f.Detail, c.want) {
				t.Fatalf("finding node %q detail %q; want node %q detail containing %q", f.Node, f.Detail, c.node, c.want)
			}
			if !res.Has(NoPrimary) {
				t.Fatalf("NoPrimary missing: %+v", res.Findings)
			}
		})
	}
}
