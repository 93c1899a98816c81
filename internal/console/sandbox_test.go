package console_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/admin"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/status"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

func sha(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// TestConsoleOnSandbox drives the console in chromium against the real
// admin endpoint of a process with a controller and a proxy over a 3-node
// sandbox and an embedded etcd, with tokens configured: an operator logs
// in, sees node1 as primary and a live client session, plans a switchover
// to node3, runs it with a reason and follows it to done, sees node3 drawn
// as primary and the switchover's event with the actor in the timeline; a
// viewer token then is offered neither Execute nor Kill, and the API
// answers its switchover with 403. Screenshots of each step are saved in
// the test's artifact directory (go test -artifacts -outputdir DIR).
func TestConsoleOnSandbox(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	// The leader session TTL `up` uses (5 s), not the 1 s of
	// topotest.NewStore: on a loaded machine a 1 s lease lapses and the
	// leadership changes mid-switchover, which this test is not about
	// (the retry below covers it if it still happens).
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: topotest.StartEtcd(t), DialTimeout: 5 * time.Second,
		SessionTTL: topo.DefaultSessionTTL, Log: topotest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	keys := topo.Keys{Prefix: "/switchyard-console-test"}
	cfg := c.Config()
	// Probe timeouts with room for a loaded machine: a probe that times
	// out makes the node unreachable and the switchover refused.
	cfg.Probe.Interval = config.Duration(time.Second)
	cfg.Probe.Timeout = config.Duration(900 * time.Millisecond)
	cfg.Switchover.CatchupTimeout = config.Duration(10 * time.Second)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := configstore.Bootstrap(ctx, st, keys, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctl, err := controller.New(controller.Options{Config: cfg, Store: st, Keys: keys, ID: "ctl-console", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Run(ctx) }()
	px, err := proxy.New(proxy.Options{Config: cfg, ID: "proxy-console", Log: log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- proxy.Follow(ctx, st, keys, px) }()
	srv, err := admin.Start(admin.Options{Address: "127.0.0.1:0", Store: st, Keys: keys, Sessions: px, Log: log,
		Status: func(ctx context.Context) (any, error) { return status.Collect(ctx, st, keys, time.Now()) },
		Tokens: []config.AdminToken{{Name: "alice", Role: config.RoleOperator, TokenSHA256: sha("op")},
			{Name: "victor", Role: config.RoleViewer, TokenSHA256: sha("v")}}})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the browser's cleanup, so run after it: the
	// event stream stays open until the admin server closes.
	t.Cleanup(func() {
		_ = srv.Close()
		cancel()
		<-followDone
		_ = px.Close()
		waitStopped(t, ctlDone, 15*time.Second)
	})
	b := startBrowser(t, bin, "http://"+srv.Addr()+"/console/")
	ok := func(v bool) bool { return v }
	js := func(expr string) {
		t.Helper()
		if err := b.eval(expr, nil); err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
	}

	// Log in with the operator token.
	waitFor(t, b, "login form", 30*time.Second, `!document.getElementById('login').hidden`, ok)
	b.screenshot("01-login")
	js(`document.getElementById('login-token').value = 'op'; document.getElementById('login-form').requestSubmit()`)
	who := waitFor(t, b, "whoami", 30*time.Second, `(document.getElementById('whoami') || {}).textContent || ''`, func(s string) bool { return s != "" })
	if who != "alice (operator)" {
		t.Errorf("whoami shown as %q, want alice (operator)", who)
	}

	// The topology: node1 primary, node2 and node3 replicas.
	roles := waitFor(t, b, "topology", 60*time.Second, `Object.fromEntries([...document.querySelectorAll('.topo g.node')].map((g) => [g.dataset.node, g.dataset.role]))`,
		func(m map[string]string) bool {
			return m["node1"] == "primary" && m["node2"] == "replica" && m["node3"] == "replica"
		})
	t.Logf("topology shown: %v", roles)
	b.screenshot("02-topology-node1-primary")

	// A live client of the proxy shows on the sessions page.
	app, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/", c.AppUser, c.AppPassword, px.ListenerAddr("rw")))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	js(`location.hash = '#sessions'`)
	row := waitFor(t, b, "client session listed", 20*time.Second,
		`[...document.querySelectorAll('#sessions tbody tr')].map((r) => r.textContent + (r.querySelector('button.danger').disabled ? ' [kill disabled]' : ''))`,
		func(v []string) bool { return len(v) == 1 })
	if !strings.Contains(row[0], c.AppUser) || !strings.Contains(row[0], "rw") || strings.Contains(row[0], "[kill disabled]") {
		t.Errorf("session row %q: want user %s on listener rw, Kill enabled", row[0], c.AppUser)
	}
	_ = conn.Close()

	// Plan a switchover to node3 (until the controller's state makes the
	// plan acceptable), then run it with a reason and follow it to done.
	// A run that ends failed because the controller leadership changed
	// under it is planned and run again, as an operator would.
	js(`location.hash = '#actions'`)
	var res string
	for attempt := 1; ; attempt++ {
		planSwitchover(t, b, "node3", attempt == 1)
		var disabled bool
		if err := b.eval(`document.getElementById('act-go').disabled`, &disabled); err != nil || !disabled {
			t.Errorf("Execute enabled without a reason (%v)", err)
		}
		js(`document.getElementById('act-reason').value = 'console test'; document.getElementById('act-reason').dispatchEvent(new Event('input'))`)
		if attempt == 1 {
			b.screenshot("03-switchover-plan-node3")
		}
		js(`document.getElementById('act-go').click()`)
		start := time.Now()
		res = waitFor(t, b, "operation followed to done", 180*time.Second, `(document.getElementById('act-result') || {}).textContent || ''`, func(s string) bool {
			return strings.Contains(s, "Operation ") && (strings.Contains(s, `"state": "done"`) || strings.Contains(s, `"state": "failed"`)) || strings.Contains(s, "Refused")
		})
		t.Logf("switchover attempt %d from the console ended after %s: %.300s", attempt, time.Since(start).Round(time.Millisecond), res)
		// Planned and run again, as an operator would: a run failed
		// because the leadership changed under it, or refused because a
		// probe timed out on the loaded machine since the plan.
		if attempt < 3 && (strings.Contains(res, `"state": "failed"`) && strings.Contains(res, "leader changed") ||
			strings.Contains(res, "Refused") && strings.Contains(res, "unreachable")) {
			b.screenshot(fmt.Sprintf("04-switchover-attempt%d-failed", attempt))
			continue
		}
		break
	}
	b.screenshot("04-switchover-done")
	if !strings.Contains(res, `"state": "done"`) || !strings.Contains(res, `"by": "alice"`) || !strings.Contains(res, `"target": "node3"`) {
		t.Fatalf("operation panel: %q", res)
	}

	// The timeline shows the switchover's event with the actor.
	js(`location.hash = '#events'`)
	waitFor(t, b, "switchover event with actor alice", 30*time.Second,
		`[...document.querySelectorAll('tr[data-event]')].some((r) => r.textContent.includes('switchover_done') && r.lastElementChild.textContent === 'alice')`, ok)
	b.screenshot("05-events-actor-alice")
	js(`location.hash = '#cluster'`)
	waitFor(t, b, "new topology", 60*time.Second, `Object.fromEntries([...document.querySelectorAll('.topo g.node')].map((g) => [g.dataset.node, g.dataset.role]))`,
		func(m map[string]string) bool {
			return m["node3"] == "primary" && m["node1"] == "replica" && m["node2"] == "replica"
		})
	b.screenshot("06-topology-node3-primary")

	// A viewer token: it plans, but neither Execute nor Kill is offered,
	// and the API refuses its switchover with 403.
	js(`sessionStorage.setItem('switchyard.token', 'v'); location.hash = '#actions'; location.reload()`)
	who = waitFor(t, b, "viewer whoami", 30*time.Second, `(document.getElementById('whoami') || {}).textContent || ''`, func(s string) bool { return s != "" })
	if who != "victor (viewer)" {
		t.Errorf("whoami shown as %q, want victor (viewer)", who)
	}
	waitFor(t, b, "actions form for the viewer", 20*time.Second, `!!document.querySelector('#act-node option[value="node1"]') && !!document.getElementById('act-viewer')`, ok)
	js(`document.getElementById('act-node').value = 'node1'; document.getElementById('act-node').dispatchEvent(new Event('change'));
	    document.getElementById('act-reason').value = 'viewer try'; document.getElementById('act-reason').dispatchEvent(new Event('input'));
	    document.getElementById('act-plan').click()`)
	waitFor(t, b, "viewer's plan shown", 30*time.Second, `!!document.getElementById('plan') || !!document.getElementById('plan-error')`, ok)
	var viewer struct {
		Go   bool   `json:"go"`
		Note string `json:"note"`
		API  int    `json:"api"`
		Body string `json:"body"`
	}
	if err := b.eval(`(async () => {
	  const r = await fetch('/api/v1/clusters/main/switchover', {method: 'POST', headers: {'Authorization': 'Bearer v', 'Content-Type': 'application/json'},
	    body: JSON.stringify({target: 'node1', reason: 'viewer try'})});
	  return {go: !!document.getElementById('act-go'), note: document.getElementById('act-viewer').textContent, api: r.status, body: await r.text()};
	})()`, &viewer); err != nil {
		t.Fatal(err)
	}
	b.screenshot("07-viewer-actions")
	if viewer.Go {
		t.Error("Execute offered to a viewer")
	}
	if !strings.Contains(viewer.Note, "viewer role") {
		t.Errorf("the actions page does not say why a viewer cannot act: %q", viewer.Note)
	}
	if viewer.API != 403 || !strings.Contains(viewer.Body, "needs role operator") {
		t.Errorf("viewer switchover through the API: %d %s, want 403", viewer.API, viewer.Body)
	}
	conn, err = app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	js(`location.hash = '#sessions'`)
	kill := waitFor(t, b, "session listed for the viewer", 20*time.Second,
		`[...document.querySelectorAll('#sessions tbody tr')].map((r) => r.querySelectorAll('button').length)`, func(v []int) bool { return len(v) >= 1 })
	for _, n := range kill {
		if n != 0 {
			t.Error("Kill offered to a viewer")
		}
	}
	var st2 string
	if err := b.eval(`fetch('/api/v1/status', {headers: {'Authorization': 'Bearer v'}}).then((r) => r.json()).then((d) => d.clusters[0].primary)`, &st2); err != nil || st2 != "node3" {
		t.Errorf("primary after the viewer's refused switchover: %q (%v), want node3", st2, err)
	}
}

// planSwitchover chooses target on the actions page and plans until the
// plan is acceptable (the controller's published state may need a few
// rounds), checking that the plan shows from, to and the steps.
func planSwitchover(t *testing.T, b *browser, target string, check bool) {
	t.Helper()
	waitFor(t, b, "actions form", 30*time.Second, `!!document.querySelector('#act-node option[value="`+target+`"]') && !!document.getElementById('act-go')`,
		func(v bool) bool { return v })
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := b.eval(`document.getElementById('act-action').value = 'switchover'; document.getElementById('act-action').dispatchEvent(new Event('change'));
		    document.getElementById('act-node').value = '`+target+`'; document.getElementById('act-node').dispatchEvent(new Event('change'));
		    document.getElementById('act-plan').click()`, nil); err != nil {
			t.Fatal(err)
		}
		plan := waitFor(t, b, "plan shown", 30*time.Second, `(document.getElementById('act-plan-out') || {}).textContent || ''`, func(s string) bool {
			return s != "" && !strings.Contains(s, "Planning…")
		})
		if strings.Contains(plan, "the server would accept it") {
			if check && (!strings.Contains(plan, "node1") || !strings.Contains(plan, target) || !strings.Contains(plan, "Steps")) {
				t.Errorf("plan %q: want from node1, to %s and the steps", plan, target)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("switchover plan not accepted within 90 s: %q", plan)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitStopped waits for a controller's Run to return; when it does not
// within bound, the test fails with the goroutines' stacks.
func waitStopped(t *testing.T, done <-chan error, bound time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(bound):
		var sb strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Errorf("controller did not stop within %s; goroutines:\n%s", bound, sb.String())
	}
}
