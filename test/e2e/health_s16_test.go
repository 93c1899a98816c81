package e2e

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// metricsServer serves reg at /metrics and returns a function that reads it.
func metricsServer(t *testing.T, reg *prometheus.Registry) func() string {
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return func() string {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
}

// waitMetric waits until the /metrics text contains line.
func waitMetric(t *testing.T, get func() string, line string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(get(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has no line %q within %s", line, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func finding(st topo.ClusterState, code, node string) *topo.AnalysisEntry {
	for i := range st.Analysis {
		if st.Analysis[i].Code == code && st.Analysis[i].Node == node {
			return &st.Analysis[i]
		}
	}
	return nil
}

// TestS16BlockedWritesAreReported: auto mode, writers
// running. A root session holds FLUSH TABLES WITH READ LOCK on the primary
// for 20 s: the controller's heartbeat write is blocked, the analysis
// reports PrimaryWritesBlocked naming the holder (status JSON), an event
// says so, the gauge on /metrics is 1 — and there is no failover. After
// UNLOCK TABLES the finding clears, with an event, and the writers'
// acknowledged writes are all on the primary.
func TestS16BlockedWritesAreReported(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startFO(t, foOpts{Registry: reg})
	metrics := metricsServer(t, reg)
	w := s.startWorkload(4)
	time.Sleep(time.Second)
	waitMetric(t, metrics, `switchyard_controller_heartbeats_total{cluster="main",result="ok"}`, 10*time.Second)

	root := s.root(0)
	defer root.Close()
	lock, err := root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(context.Background(), "FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	st, took := s.waitState("PrimaryWritesBlocked naming the FTWRL holder", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
		f := finding(st, "PrimaryWritesBlocked", "node1")
		return f != nil && strings.Contains(f.Detail, "FLUSH TABLES WITH READ LOCK held by root@")
	})
	t.Logf("PrimaryWritesBlocked %s after FLUSH TABLES WITH READ LOCK (probe interval %s): %s",
		took.Round(time.Millisecond), foInterval, finding(st, "PrimaryWritesBlocked", "node1").Detail)
	ev := s.waitEvent("PrimaryWritesBlocked on node1", 10*time.Second)
	t.Logf("event %s after the lock: %s %s", ev.At.Sub(locked).Round(time.Millisecond), ev.Kind, ev.Message)
	waitMetric(t, metrics, `switchyard_cluster_finding{cluster="main",code="PrimaryWritesBlocked"} 1`, 10*time.Second)
	if hb := st.Node("node1").Probe.Heartbeat; hb != nil && hb.OK {
		t.Logf("note: the published probe's heartbeat is from an earlier round: %+v", hb)
	}
	out := s.cli("status", "--json")
	if !strings.Contains(out, "PrimaryWritesBlocked") || !strings.Contains(out, "FLUSH TABLES WITH READ LOCK held by root@") {
		t.Fatalf("status --json does not show the finding with its holder:\n%s", out)
	}

	time.Sleep(time.Until(locked.Add(20 * time.Second)))
	st = s.state()
	if st.Primary != "node1" || st.Epoch != 1 || s.failovers() != 0 {
		t.Fatalf("blocked writes led to a failover: primary %s epoch %d, %d failovers\n%s", st.Primary, st.Epoch, s.failovers(), s.eventText())
	}
	if finding(st, "PrimaryWritesBlocked", "node1") == nil {
		t.Fatalf("PrimaryWritesBlocked gone while the lock is still held: %s", analysisCodes(st))
	}
	for _, a := range st.Analysis {
		if a.Code == "DeadPrimary" {
			t.Fatalf("blocked writes were analysed as a dead primary: %+v", a)
		}
	}

	if _, err := lock.ExecContext(context.Background(), "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	unlocked := time.Now()
	_, took = s.waitState("PrimaryWritesBlocked cleared", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
		return finding(st, "PrimaryWritesBlocked", "node1") == nil
	})
	ev = s.waitEvent("PrimaryWritesBlocked on node1 cleared", 10*time.Second)
	waitMetric(t, metrics, `switchyard_cluster_finding{cluster="main",code="PrimaryWritesBlocked"} 0`, 10*time.Second)
	t.Logf("finding cleared %s after UNLOCK TABLES; event %q (%s after)", took.Round(time.Millisecond), ev.Message,
		ev.At.Sub(unlocked).Round(time.Millisecond))
	time.Sleep(time.Second)
	w.stop(0)
	if s.failovers() != 0 {
		t.Fatalf("%d failovers, want 0", s.failovers())
	}
}

// TestS16ApplicationLoginsRefused: the application
// account is refused on the primary — first by MAX_USER_CONNECTIONS 1
// (error 1226) while the monitor gets in, then with max_connections exhausted
// (1040). ApplicationLoginsRefused is reported with the error, an event
// and the gauge; there is no failover; it clears when logins work again.
func TestS16ApplicationLoginsRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startFO(t, foOpts{Registry: reg})
	metrics := metricsServer(t, reg)
	app := s.sb.AppUser

	// Phase A: MAX_USER_CONNECTIONS 1 and one application session held
	// (opened after the ALTER: MariaDB counts an account's connections only
	// from when it has a limit). Further logins get error 1226.
	s.exec(0, "ALTER USER '"+app+"'@'%' WITH MAX_USER_CONNECTIONS 1")
	held, err := sql.Open("mysql", s.appDirect(0, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetMaxOpenConns(1)
	held.SetMaxIdleConns(1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		// A controller login check may hold the one slot for a moment.
		if err = held.Ping(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	limited := time.Now()
	st, took := s.waitState("ApplicationLoginsRefused (1226)", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
		f := finding(st, "ApplicationLoginsRefused", "node1")
		return f != nil && strings.Contains(f.Detail, "1226")
	})
	t.Logf("phase A: ApplicationLoginsRefused %s after MAX_USER_CONNECTIONS 1: %s", took.Round(time.Millisecond),
		finding(st, "ApplicationLoginsRefused", "node1").Detail)
	ev := s.waitEvent("ApplicationLoginsRefused on node1", 10*time.Second)
	t.Logf("event %s after: %s", ev.At.Sub(limited).Round(time.Millisecond), ev.Message)
	waitMetric(t, metrics, `switchyard_cluster_finding{cluster="main",code="ApplicationLoginsRefused"} 1`, 10*time.Second)
	waitMetric(t, metrics, `switchyard_controller_app_login_refusals_total{cluster="main",code="1226",user="`+app+`"}`, 10*time.Second)
	s.exec(0, "ALTER USER '"+app+"'@'%' WITH MAX_USER_CONNECTIONS 0")
	held.Close()
	_, took = s.waitState("ApplicationLoginsRefused cleared", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
		return finding(st, "ApplicationLoginsRefused", "node1") == nil
	})
	t.Logf("phase A: cleared %s after the limit was lifted", took.Round(time.Millisecond))
	s.waitEvent("ApplicationLoginsRefused on node1 cleared", 10*time.Second)

	// Phase B: max_connections exhausted for 30 s.
	hold := s.exhaustConnections(0)
	exhausted := time.Now()
	st, took = s.waitState("ApplicationLoginsRefused (1040)", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
		f := finding(st, "ApplicationLoginsRefused", "node1")
		return f != nil && strings.Contains(f.Detail, "1040")
	})
	t.Logf("phase B: ApplicationLoginsRefused %s after max_connections was exhausted: %s; analysis %s", took.Round(time.Millisecond),
		finding(st, "ApplicationLoginsRefused", "node1").Detail, analysisCodes(st))
	time.Sleep(time.Until(exhausted.Add(30 * time.Second)))
	st = s.state()
	hold.release()
	if st.Primary != "node1" || st.Epoch != 1 || s.failovers() != 0 {
		t.Fatalf("refused logins led to a failover: primary %s epoch %d\n%s", st.Primary, st.Epoch, s.eventText())
	}
	if finding(st, "ApplicationLoginsRefused", "node1") == nil {
		t.Fatalf("ApplicationLoginsRefused gone while connections are exhausted: %s", analysisCodes(st))
	}
	_, took = s.waitState("ApplicationLoginsRefused cleared", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
		return finding(st, "ApplicationLoginsRefused", "node1") == nil
	})
	t.Logf("phase B: cleared %s after the connections were released; 0 failovers", took.Round(time.Millisecond))
}

// semiSyncVars reads a node's semi-sync master variables as root.
func semiSyncVars(t *testing.T, s *foStack, i int) (enabled bool, timeout uint64, noSlave bool, waitPoint string) {
	t.Helper()
	db := s.root(i)
	defer db.Close()
	var en, ns int
	if err := db.QueryRow("SELECT @@rpl_semi_sync_master_enabled, @@rpl_semi_sync_master_timeout, @@rpl_semi_sync_master_wait_no_slave, "+
		"@@rpl_semi_sync_master_wait_point").Scan(&en, &timeout, &ns, &waitPoint); err != nil {
		t.Fatal(err)
	}
	return en != 0, timeout, ns != 0, waitPoint
}

// waitDurable waits until node i has the semi_sync_durable primary
// settings.
func waitDurable(t *testing.T, s *foStack, i int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		en, to, ns, wp := semiSyncVars(t, s, i)
		if en && to == probe.DurableSemiSyncTimeoutMS && ns && wp == "AFTER_SYNC" {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: semi-sync enabled=%v timeout=%d wait_no_slave=%v wait_point=%s after %s, want durable settings\n%s",
				s.sb.Nodes[i].Name, en, to, ns, wp, timeout, s.eventText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestS16DurableSemiSync: durability semi_sync_durable on a semi-sync
// sandbox. The controller applies the durable settings to the primary at
// start; an operator setting rpl_semi_sync_master_timeout back to 1 s is
// drift: alarm in the state, event, metric, and re-applied. After a
// switchover the new primary has the durable settings and the old one has
// the master switch off; writes through the proxy still commit.
func TestS16DurableSemiSync(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startFO(t, foOpts{SemiSync: true, Registry: reg, Mutate: func(c *config.Config) {
		c.Clusters[0].Durability = config.DurabilitySemiSyncDurable
	}})
	metrics := metricsServer(t, reg)
	took := waitDurable(t, s, 0, 20*time.Second)
	ev := s.waitEvent("applying durability semi_sync_durable to primary node1", 10*time.Second)
	t.Logf("durable settings on node1 %s after discovery: %s", took.Round(time.Millisecond), ev.Message)
	waitMetric(t, metrics, `switchyard_controller_durability_ok{cluster="main"} 1`, 10*time.Second)

	s.exec(0, "SET GLOBAL rpl_semi_sync_master_timeout = 1000")
	changed := time.Now()
	ev = s.waitEvent("durability semi_sync_durable drifted on primary node1", 40*foInterval+10*time.Second)
	if !strings.Contains(ev.Message, "rpl_semi_sync_master_timeout=1000 ms") || !strings.Contains(ev.Message, "re-applied") || ev.Kind != topo.EventAlarm {
		t.Fatalf("drift event = %s %q: want an alarm naming the timeout and saying it was re-applied", ev.Kind, ev.Message)
	}
	waitDurable(t, s, 0, 10*time.Second)
	t.Logf("drift (timeout 1000 ms) seen %s after the change, repaired within %s: %s",
		ev.At.Sub(changed).Round(time.Millisecond), time.Since(changed).Round(time.Millisecond), ev.Message)
	s.waitState("durability alarm in the state", 10*time.Second, func(st topo.ClusterState) bool {
		for _, a := range st.Alarms {
			if a.Code == "durability_drift" && a.Node == "node1" {
				return true
			}
		}
		return false
	})
	waitMetric(t, metrics, `switchyard_controller_durability_repairs_total{cluster="main",node="node1",setting="rpl_semi_sync_master_timeout"}`, 10*time.Second)

	// Promotion: switchover to node2.
	out := s.cli("switchover", "--cluster", "main", "--to", "node2")
	t.Logf("switchover: %s", strings.TrimSpace(out))
	took = waitDurable(t, s, 1, 20*time.Second)
	ev = s.waitEvent("durability semi_sync_durable applied after the promotion of node2", 10*time.Second)
	t.Logf("durable settings on the new primary node2 %s after the switchover returned: %s", took.Round(time.Millisecond), ev.Message)
	if en, _, _, _ := semiSyncVars(t, s, 0); en {
		t.Fatalf("old primary node1 still has rpl_semi_sync_master_enabled=ON as a replica (its applier would wait)")
	}
	db, err := sql.Open("mysql", s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS sbtest.s16 (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO sbtest.s16 VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	t.Logf("write through the proxy on durable node2 committed in %s", time.Since(start).Round(time.Millisecond))
	root := s.root(1)
	defer root.Close()
	var name string
	var yes int64
	if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_yes_tx'").Scan(&name, &yes); err != nil || yes < 1 {
		t.Fatalf("Rpl_semi_sync_master_yes_tx on node2 = %d (%v): want acknowledged commits", yes, err)
	}
	if s.failovers() != 0 {
		t.Fatalf("%d failovers", s.failovers())
	}
}

// TestS16DurableSemiSyncAfterFailover: durability semi_sync_durable, auto
// mode, writers running; kill -9 the primary. The promoted node gets the
// durable settings (timeout 4294967295 ms, wait_no_slave ON, AFTER_SYNC),
// the remaining replica acknowledges, writes commit through the proxy and
// no acknowledged write is missing on the new primary.
func TestS16DurableSemiSyncAfterFailover(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true, Mutate: func(c *config.Config) {
		c.Clusters[0].Durability = config.DurabilitySemiSyncDurable
	}})
	waitDurable(t, s, 0, 20*time.Second)
	w := s.startWorkload(4)
	time.Sleep(2 * time.Second)
	killed := time.Now()
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	st, took := s.waitState("failover", 40*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("kill -9 node1 → %s published %s later (epoch %d)", st.Primary, took.Round(time.Millisecond), st.Epoch)
	i := nodeIdx(st.Primary)
	d := waitDurable(t, s, i, 20*time.Second)
	ev := s.waitEvent("durability semi_sync_durable applied after the promotion of "+st.Primary, 10*time.Second)
	t.Logf("durable settings on %s %s after publication (%s after the kill): %s", st.Primary, d.Round(time.Millisecond),
		time.Since(killed).Round(time.Millisecond), ev.Message)
	time.Sleep(2 * time.Second)
	w.stop(i)
	root := s.root(i)
	defer root.Close()
	var name string
	var yes, clients int64
	if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_yes_tx'").Scan(&name, &yes); err != nil || yes < 1 {
		t.Fatalf("Rpl_semi_sync_master_yes_tx on %s = %d (%v): want acknowledged commits after the failover", st.Primary, yes, err)
	}
	if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &clients); err != nil || clients < 1 {
		t.Fatalf("Rpl_semi_sync_master_clients on %s = %d (%v): want the remaining replica acknowledging", st.Primary, clients, err)
	}
	t.Logf("%s: %d acknowledged commits, %d semi-sync replica(s)", st.Primary, yes, clients)
}

// TestS16SemiSyncFallbackVersusDurable shows the fault that separates the
// two semi-sync modes: both replicas stop acknowledging (IO threads
// stopped). Under semi_sync (server timeout, here 1 s) a commit returns
// after the timeout, unacknowledged: the primary fell back to async, and
// an event says so. Under semi_sync_durable the commit waits until a
// replica is back; meanwhile PrimaryWritesBlocked names the semi-sync wait;
// no failover in either.
func TestS16SemiSyncFallbackVersusDurable(t *testing.T) {
	stopIO := func(s *foStack) {
		for _, i := range []int{1, 2} {
			s.exec(i, "STOP SLAVE IO_THREAD")
		}
	}
	write := func(s *foStack, id int) (time.Duration, error) {
		db, err := sql.Open("mysql", s.dsn(0, "primary"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		start := time.Now()
		_, err = db.ExecContext(ctx, "INSERT INTO sbtest.s16fb VALUES (?)", id)
		return time.Since(start), err
	}
	t.Run("semi_sync", func(t *testing.T) {
		s := startFO(t, foOpts{SemiSync: true, Mode: config.FailoverManual, Mutate: func(c *config.Config) {
			c.Clusters[0].Durability = config.DurabilitySemiSync
		}})
		s.exec(0, "CREATE TABLE sbtest.s16fb (id INT PRIMARY KEY)")
		s.exec(0, "SET GLOBAL rpl_semi_sync_master_timeout = 1000")
		if d, err := write(s, 1); err != nil || d > 900*time.Millisecond {
			t.Fatalf("write with replicas acknowledging took %s (%v)", d, err)
		}
		stopIO(s)
		d, err := write(s, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("semi_sync: a commit with no replica acknowledging returned after %s (rpl_semi_sync_master_timeout 1000 ms): acknowledged, on the primary only", d.Round(time.Millisecond))
		if d < 900*time.Millisecond {
			t.Fatalf("commit returned after %s, before the 1 s semi-sync timeout", d)
		}
		ev := s.waitEvent("fell back to asynchronous replication", 40*foInterval+10*time.Second)
		t.Logf("event: %s", ev.Message)
		for _, i := range []int{1, 2} {
			s.exec(i, "START SLAVE IO_THREAD")
		}
		ev = s.waitEvent("is synchronous again", 40*foInterval+20*time.Second)
		t.Logf("event: %s", ev.Message)
		if s.failovers() != 0 {
			t.Fatalf("%d failovers", s.failovers())
		}
	})
	t.Run("semi_sync_durable", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		s := startFO(t, foOpts{SemiSync: true, Mode: config.FailoverAuto, Registry: reg, Mutate: func(c *config.Config) {
			c.Clusters[0].Durability = config.DurabilitySemiSyncDurable
		}})
		metrics := metricsServer(t, reg)
		waitDurable(t, s, 0, 20*time.Second)
		s.exec(0, "CREATE TABLE sbtest.s16fb (id INT PRIMARY KEY)")
		waitMetric(t, metrics, `switchyard_controller_heartbeats_total{cluster="main",result="ok"}`, 10*time.Second)
		stopIO(s)
		stopped := time.Now()
		type res struct {
			d   time.Duration
			err error
		}
		done := make(chan res, 1)
		go func() { d, err := write(s, 2); done <- res{d, err} }()
		st, took := s.waitState("PrimaryWritesBlocked by the semi-sync wait", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
			f := finding(st, "PrimaryWritesBlocked", "node1")
			return f != nil && strings.Contains(f.Detail, "semi-sync")
		})
		t.Logf("semi_sync_durable: PrimaryWritesBlocked %s after the replicas stopped acknowledging: %s", took.Round(time.Millisecond),
			finding(st, "PrimaryWritesBlocked", "node1").Detail)
		select {
		case r := <-done:
			t.Fatalf("a commit returned after %s (%v) with no replica acknowledging under semi_sync_durable", r.d, r.err)
		case <-time.After(time.Until(stopped.Add(8 * time.Second))):
		}
		st = s.state()
		if st.Primary != "node1" || st.Epoch != 1 || s.failovers() != 0 {
			t.Fatalf("blocked commits led to a failover: primary %s epoch %d\n%s", st.Primary, st.Epoch, s.eventText())
		}
		resumed := time.Now()
		s.exec(1, "START SLAVE IO_THREAD")
		r := <-done
		if r.err != nil {
			t.Fatalf("the waiting commit failed: %v", r.err)
		}
		t.Logf("semi_sync_durable: the commit waited %s and returned %s after one replica's IO thread restarted",
			r.d.Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond))
		_, took = s.waitState("PrimaryWritesBlocked cleared", 40*foInterval+10*time.Second, func(st topo.ClusterState) bool {
			return finding(st, "PrimaryWritesBlocked", "node1") == nil
		})
		t.Logf("finding cleared %s after the replica resumed", took.Round(time.Millisecond))
		s.exec(2, "START SLAVE IO_THREAD")
	})
}
