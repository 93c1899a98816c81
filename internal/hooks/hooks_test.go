package hooks

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func hook(name string, events ...string) config.Hook {
	h := config.Hook{Name: name, Events: events}
	c := config.Config{Hooks: []config.Hook{h}}
	c.ApplyDefaults()
	return c.Hooks[0]
}

// results collects the attempts a Dispatcher reports.
type results struct {
	mu   sync.Mutex
	list []Attempt
	ch   chan Attempt
}

func newResults() *results { return &results{ch: make(chan Attempt, 100)} }

func (r *results) add(a Attempt) {
	r.mu.Lock()
	r.list = append(r.list, a)
	r.mu.Unlock()
	r.ch <- a
}

func (r *results) next(t *testing.T) Attempt {
	t.Helper()
	select {
	case a := <-r.ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no hook attempt reported within 30s")
		return Attempt{}
	}
}

func newDispatcher(t *testing.T, hooks ...config.Hook) (*Dispatcher, *results, *Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := newResults()
	d := New(hooks, Options{Metrics: m, OnResult: r.add,
		Sleep: func(ctx context.Context, d time.Duration) { sleep(ctx, d/100) }})
	t.Cleanup(d.Close)
	return d, r, m
}

func samplePayload(event string) Payload {
	return Payload{Event: event, Cluster: "main", Node: "node2", Primary: "node1", Epoch: 7,
		Time: time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC), Reason: "DeadPrimary: node1 unreachable",
		Plan: &topo.FailoverPlan{Cluster: "main", OldPrimary: "node1", Candidate: "node2",
			Candidates: []topo.PlanCandidate{{Node: "node2", GTID: "0-1-10", Eligible: true}, {Node: "node3", GTID: "0-1-8", Rejected: "behind"}}}}
}

// A command hook gets the payload on stdin and the SWITCHYARD_* variables,
// runs as a real child process, and its result is counted.
func TestCommandPayloadAndEnv(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	h := hook("cmd", config.HookDeadPrimary)
	h.Command = []string{"/bin/sh", "-c", `cat > "$1.json"; env | grep ^SWITCHYARD_ | sort > "$1.env"`, "sh", out}
	d, r, m := newDispatcher(t, h)
	d.Notify(samplePayload(config.HookDeadPrimary))
	a := r.next(t)
	if !a.OK() || a.ExitCode != 0 {
		t.Fatalf("attempt: %+v", a)
	}
	body, err := os.ReadFile(out + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var got Payload
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("stdin is not the JSON payload: %v: %s", err, body)
	}
	if got.Version != SchemaVersion || got.Event != config.HookDeadPrimary || got.Plan == nil || got.Plan.Candidate != "node2" || len(got.Plan.Candidates) != 2 {
		t.Errorf("payload on stdin: %+v", got)
	}
	env, _ := os.ReadFile(out + ".env")
	for _, want := range []string{"SWITCHYARD_EVENT=dead_primary", "SWITCHYARD_CLUSTER=main", "SWITCHYARD_NODE=node2", "SWITCHYARD_EPOCH=7", "SWITCHYARD_HOOK=cmd", "SWITCHYARD_CANDIDATE=node2"} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	if v := counterValue(m.runs.WithLabelValues("cmd", ResultOK)); v != 1 {
		t.Errorf("switchyard_hook_runs_total{hook=cmd,result=ok} = %v, want 1", v)
	}
}

// A failing command is retried (1 + retries attempts), each reported with
// its exit code; a later success stops the retries.
func TestCommandRetry(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	h := hook("flaky", config.HookFailoverEnd)
	three := 3
	h.Retries = &three
	// Fails twice with status 3, then succeeds.
	h.Command = []string{"/bin/sh", "-c", `echo x >> "$1"; n=$(wc -l < "$1"); echo "try $n" >&2; [ "$n" -ge 3 ] || exit 3`, "sh", count}
	d, r, m := newDispatcher(t, h)
	d.Notify(samplePayload(config.HookFailoverEnd))
	for i := 1; i <= 3; i++ {
		a := r.next(t)
		if a.N != i || a.Of != 4 {
			t.Errorf("attempt %d reported as %d of %d", i, a.N, a.Of)
		}
		wantOK := i == 3
		if a.OK() != wantOK {
			t.Fatalf("attempt %d: %s", i, a.Summary())
		}
		if !wantOK && (a.ExitCode != 3 || !strings.Contains(a.Output, "try")) {
			t.Errorf("attempt %d: exit %d output %q", i, a.ExitCode, a.Output)
		}
	}
	select {
	case a := <-r.ch:
		t.Errorf("attempt after success: %s", a.Summary())
	case <-time.After(200 * time.Millisecond):
	}
	if v := counterValue(m.runs.WithLabelValues("flaky", ResultFailed)); v != 2 {
		t.Errorf("failed attempts counted %v, want 2", v)
	}
}

// A command that outlives its timeout is killed with what it started, and
// the attempt is a timeout.
func TestCommandTimeout(t *testing.T) {
	h := hook("slow", config.HookAlarmRaised)
	zero := 0
	h.Retries = &zero
	h.Timeout = config.Duration(300 * time.Millisecond)
	h.Command = []string{"/bin/sh", "-c", "sleep 30 & sleep 30"}
	d, r, m := newDispatcher(t, h)
	start := time.Now()
	d.Notify(samplePayload(config.HookAlarmRaised))
	a := r.next(t)
	if a.Result != ResultTimeout {
		t.Fatalf("attempt: %s", a.Summary())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("timed-out command took %s to be reported (timeout 300ms)", took)
	}
	if v := counterValue(m.runs.WithLabelValues("slow", ResultTimeout)); v != 1 {
		t.Errorf("timeouts counted %v, want 1", v)
	}
}

// A URL hook POSTs the JSON payload with its headers (one from the
// environment); a 500 is retried, and a hook that only fires on other
// events or clusters is not called.
func TestURLPostRetryAndHeaders(t *testing.T) {
	var calls atomic.Int32
	bodies := make(chan []byte, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("request %d: %s content-type %q authorization %q", n, r.Method, r.Header.Get("Content-Type"), r.Header.Get("Authorization"))
		}
		if n == 1 {
			http.Error(w, "try later", http.StatusInternalServerError)
			return
		}
		bodies <- b
	}))
	defer srv.Close()
	t.Setenv("HOOK_TEST_TOKEN", "Bearer s3cret")
	h := hook("web", config.HookFailoverStart)
	h.URL = srv.URL + "/notify"
	h.Headers = []config.HookHeader{{Name: "Authorization", ValueEnv: "HOOK_TEST_TOKEN"}}
	other := hook("other-cluster", config.HookFailoverStart)
	other.Clusters = []string{"elsewhere"}
	other.URL = srv.URL + "/never"
	d, r, _ := newDispatcher(t, h, other)
	d.Notify(samplePayload(config.HookFailoverStart))
	d.Notify(samplePayload(config.HookAlarmCleared)) // no hook fires on it
	a := r.next(t)
	if a.OK() || a.Status != 500 || !strings.Contains(a.Output, "try later") {
		t.Fatalf("first attempt: %s", a.Summary())
	}
	if a = r.next(t); !a.OK() || a.Status != 200 || a.Hook != "web" {
		t.Fatalf("second attempt: %s", a.Summary())
	}
	var got Payload
	if err := json.Unmarshal(<-bodies, &got); err != nil || got.Event != config.HookFailoverStart || got.Plan == nil || got.Plan.Candidate != "node2" {
		t.Fatalf("body: %+v (%v)", got, err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
}

// A URL hook whose server does not answer in time is a timeout; Notify
// never waits for it, and a full queue drops deliveries (counted).
func TestURLTimeoutNeverBlocksNotify(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h := hook("hang", config.HookDeadPrimary)
	zero := 0
	h.Retries, h.Queue = &zero, 2
	h.Timeout = config.Duration(300 * time.Millisecond)
	h.URL = srv.URL
	d, r, m := newDispatcher(t, h)
	start := time.Now()
	for range 10 {
		d.Notify(samplePayload(config.HookDeadPrimary))
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("10 Notify calls took %s; Notify must not wait for a hook", took)
	}
	a := r.next(t)
	if a.Result != ResultTimeout || a.Status != 0 {
		t.Fatalf("attempt: %s", a.Summary())
	}
	// One in flight, two queued, the other seven dropped.
	if v := counterValue(m.runs.WithLabelValues("hang", ResultDropped)); v < 7 {
		t.Errorf("dropped deliveries counted %v, want at least 7", v)
	}
}

// A veto hook refuses with its output; a passing one lets the action go;
// a veto hook is not queued by Notify, and one that hangs is bounded by
// its timeout.
func TestVeto(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/deny") {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "change freeze until Monday")
		}
	}))
	defer srv.Close()
	gate := func(name, target string) config.Hook {
		h := hook(name, config.HookSwitchoverStart)
		h.Veto = true
		h.URL = srv.URL + target
		return h
	}
	ctx := context.Background()
	p := samplePayload(config.HookSwitchoverStart)

	d, r, m := newDispatcher(t, gate("allow", "/allow"))
	if err := d.Veto(ctx, p); err != nil {
		t.Fatalf("passing veto hook refused: %v", err)
	}
	if a := r.next(t); !a.OK() || !a.Veto {
		t.Errorf("veto attempt: %+v", a)
	}
	d.Notify(p)
	select {
	case a := <-r.ch:
		t.Errorf("Notify ran a veto hook: %s", a.Summary())
	case <-time.After(200 * time.Millisecond):
	}
	if err := d.Veto(ctx, samplePayload(config.HookFailoverStart)); err != nil {
		t.Errorf("veto hook on switchover_start refused a failover: %v", err)
	}

	d2, _, _ := newDispatcher(t, gate("allow", "/allow"), gate("freeze", "/deny"))
	err := d2.Veto(ctx, p)
	if !IsVeto(err) || !strings.Contains(err.Error(), `veto hook "freeze"`) || !strings.Contains(err.Error(), "HTTP 403") ||
		!strings.Contains(err.Error(), "change freeze until Monday") {
		t.Fatalf("denying veto hook: %v", err)
	}

	slow := hook("slow-gate", config.HookFailoverStart)
	slow.Veto, slow.Timeout = true, config.Duration(300*time.Millisecond)
	slow.Command = []string{"/bin/sleep", "30"}
	d3, _, _ := newDispatcher(t, slow)
	start := time.Now()
	err = d3.Veto(ctx, samplePayload(config.HookFailoverStart))
	if !IsVeto(err) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("hanging veto hook: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("hanging veto hook held the action %s (timeout 300ms)", took)
	}
	_ = m
}

// Update keeps unchanged hooks, stops removed ones and starts new ones.
func TestUpdate(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string) config.Hook {
		h := hook(name, config.HookNodeQuarantined)
		h.Command = []string{"/bin/sh", "-c", `touch "$1/$SWITCHYARD_HOOK"`, "sh", dir}
		return h
	}
	d, r, _ := newDispatcher(t, mk("a"))
	d.Update([]config.Hook{mk("b")})
	d.Notify(samplePayload(config.HookNodeQuarantined))
	if a := r.next(t); a.Hook != "b" || !a.OK() {
		t.Fatalf("attempt: %s", a.Summary())
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("removed hook a still ran")
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// A header whose environment variable is unset fails the attempt, naming
// the header and the variable, without sending anything.
func TestURLHeaderSecretMissing(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	h := hook("web", config.HookDeadPrimary)
	zero := 0
	h.Retries, h.URL = &zero, srv.URL
	h.Headers = []config.HookHeader{{Name: "Authorization", ValueEnv: "HOOK_TEST_UNSET_TOKEN"}}
	d, r, _ := newDispatcher(t, h)
	d.Notify(samplePayload(config.HookDeadPrimary))
	a := r.next(t)
	if a.OK() || !strings.Contains(a.Err, "headers[0] (Authorization): environment variable HOOK_TEST_UNSET_TOKEN is not set") {
		t.Fatalf("attempt: %s", a.Summary())
	}
	if calls.Load() != 0 {
		t.Error("the request was sent without its header")
	}
}
