package controller

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

func autoConfig(c *sandbox.Cluster) *config.Config {
	cfg := testConfig(c)
	cfg.Clusters[0].Failover.Mode = config.FailoverAuto
	return cfg
}

// events reads the cluster's event log.
func events(t *testing.T, st topo.Store) []topo.Event {
	t.Helper()
	evs, err := ListEvents(context.Background(), st, testKeys, sandbox.ClusterName, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitEvent waits until an event whose message contains substr exists.
func waitEvent(t *testing.T, st topo.Store, timeout time.Duration, substr string) topo.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, ev := range events(t, st) {
			if strings.Contains(ev.Message, substr) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			var msgs []string
			for _, ev := range events(t, st) {
				msgs = append(msgs, ev.Kind+": "+ev.Message)
			}
			t.Fatalf("no event containing %q within %s; events:\n  %s", substr, timeout, strings.Join(msgs, "\n  "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nodeIndex(name string) int {
	return map[string]int{"node1": 0, "node2": 1, "node3": 2}[name]
}

// TestAutoFailoverAndRejoin: in auto mode a killed primary is failed over
// once confirmed; the block is recorded; the restarted old primary (which
// the sandbox starts writable) is fenced and rejoined as a replica.
func TestAutoFailoverAndRejoin(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, autoConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	mustExec(t, rootDB(t, c, 0), "CREATE TABLE sbtest.fo_t (id INT PRIMARY KEY)")
	mustExec(t, rootDB(t, c, 0), "INSERT INTO sbtest.fo_t VALUES (1)")
	// Asynchronous replication: wait until both replicas have the row, or
	// the kill may lose it (semi-sync scenarios are in test/e2e).
	for i := 1; i < 3; i++ {
		deadline := time.Now().Add(10 * time.Second)
		for queryInt(t, rootDB(t, c, i), "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA='sbtest' AND TABLE_NAME='fo_t'") == 0 ||
			queryInt(t, rootDB(t, c, i), "SELECT COUNT(*) FROM sbtest.fo_t") != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not receive the row", c.Nodes[i].Name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	killed := time.Now()
	if err := c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	s := waitState(t, st, 20*time.Second, "failover", func(s topo.ClusterState) bool {
		return s.Primary != "" && s.Primary != "node1" && s.Phase == topo.PhaseStable
	})
	took := time.Since(killed)
	t.Logf("kill -9 of node1 → %s published primary after %s (probe interval %s)", s.Primary, took.Round(time.Millisecond), testInterval)
	if s.Epoch != 2 || s.FailoverBlock == nil || s.LastFailover == nil || !s.LastFailover.Auto || s.LastFailover.From != "node1" {
		t.Fatalf("after failover: epoch %d block %+v last %+v; want epoch 2, a block and an auto failover record", s.Epoch, s.FailoverBlock, s.LastFailover)
	}
	waitEvent(t, st, 5*time.Second, "failing over: DeadPrimary confirmed")
	waitEvent(t, st, 5*time.Second, "auto failover done")
	np := nodeIndex(s.Primary)
	if ro := queryInt(t, rootDB(t, c, np), "SELECT @@read_only"); ro != 0 {
		t.Fatalf("new primary read_only=%d", ro)
	}
	if n := queryInt(t, rootDB(t, c, np), "SELECT COUNT(*) FROM sbtest.fo_t"); n != 1 {
		t.Fatalf("new primary has %d rows of fo_t, want 1", n)
	}
	other := 3 - np // the remaining replica (indexes 1 and 2)
	waitReplicating(t, c, other, np)

	// The old primary returns (read-only, as its defaults file says); an
	// init script that makes it writable is simulated by hand: it is fenced
	// at once and rejoined as a replica of the new primary.
	if err := c.StartNode(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rootDB(t, c, 0).Exec("SET GLOBAL read_only=0"); err != nil {
		t.Fatal(err)
	}
	// Fenced by the fence kept pending on the unreachable old primary
	// ("fenced old primary node1 the moment it answered again") or, if the
	// simulated init script ran after it, by the repair loop ("fenced
	// node1").
	waitEvent(t, st, 10*time.Second, "fenced ")
	waitEvent(t, st, 10*time.Second, "rejoined node1")
	waitReplicating(t, c, 0, np)
	waitState(t, st, 10*time.Second, "node1 serving", func(s topo.ClusterState) bool {
		return s.Node("node1").Serving
	})
}

// waitReplicating waits until node i replicates from node from, read-only.
func waitReplicating(t *testing.T, c *sandbox.Cluster, i, from int) {
	t.Helper()
	db := rootDB(t, c, i)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var port, io, sqlRun string
		rows, err := db.Query("SHOW ALL SLAVES STATUS")
		if err == nil {
			cols, _ := rows.Columns()
			vals := make([]any, len(cols))
			strs := make([][]byte, len(cols))
			for j := range vals {
				vals[j] = &strs[j]
			}
			if rows.Next() && rows.Scan(vals...) == nil {
				for j, col := range cols {
					switch col {
					case "Master_Port":
						port = string(strs[j])
					case "Slave_IO_Running":
						io = string(strs[j])
					case "Slave_SQL_Running":
						sqlRun = string(strs[j])
					}
				}
			}
			rows.Close()
		}
		ro := queryInt(t, db, "SELECT @@read_only")
		if port == itoa(int64(c.Nodes[from].Port)) && io == "Yes" && sqlRun == "Yes" && ro == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not replicate from %s: port %q IO %q SQL %q read_only %d", c.Nodes[i].Name, c.Nodes[from].Name, port, io, sqlRun, ro)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestManualModeReportsAndPlans: in the default manual mode a dead primary
// is reported, never failed over alone; --plan shows the candidate without
// acting; an operator's failover then runs.
func TestManualModeReportsAndPlans(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	if err := c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	waitState(t, st, 10*time.Second, "DeadPrimary analysis", func(s topo.ClusterState) bool {
		for _, a := range s.Analysis {
			if a.Code == "DeadPrimary" {
				return true
			}
		}
		return false
	})
	waitEvent(t, st, 5*time.Second, "not failing over: failover.mode is manual")
	time.Sleep(5 * testInterval)
	if s, _ := readState(t, st, sandbox.ClusterName); s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("manual mode failed over by itself: primary %s epoch %d", s.Primary, s.Epoch)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{PlanOnly: true, By: "test"})
	if err != nil {
		t.Fatalf("plan: %v (%s)", err, req.Message)
	}
	if req.Plan == nil || req.Plan.Candidate == "" || len(req.Plan.Candidates) != 2 || req.Plan.Fence != "proxies" {
		t.Fatalf("plan = %+v; want a candidate among 2 and fencing by proxies", req.Plan)
	}
	t.Logf("plan:\n%s", req.Message)
	if s, _ := readState(t, st, sandbox.ClusterName); s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("--plan acted: primary %s epoch %d", s.Primary, s.Epoch)
	}

	req, err = RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{By: "test"})
	if err != nil {
		t.Fatalf("failover: %v\nsteps:\n  %s", err, strings.Join(req.Steps, "\n  "))
	}
	t.Logf("failover: %s\n  %s", req.Message, strings.Join(req.Steps, "\n  "))
	s, _ := readState(t, st, sandbox.ClusterName)
	if s.Primary != req.Target || s.Epoch != 2 || s.FailoverBlock == nil || s.LastFailover == nil || s.LastFailover.Auto {
		t.Fatalf("after manual failover: %+v", s)
	}
}

// runControllerCancel is runController that also returns the cancel of its
// Run context, usable from inside the controller (it does not wait).
func runControllerCancel(t *testing.T, c *Controller) (cancel func(), done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	d := make(chan error, 1)
	go func() { d <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d:
		case <-time.After(15 * time.Second):
			t.Errorf("controller %s did not stop", c.id)
		}
	})
	return cancel, d
}

// TestMissingPrivilegesAlarm: at start-up the controller checks the monitor
// account's grants on every node and raises an alarm naming what is
// missing (MariaDB 10.11: SUPER no longer implies READ_ONLY ADMIN).
func TestMissingPrivilegesAlarm(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	db := rootDB(t, c, 2)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SET SESSION sql_log_bin = 0", "REVOKE READ_ONLY ADMIN ON *.* FROM '" + c.MonitorUser + "'@'%'"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	s := waitState(t, st, 15*time.Second, "missing-privileges alarm", func(s topo.ClusterState) bool {
		for _, a := range s.Alarms {
			if a.Code == topo.AlarmMissingPrivileges && a.Node == "node3" {
				return true
			}
		}
		return false
	})
	for _, a := range s.Alarms {
		if a.Code == topo.AlarmMissingPrivileges {
			t.Logf("alarm: %s", a.Message)
			if a.Node != "node3" || !strings.Contains(a.Message, "READ_ONLY ADMIN") {
				t.Fatalf("alarm %+v, want node3 naming READ_ONLY ADMIN only", a)
			}
		}
	}
	waitEvent(t, st, 5*time.Second, "lacks READ_ONLY ADMIN on node3")
}

// TestManualFailoverOfLivePrimary: an operator's failover of a healthy,
// reachable primary is refused (use a switchover), --plan warns, and with
// --force --reason it fences it (read_only=ON) first, lets the candidate
// apply everything it wrote, and the fenced node then rejoins as a replica
// of the new primary.
func TestManualFailoverOfLivePrimary(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	p := rootDB(t, c, 0)
	mustExec(t, p, "CREATE TABLE sbtest.live_t (id INT PRIMARY KEY)")
	for i := 1; i <= 50; i++ {
		mustExec(t, p, "INSERT INTO sbtest.live_t VALUES (?)", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const healthy = "primary node1 is healthy and reachable: use `switchyard switchover` (or --force --reason to fail over anyway)"
	req, err := RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{Target: "node3", By: "test"})
	if err == nil || !strings.Contains(req.Message, healthy) {
		t.Fatalf("failover of a healthy primary without --force: err %v, message %q; want refused with %q", err, req.Message, healthy)
	}
	if ro := queryInt(t, p, "SELECT @@read_only"); ro != 0 {
		t.Fatalf("a refused failover fenced the primary (read_only=%d)", ro)
	}
	waitEvent(t, st, 5*time.Second, healthy)
	req, err = RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{Target: "node3", PlanOnly: true, By: "test"})
	if err != nil || req.Plan == nil || req.Plan.Warning != healthy {
		t.Fatalf("plan of a healthy primary: err %v plan %+v; want the warning", err, req.Plan)
	}
	// A target no flag can make a candidate (here the primary itself): the
	// plan offers no override, and the refusal says --force would not help.
	req, err = RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{Target: "node1", PlanOnly: true, By: "test"})
	if req.Plan == nil || req.Plan.Candidate != "" || req.Plan.Override != "" || req.Override != "" {
		t.Fatalf("plan of a healthy primary to an impossible target: err %v plan %+v override %q; want no candidate and no override", err, req.Plan, req.Override)
	}
	req, err = RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{Target: "node1", By: "test"})
	if err == nil || !strings.Contains(req.Message, "no flag makes a candidate") || req.Override != "" {
		t.Fatalf("failover of a healthy primary to an impossible target: err %v, message %q, override %q; want refused, no flag helps", err, req.Message, req.Override)
	}
	if _, err := RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{Target: "node3", ForceReachable: true, By: "test"}); err == nil {
		t.Fatal("--force without --reason accepted")
	}
	req, err = RequestFailover(ctx, st, testKeys, sandbox.ClusterName, FailoverOptions{Target: "node3", ForceReachable: true,
		Reason: "test: replace a live primary", By: "test"})
	if err != nil {
		t.Fatalf("failover: %v\n  %s", err, strings.Join(req.Steps, "\n  "))
	}
	t.Logf("failover of a live primary:\n  %s", strings.Join(req.Steps, "\n  "))
	if req.Plan == nil || req.Plan.Fence != "read_only" {
		t.Fatalf("plan fence %+v, want read_only", req.Plan)
	}
	if n := queryInt(t, rootDB(t, c, 2), "SELECT COUNT(*) FROM sbtest.live_t"); n != 50 {
		t.Fatalf("new primary node3 has %d of 50 rows", n)
	}
	if ro := queryInt(t, p, "SELECT @@read_only"); ro != 1 {
		t.Fatalf("old primary read_only=%d, want 1 (fenced)", ro)
	}
	waitEvent(t, st, 10*time.Second, "rejoined node1")
	waitReplicating(t, c, 0, 2)
	waitReplicating(t, c, 1, 2)
}

// TestFailedRecoveryDisablesAuto: a failover whose promotion fails (the
// monitor account may not set read_only on the replicas) is rolled back,
// raises an alarm and disables automatic failover for the cluster, which
// then says so instead of retrying; ack re-enables it.
func TestFailedRecoveryDisablesAuto(t *testing.T) {
	// With semi-sync the replicas' IO threads are cut (the killed primary
	// cannot be reached), and the rollback restarts them once they exited.
	for _, semi := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "semi-sync"}[semi], func(t *testing.T) {
			testFailedRecoveryDisablesAuto(t, semi)
		})
	}
}

func testFailedRecoveryDisablesAuto(t *testing.T, semiSync bool) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3, SemiSync: semiSync})
	for i := 1; i < 3; i++ {
		conn, err := rootDB(t, c, i).Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"SET SESSION sql_log_bin = 0", "REVOKE READ_ONLY ADMIN ON *.* FROM '" + c.MonitorUser + "'@'%'"} {
			if _, err := conn.ExecContext(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		conn.Close()
	}
	st := topotest.NewStore(t)
	runController(t, autoConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	if err := c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	// AutoDisabled and the recovery_failed alarm are two writes, a few
	// milliseconds apart: wait for both.
	s := waitState(t, st, 30*time.Second, "automatic failover disabled, with its alarm", func(s topo.ClusterState) bool {
		if s.AutoDisabled == "" {
			return false
		}
		for _, a := range s.Alarms {
			if a.Code == topo.AlarmRecoveryFailed {
				return true
			}
		}
		return false
	})
	t.Logf("auto disabled: %s", s.AutoDisabled)
	if s.Primary != "node1" || s.Phase != topo.PhaseStable {
		t.Fatalf("after the failed failover: primary %q phase %s, want node1 republished, stable", s.Primary, s.Phase)
	}
	failed := waitEvent(t, st, 10*time.Second, "auto failover failed")
	if semiSync && !strings.Contains(failed.Message, "cut by KILL") {
		t.Errorf("semi-sync replicas' IO threads not cut: %s", failed.Message)
	}
	if strings.Contains(failed.Message, "IO thread not restarted") {
		t.Errorf("rollback left an IO thread stopped: %s", failed.Message)
	}
	// The candidate's replication was being reset: repair rejoins it. The
	// other replica's IO thread is restarted by the rollback.
	_, rest, _ := strings.Cut(failed.Message, "refresh and plan: candidate ")
	cand, _, _ := strings.Cut(rest, ",")
	for i := 1; i < 3; i++ {
		if c.Nodes[i].Name == cand {
			continue
		}
		if io := replicaIO(t, rootDB(t, c, i)); io != "Yes" && io != "Connecting" {
			t.Errorf("%s IO thread %q after the rollback, want it restarted (candidate %s)", c.Nodes[i].Name, io, cand)
		}
	}
	found := false
	for _, a := range s.Alarms {
		found = found || a.Code == topo.AlarmRecoveryFailed
	}
	if !found {
		t.Fatalf("no recovery_failed alarm: %+v", s.Alarms)
	}
	for i := 1; i < 3; i++ {
		if ro := queryInt(t, rootDB(t, c, i), "SELECT @@read_only"); ro != 1 {
			t.Fatalf("%s writable after the failed failover", c.Nodes[i].Name)
		}
	}
	waitEvent(t, st, 10*time.Second, "not failing over: automatic failover is disabled after a failed recovery")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := RequestAck(ctx, st, testKeys, sandbox.ClusterName, "checked", "test")
	if err != nil || !strings.Contains(req.Message, "automatic failover re-enabled") {
		t.Fatalf("ack: %v, %q", err, req.Message)
	}
}

// replicaIO returns Slave_IO_Running of the node's replication ("" when it
// has none).
func replicaIO(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SHOW ALL SLAVES STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	io := ""
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			if c == "Slave_IO_Running" {
				io = vals[i].String
			}
		}
	}
	return io
}
