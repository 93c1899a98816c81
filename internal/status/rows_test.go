package status

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func putJSON(t *testing.T, st topo.Store, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, key, b)
}

func table(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func row(t *testing.T, out, node string) string {
	t.Helper()
	last := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, node+" ") {
			last = l
		}
	}
	if last == "" {
		t.Fatalf("no row for %s:\n%s", node, out)
	}
	return last
}

// Probe ages come from the last probe round when it is newer; a role
// published after the probe shows no read_only/source of the old role; a
// stable state without a primary says so; the proxy's applied config
// revision comes from its consumer report.
func TestStatusFreshProbesAndRoles(t *testing.T) {
	ctx := context.Background()
	keys := topo.Keys{Prefix: "/sy"}
	now := time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)
	old := now.Add(-10 * time.Second)
	fresh := now.Add(-300 * time.Millisecond)
	lag := int64(0)

	st := topo.NewMemory()
	// node2 just became primary (switchover published at now-1s); its
	// probe in the state is from before, as a replica of node1.
	state := topo.ClusterState{Cluster: "main", Primary: "node2", Epoch: 4, Phase: topo.PhaseStable, UpdatedAt: now.Add(-time.Second),
		Nodes: []topo.NodeState{
			{Name: "node1", Address: "127.0.0.1:3306", Role: topo.RoleReplica, Serving: true,
				Probe: topo.Probe{Reachable: true, At: old, LatencyMS: 1.1, ReadOnly: true, Replicating: true, SourceHost: "127.0.0.1", SourcePort: 3307, IORunning: "Yes", SQLRunning: true, LagSeconds: &lag}},
			{Name: "node2", Address: "127.0.0.1:3307", Role: topo.RolePrimary, RoleSince: now.Add(-time.Second),
				Probe: topo.Probe{Reachable: true, At: old, LatencyMS: 1.1, ReadOnly: true, Replicating: true, SourceHost: "127.0.0.1", SourcePort: 3306, IORunning: "Yes", SQLRunning: true, LagSeconds: &lag}},
		}}
	putJSON(t, st, keys.ClusterState("main"), state)
	// The last round (same epoch) probed node1 in its role; node2 not yet.
	putJSON(t, st, keys.ProbeRound("main"), topo.ProbeRound{Cluster: "main", Epoch: 4, Primary: "node2", At: fresh,
		Nodes: []topo.RoundNode{{Name: "node1", Role: topo.RoleReplica, Probe: topo.Probe{Reachable: true, At: fresh, LatencyMS: 0.7,
			ReadOnly: true, Replicating: true, SourceHost: "127.0.0.1", SourcePort: 3307, IORunning: "Yes", SQLRunning: true, LagSeconds: &lag}}}})
	putJSON(t, st, keys.Proxy("p1"), topo.ProxyRegistration{ID: "p1", Epochs: map[string]int64{"main": 4}, UpdatedAt: now})
	putJSON(t, st, keys.ConfigConsumer("proxy", "p1"), configstore.Status{ID: "p1", Name: "proxy", AppliedRev: 3})

	r, err := Collect(ctx, st, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	out := table(t, r)
	if n1 := row(t, out, "node1"); !strings.Contains(n1, "ok 0.7ms, 300ms ago") {
		t.Fatalf("node1 shows the state's 10 s old probe, not the round's:\n%s", out)
	}
	n2 := row(t, out, "node2")
	if strings.Contains(n2, "127.0.0.1:3306") || strings.Contains(n2, " yes ") || !strings.Contains(n2, "NOT PROBED since it became primary 1s ago") {
		t.Fatalf("node2 (new primary) shows its replica probe:\n%s", out)
	}
	if !strings.Contains(out, "probed: 300ms ago") {
		t.Fatalf("cluster line lacks the round's age:\n%s", out)
	}
	if p := row(t, out, "p1"); !strings.Contains(p, "rev 3") {
		t.Fatalf("PROXIES CONFIG lacks the applied revision:\n%s", out)
	}

	// The next round probed node2 as primary: fresh and shown.
	kv, _ := st.Get(ctx, keys.ProbeRound("main"))
	b, _ := json.Marshal(topo.ProbeRound{Cluster: "main", Epoch: 4, Primary: "node2", At: now,
		Nodes: []topo.RoundNode{{Name: "node2", Role: topo.RolePrimary, Probe: topo.Probe{Reachable: true, At: now, LatencyMS: 0.9}}}})
	if _, err := st.Update(ctx, keys.ProbeRound("main"), b, kv.Version); err != nil {
		t.Fatal(err)
	}
	r, _ = Collect(ctx, st, keys, now)
	if n2 := row(t, table(t, r), "node2"); !strings.Contains(n2, " no ") || !strings.Contains(n2, "ok 0.9ms, 0s ago") {
		t.Fatalf("node2 after a round as primary: %s", n2)
	}

	// No primary in a stable state.
	st2 := topo.NewMemory()
	state.Primary = ""
	putJSON(t, st2, keys.ClusterState("main"), state)
	r, _ = Collect(ctx, st2, keys, now)
	if out := table(t, r); !strings.Contains(out, "phase: NO PRIMARY (writes refused)") || strings.Contains(out, "phase: stable") {
		t.Fatalf("no primary shown as stable:\n%s", out)
	}

	// A dead primary in a stable state.
	st3 := topo.NewMemory()
	state.Primary = "node1"
	state.Analysis = []topo.AnalysisEntry{{Code: "DeadPrimary", Node: "node1"}}
	putJSON(t, st3, keys.ClusterState("main"), state)
	r, _ = Collect(ctx, st3, keys, now)
	if out := table(t, r); !strings.Contains(out, "phase: PRIMARY DEAD") || strings.Contains(out, "phase: stable") {
		t.Fatalf("dead primary shown as stable:\n%s", out)
	}
}
