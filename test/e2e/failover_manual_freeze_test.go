package e2e

import (
	"database/sql"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestManualModeFrozenPrimary: in failover.mode manual a primary frozen by
// SIGSTOP is never treated as dead before the rule an automatic failover
// uses (DeadPrimary in failover.confirm_rounds rounds) says so:
//
//   - frozen for 800 ms (less than the detection bound), then woken: no
//     client gets an error — a statement in flight and a new login wait,
//     no PrimaryLost is published;
//   - frozen for good: once the controller declares it lost (within the
//     detection bound and a margin), the statement in flight is cut with
//     the outcome-unknown error, and a statement on an idle session and a
//     new login get the "an operator must run switchyard failover" error
//     at once (no backend connect); the event and the metrics say so;
//   - woken: statements run again on it, and the controller clears the
//     verdict.
func TestManualModeFrozenPrimary(t *testing.T) {
	preg, creg := prometheus.NewRegistry(), prometheus.NewRegistry()
	s := startFO(t, foOpts{Mode: config.FailoverManual, Registry: creg, ProxyRegistry: preg})
	fo := s.cfg.Clusters[0].Failover
	bound := fo.SilenceBound.D() + fo.SilenceBound.D()/12 + 150*time.Millisecond + s.cfg.Probe.ConnectTimeout.D()
	// The margin covers a shared 2-core machine at load average 30 and
	// more, where probe rounds and replication-status reads run late.
	const margin = 4 * time.Second
	s.exec(0, "CREATE TABLE sbtest.frozen (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")

	pid := s.sb.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	signal := func(sig syscall.Signal) time.Time {
		t.Helper()
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
		frozen = sig == syscall.SIGSTOP
		return time.Now()
	}
	open := func() *sql.DB {
		t.Helper()
		db, err := sql.Open("mysql", s.dsn(0, "primary"))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	type answer struct {
		err  error
		took time.Duration
	}
	// inFlight sends one statement on db now and returns its answer.
	inFlight := func(db *sql.DB, q string) <-chan answer {
		c := make(chan answer, 1)
		start := time.Now()
		go func() {
			_, err := db.Exec(q)
			c <- answer{err, time.Since(start)}
		}()
		return c
	}
	login := func() answer {
		start := time.Now()
		db, err := sql.Open("mysql", s.dsn(0, "primary"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		err = db.Ping()
		if err == nil {
			_, err = db.Exec("INSERT INTO frozen (v) VALUES (3)")
		}
		return answer{err, time.Since(start)}
	}

	// A freeze shorter than the bound: nobody gets an error.
	busy, idle := open(), open()
	for _, db := range []*sql.DB{busy, idle} {
		if _, err := db.Exec("INSERT INTO frozen (v) VALUES (0)"); err != nil {
			t.Fatal(err)
		}
	}
	stopped := signal(syscall.SIGSTOP)
	short := inFlight(busy, "INSERT INTO frozen (v) VALUES (1)")
	var loginShort answer
	var wg sync.WaitGroup
	wg.Go(func() { loginShort = login() })
	time.Sleep(800*time.Millisecond - time.Since(stopped))
	signal(syscall.SIGCONT)
	wg.Wait()
	if a := <-short; a.err != nil {
		t.Fatalf("800ms freeze: the statement in flight failed after %v: %v", a.took, a.err)
	}
	if loginShort.err != nil {
		t.Fatalf("800ms freeze: a new login failed after %v: %v", loginShort.took, loginShort.err)
	}
	time.Sleep(bound + time.Second) // any confirmation round is over
	if st := s.state(); st.PrimaryLost != nil || st.Primary != "node1" {
		t.Fatalf("800ms freeze: primary %s, primary_lost %+v\n%s", st.Primary, st.PrimaryLost, s.eventText())
	}
	for _, ev := range s.events() {
		if ev.At.After(stopped) && strings.Contains(ev.Message, "declared lost") {
			t.Fatalf("800ms freeze: %s", ev.Message)
		}
	}
	t.Logf("800ms SIGSTOP: the statement in flight and a new login waited and succeeded (login %v)", loginShort.took.Round(time.Millisecond))

	// Frozen for good.
	stopped = signal(syscall.SIGSTOP)
	long := inFlight(busy, "INSERT INTO frozen (v) VALUES (2)")
	st, _ := s.waitState("primary declared lost", bound+margin+5*time.Second, func(st topo.ClusterState) bool {
		return st.PrimaryLost != nil
	})
	declared := time.Since(stopped)
	if pl := st.PrimaryLost; pl.Node != "node1" || pl.Epoch != st.Epoch || pl.Class != topo.AutoNotAuto || pl.Rounds < fo.ConfirmRounds {
		t.Fatalf("primary_lost %+v (epoch %d, confirm_rounds %d)", pl, st.Epoch, fo.ConfirmRounds)
	}
	if declared < fo.SilenceBound.D() {
		t.Errorf("declared lost %v after the freeze, before failover.silence_bound %v", declared, fo.SilenceBound.D())
	}
	if declared > bound+time.Second {
		t.Logf("declared late (%v after the freeze); events:\n%s", declared, s.eventText())
	}
	a := <-long
	if a.took > bound+margin {
		t.Errorf("the statement in flight got its error %v after the freeze, want within %v + %v; events:\n%s", a.took, bound, margin, s.eventText())
	}
	wantCode(t, "statement in flight", a.err, "switchyard: primary node1 of cluster main stopped answering while this statement ran; its outcome is unknown",
		"the controller declared node1 dead (DeadPrimary) and failover.mode is manual: an operator must run `switchyard failover --cluster main`")
	refused := "switchyard: primary node1 of cluster main is unreachable (the controller declared it dead (DeadPrimary)) and failover.mode is manual: an operator must run `switchyard failover --cluster main`; the statement was not run"
	start := time.Now()
	_, err := idle.Exec("INSERT INTO frozen (v) VALUES (4)")
	idleTook := time.Since(start)
	wantCode(t, "idle session", err, refused)
	l := login()
	wantCode(t, "new login", l.err, refused)
	// The same session again (its backend was cut): at once too.
	start = time.Now()
	_, err = busy.Exec("SELECT 1")
	busyTook := time.Since(start)
	wantCode(t, "the cut session's next statement", err, refused)
	// A connect to the frozen primary would wait proxy.connect_timeout.
	for what, d := range map[string]time.Duration{"idle session": idleTook, "new login": l.took, "cut session": busyTook} {
		if d >= s.cfg.Proxy.ConnectTimeout.D() {
			t.Errorf("%s: the error came after %v, want at once (no backend connect, which waits up to proxy.connect_timeout %v)", what, d, s.cfg.Proxy.ConnectTimeout.D())
		}
	}
	t.Logf("frozen for good: declared lost %v after the freeze (bound %v); in-flight statement cut after %v; idle %v, login %v, cut session %v",
		declared.Round(time.Millisecond), bound, a.took.Round(time.Millisecond), idleTook.Round(time.Millisecond),
		l.took.Round(time.Millisecond), busyTook.Round(time.Millisecond))
	s.waitEvent("primary node1 declared lost", 5*time.Second)
	if n := metricSum(t, preg, "switchyard_primary_lost_refused_total", map[string]string{"reason": topo.AutoNotAuto}); n < 3 {
		t.Errorf("switchyard_primary_lost_refused_total{reason=manual} = %v, want >= 3", n)
	}
	if n := metricSum(t, creg, "switchyard_controller_primary_declared_lost_total", map[string]string{"class": topo.AutoNotAuto}); n != 1 {
		t.Errorf("switchyard_controller_primary_declared_lost_total{class=manual} = %v, want 1", n)
	}

	// Woken: it serves again, and the verdict is cleared.
	signal(syscall.SIGCONT)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := idle.Exec("INSERT INTO frozen (v) VALUES (5)")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGCONT: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.waitState("primary_lost cleared", 10*time.Second, func(st topo.ClusterState) bool { return st.PrimaryLost == nil && st.Primary == "node1" })
	if l := login(); l.err != nil {
		t.Fatalf("login after the wake: %v", l.err)
	}
}

// wantCode fails unless err is MySQL error 1105 (HY000) whose message
// contains every part.
func wantCode(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1105 || string(me.SQLState[:]) != "HY000" {
		t.Fatalf("%s: got %v, want error 1105 (HY000)", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(me.Message, p) {
			t.Fatalf("%s: %q does not say %q", what, me.Message, p)
		}
	}
}

// metricSum adds the values of the counters named name in reg whose labels
// include want.
func metricSum(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, want) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestManualModeIsolatedPrimary: in failover.mode manual a primary whose
// network namespace loses its link (packets dropped, nothing refused) is
// the blackholed case: a statement sent after the isolation waits for the
// controller's verdict (or for the link to come back) instead of failing
// after one connect timeout, and then gets the "an operator must run"
// error; once the verdict is published every new statement and login is
// refused at once; after the link comes back statements run there again.
func TestManualModeIsolatedPrimary(t *testing.T) {
	s := startFO(t, foOpts{NetNS: true, Mode: config.FailoverManual})
	fo := s.cfg.Clusters[0].Failover
	bound := fo.SilenceBound.D() + fo.SilenceBound.D()/12 + 150*time.Millisecond + s.cfg.Probe.ConnectTimeout.D()
	const margin = 4 * time.Second
	s.exec(0, "CREATE TABLE sbtest.isolated (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	db, err := sql.Open("mysql", s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("INSERT INTO isolated (v) VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			s.lab.heal(0)
		}
	})
	s.lab.isolate(0)
	isolated := time.Now()
	time.Sleep(50 * time.Millisecond)
	refused := "and failover.mode is manual: an operator must run `switchyard failover --cluster main`; the statement was not run"
	// The first statement: cut in flight by the proxy's check, or (sent
	// after that cut) waiting for the verdict; either way one error.
	_, err = db.Exec("INSERT INTO isolated (v) VALUES (1)")
	first := time.Since(isolated)
	if err == nil {
		t.Fatal("a write on the isolated primary succeeded")
	}
	var waited time.Duration
	var me *mysql.MySQLError
	if errors.As(err, &me) && strings.Contains(me.Message, "stopped answering while this statement ran") {
		start := time.Now()
		_, err = db.Exec("INSERT INTO isolated (v) VALUES (2)")
		waited = time.Since(start)
	}
	took := time.Since(isolated)
	wantCode(t, "statement after the isolation", err, refused)
	if took > bound+margin {
		t.Errorf("the refusal came %v after the isolation, want within %v + %v", took, bound, margin)
	}
	if st := s.state(); st.PrimaryLost == nil || st.PrimaryLost.Node != "node1" {
		// A session waits for the verdict at most failover.silence_bound
		// + 500ms; on a loaded machine the verdict can come later, and
		// the refusal (asserted above) then gives the proxy's own reason.
		t.Logf("refused before the verdict, after %v: %v", took, err)
		s.waitState("primary_lost for node1", bound+margin, func(st topo.ClusterState) bool {
			return st.PrimaryLost != nil && st.PrimaryLost.Node == "node1"
		})
	}
	start := time.Now()
	_, err = db.Exec("SELECT 1")
	again := time.Since(start)
	wantCode(t, "next statement", err, "the controller declared it dead (DeadPrimary)", refused)
	if again >= s.cfg.Proxy.ConnectTimeout.D() {
		t.Errorf("the next statement's refusal came after %v, want at once", again)
	}
	t.Logf("isolated primary: first error %v after the isolation (%v), refusal %v after it (waited %v for the verdict), next statement refused in %v",
		first.Round(time.Millisecond), shortErr(err), took.Round(time.Millisecond), waited.Round(time.Millisecond), again.Round(time.Millisecond))
	s.lab.heal(0)
	healed = true
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := db.Exec("INSERT INTO isolated (v) VALUES (3)")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the link came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.waitState("primary_lost cleared", 15*time.Second, func(st topo.ClusterState) bool { return st.PrimaryLost == nil && st.Primary == "node1" })
}

// shortErr is err's text cut at 80 bytes, for logs.
func shortErr(err error) string {
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	return msg
}
