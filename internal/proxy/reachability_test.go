package proxy

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// newLabHarness is newHarness with every node in its own network namespace
// (sandbox.NetLab), configured by its lab address, so that a node can be
// made silent (its packets dropped). It skips where namespaces cannot be
// used, unless SWITCHYARD_REQUIRE_NETNS=1.
func newLabHarness(t *testing.T, mutate func(*config.Config)) (*harness, *sandbox.NetLab) {
	t.Helper()
	if why := sandbox.NetNSUnavailable(); why != "" {
		if os.Getenv("SWITCHYARD_REQUIRE_NETNS") == "1" {
			t.Fatalf("network namespaces required: %s", why)
		}
		t.Skipf("network namespaces unavailable: %s", why)
	}
	c := sandboxtest.Start(t, sandbox.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab, err := sandbox.NewNetLab(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Teardown)
	cfg := c.Config()
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	for i := range cfg.Clusters[0].Nodes {
		cfg.Clusters[0].Nodes[i].Address = lab.Addr(i)
	}
	if mutate != nil {
		mutate(cfg)
	}
	h := &harness{t: t, c: c, cfg: cfg}
	h.srv = h.startProxy(cfg)
	st := sandboxState(c, 1, 0, 1, 2)
	for i := range st.Nodes {
		st.Nodes[i].Address = lab.Addr(i)
	}
	h.srv.SetClusterState(st)
	return h, lab
}

func reachOf(t *testing.T, s *Server, node string) topo.BackendReach {
	t.Helper()
	for _, b := range s.backendReport() {
		if b.Node == node {
			return b
		}
	}
	t.Fatalf("%s not in the report: %+v", node, s.backendReport())
	return topo.BackendReach{}
}

// A node whose packets are dropped (no refusal, no reset) is reported
// unreachable once two connects bounded by probe.connect_timeout go
// unanswered — long before proxy.connect_timeout — while a statement in
// flight there is cut only when a connect has waited the whole
// proxy.connect_timeout; a check after the heal clears the report at once.
func TestCheckReportsSilentNodeBeforeConnectTimeout(t *testing.T) {
	const connectTimeout = 3 * time.Second // proxy.connect_timeout; probe.connect_timeout stays 100ms
	h, lab := newLabHarness(t, func(cfg *config.Config) { cfg.Proxy.ConnectTimeout = config.Duration(connectTimeout) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if again := h.srv.checkAll(ctx); again {
		t.Fatalf("healthy nodes asked for a quick re-check: %+v", h.srv.backendReport())
	}
	for _, b := range h.srv.backendReport() {
		if !b.Reachable {
			t.Fatalf("%s unreachable before the cut: %+v", b.Node, b)
		}
	}

	c := conn1(t, h.db("ro", "", nil))
	id := serverID(t, c)
	if id != 2 && id != 3 {
		t.Fatalf("ro on server_id %d", id)
	}
	idx := id - 1
	node := h.c.Nodes[idx].Name
	busy := execAsync(c, "SELECT SLEEP(8)")
	time.Sleep(300 * time.Millisecond)
	if err := lab.CutFromHost(idx); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	again := h.srv.checkAll(ctx)
	took := time.Since(cutAt)
	t.Logf("silent %s reported unreachable after %s (proxy.connect_timeout %s)", node, took, connectTimeout)
	b := reachOf(t, h.srv, node)
	if b.Reachable || !strings.Contains(b.Error, "no answer to two connects within 100ms") {
		t.Fatalf("%s after the cut: %+v, want unreachable after two unanswered connects", node, b)
	}
	if !again {
		t.Fatal("a failed check did not ask for a quick re-check")
	}
	// 10× the expected ~200 ms, and below the 3 s the old single connect took.
	if took > 2*time.Second {
		t.Fatalf("the silent node's verdict took %s, want about 2 × probe.connect_timeout", took)
	}
	select {
	case r := <-busy:
		t.Fatalf("the statement in flight ended on the early verdict: %v", r.err)
	default:
	}
	for _, o := range h.srv.backendReport() {
		if o.Node != node && !o.Reachable {
			t.Fatalf("%s unreachable although only %s was cut: %+v", o.Node, node, o)
		}
	}

	// The connect that waits the whole proxy.connect_timeout cuts it.
	r := waitResult(t, busy, 20*time.Second, "statement in flight on the silent replica")
	code, msg := mysqlErr(r.err)
	t.Logf("statement cut %s after the cut: %d %s", r.at.Sub(cutAt), code, msg)
	if code != 1105 || !strings.Contains(msg, "cannot connect") {
		t.Fatalf("statement on the silent replica: %v, want the 1105 cut for an unreachable backend", r.err)
	}
	if d := r.at.Sub(cutAt); d < connectTimeout {
		t.Fatalf("statement cut %s after the cut, before a connect waited proxy.connect_timeout (%s)", d, connectTimeout)
	}

	if err := lab.Heal(idx); err != nil {
		t.Fatal(err)
	}
	h.srv.checkAll(ctx)
	if b := reachOf(t, h.srv, node); !b.Reachable {
		t.Fatalf("%s after the heal: %+v, want reachable", node, b)
	}
}

// The loop checks a failing node every minCheckInterval rather than every
// probe.interval, and a published state whose analysis names the primary
// starts a check at once.
func TestCheckCadenceFollowsTrouble(t *testing.T) {
	h := newHarness(t, func(cfg *config.Config) { cfg.Probe.Interval = config.Duration(time.Hour) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); h.srv.checkBackends(ctx) }()
	defer func() { cancel(); <-done }()
	waitReach := func(node string, want bool, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			for _, b := range h.srv.backendReport() {
				if b.Node == node && b.Reachable == want {
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s reachable=%v not reported within %s: %+v", node, want, within, h.srv.backendReport())
	}
	waitReach("node3", true, 30*time.Second)

	// With an hour between checks only a kick can see node3 go.
	if err := h.c.KillNode(2); err != nil {
		t.Fatal(err)
	}
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.Analysis = []topo.AnalysisEntry{{Code: "UnreachablePrimary", Node: "node1"}}
	h.srv.SetClusterState(st)
	waitReach("node3", false, 30*time.Second)

	// node3 failed: it is checked every minCheckInterval and seen back
	// without a kick.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := h.c.StartNode(ctx2, 2); err != nil {
		t.Fatal(err)
	}
	waitReach("node3", true, 30*time.Second)
}

func TestPrimaryInTrouble(t *testing.T) {
	at := time.Now()
	base := func() topo.ClusterState {
		return topo.ClusterState{Cluster: "main", Primary: "node1", Phase: topo.PhaseStable, Nodes: []topo.NodeState{
			{Name: "node1", Probe: topo.Probe{Reachable: true, At: at}}, {Name: "node2", Probe: topo.Probe{Reachable: true, At: at}}}}
	}
	cases := []struct {
		name string
		mod  func(*topo.ClusterState)
		want bool
	}{
		{"healthy", func(*topo.ClusterState) {}, false},
		{"DeadPrimary", func(s *topo.ClusterState) { s.Analysis = []topo.AnalysisEntry{{Code: "DeadPrimary", Node: "node1"}} }, true},
		{"UnreachablePrimary", func(s *topo.ClusterState) {
			s.Analysis = []topo.AnalysisEntry{{Code: "UnreachablePrimary", Node: "node1"}}
		}, true},
		{"code on a replica", func(s *topo.ClusterState) { s.Analysis = []topo.AnalysisEntry{{Code: "DeadPrimary", Node: "node2"}} }, false},
		{"other code on the primary", func(s *topo.ClusterState) {
			s.Analysis = []topo.AnalysisEntry{{Code: "ReplicaLagging", Node: "node1"}}
		}, false},
		{"primary probe failed", func(s *topo.ClusterState) { s.Nodes[0].Probe.Reachable = false }, true},
		{"replica probe failed", func(s *topo.ClusterState) { s.Nodes[1].Probe.Reachable = false }, false},
		{"never probed", func(s *topo.ClusterState) { s.Nodes[0].Probe = topo.Probe{} }, false},
		{"failover of the old primary", func(s *topo.ClusterState) {
			s.Primary, s.OldPrimary, s.Phase = "", "node1", topo.PhaseFailover
			s.Analysis = []topo.AnalysisEntry{{Code: "DeadPrimary", Node: "node1"}}
		}, true},
		{"no primary", func(s *topo.ClusterState) { s.Primary = "" }, false},
	}
	for _, c := range cases {
		st := base()
		c.mod(&st)
		if got := primaryInTrouble(&st); got != c.want {
			t.Errorf("%s: primaryInTrouble = %v, want %v", c.name, got, c.want)
		}
	}
}
