package console_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
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
// in, sees the topology and a live client session, plans and runs a
// switchover with a reason and follows it to done, and finds the
// switchover's event with the actor in the timeline; a viewer token then
// sees the Execute and Kill buttons disabled.
func TestConsoleOnSandbox(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	keys := topo.Keys{Prefix: "/switchyard-console-test"}
	cfg := c.Config()
	cfg.Probe.Interval = config.Duration(500 * time.Millisecond)
	cfg.Probe.Timeout = config.Duration(400 * time.Millisecond)
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
		select {
		case <-ctlDone:
		case <-time.After(15 * time.Second):
			t.Error("controller did not stop within 15 s")
		}
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

	// Plan a switchover to node2 (until the controller's state makes the
	// plan acceptable), then run it with a reason and follow it to done.
	js(`location.hash = '#actions'`)
	waitFor(t, b, "actions form", 20*time.Second, `!!document.querySelector('#act-node option[value="node2"]')`, ok)
	deadline := time.Now().Add(60 * time.Second)
	for {
		js(`document.getElementById('act-node').value = 'node2'; document.getElementById('act-node').dispatchEvent(new Event('change'));
		    document.getElementById('act-plan').click()`)
		plan := waitFor(t, b, "plan shown", 20*time.Second, `(document.getElementById('act-plan-out') || {}).textContent || ''`, func(s string) bool {
			return s != "" && !strings.Contains(s, "Planning…")
		})
		if strings.Contains(plan, "the server would accept it") {
			if !strings.Contains(plan, "node1") || !strings.Contains(plan, "node2") || !strings.Contains(plan, "Steps") {
				t.Errorf("plan %q: want from node1, to node2 and the steps", plan)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("switchover plan not accepted within 60 s: %q", plan)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var disabled bool
	if err := b.eval(`document.getElementById('act-go').disabled`, &disabled); err != nil || !disabled {
		t.Errorf("Execute enabled without a reason (%v)", err)
	}
	js(`document.getElementById('act-reason').value = 'console test'; document.getElementById('act-reason').dispatchEvent(new Event('input'));
	    document.getElementById('act-go').click()`)
	start := time.Now()
	res := waitFor(t, b, "operation followed to done", 120*time.Second, `(document.getElementById('act-result') || {}).textContent || ''`, func(s string) bool {
		return strings.Contains(s, "Operation ") && (strings.Contains(s, `"state": "done"`) || strings.Contains(s, `"state": "failed"`)) || strings.Contains(s, "Refused")
	})
	if !strings.Contains(res, `"state": "done"`) || !strings.Contains(res, `"by": "alice"`) {
		t.Fatalf("operation panel: %q", res)
	}
	t.Logf("switchover from the console done, seen by the page after %s (machine loaded)", time.Since(start).Round(time.Millisecond))

	// The timeline shows the switchover's event with the actor.
	js(`location.hash = '#events'`)
	waitFor(t, b, "switchover event with actor alice", 30*time.Second,
		`[...document.querySelectorAll('tr[data-event]')].some((r) => r.textContent.includes('switchover_done') && r.lastElementChild.textContent === 'alice')`, ok)
	waitFor(t, b, "new topology", 30*time.Second, `(location.hash = '#cluster', Object.fromEntries([...document.querySelectorAll('.topo g.node')].map((g) => [g.dataset.node, g.dataset.role])))`,
		func(m map[string]string) bool { return m["node2"] == "primary" })

	// A viewer token: the actions and the kill buttons are disabled.
	js(`sessionStorage.setItem('switchyard.token', 'v'); location.hash = '#actions'; location.reload()`)
	who = waitFor(t, b, "viewer whoami", 30*time.Second, `(document.getElementById('whoami') || {}).textContent || ''`, func(s string) bool { return s != "" })
	if who != "victor (viewer)" {
		t.Errorf("whoami shown as %q, want victor (viewer)", who)
	}
	waitFor(t, b, "actions form for the viewer", 20*time.Second, `!!document.querySelector('#act-node option[value="node3"]')`, ok)
	js(`document.getElementById('act-node').value = 'node3'; document.getElementById('act-node').dispatchEvent(new Event('change'));
	    document.getElementById('act-reason').value = 'viewer try'; document.getElementById('act-reason').dispatchEvent(new Event('input'));
	    document.getElementById('act-plan').click()`)
	waitFor(t, b, "viewer's plan shown", 30*time.Second, `!!document.getElementById('plan') || !!document.getElementById('plan-error')`, ok)
	var goState struct {
		Disabled bool   `json:"disabled"`
		Title    string `json:"title"`
	}
	if err := b.eval(`({disabled: document.getElementById('act-go').disabled, title: document.getElementById('act-go').title})`, &goState); err != nil || !goState.Disabled {
		t.Errorf("Execute for a viewer: %+v (%v), want disabled", goState, err)
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
		`[...document.querySelectorAll('#sessions tbody tr button.danger')].map((x) => x.disabled)`, func(v []bool) bool { return len(v) >= 1 })
	for _, d := range kill {
		if !d {
			t.Error("Kill enabled for a viewer")
		}
	}
}
