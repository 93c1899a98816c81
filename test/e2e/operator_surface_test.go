package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/admin"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// opSurface is a manual-mode stack with the admin endpoint (health
// endpoints and /metrics of the controller and the first proxy) served as
// `switchyard up` serves it. Scenario tests of what an operator is told
// when the primary dies start from startOperatorSurface and
// killPrimaryInManualMode and add their own checks (hooks, status, logs).
type opSurface struct {
	t     *testing.T
	s     *foStack
	admin *admin.Server
	// record, when set (SWITCHYARD_RECORD_METRICS=dir), is where each
	// /metrics scrape is written as <n>-<label>.prom, for the recorded
	// series of monitoring/tests.
	record string
	scrape int
}

func startOperatorSurface(t *testing.T, o foOpts) *opSurface {
	t.Helper()
	if o.Mode == "" {
		o.Mode = config.FailoverManual
	}
	reg := prometheus.NewRegistry()
	o.Registry, o.ProxyRegistry = reg, reg
	s := startFO(t, o)
	a, err := admin.Start(admin.Options{Address: "127.0.0.1:0", Gatherer: reg, Listeners: s.proxies[0].Health})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return &opSurface{t: t, s: s, admin: a, record: os.Getenv("SWITCHYARD_RECORD_METRICS")}
}

// get answers GET path on the admin endpoint: status code and body.
func (o *opSurface) get(path string) (int, string) {
	o.t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + o.admin.Addr() + path)
	if err != nil {
		o.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// metrics is the /metrics text; with recording on it is also written out
// under label.
func (o *opSurface) metrics(label string) string {
	o.t.Helper()
	_, body := o.get("/metrics")
	if o.record != "" && label != "" {
		o.scrape++
		if err := os.MkdirAll(o.record, 0o755); err != nil {
			o.t.Fatal(err)
		}
		name := filepath.Join(o.record, fmt.Sprintf("%02d-%s.prom", o.scrape, label))
		if err := os.WriteFile(name, []byte(body+"\n"), 0o644); err != nil {
			o.t.Fatal(err)
		}
	}
	return body
}

// waitStatus polls path until it answers code, and returns how long that
// took.
func (o *opSurface) waitStatus(path string, code int, timeout time.Duration) (time.Duration, string) {
	o.t.Helper()
	start := time.Now()
	for {
		got, body := o.get(path)
		if got == code {
			return time.Since(start), body
		}
		if time.Since(start) > timeout {
			o.t.Fatalf("GET %s: still %d %q after %s, want %d", path, got, body, timeout, code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killPrimaryInManualMode kills node1 (the primary) with SIGKILL and
// returns when it was killed.
func (o *opSurface) killPrimaryInManualMode() time.Time {
	o.t.Helper()
	if err := o.s.sb.KillNode(0); err != nil {
		o.t.Fatal(err)
	}
	return time.Now()
}

// metricValue returns the value of the sample line that starts with
// series (name and labels as /metrics prints them), or false.
func metricValue(text, series string) (string, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// TestManualDeadPrimaryTellsTheOperator: failover.mode manual (the
// default), the primary killed with SIGKILL. The rw listener's readiness
// turns 503 and /primary 503 (while /healthz stays 200), the DeadPrimary
// finding gauge turns 1, one event (not one per round) says an operator is
// needed, clients get the needs-an-operator error at once (no hold), and
// the proxy counts the 1105s it sent by error number.
func TestManualDeadPrimaryTellsTheOperator(t *testing.T) {
	o := startOperatorSurface(t, foOpts{})
	s := o.s
	s.waitState("failover readiness published", 10*time.Second, func(st topo.ClusterState) bool {
		return st.AutoFailover != nil && st.AutoFailover.Class == topo.AutoNotAuto
	})
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/readyz/listener/rw": 200, "/readyz?cluster=main": 200, "/primary": 200} {
		if code, body := o.get(path); code != want {
			t.Fatalf("before the kill: GET %s = %d %q, want %d", path, code, body, want)
		}
	}
	ctx := context.Background()
	pool, err := sql.Open("mysql", s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 20 {
		if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * foInterval)
	before := o.metrics("before")
	for _, series := range []string{
		`switchyard_cluster_finding{cluster="main",code="DeadPrimary"}`,
		`switchyard_node_up{cluster="main",node="node1"}`,
		`switchyard_cluster_primary_known{cluster="main"}`,
		`switchyard_proxy_listener_ready{cluster="main",listener="rw",role="primary"}`,
	} {
		if _, ok := metricValue(before, series); !ok {
			t.Fatalf("before the kill /metrics has no %s", series)
		}
	}
	if v, _ := metricValue(before, `switchyard_cluster_finding{cluster="main",code="DeadPrimary"}`); v != "0" {
		t.Fatalf("DeadPrimary finding is %s before the kill", v)
	}
	if v, ok := metricValue(before, `switchyard_proxy_backend_queries_total{cluster="main",node="node1"}`); !ok || v == "0" {
		t.Fatalf("queries through rw not counted for node1: %q", v)
	}

	killed := o.killPrimaryInManualMode()
	took, body := o.waitStatus("/readyz/listener/rw", http.StatusServiceUnavailable, 40*foInterval)
	t.Logf("/readyz/listener/rw 503 %s after the kill (%.1f probe intervals of %s): %s", took.Round(time.Millisecond),
		float64(took)/float64(foInterval), foInterval, body)
	if !strings.Contains(body, `listener "rw"`) {
		t.Fatalf("readiness does not name the listener: %q", body)
	}
	// Acceptance: the rw listener is not ready within 2 probe intervals
	// of the kill (the proxy's own backend check sees the refused
	// connection; it does not wait for the controller's confirmation).
	if took > 2*foInterval {
		t.Fatalf("/readyz/listener/rw turned 503 %s after the kill, want within 2 probe intervals (%s)", took.Round(time.Millisecond), 2*foInterval)
	}
	if code, body := o.get("/primary"); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /primary after the kill: %d %q, want 503", code, body)
	}
	if code, _ := o.get("/healthz"); code != 200 {
		t.Fatalf("GET /healthz after the kill: %d, want 200 (liveness stays true)", code)
	}
	code, body := o.get("/readyz/listener/ro")
	t.Logf("/readyz/listener/ro after the kill: %d %s", code, body)

	line := `switchyard_cluster_finding{cluster="main",code="DeadPrimary"} 1`
	for !strings.Contains(o.metrics(""), line) {
		if time.Since(killed) > 40*foInterval {
			t.Fatalf("/metrics has no %q %s after the kill", line, 40*foInterval)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took = time.Since(killed)
	t.Logf("%s on /metrics %s after the kill (%.1f probe intervals)", line, took.Round(time.Millisecond), float64(took)/float64(foInterval))

	// The client is told at once, with what a human must do.
	for i := range 3 {
		start := time.Now()
		_, err := conn.ExecContext(ctx, "SELECT 1")
		took := time.Since(start)
		msg := fmt.Sprint(err)
		if mysqlErrNo(err) != 1105 || !strings.Contains(msg, "failover.mode is manual") ||
			!strings.Contains(msg, "switchyard failover --cluster main") {
			t.Fatalf("statement %d after the kill: %v, want 1105 saying an operator must fail over", i, err)
		}
		if took > 2*time.Second {
			t.Fatalf("statement %d: the error came after %s, want it at once (no hold)", i, took)
		}
		t.Logf("statement %d: 1105 after %s: %s", i, took.Round(time.Millisecond), msg)
	}
	ev := s.waitEvent("an operator is needed", 10*time.Second)
	t.Logf("event %s after the kill: %s %s", ev.At.Sub(killed).Round(time.Millisecond), ev.Kind, ev.Message)
	time.Sleep(12 * foInterval) // several more rounds with DeadPrimary
	// The "not failing over" event is written once, not every round (the
	// primary_lost verdict's event repeats the reason, once).
	n, lost := 0, 0
	for _, ev := range s.events() {
		if strings.HasPrefix(ev.Message, "not failing over") && strings.Contains(ev.Message, "an operator is needed") {
			n++
		}
		if strings.Contains(ev.Message, "declared lost") {
			lost++
		}
	}
	if lost > 1 {
		t.Errorf("%d events declare the primary lost, want at most 1:\n%s", lost, s.eventText())
	}
	if n != 1 {
		t.Fatalf("%d events say an operator is needed after %s of rounds, want 1:\n%s", n, time.Since(killed).Round(time.Millisecond), s.eventText())
	}
	after := o.metrics("after")
	for series, want := range map[string]string{
		`switchyard_cluster_finding{cluster="main",code="DeadPrimary"}`:                "1",
		`switchyard_node_up{cluster="main",node="node1"}`:                              "0",
		`switchyard_cluster_failover_blocked{cluster="main"}`:                          "0",
		`switchyard_cluster_auto_failover_ready{cluster="main"}`:                       "0",
		`switchyard_proxy_listener_ready{cluster="main",listener="rw",role="primary"}`: "0",
		`switchyard_proxy_listener_ready{cluster="main",listener="ro",role="replica"}`: "1",
	} {
		if v, ok := metricValue(after, series); !ok || v != want {
			t.Errorf("after the kill %s = %q, want %s", series, v, want)
		}
	}
	if v, ok := metricValue(after, `switchyard_proxy_client_errors_total{code="1105",listener="rw"}`); !ok || v == "0" {
		t.Errorf("the 1105s sent to the client are not counted: %q", v)
	}
	if v, ok := metricValue(after, `switchyard_primary_lost_refused_total{cluster="main",reason="manual"}`); !ok || v == "0" {
		t.Errorf("refusals for manual mode are not counted: %q", v)
	}
	if st := s.state(); st.Primary != "node1" || st.Epoch != 1 {
		t.Fatalf("manual mode failed over: primary %s epoch %d", st.Primary, st.Epoch)
	}
}
