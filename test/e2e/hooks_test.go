package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/hooks"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// hookSink is an HTTP hook receiver: it keeps every payload POSTed to it.
type hookSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []hooks.Payload
	// status is the status it answers with (200 when 0).
	status int
}

func newHookSink(t *testing.T, status int) *hookSink {
	h := &hookSink{status: status}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var p hooks.Payload
		if err := json.Unmarshal(b, &p); err != nil {
			t.Errorf("hook body is not a JSON payload: %v: %s", err, b)
		}
		h.mu.Lock()
		h.got = append(h.got, p)
		h.mu.Unlock()
		if h.status != 0 {
			http.Error(w, "receiver is down", h.status)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// wait returns the first payload of event received within timeout.
func (h *hookSink) wait(t *testing.T, event string, timeout time.Duration) hooks.Payload {
	t.Helper()
	return h.waitFor(t, event, timeout, func(hooks.Payload) bool { return true })
}

// waitFor returns the first payload of event for which ok holds.
func (h *hookSink) waitFor(t *testing.T, event string, timeout time.Duration, ok func(hooks.Payload) bool) hooks.Payload {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		h.mu.Lock()
		for _, p := range h.got {
			if p.Event == event && ok(p) {
				h.mu.Unlock()
				return p
			}
		}
		var seen []string
		for _, p := range h.got {
			seen = append(seen, p.Event)
		}
		h.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %s payload received within %s (received: %v)", event, timeout, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *hookSink) count(event string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.got {
		if p.Event == event {
			n++
		}
	}
	return n
}

func withHooks(hs ...config.Hook) func(*config.Config) {
	return func(c *config.Config) {
		c.Hooks = hs
		c.ApplyDefaults()
	}
}

// TestHookDeadPrimaryManual: in manual mode, kill -9 of the primary sends
// an HTTP hook the dead_primary payload with the failover plan an operator
// would run (candidate, GTID positions, why not automatic), and a command
// hook gets the same on stdin with SWITCHYARD_* variables; each attempt is
// a hook_ok event. A veto hook on failover_start refuses the operator's
// failover with its output; once it passes, failover_start and
// failover_end (result done, new epoch) reach the HTTP hook.
func TestHookDeadPrimaryManual(t *testing.T) {
	sink := newHookSink(t, 0)
	dir := t.TempDir()
	out := filepath.Join(dir, "dead")
	allow := filepath.Join(dir, "allow")
	s := startFO(t, foOpts{Mode: config.FailoverManual, Mutate: withHooks(
		config.Hook{Name: "web", Events: []string{config.HookDeadPrimary, config.HookFailoverStart, config.HookFailoverEnd,
			config.HookSwitchoverStart, config.HookSwitchoverEnd}, URL: sink.srv.URL + "/hook"},
		config.Hook{Name: "page", Events: []string{config.HookDeadPrimary},
			Command: []string{"/bin/sh", "-c", `cat > "$1.json"; echo "$SWITCHYARD_EVENT $SWITCHYARD_CLUSTER $SWITCHYARD_NODE $SWITCHYARD_CANDIDATE" > "$1.env"`, "sh", out}},
		config.Hook{Name: "freeze", Events: []string{config.HookFailoverStart}, Veto: true,
			Command: []string{"/bin/sh", "-c", `[ -e "$1" ] || { echo "change freeze in effect" >&2; exit 4; }`, "sh", allow}},
	)})
	s.waitState("replicas known", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Primary == "node1" && st.Node("node2").Probe.GTIDCurrent != "" && st.Node("node3").Probe.GTIDCurrent != ""
	})
	killed := time.Now()
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	// The rw listener stops being ready within 2 probe intervals, long
	// before the dead_primary notification (which waits for the
	// confirmation and the plan).
	notReady := waitListenerNotReady(t, s.proxies[0], "rw", killed, 40*foInterval)
	t.Logf("rw listener not ready %s after kill -9 (%.1f probe intervals of %s)", notReady.Round(time.Millisecond), float64(notReady)/float64(foInterval), foInterval)
	if notReady > 2*foInterval {
		t.Errorf("rw listener still ready %s after the kill, want not ready within 2 probe intervals (%s)", notReady.Round(time.Millisecond), 2*foInterval)
	}
	p := sink.wait(t, config.HookDeadPrimary, 20*time.Second)
	if p.Plan == nil {
		t.Fatalf("dead_primary payload without a plan: %+v", p)
	}
	if b, err := json.MarshalIndent(p, "", "  "); err == nil {
		t.Logf("dead_primary payload as received:\n%s", b)
	}
	t.Logf("dead_primary payload %s after kill -9: node %s, candidate %q, reason %.120q", time.Since(killed).Round(time.Millisecond), p.Node, p.Plan.Candidate, p.Reason)
	if p.Version != hooks.SchemaVersion || p.Cluster != "main" || p.Node != "node1" || p.Primary != "node1" || p.Epoch != 1 || p.Controller == "" || p.Time.IsZero() {
		t.Errorf("payload fields: %+v", p)
	}
	if !strings.Contains(p.Reason, "failover.mode is manual") || !strings.Contains(p.Reason, "switchyard failover --cluster main") {
		t.Errorf("reason does not say why and what to run: %q", p.Reason)
	}
	if p.Plan == nil || p.Plan.OldPrimary != "node1" || (p.Plan.Candidate != "node2" && p.Plan.Candidate != "node3") || len(p.Plan.Candidates) != 2 {
		t.Fatalf("plan: %+v", p.Plan)
	}
	for _, c := range p.Plan.Candidates {
		if c.GTID == "" {
			t.Errorf("plan candidate %s has no GTID position: %+v", c.Node, c)
		}
	}
	s.waitEvent(`hook "web" on dead_primary: ok`, 10*time.Second)
	s.waitEvent(`hook "page" on dead_primary: ok`, 10*time.Second)
	env, err := os.ReadFile(out + ".env")
	if err != nil {
		t.Fatal(err)
	}
	if want := "dead_primary main node1 " + p.Plan.Candidate + "\n"; string(env) != want {
		t.Errorf("command hook environment: %q, want %q", env, want)
	}
	var cp hooks.Payload
	if b, err := os.ReadFile(out + ".json"); err != nil || json.Unmarshal(b, &cp) != nil || cp.Plan == nil || cp.Plan.Candidate != p.Plan.Candidate {
		t.Errorf("command hook stdin: %+v (%v)", cp, err)
	}
	time.Sleep(4 * foInterval)
	if n := sink.count(config.HookDeadPrimary); n != 1 {
		t.Errorf("dead_primary delivered %d times for one dead primary, want 1", n)
	}

	refusal, err := s.cliErr("failover", "--cluster", "main")
	if exitCode(err) != 2 || !strings.Contains(refusal, `failover refused: by veto hook "freeze"`) || !strings.Contains(refusal, "change freeze in effect") ||
		!strings.Contains(refusal, "; override: none") {
		t.Fatalf("failover with a refusing veto hook: err %v\n%s", err, refusal)
	}
	t.Logf("switchyard failover with the veto hook refusing (%v):\n%s", err, refusal)
	if st := s.state(); st.Primary != "node1" || st.Epoch != 1 {
		t.Fatalf("vetoed failover acted: primary %s epoch %d", st.Primary, st.Epoch)
	}
	refused := sink.wait(t, config.HookFailoverEnd, 10*time.Second)
	if refused.Result != "refused" || !strings.Contains(refused.Reason, "change freeze in effect") || refused.Plan == nil {
		t.Errorf("failover_end of the vetoed failover: result %q reason %q", refused.Result, refused.Reason)
	}
	if n := sink.count(config.HookFailoverStart); n != 0 {
		t.Errorf("failover_start sent %d times for a vetoed failover, want 0", n)
	}
	if err := os.WriteFile(allow, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("switchyard failover:\n%s", s.cli("failover", "--cluster", "main"))
	start := sink.wait(t, config.HookFailoverStart, 10*time.Second)
	if start.Plan == nil || start.Plan.Candidate == "" || start.Mode != "manual" || start.Primary != "node1" {
		t.Errorf("failover_start payload: %+v", start)
	}
	end := sink.waitFor(t, config.HookFailoverEnd, 10*time.Second, func(p hooks.Payload) bool { return p.Result != "refused" })
	if end.Result != "done" || end.Epoch != 2 || end.Node != start.Plan.Candidate || len(end.Steps) == 0 {
		t.Errorf("failover_end payload: result %q epoch %d node %q steps %d", end.Result, end.Epoch, end.Node, len(end.Steps))
	}

	// A planned switchover to the other replica: start and end.
	other := "node3"
	if end.Node == "node3" {
		other = "node2"
	}
	s.waitState("replica repointed", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Epoch == 2 && st.Node(other).Serving
	})
	t.Logf("switchyard switchover:\n%s", s.cli("switchover", "--cluster", "main", "--to", other))
	ss := sink.wait(t, config.HookSwitchoverStart, 10*time.Second)
	if ss.Node != other || ss.Primary != end.Node || ss.Epoch != 2 {
		t.Errorf("switchover_start payload: node %q primary %q epoch %d", ss.Node, ss.Primary, ss.Epoch)
	}
	se := sink.wait(t, config.HookSwitchoverEnd, 10*time.Second)
	if se.Result != "done" || se.Node != other || se.Epoch != 3 || len(se.Steps) == 0 {
		t.Errorf("switchover_end payload: result %q node %q epoch %d steps %d", se.Result, se.Node, se.Epoch, len(se.Steps))
	}
}

// TestHookFailingDoesNotDelayFailover: auto mode, kill -9 of the primary,
// first without hooks (the usual time, logged), then with two failing
// hooks on failover_start — a command that hangs (timeout 30 s) and a URL
// that answers 500: the failover is published without waiting for them
// (a hook that blocked it would hold it 30 s), and the failures are
// hook_failed events and counted.
func TestHookFailingDoesNotDelayFailover(t *testing.T) {
	failover := func(t *testing.T, s *foStack) (time.Duration, string) {
		t.Helper()
		s.waitState("replicas known", 10*time.Second, func(st topo.ClusterState) bool {
			return st.Primary == "node1" && st.Node("node2").Probe.GTIDCurrent != ""
		})
		if err := s.sb.KillNode(0); err != nil {
			t.Fatal(err)
		}
		_, took := s.waitState("failover", 20*time.Second, func(st topo.ClusterState) bool {
			return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
		})
		msg := s.waitEvent("auto failover done", 10*time.Second).Message
		if i := strings.Index(msg, "; "); i > 0 {
			msg = msg[:i]
		}
		return took, msg
	}
	var base time.Duration
	t.Run("without hooks", func(t *testing.T) {
		var msg string
		base, msg = failover(t, startFO(t, foOpts{}))
		t.Logf("kill -9 node1 → new primary published %s later (%s)", base.Round(time.Millisecond), msg)
	})
	t.Run("with failing hooks", func(t *testing.T) {
		sink := newHookSink(t, http.StatusInternalServerError)
		one := 1
		reg := prometheus.NewRegistry()
		s := startFO(t, foOpts{Registry: reg, Mutate: withHooks(
			config.Hook{Name: "hang", Events: []string{config.HookFailoverStart}, Command: []string{"/bin/sleep", "60"},
				Timeout: config.Duration(30 * time.Second)},
			config.Hook{Name: "broken", Events: []string{config.HookFailoverStart, config.HookFailoverEnd}, URL: sink.srv.URL,
				Retries: &one, Backoff: config.Duration(100 * time.Millisecond)},
		)})
		took, msg := failover(t, s)
		t.Logf("kill -9 node1 → new primary published %s later with a hanging and a failing failover_start hook (%s); without hooks: %s",
			took.Round(time.Millisecond), msg, base.Round(time.Millisecond))
		ev := s.waitEvent(`hook "broken" on failover_start: failed`, 10*time.Second)
		t.Logf("event: %s", ev.Message)
		if ev.Kind != topo.EventHook || ev.Code != "hook_failed" || !strings.Contains(ev.Message, "HTTP 500") {
			t.Errorf("hook_failed event: %+v", ev)
		}
		sink.wait(t, config.HookFailoverEnd, 10*time.Second)
		s.waitEvent(`hook "broken" on failover_end: failed`, 10*time.Second)
		if n := metricLabeled(t, reg, "switchyard_hook_runs_total", map[string]string{"hook": "broken", "result": "failed"}); n < 2 {
			t.Errorf("switchyard_hook_runs_total{hook=broken,result=failed} = %v, want at least 2", n)
		}
		for _, e := range s.events() {
			if strings.Contains(e.Message, `hook "hang"`) {
				t.Errorf("the hanging hook finished already: %s", e.Message)
			}
		}
	})
}

// metricLabeled returns the value of the counter name with exactly labels
// in reg (0 when absent).
func metricLabeled(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// waitListenerNotReady polls the proxy's listener health until listener
// reports a problem and returns how long after start that was (fatal after
// timeout).
func waitListenerNotReady(t *testing.T, p *proxy.Server, listener string, start time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	for {
		for _, h := range p.Health() {
			if h.Listener == listener && h.Problem != "" {
				return time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("listener %s still ready %s after the kill", listener, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
