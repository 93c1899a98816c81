package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/admin"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/status"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// pageState is what the console shows, read from its DOM.
type pageState struct {
	Primary    string      `json:"primary"`
	Nodes      [][2]string `json:"nodes"` // [name, role] of the topology boxes
	Rows       [][2]string `json:"rows"`  // [name, role] of the node table
	Edges      int         `json:"edges"`
	Stale      bool        `json:"stale"`
	StaleText  string      `json:"staleText"`
	Store      bool        `json:"store"`
	StoreText  string      `json:"storeText"`
	Source     string      `json:"source"`
	ScrollW    int         `json:"scrollW"`
	InnerW     int         `json:"innerW"`
	StateAges  []string    `json:"stateAges"`
	LoginShown bool        `json:"loginShown"`
}

const readPage = `(() => {
  const q = (s) => document.querySelector(s);
  const all = (s) => [...document.querySelectorAll(s)];
  return {
    primary: (q('[data-cluster="main"] .cluster-primary') || {}).textContent || '',
    nodes: all('[data-cluster="main"] .topo g.node').map((g) => [g.dataset.node, g.dataset.role]),
    rows: all('[data-cluster="main"] table.nodes tbody tr').map((r) => [r.dataset.node, r.dataset.role]),
    edges: all('[data-cluster="main"] .topo path.edge').length,
    stale: !q('#banner-stale').hidden, staleText: q('#banner-stale').textContent,
    store: !q('#banner-store').hidden, storeText: q('#banner-store').textContent,
    source: q('#source').textContent,
    scrollW: document.documentElement.scrollWidth, innerW: window.innerWidth,
    stateAges: all('[data-cluster="main"] table.nodes tbody tr td:nth-child(8)').map((td) => td.textContent),
    loginShown: !q('#login').hidden,
  };
})()`

func (p pageState) has(list [][2]string, name, role string) bool {
	for _, n := range list {
		if n[0] == name && n[1] == role {
			return true
		}
	}
	return false
}

func (p pageState) topologyOK() bool {
	if p.Primary != "node1" || len(p.Nodes) != 3 || len(p.Rows) != 3 || p.Edges != 2 {
		return false
	}
	for _, want := range [][2]string{{"node1", "primary"}, {"node2", "replica"}, {"node3", "replica"}} {
		if !p.has(p.Nodes, want[0], want[1]) || !p.has(p.Rows, want[0], want[1]) {
			return false
		}
	}
	return true
}

// TestConsoleShowsTopologyAndStaleness: a 3-node sandbox, a real embedded
// etcd, a controller publishing the cluster and the admin endpoint serving
// the console with the status read from the store. Headless chromium opens
// the console at 1366×768: the topology shows node1 as the primary and
// node2, node3 as replicas replicating from it, with no stale banner and no
// horizontal scrolling. Then the etcd stops: the status fetch fails and the
// page says the data is stale and the store unreachable, still showing the
// last topology read.
func TestConsoleShowsTopologyAndStaleness(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	emb := topotest.StartEmbedded(t, t.TempDir())
	store, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: emb.Endpoints(), DialTimeout: 2 * time.Second, SessionTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sb.Config()
	cfg.Etcd.Endpoints = emb.Endpoints()
	cfg.Probe.Interval = config.Duration(300 * time.Millisecond)
	cfg.Probe.Timeout = config.Duration(200 * time.Millisecond)
	cfg.Admin.Address = "off"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("sandbox config does not validate: %v", err)
	}
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	log := topotest.Logger(t)
	ctrl, err := controller.New(controller.Options{Config: cfg, Store: store, Keys: keys, ID: "ctrl-1", Log: log.With("role", "controller")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctrlDone := make(chan error, 1)
	go func() { ctrlDone <- ctrl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		waitStopped(t, ctrlDone, 15*time.Second)
		closed := make(chan struct{})
		go func() { _ = store.Close(); close(closed) }() // its etcd is gone: errors are expected
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
		}
	})

	a, err := admin.Start(admin.Options{
		Address: "127.0.0.1:0",
		Status: func(ctx context.Context) (any, error) {
			return status.Collect(ctx, store, keys, time.Now())
		},
		Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })

	// The controller publishes node1 as primary, both replicas serving.
	deadline := time.Now().Add(90 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
		r, err := status.Collect(cctx, store, keys, time.Now())
		ccancel()
		if err == nil && len(r.Clusters) == 1 && r.Clusters[0].Primary == "node1" {
			serving := 0
			for _, n := range r.Clusters[0].Nodes {
				if n.Serving {
					serving++
				}
			}
			if serving == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no published state with primary node1 and 2 serving replicas within 90s (last err %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	b := startBrowser(t, bin, "http://"+a.Addr()+"/")
	p := waitFor(t, b, "topology with primary node1 and replicas node2, node3", 60*time.Second, readPage, func(p pageState) bool {
		return p.topologyOK() && !p.Stale && !p.Store
	})
	b.screenshot("01-topology")
	if p.ScrollW > p.InnerW {
		t.Errorf("at 1366x768 the page is %dpx wide in a %dpx window (horizontal scrolling)", p.ScrollW, p.InnerW)
	}
	if !strings.Contains(p.Source, "/api/") {
		t.Errorf("status source shown as %q", p.Source)
	}
	if p.LoginShown {
		t.Errorf("login form shown against an endpoint without tokens")
	}
	for _, age := range p.StateAges {
		if !strings.Contains(age, "ago") {
			t.Errorf("last probe column %q has no age", age)
		}
	}
	t.Logf("page: %+v", p)

	// Planning is required before acting: Execute stays disabled until a
	// plan is shown, and the plan answer (or its failure) is shown.
	var acts struct {
		Plan     string `json:"plan"`
		Disabled bool   `json:"disabled"`
	}
	if err := b.eval(`location.hash = '#actions'`, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "actions form", 30*time.Second, `!!document.querySelector('#act-cluster option[value="main"]')`, func(ok bool) bool { return ok })
	if err := b.eval(`(() => { document.getElementById('act-reason').value = 'console test';
	  document.getElementById('act-reason').dispatchEvent(new Event('input'));
	  return document.getElementById('act-go').disabled; })()`, &acts.Disabled); err != nil {
		t.Fatal(err)
	}
	if !acts.Disabled {
		t.Errorf("Execute enabled before any plan was shown")
	}
	if err := b.eval(`document.getElementById('act-plan').click()`, nil); err != nil {
		t.Fatal(err)
	}
	acts = waitFor(t, b, "switchover plan answer", 60*time.Second, `({plan: (document.getElementById('act-plan-out') || {}).textContent || '',
	  disabled: document.getElementById('act-go').disabled})`, func(v struct {
		Plan     string `json:"plan"`
		Disabled bool   `json:"disabled"`
	}) bool {
		return v.Plan != "" && !strings.Contains(v.Plan, "Planning")
	})
	if strings.Contains(acts.Plan, "Plan failed") && !acts.Disabled {
		t.Errorf("Execute enabled after the plan failed: %q", acts.Plan)
	}
	t.Logf("plan panel: %q (execute disabled: %v)", acts.Plan, acts.Disabled)
	b.screenshot("02-actions-plan")
	if err := b.eval(`location.hash = '#cluster'`, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "cluster view again", 30*time.Second, readPage, func(p pageState) bool { return p.topologyOK() })

	// The status source fails: the store is gone.
	stopped := time.Now()
	emb.Close()
	p = waitFor(t, b, "stale banner after the store stopped", 60*time.Second, readPage, func(p pageState) bool {
		return p.Stale && p.Store
	})
	b.screenshot("03-store-unreachable")
	t.Logf("stale banner %s after the store stopped: %q / %q", time.Since(stopped).Round(100*time.Millisecond), p.StaleText, p.StoreText)
	// The admin endpoint answers with the last document read, marked
	// stale, while the store is down; an endpoint that fails instead
	// makes the fetch fail.
	if !strings.Contains(p.StaleText, "marks this status as stale; it was read") && !strings.Contains(p.StaleText, "status fetch is failing") {
		t.Errorf("stale banner %q says neither that the endpoint marks the status stale (and its age) nor that the fetch fails", p.StaleText)
	}
	if !strings.Contains(p.StoreText, "store unreachable") {
		t.Errorf("store banner %q does not say the store is unreachable", p.StoreText)
	}
	if !p.topologyOK() {
		t.Errorf("the last topology read is no longer shown once stale: %+v", p)
	}
}
