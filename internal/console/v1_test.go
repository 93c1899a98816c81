package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/console"
)

// fakeAPI answers the /api/v1 endpoints the console calls, as the admin API
// contract describes them, from fixed documents, and records the mutating
// calls. It exercises the console's side of the contract only; the real
// endpoints are tested in internal/admin.
type fakeAPI struct {
	mu          sync.Mutex
	storeOK     bool
	calls       []string // "METHOD path token body"
	opPolls     int
	streamEvent chan string
}

func (f *fakeAPI) record(r *http.Request, body map[string]any) {
	data, _ := json.Marshal(body)
	f.mu.Lock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(data))
	f.mu.Unlock()
}

func (f *fakeAPI) called(prefix string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			return c
		}
	}
	return ""
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	ui := console.Handler()
	mux.Handle("GET /{$}", ui)
	mux.Handle("GET /console/", ui)
	auth := func(next func(w http.ResponseWriter, r *http.Request, who string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("Authorization") {
			case "Bearer op-token":
				next(w, r, "alice")
			default:
				writeJSON(w, 401, map[string]string{"error": "no valid bearer token", "code": "unauthorized"})
			}
		}
	}
	mutating := func(next func(w http.ResponseWriter, r *http.Request, body map[string]any)) http.HandlerFunc {
		return auth(func(w http.ResponseWriter, r *http.Request, _ string) {
			body := map[string]any{}
			_ = json.NewDecoder(r.Body).Decode(&body)
			f.record(r, body)
			if !strings.HasSuffix(r.URL.Path, "/plan") && !strings.HasSuffix(r.URL.Path, "/diff") {
				if s, _ := body["reason"].(string); s == "" {
					writeJSON(w, 400, map[string]string{"error": "reason is required", "code": "bad_request"})
					return
				}
			}
			next(w, r, body)
		})
	}
	mux.HandleFunc("GET /api/v1/whoami", auth(func(w http.ResponseWriter, r *http.Request, who string) {
		writeJSON(w, 200, map[string]any{"name": who, "role": "operator", "auth": true})
	}))
	mux.HandleFunc("GET /api/v1/status", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		f.mu.Lock()
		ok := f.storeOK
		f.mu.Unlock()
		now := time.Now().UTC()
		lag := int64(3)
		probe := func(src int, ro bool) map[string]any {
			p := map[string]any{"reachable": true, "at": now.Add(-time.Second), "latency_ms": 1.5, "read_only": ro, "gtid_current": "0-1-42"}
			if src > 0 {
				p["replicating"] = true
				p["source_host"] = "127.0.0.1"
				p["source_port"] = 3300 + src
				p["io_running"] = "Yes"
				p["sql_running"] = true
				p["lag_seconds"] = lag
			}
			return p
		}
		writeJSON(w, 200, map[string]any{
			"leader": "ctrl-1", "controllers": []string{"ctrl-1"}, "proxies": []any{},
			"clusters": []any{map[string]any{
				"cluster": "main", "primary": "node1", "epoch": 7, "phase": "stable", "leader": "ctrl-1", "updated_at": now,
				"nodes": []any{
					map[string]any{"name": "node1", "address": "127.0.0.1:3301", "role": "primary", "serving": false, "probe": probe(0, false)},
					map[string]any{"name": "node2", "address": "127.0.0.1:3302", "role": "replica", "serving": true, "probe": probe(1, true)},
					map[string]any{"name": "node3", "address": "127.0.0.1:3303", "role": "replica", "serving": true, "probe": probe(2, true)},
				},
			}},
			"collected_at": now, "generated_at": now, "stale": !ok, "store_reachable": ok,
		})
	}))
	mux.HandleFunc("GET /api/v1/events", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		writeJSON(w, 200, map[string]any{"events": []any{map[string]any{"id": "e1", "cluster": "main", "at": time.Now().Add(-time.Minute),
			"kind": "decision", "message": "first event from the events API", "epoch": 7}}, "next": ""})
	}))
	mux.HandleFunc("GET /api/v1/events/stream", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, ": ping\n\n")
		fl.Flush()
		for {
			select {
			case msg := <-f.streamEvent:
				fmt.Fprintf(w, "event: event\ndata: %s\n\n", msg)
				fl.Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	mux.HandleFunc("POST /api/v1/clusters/main/switchover/plan", mutating(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		writeJSON(w, 200, map[string]any{"ok": false,
			"plan":     map[string]any{"from": "node1", "to": "node2", "steps": []string{"fence node1", "wait for node2 to catch up", "promote node2"}},
			"refusals": []string{"node3 lags 40s behind the primary (switchover.max_lag 10s)"}})
	}))
	mux.HandleFunc("POST /api/v1/clusters/main/switchover", mutating(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		writeJSON(w, 202, map[string]any{"id": "op-1", "status_url": "/api/v1/clusters/main/operations/op-1"})
	}))
	mux.HandleFunc("GET /api/v1/clusters/main/operations/op-1", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		f.mu.Lock()
		f.opPolls++
		n := f.opPolls
		f.mu.Unlock()
		if n < 2 {
			writeJSON(w, 200, map[string]any{"id": "op-1", "state": "running", "steps": []string{"fenced node1"}})
			return
		}
		writeJSON(w, 200, map[string]any{"id": "op-1", "state": "done", "message": "node2 is the primary", "steps": []string{"fenced node1", "promoted node2"}})
	}))
	mux.HandleFunc("GET /api/v1/sessions", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		writeJSON(w, 200, map[string]any{"proxy": true, "sessions": []any{map[string]any{"id": "17", "user": "app", "client_addr": "127.0.0.1:50000",
			"listener": "rw", "backend_node": "node1", "age_s": 42, "state": "in_transaction", "current_statement": "UPDATE t SET v = 1", "in_transaction": true}}})
	}))
	mux.HandleFunc("POST /api/v1/sessions/{id}/kill", mutating(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		writeJSON(w, 200, map[string]any{"ok": true})
	}))
	mux.HandleFunc("GET /api/v1/config", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		writeJSON(w, 200, map[string]any{"revision": 2, "yaml": "probe:\n  interval: 2s\n", "applied_by": "alice", "at": time.Now()})
	}))
	mux.HandleFunc("GET /api/v1/config/history", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		writeJSON(w, 200, map[string]any{"revisions": []any{
			map[string]any{"revision": 2, "actor": "alice", "reason": "slower probes", "at": time.Now(), "guard_overridden": false},
			map[string]any{"revision": 1, "actor": "bootstrap", "reason": "first start", "at": time.Now().Add(-time.Hour), "guard_overridden": false}}})
	}))
	mux.HandleFunc("GET /api/v1/config/revisions/{rev}", auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		y := map[string]string{"1": "probe:\n  interval: 1s\n", "2": "probe:\n  interval: 2s\n"}[r.PathValue("rev")]
		writeJSON(w, 200, map[string]any{"revision": r.PathValue("rev"), "yaml": y})
	}))
	mux.HandleFunc("POST /api/v1/config/diff", mutating(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		writeJSON(w, 200, map[string]any{"diff": "~ probe.interval: 2s -> 1s", "pending_restart": []string{}, "destructive": false, "refusals": []string{}})
	}))
	mux.HandleFunc("POST /api/v1/config/rollback", mutating(func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		writeJSON(w, 200, map[string]any{"revision": 3})
	}))
	return mux
}

// TestConsoleAgainstAPIv1 drives the console in headless chromium against
// the /api/v1 endpoints of the contract (answered by fakeAPI): login with a
// bearer token, a chained topology, live events from the stream, a
// switchover planned, refused, overridden and followed to done, a config
// rollback confirmed with its diff, and the store banner.
func TestConsoleAgainstAPIv1(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	f := &fakeAPI{storeOK: true, streamEvent: make(chan string, 4)}
	srv := httptest.NewServer(f.handler())
	// Registered first, so run after the browser stopped; the event
	// stream stays open until its connection is closed.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	b := startBrowser(t, bin, srv.URL+"/console/")
	ok := func(v bool) bool { return v }
	js := func(expr string) {
		t.Helper()
		if err := b.eval(expr, nil); err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
	}

	// Without a token every call is 401: the login form is shown.
	waitFor(t, b, "login form", 20*time.Second, `!document.getElementById('login').hidden && !document.getElementById('banner-auth').hidden`, ok)
	js(`document.getElementById('login-token').value = 'op-token'; document.getElementById('login-form').requestSubmit()`)
	who := waitFor(t, b, "whoami", 20*time.Second, `(document.getElementById('whoami') || {}).textContent || ''`, func(s string) bool { return s != "" })
	if who != "alice (operator)" {
		t.Errorf("whoami shown as %q", who)
	}
	var stored string
	if err := b.eval(`sessionStorage.getItem('switchyard.token')`, &stored); err != nil || stored != "op-token" {
		t.Errorf("token in sessionStorage %q (%v)", stored, err)
	}

	// node3 replicates from node2, which replicates from node1: three levels.
	type box struct {
		Node string  `json:"node"`
		Y    float64 `json:"y"`
	}
	boxes := waitFor(t, b, "chained topology", 20*time.Second, `[...document.querySelectorAll('.topo g.node')].map((g) =>
	  ({node: g.dataset.node, y: +g.getAttribute('transform').match(/,([0-9.]+)\)/)[1]}))`, func(v []box) bool { return len(v) == 3 })
	y := map[string]float64{}
	for _, bx := range boxes {
		y[bx.Node] = bx.Y
	}
	if !(y["node1"] < y["node2"] && y["node2"] < y["node3"]) {
		t.Errorf("topology levels %v, want node1 above node2 above node3", y)
	}

	// Events: the first page, then one from the stream, live.
	js(`location.hash = '#events'`)
	waitFor(t, b, "events from the API", 10*time.Second, `!!document.querySelector('tr[data-event="e1"]')`, ok)
	waitFor(t, b, "stream connected", 10*time.Second, `document.getElementById('events-mode').textContent === 'live (stream)'`, ok)
	f.streamEvent <- fmt.Sprintf(`{"id":"e2","cluster":"main","at":%q,"kind":"switchover","message":"streamed event","epoch":8}`, time.Now().UTC().Format(time.RFC3339Nano))
	waitFor(t, b, "streamed event shown", 10*time.Second, `!!document.querySelector('tr[data-event="e2"]')`, ok)

	// A switchover: plan first, refused; Execute needs a reason and the override.
	js(`location.hash = '#actions'`)
	waitFor(t, b, "actions form", 10*time.Second, `!!document.querySelector('#act-node option[value="node2"]')`, ok)
	js(`document.getElementById('act-node').value = 'node2'; document.getElementById('act-node').dispatchEvent(new Event('change'));
	    document.getElementById('act-plan').click()`)
	waitFor(t, b, "refusals shown", 10*time.Second, `((document.getElementById('refusals') || {}).textContent || '').includes('node3 lags 40s')`, ok)
	disabled := func() bool {
		var d bool
		if err := b.eval(`document.getElementById('act-go').disabled`, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !disabled() {
		t.Fatal("Execute enabled without a reason")
	}
	js(`document.getElementById('act-reason').value = 'move off node1'; document.getElementById('act-reason').dispatchEvent(new Event('input'))`)
	if !disabled() {
		t.Fatal("Execute enabled with refusals and no override ticked")
	}
	js(`document.getElementById('flag-force').click()`)
	if disabled() {
		t.Fatal("Execute still disabled with a plan, a reason and the override")
	}
	js(`document.getElementById('act-go').click()`)
	op := waitFor(t, b, "operation followed to done", 15*time.Second, `(document.getElementById('act-result') || {}).textContent || ''`, func(s string) bool {
		return strings.Contains(s, "node2 is the primary")
	})
	if !strings.Contains(op, "Operation op-1") || !strings.Contains(op, "promoted node2") {
		t.Errorf("operation panel %q", op)
	}
	call := f.called("POST /api/v1/clusters/main/switchover ")
	for _, want := range []string{"Bearer op-token", `"force":true`, `"reason":"move off node1"`, `"target":"node2"`} {
		if !strings.Contains(call, want) {
			t.Errorf("switchover call %q lacks %s", call, want)
		}
	}
	if f.called("POST /api/v1/clusters/main/switchover/plan ") == "" {
		t.Error("no plan call before the switchover")
	}

	// Sessions: kill asks for a reason.
	js(`location.hash = '#sessions'`)
	waitFor(t, b, "session listed", 10*time.Second, `!!document.querySelector('tr[data-session="17"] button.danger')`, ok)
	js(`document.querySelector('tr[data-session="17"] button.danger').click()`)
	var killDisabled bool
	if err := b.eval(`document.querySelector('#modal-body button.danger').disabled`, &killDisabled); err != nil || !killDisabled {
		t.Errorf("Kill enabled without a reason (%v)", err)
	}
	js(`const k = document.getElementById('kill-reason'); k.value = 'runaway update'; k.dispatchEvent(new Event('input'));
	    document.getElementById('kill-query-only').click(); document.querySelector('#modal-body button.danger').click()`)
	waitFor(t, b, "kill sent and the dialog closed", 10*time.Second, `document.getElementById('modal').hidden`, ok)
	if call := f.called("POST /api/v1/sessions/17/kill "); !strings.Contains(call, `"query_only":true`) || !strings.Contains(call, `"reason":"runaway update"`) {
		t.Errorf("kill call %q", call)
	}

	// Config rollback: the confirmation shows the server's diff and needs a reason.
	js(`location.hash = '#config'`)
	waitFor(t, b, "history", 10*time.Second, `!!document.querySelector('tr[data-revision="1"] button.danger')`, ok)
	js(`document.querySelector('tr[data-revision="1"] button.danger').click()`)
	waitFor(t, b, "rollback confirmation with the diff", 10*time.Second,
		`!document.getElementById('modal').hidden && document.getElementById('modal-body').textContent.includes('probe.interval: 2s -> 1s')`, ok)
	js(`const r = document.getElementById('rollback-reason'); r.value = 'probes too slow'; r.dispatchEvent(new Event('input'));
	    document.querySelector('#modal-body button.danger').click()`)
	waitFor(t, b, "rollback sent", 10*time.Second, `document.getElementById('modal-body').textContent.includes('new revision 3')`, ok)
	if call := f.called("POST /api/v1/config/rollback "); !strings.Contains(call, `"revision":1`) || !strings.Contains(call, `"reason":"probes too slow"`) {
		t.Errorf("rollback call %q", call)
	}
	js(`document.querySelector('#modal-body button').click()`)

	// The endpoint reports the store unreachable.
	f.mu.Lock()
	f.storeOK = false
	f.mu.Unlock()
	js(`location.hash = '#cluster'`)
	texts := waitFor(t, b, "store and stale banners", 15*time.Second, `[document.getElementById('banner-store').hidden ? '' : document.getElementById('banner-store').textContent,
	  document.getElementById('banner-stale').hidden ? '' : document.getElementById('banner-stale').textContent]`, func(v []string) bool {
		return len(v) == 2 && v[0] != "" && v[1] != ""
	})
	if !strings.Contains(texts[0], "Topology store unreachable") || !strings.Contains(texts[1], "marks this status as stale") {
		t.Errorf("banners %q", texts)
	}
}
