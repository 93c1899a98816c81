package proxy

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// gaugeValue reads the gauge name{cluster=cluster} from reg (-1 if absent).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, cluster string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestWritesFencedWhileLeaseLost: while the registration lease is lost and
// no direct check can confirm the primary (here: the monitor account is not
// usable), the primary listener refuses new and existing sessions with
// error 1290 and a message saying why, the replica listener keeps serving,
// and lifting the fence restores writes.
func TestWritesFencedWhileLeaseLost(t *testing.T) {
	h := newHarness(t, func(cfg *config.Config) { cfg.Credentials.Monitor.Password = "wrong" })
	rw := h.db("rw", "", nil)
	rw.SetMaxOpenConns(1)
	if id := serverID(t, rw); id != 1 {
		t.Fatalf("rw answered by server_id %d, want 1", id)
	}

	h.srv.fenceWrites(context.Background(), "registration lease lost")
	if h.srv.WritesFenced() == "" {
		t.Fatal("WritesFenced() is empty after fenceWrites")
	}
	if v := fenceGauge(h.srv); v != 1 {
		t.Fatalf("switchyard_proxy_registration_lost = %v while fenced, want 1", v)
	}
	for _, lh := range h.srv.Health() {
		if ready := lh.Problem == ""; ready != (lh.Role == roleReplica) {
			t.Fatalf("Health while fenced: %+v (the primary listener must not be ready, the replica one must)", lh)
		}
	}
	// The pooled (idle) session is moved off the primary: its next command fails.
	var x int
	err := rw.QueryRow("SELECT 1").Scan(&x)
	code, msg := mysqlErr(err)
	if code != mysql.ER_OPTION_PREVENTS_STATEMENT || !strings.Contains(msg, "lost its registration") || !strings.Contains(msg, "failsafe") {
		t.Fatalf("existing rw session while fenced: err %v (code %d), want 1290 naming the lost registration and the failsafe check", err, code)
	}
	t.Logf("fenced without failsafe: %s", msg)
	// A new session is refused at login.
	rw2, err := sql.Open("mysql", h.dsn("rw", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer rw2.Close()
	err = rw2.Ping()
	if code, _ := mysqlErr(err); code != mysql.ER_OPTION_PREVENTS_STATEMENT {
		t.Fatalf("new rw session while fenced: err %v, want 1290", err)
	}
	// Reads continue from the last known topology.
	ro := h.db("ro", "", nil)
	if id := serverID(t, ro); id != 2 && id != 3 {
		t.Fatalf("ro answered by server_id %d while fenced, want a replica", id)
	}

	h.srv.unfenceWrites()
	if v := fenceGauge(h.srv); v != 0 {
		t.Fatalf("switchyard_proxy_registration_lost = %v after the fence was lifted, want 0", v)
	}
	rw3 := h.db("rw", "", nil)
	if id := serverID(t, rw3); id != 1 {
		t.Fatalf("rw after the fence was lifted answered by server_id %d, want 1", id)
	}
}

// TestFailsafeWhileLeaseLost: with the lease lost and every node confirming
// the primary (writable, the replicas read-only with their IO threads
// running from it), writes continue on the same session with no error; a
// replica whose IO thread stops (as a failover stops it before promoting)
// ends failsafe within topo.FailsafeValidity and writes are refused; once it
// replicates again failsafe resumes; registering again ends it, and the
// registration, Failsafe() and the metrics say so.
func TestFailsafeWhileLeaseLost(t *testing.T) {
	h := newHarness(t, nil)
	rw := h.db("rw", "", nil)
	rw.SetMaxOpenConns(1)
	if id := serverID(t, rw); id != 1 {
		t.Fatalf("rw answered by server_id %d, want 1", id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.srv.fenceWrites(ctx, "registration lease lost")
	for i := range 20 {
		if id := serverID(t, rw); id != 1 {
			t.Fatalf("rw in failsafe (query %d) answered by server_id %d, want 1", i, id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fs := h.srv.Failsafe()[sandbox.ClusterName]
	if fs.Primary != "node1" || fs.Since.IsZero() || !fs.Until.IsZero() {
		t.Fatalf("failsafe period %+v, want an active one on node1", fs)
	}
	if v := gaugeValue(t, h.reg, "switchyard_failsafe_active", sandbox.ClusterName); v != 1 {
		t.Fatalf("switchyard_failsafe_active %v, want 1", v)
	}

	root, err := sql.Open("mysql", h.c.RootDSN(1))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.Exec("STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var refused string
	for refused == "" {
		if time.Since(stopped) > 10*topo.FailsafeWindow {
			t.Fatal("writes still routed 10 s after a replica's IO thread stopped")
		}
		var x int
		if err := rw.QueryRow("SELECT 1").Scan(&x); err != nil {
			code, msg := mysqlErr(err)
			if code == mysql.ER_UNKNOWN_ERROR && strings.Contains(msg, "this proxy stopped routing writes to the primary") && strings.Contains(msg, "IO thread") {
				// In flight the instant failsafe ended: cut (the next
				// statement is refused).
				t.Logf("statement in flight when failsafe ended: %v", err)
				continue
			}
			if code != mysql.ER_OPTION_PREVENTS_STATEMENT || !strings.Contains(msg, "IO thread") {
				t.Fatalf("rw after the IO thread stopped: %v, want 1290 naming the IO thread", err)
			}
			refused = msg
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("IO thread of node2 stopped: writes refused %s later: %s", time.Since(stopped).Round(time.Millisecond), refused)
	if fs := h.srv.Failsafe()[sandbox.ClusterName]; fs.Until.IsZero() || !strings.Contains(fs.Ended, "IO thread") {
		t.Fatalf("failsafe period after the check failed: %+v", fs)
	}
	if _, err := root.Exec("START SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var id int
		if err := rw.QueryRow("SELECT @@server_id").Scan(&id); err == nil && id == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("failsafe did not resume after the IO thread restarted")
		}
		time.Sleep(50 * time.Millisecond)
	}

	h.srv.unfenceWrites()
	fs = h.srv.Failsafe()[sandbox.ClusterName]
	if fs.Until.IsZero() || fs.Ended != "registered again and re-read the topology" {
		t.Fatalf("failsafe period after registering again: %+v", fs)
	}
	if v := gaugeValue(t, h.reg, "switchyard_failsafe_active", sandbox.ClusterName); v != 0 {
		t.Fatalf("switchyard_failsafe_active %v after registering again, want 0", v)
	}
	reg, err := h.srv.registration(time.Now(), h.srv.Epochs())
	if err != nil || !strings.Contains(string(reg), `"failsafe":{"main":{"primary":"node1"`) {
		t.Fatalf("registration does not show the failsafe period: %s, %v", reg, err)
	}
}

// TestBackendReachability: the proxy's own checks see every node, then a
// killed node as refused, and signal the change for the registration.
func TestBackendReachability(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.reach.init()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.srv.checkAll(ctx)
	rep := h.srv.backendReport()
	if len(rep) != 3 {
		t.Fatalf("report has %d nodes, want 3: %+v", len(rep), rep)
	}
	for _, b := range rep {
		if !b.Reachable || b.Since.IsZero() {
			t.Fatalf("%s not reachable: %+v", b.Node, b)
		}
	}
	select {
	case <-h.srv.reach.changed:
	default:
		t.Fatal("first check did not signal a change")
	}
	// The check logs in and quits: no aborted connection is counted.
	var name string
	var aborted int
	if err := h.direct(0).QueryRow("SHOW GLOBAL STATUS LIKE 'Aborted_connects'").Scan(&name, &aborted); err != nil {
		t.Fatal(err)
	}
	if aborted != 0 {
		t.Errorf("Aborted_connects = %d after a check, want 0 (the check must log in and quit)", aborted)
	}

	if err := h.c.KillNode(2); err != nil {
		t.Fatal(err)
	}
	h.srv.checkAll(ctx)
	for _, b := range h.srv.backendReport() {
		if b.Node == "node3" && (b.Reachable || b.Error == "") {
			t.Fatalf("node3 after kill: %+v, want unreachable with the error", b)
		}
		if b.Node != "node3" && !b.Reachable {
			t.Fatalf("%s unreachable after node3 was killed: %+v", b.Node, b)
		}
	}
	select {
	case <-h.srv.reach.changed:
	default:
		t.Fatal("node3 going down did not signal a change")
	}
	// No change, no signal.
	h.srv.checkAll(ctx)
	select {
	case <-h.srv.reach.changed:
		t.Fatal("an unchanged check signalled a change")
	default:
	}
}

// TestFailsafeOff: with proxy.failsafe off a proxy whose lease is lost
// refuses writes at once although every node would confirm the primary.
func TestFailsafeOff(t *testing.T) {
	off := false
	h := newHarness(t, func(cfg *config.Config) { cfg.Proxy.Failsafe = &off })
	rw := h.db("rw", "", nil)
	rw.SetMaxOpenConns(1)
	if id := serverID(t, rw); id != 1 {
		t.Fatalf("rw answered by server_id %d, want 1", id)
	}
	h.srv.fenceWrites(context.Background(), "registration lease lost")
	var x int
	err := rw.QueryRow("SELECT 1").Scan(&x)
	if code, msg := mysqlErr(err); code != mysql.ER_OPTION_PREVENTS_STATEMENT || !strings.Contains(msg, "lost its registration") || strings.Contains(msg, "failsafe") {
		t.Fatalf("rw with failsafe off after the lease was lost: %v, want 1290 without a failsafe reason", err)
	}
	if fs := h.srv.Failsafe(); fs != nil {
		t.Fatalf("failsafe periods with failsafe off: %+v", fs)
	}
}

// fenceGauge reads switchyard_proxy_registration_lost of srv.
func fenceGauge(srv *Server) float64 {
	var m dto.Metric
	_ = srv.metrics.registrationLost.Write(&m)
	return m.GetGauge().GetValue()
}
