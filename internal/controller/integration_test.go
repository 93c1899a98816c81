package controller

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

const testInterval = 300 * time.Millisecond

var testKeys = topo.Keys{Prefix: "/switchyard-test"}

// testConfig is the sandbox's config with a fast probe interval.
func testConfig(c *sandbox.Cluster) *config.Config {
	cfg := c.Config()
	cfg.Probe.Interval = config.Duration(testInterval)
	cfg.Probe.Timeout = config.Duration(250 * time.Millisecond)
	cfg.Switchover.CatchupTimeout = config.Duration(5 * time.Second)
	return cfg
}

// testLogger sends logs to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// runController starts a controller and returns it with a stop function
// that cancels it and waits for Run to return.
func runController(t *testing.T, cfg *config.Config, st topo.Store, id string) (*Controller, func()) {
	t.Helper()
	c, err := New(Options{Config: cfg, Store: st, Keys: testKeys, ID: id, Log: testLogger(t).With("ctl", id)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controller %s Run: %v", id, err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("controller %s did not stop within 15s", id)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

func readState(t *testing.T, st topo.Store, cluster string) (topo.ClusterState, bool) {
	t.Helper()
	var s topo.ClusterState
	_, err := topo.GetJSON(context.Background(), st, testKeys.ClusterState(cluster), &s)
	if errors.Is(err, topo.ErrNotFound) {
		return s, false
	}
	if err != nil {
		t.Fatalf("read state: %v", err)
	}
	return s, true
}

// waitState polls the cluster state until ok accepts it or timeout passes.
func waitState(t *testing.T, st topo.Store, timeout time.Duration, what string, ok func(topo.ClusterState) bool) topo.ClusterState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last topo.ClusterState
	for time.Now().Before(deadline) {
		if s, found := readState(t, st, sandbox.ClusterName); found {
			last = s
			if ok(s) {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("timed out after %s waiting for %s; last state:\n%s", timeout, what, b)
	return last
}

func rootDB(t *testing.T, c *sandbox.Cluster, i int) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(c.RootDSN(i))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func queryInt(t *testing.T, db *sql.DB, q string) int64 {
	t.Helper()
	var v sql.NullInt64
	if err := db.QueryRow(q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v.Int64
}

func discovered(s topo.ClusterState) bool {
	if s.Primary == "" {
		return false
	}
	for _, n := range s.Nodes {
		if n.Name != s.Primary && !n.Serving {
			return false
		}
	}
	return true
}

func TestDiscoveryAndStoppedReplica(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	ctl, _ := runController(t, testConfig(c), st, "ctl-a")

	s := waitState(t, st, 15*time.Second, "discovery", discovered)
	if !ctl.IsLeader() {
		t.Fatal("the only controller is not leader")
	}
	if s.Primary != "node1" || s.Epoch != 1 || s.Phase != topo.PhaseStable || s.Leader != "ctl-a" {
		t.Fatalf("discovered primary %q epoch %d phase %s leader %s; want node1, 1, stable, ctl-a", s.Primary, s.Epoch, s.Phase, s.Leader)
	}
	for _, n := range s.Nodes {
		p := n.Probe
		if !p.Reachable || p.GTIDCurrent == "" || p.GTIDBinlog == "" || p.ServerID == 0 || p.At.IsZero() {
			t.Errorf("%s probe incomplete: %+v", n.Name, p)
		}
		want := topo.RoleReplica
		if n.Name == "node1" {
			want = topo.RolePrimary
		}
		if n.Role != want {
			t.Errorf("%s role %s, want %s", n.Name, n.Role, want)
		}
	}
	t.Logf("discovered: primary %s epoch %d, GTID %s", s.Primary, s.Epoch, s.Node("node1").Probe.GTIDCurrent)

	// STOP SLAVE on node2: it leaves read routing within two probe
	// intervals (asserted with a 10x margin, figure logged).
	node2 := rootDB(t, c, 1)
	start := time.Now()
	mustExec(t, node2, "STOP SLAVE")
	s = waitState(t, st, 20*testInterval, "node2 not serving", func(s topo.ClusterState) bool {
		return !s.Node("node2").Serving
	})
	took := time.Since(start)
	t.Logf("STOP SLAVE on node2 → not serving after %s (probe interval %s, %.1f intervals); reason %q",
		took.Round(time.Millisecond), testInterval, float64(took)/float64(testInterval), s.Node("node2").Reason)
	if r := s.Node("node2").Reason; r != "replication stopped" {
		t.Errorf("node2 reason %q, want %q", r, "replication stopped")
	}
	if !s.Node("node3").Serving || s.Primary != "node1" || s.Epoch != 1 {
		t.Errorf("stopping node2 disturbed the rest: %+v", s)
	}
	mustExec(t, node2, "START SLAVE")
	waitState(t, st, 20*testInterval, "node2 serving again", func(s topo.ClusterState) bool {
		return s.Node("node2").Serving
	})
}

// checkReplicates asserts that node i replicates from the node at addr with
// both threads running and read_only=1.
func checkReplicates(t *testing.T, c *sandbox.Cluster, i int, from int) {
	t.Helper()
	db := rootDB(t, c, i)
	got := slaveStatus(t, db)
	if got == nil {
		t.Fatalf("%s is not replicating", c.Nodes[i].Name)
	}
	if got["Master_Port"] != fmt.Sprint(c.Nodes[from].Port) || got["Slave_IO_Running"] != "Yes" || got["Slave_SQL_Running"] != "Yes" {
		t.Fatalf("%s: source port %s IO %s SQL %s (IO error %q); want port %d, Yes, Yes", c.Nodes[i].Name,
			got["Master_Port"], got["Slave_IO_Running"], got["Slave_SQL_Running"], got["Last_IO_Error"], c.Nodes[from].Port)
	}
	if ro := queryInt(t, db, "SELECT @@read_only"); ro != 1 {
		t.Fatalf("%s read_only=%d after repoint, want 1", c.Nodes[i].Name, ro)
	}
}

// slaveStatus is the first row of SHOW ALL SLAVES STATUS on db by column
// name, nil when the node has no replication connection.
func slaveStatus(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SHOW ALL SLAVES STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for j := range vals {
		ptrs[j] = &vals[j]
	}
	if !rows.Next() {
		return nil
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for j, col := range cols {
		got[col] = vals[j].String
	}
	return got
}

// waitRow waits until node i has the row id in sbtest.ctl_t.
func waitRow(t *testing.T, c *sandbox.Cluster, i int, id int) {
	t.Helper()
	db := rootDB(t, c, i)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM sbtest.ctl_t WHERE id = ?", id).Scan(&n); err == nil && n == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("row %d never reached %s", id, c.Nodes[i].Name)
}

func doSwitchover(t *testing.T, st topo.Store, target string) topo.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	req, err := RequestSwitchover(ctx, st, testKeys, sandbox.ClusterName, target)
	t.Logf("switchover to %q: state %s in %s: %s", target, req.State, time.Since(start).Round(time.Millisecond), req.Message)
	for _, s := range req.Steps {
		t.Logf("  step: %s", s)
	}
	if err != nil && !errors.Is(err, ErrRequestFailed) {
		t.Fatalf("RequestSwitchover: %v", err)
	}
	return req
}

func TestSwitchoverAlternates(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)

	app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, "sbtest")
	mustExec(t, app, "CREATE TABLE ctl_t (id INT PRIMARY KEY)")
	mustExec(t, app, "INSERT INTO ctl_t VALUES (1)")

	rounds := []struct {
		target, want string
		newP, oldP   int
		other        int
		epoch        int64
		rowToInsert  int
	}{
		{"node2", "node2", 1, 0, 2, 2, 2},
		// No target: node1 and node3 are equally advanced and neutral, so
		// config order picks node1.
		{"", "node1", 0, 1, 2, 3, 3},
	}
	// A client holding LOCK TABLES ... WRITE on the primary blocks
	// SET GLOBAL read_only; the fence kills it and succeeds.
	locker, err := app.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	mustExecConn(t, locker, "LOCK TABLES ctl_t WRITE")
	for _, r := range rounds {
		req := doSwitchover(t, st, r.target)
		if req.State != topo.RequestDone || req.FromEpoch != r.epoch-1 || req.ToEpoch != r.epoch || req.Target != r.want {
			t.Fatalf("switchover to %s: state %s epochs %d→%d message %q; want done %d→%d",
				r.target, req.State, req.FromEpoch, req.ToEpoch, req.Message, r.epoch-1, r.epoch)
		}
		s, _ := readState(t, st, sandbox.ClusterName)
		if s.Primary != r.want || s.Epoch != r.epoch || s.Phase != topo.PhaseStable {
			t.Fatalf("state after switchover: primary %s epoch %d phase %s", s.Primary, s.Epoch, s.Phase)
		}
		newDB := rootDB(t, c, r.newP)
		if ro := queryInt(t, newDB, "SELECT @@read_only"); ro != 0 {
			t.Fatalf("new primary %s read_only=%d", r.want, ro)
		}
		checkReplicates(t, c, r.oldP, r.newP)
		checkReplicates(t, c, r.other, r.newP)
		// The application user writes on the new primary; the write
		// reaches the old primary and the other replica.
		newApp := sandboxtest.DB(t, c, r.newP, c.AppUser, c.AppPassword, "sbtest")
		mustExec(t, newApp, "INSERT INTO ctl_t VALUES (?)", r.rowToInsert)
		waitRow(t, c, r.oldP, r.rowToInsert)
		waitRow(t, c, r.other, r.rowToInsert)
		// The old primary refuses the application user's writes (fenced).
		oldApp := sandboxtest.DB(t, c, r.oldP, c.AppUser, c.AppPassword, "sbtest")
		var me *mysql.MySQLError
		if _, err := oldApp.Exec("INSERT INTO ctl_t VALUES (100)"); !errors.As(err, &me) || me.Number != 1290 {
			t.Fatalf("write on the old primary %s: %v; want error 1290 (read-only)", c.Nodes[r.oldP].Name, err)
		}
		// Read routing recovers: every replica serving from the new primary.
		waitState(t, st, 20*testInterval, "replicas serving from "+r.want, discovered)
	}
}

func TestSwitchoverRefusedAndRolledBack(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	cfg := testConfig(c)
	cfg.Switchover.CatchupTimeout = config.Duration(time.Second)
	ctl, err := New(Options{Config: cfg, Store: st, Keys: testKeys, ID: "ctl-a", Log: testLogger(t).With("ctl", "ctl-a")})
	if err != nil {
		t.Fatal(err)
	}
	// Armed for the last part: at the fence, a row lock stalls the
	// candidate (set before the controller runs: it reads the hook).
	var atFence atomic.Pointer[func(context.Context)]
	ctl.stepHook = func(ctx context.Context, step string) {
		if f := atFence.Load(); f != nil && strings.HasPrefix(step, "fence ") {
			(*f)(ctx)
		}
	}
	runControllerCancel(t, ctl)
	waitState(t, st, 15*time.Second, "discovery", discovered)

	app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, "sbtest")
	mustExec(t, app, "CREATE TABLE ctl_t (id INT PRIMARY KEY, v INT)")
	mustExec(t, app, "INSERT INTO ctl_t VALUES (1, 0)")
	waitRow(t, c, 1, 1)

	// A candidate with a stopped SQL thread is refused before anything
	// changes.
	node2 := rootDB(t, c, 1)
	mustExec(t, node2, "STOP SLAVE SQL_THREAD")
	waitState(t, st, 20*testInterval, "node2 not serving", func(s topo.ClusterState) bool { return !s.Node("node2").Serving })
	req := doSwitchover(t, st, "node2")
	if req.State != topo.RequestFailed || !strings.Contains(req.Message, "refused") || !strings.Contains(req.Message, "SQL No") {
		t.Fatalf("switchover to a replica with a stopped SQL thread: %s %q; want failed/refused", req.State, req.Message)
	}
	mustExec(t, node2, "START SLAVE SQL_THREAD")
	waitState(t, st, 20*testInterval, "node2 serving", func(s topo.ClusterState) bool { return s.Node("node2").Serving })

	// A candidate behind the primary that applies nothing (a row lock held
	// on it blocks its SQL thread) is refused at the pre-catch-up, before
	// anything is held or fenced.
	lockConn, err := node2.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close()
	mustExecConn(t, lockConn, "BEGIN")
	mustExecConn(t, lockConn, "SELECT * FROM sbtest.ctl_t WHERE id = 1 FOR UPDATE")
	mustExec(t, app, "UPDATE ctl_t SET v = v + 1 WHERE id = 1")
	req = doSwitchover(t, st, "node2")
	if req.State != topo.RequestFailed || !strings.Contains(req.Message, "refused") || !strings.Contains(req.Message, "applied nothing") {
		t.Fatalf("switchover to a stalled candidate: %s %q; want refused at the pre-catch-up", req.State, req.Message)
	}
	for _, ph := range req.Phases {
		if ph.Phase == "fence" || ph.Phase == "prepare" {
			t.Fatalf("switchover to a stalled candidate went as far as %s: %+v", ph.Phase, req.Phases)
		}
	}
	mustExec(t, app, "INSERT INTO ctl_t VALUES (3, 0)") // never fenced: the same session still writes
	mustExecConn(t, lockConn, "ROLLBACK")
	waitRow(t, c, 1, 3)

	// A candidate that stalls after the pre-catch-up (the row lock taken
	// as the fence begins, the primary's last update blocked behind it)
	// makes the catch-up time out: the switchover rolls back and the old
	// primary is writable again.
	var once sync.Once
	stall := func(ctx context.Context) {
		once.Do(func() {
			for _, q := range []string{"BEGIN", "SELECT * FROM sbtest.ctl_t WHERE id = 1 FOR UPDATE"} {
				if _, err := lockConn.ExecContext(ctx, q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
			if _, err := app.ExecContext(ctx, "UPDATE ctl_t SET v = v + 1 WHERE id = 1"); err != nil {
				t.Errorf("update before the fence: %v", err)
			}
		})
	}
	atFence.Store(&stall)
	req = doSwitchover(t, st, "node2")
	if req.State != topo.RequestFailed || !strings.Contains(req.Message, "rolled back") || !strings.Contains(req.Message, "catchup_timeout") {
		t.Fatalf("switchover that cannot catch up: %s %q; want failed and rolled back", req.State, req.Message)
	}
	node1 := rootDB(t, c, 0)
	if ro := queryInt(t, node1, "SELECT @@read_only"); ro != 0 {
		t.Fatalf("old primary left read_only=%d after the rollback (orchestrator #1482)", ro)
	}
	s, _ := readState(t, st, sandbox.ClusterName)
	if s.Primary != "node1" || s.Epoch != 1 || s.Phase != topo.PhaseStable || s.Target != "" {
		t.Fatalf("state after rollback: primary %s epoch %d phase %s target %q; want node1 1 stable", s.Primary, s.Epoch, s.Phase, s.Target)
	}
	// The application writes to the old primary again (a fresh session:
	// fencing killed the old ones).
	app2 := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, "sbtest")
	mustExec(t, app2, "INSERT INTO ctl_t VALUES (2, 0)")
	// Releasing the lock lets node2 catch up; it is still node1's replica.
	mustExecConn(t, lockConn, "ROLLBACK")
	waitRow(t, c, 1, 2)
	checkReplicates(t, c, 1, 0)
	if ro := queryInt(t, node2, "SELECT @@read_only"); ro != 1 {
		t.Fatalf("node2 read_only=%d after the rollback, want 1", ro)
	}
}

func mustExecConn(t *testing.T, conn *sql.Conn, q string) {
	t.Helper()
	if _, err := conn.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestTwoControllersFailOver(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	endpoints := topotest.StartEtcd(t)
	stA, stB, watcher := topotest.Connect(t, endpoints), topotest.Connect(t, endpoints), topotest.Connect(t, endpoints)

	// Record the writer of every state write.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	_, events, err := watcher.Watch(wctx, testKeys.ClusterState(sandbox.ClusterName))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var writers []string
	var epochs []int64
	go func() {
		for ev := range events {
			var s topo.ClusterState
			if ev.Err == nil && json.Unmarshal(ev.KV.Value, &s) == nil {
				mu.Lock()
				writers = append(writers, s.Leader)
				epochs = append(epochs, s.Epoch)
				mu.Unlock()
			}
		}
	}()

	a, stopA := runController(t, testConfig(c), stA, "ctl-a")
	waitState(t, stA, 15*time.Second, "discovery", discovered)
	b, _ := runController(t, testConfig(c), stB, "ctl-b")
	time.Sleep(6 * testInterval) // b campaigns while a leads and publishes
	if !a.IsLeader() || b.IsLeader() {
		t.Fatalf("leaders: a=%v b=%v; want only a", a.IsLeader(), b.IsLeader())
	}
	mu.Lock()
	for _, w := range writers {
		if w != "ctl-a" {
			t.Errorf("state written by %q while ctl-a leads", w)
		}
	}
	n := len(writers)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no state writes observed")
	}

	start := time.Now()
	stopA()
	s := waitState(t, stB, 15*time.Second, "ctl-b publishing", func(s topo.ClusterState) bool { return s.Leader == "ctl-b" })
	t.Logf("ctl-b took over %s after ctl-a stopped", time.Since(start).Round(time.Millisecond))
	if !b.IsLeader() || a.IsLeader() {
		t.Fatalf("after stopping a: a=%v b=%v", a.IsLeader(), b.IsLeader())
	}
	if s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("new leader published primary %s epoch %d; want node1 epoch 1", s.Primary, s.Epoch)
	}
	mu.Lock()
	defer mu.Unlock()
	// Before discovery a loaded machine may publish epoch 0 (no primary
	// known yet); from the first epoch 1 on, every write keeps epoch 1.
	seen1 := false
	for _, e := range epochs {
		seen1 = seen1 || e == 1
		if seen1 && e != 1 {
			t.Fatalf("epochs written: %v; want 1 throughout once discovered", epochs)
		}
	}
	// Once b writes, a never writes again.
	seenB := false
	for _, w := range writers {
		if w == "ctl-b" {
			seenB = true
		} else if seenB {
			t.Fatalf("writers %v: ctl-a wrote after ctl-b took over", writers)
		}
	}
}

// A leader that dies after fencing leaves the old primary read-only and the
// state in phase switching; the next leader makes the old primary writable
// again and returns to stable with the same epoch (never leaving the
// cluster without a writable primary, cf. orchestrator #1482).
func TestAbandonedSwitchoverUnfencesOldPrimary(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	node1 := rootDB(t, c, 0)
	mustExec(t, node1, "SET GLOBAL read_only = ON")
	b, _ := json.Marshal(withNodes(testConfig(c), topo.ClusterState{Cluster: sandbox.ClusterName, Primary: "node1", Epoch: 4,
		Phase: topo.PhaseSwitching, Target: "node2", Leader: "dead-leader"}))
	if _, err := st.Create(context.Background(), testKeys.ClusterState(sandbox.ClusterName), b); err != nil {
		t.Fatal(err)
	}
	runController(t, testConfig(c), st, "ctl-a")
	s := waitState(t, st, 15*time.Second, "phase stable", func(s topo.ClusterState) bool {
		return s.Phase == topo.PhaseStable && s.Leader == "ctl-a"
	})
	if s.Primary != "node1" || s.Epoch != 4 || s.Target != "" {
		t.Fatalf("resolved state: primary %s epoch %d target %q; want node1 4 \"\"", s.Primary, s.Epoch, s.Target)
	}
	if ro := queryInt(t, node1, "SELECT @@read_only"); ro != 0 {
		t.Fatalf("old primary still read_only=%d", ro)
	}
	waitState(t, st, 20*testInterval, "replicas serving", discovered)
}

// A leader that dies after promoting the target but before publishing
// leaves phase switching with the old primary fenced and the target
// writable; the next leader publishes the target with the next epoch.
func TestAbandonedSwitchoverAfterPromotion(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	mustExec(t, rootDB(t, c, 0), "SET GLOBAL read_only = ON")
	node2 := rootDB(t, c, 1)
	mustExec(t, node2, "STOP SLAVE")
	mustExec(t, node2, "RESET SLAVE ALL")
	mustExec(t, node2, "SET GLOBAL read_only = OFF")
	b, _ := json.Marshal(withNodes(testConfig(c), topo.ClusterState{Cluster: sandbox.ClusterName, Primary: "node1", Epoch: 1,
		Phase: topo.PhaseSwitching, Target: "node2", Leader: "dead-leader"}))
	if _, err := st.Create(context.Background(), testKeys.ClusterState(sandbox.ClusterName), b); err != nil {
		t.Fatal(err)
	}
	runController(t, testConfig(c), st, "ctl-a")
	s := waitState(t, st, 15*time.Second, "phase stable", func(s topo.ClusterState) bool {
		return s.Phase == topo.PhaseStable && s.Leader == "ctl-a"
	})
	if s.Primary != "node2" || s.Epoch != 2 {
		t.Fatalf("resolved state: primary %s epoch %d; want node2 2", s.Primary, s.Epoch)
	}
	if ro := queryInt(t, rootDB(t, c, 0), "SELECT @@read_only"); ro != 1 {
		t.Fatalf("old primary read_only=%d: it must stay fenced once the target is primary", ro)
	}
}

// TestQueuedSwitchoverAfterAnotherRefused: two switchovers asked at the same
// epoch (two operators at once, or one that waited behind another or for a
// leader): the first runs, the second is refused because the cluster moved
// on since it was asked — it never runs on a primary its requester did not
// see. A request asked afterwards runs.
func TestQueuedSwitchoverAfterAnotherRefused(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := Enqueue(ctx, st, testKeys, topo.Request{Kind: topo.RequestSwitchover, Cluster: sandbox.ClusterName, Target: "node2"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := Enqueue(ctx, st, testKeys, topo.Request{Kind: topo.RequestSwitchover, Cluster: sandbox.ClusterName, Target: "node3"})
	if err != nil {
		t.Fatal(err)
	}
	if first.SeenEpoch != 1 || second.SeenEpoch != 1 {
		t.Fatalf("requests made at epoch %d and %d, want 1", first.SeenEpoch, second.SeenEpoch)
	}
	wait := func(id string) topo.Request {
		for {
			r, err := LookupRequest(ctx, st, testKeys, sandbox.ClusterName, id)
			if err == nil && (r.State == topo.RequestDone || r.State == topo.RequestFailed) {
				return r
			}
			if ctx.Err() != nil {
				t.Fatalf("request %s not finished: %+v %v", id, r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r1, r2 := wait(first.ID), wait(second.ID)
	t.Logf("first: %s %s: %s", r1.State, r1.Result, r1.Message)
	t.Logf("second: %s %s: %s", r2.State, r2.Result, r2.Message)
	if r1.State != topo.RequestDone {
		t.Fatalf("the first switchover: %s %s", r1.State, r1.Message)
	}
	if r2.State != topo.RequestFailed || r2.Result != topo.RequestResultRefused ||
		!strings.Contains(r2.Message, "changed since this request was made") || !strings.Contains(r2.Message, "primary node2") {
		t.Fatalf("the second switchover, asked at the same epoch: %s %s %q, want refused naming the change", r2.State, r2.Result, r2.Message)
	}
	if s, _ := readState(t, st, sandbox.ClusterName); s.Primary != "node2" || s.Epoch != 2 {
		t.Fatalf("after both: primary %s epoch %d, want node2 at 2", s.Primary, s.Epoch)
	}
	if req := doSwitchover(t, st, "node3"); req.State != topo.RequestDone {
		t.Fatalf("a switchover asked afterwards: %s %s", req.State, req.Message)
	}
}

// TestWithdrawnSwitchoverNeverRuns: a switchover request whose requester
// gave up before any leader started it (the controller stopped, say) is
// withdrawn and does not run when a leader comes back; one already taken
// up is not withdrawn.
func TestWithdrawnSwitchoverNeverRuns(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now().UTC()
	req := topo.Request{ID: newRequestID(now), Kind: topo.RequestSwitchover, Cluster: sandbox.ClusterName, Target: "node2",
		State: topo.RequestPending, CreatedAt: now, UpdatedAt: now}
	data, err := topo.EncodeRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, testKeys.Request(sandbox.ClusterName, req.ID), data); err != nil {
		t.Fatal(err)
	}
	r, withdrawn, err := WithdrawRequest(ctx, st, testKeys, sandbox.ClusterName, req.ID, "withdrawn: gave up")
	if err != nil || !withdrawn || r.State != topo.RequestFailed || r.Result != topo.RequestResultWithdrawn {
		t.Fatalf("withdraw a pending request: %+v %v %v", r, withdrawn, err)
	}
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	time.Sleep(time.Second)
	if s, _ := readState(t, st, sandbox.ClusterName); s.Primary != "node1" || s.Epoch != 1 {
		t.Fatalf("the withdrawn switchover ran: primary %s epoch %d", s.Primary, s.Epoch)
	}
	if r, err := LookupRequest(ctx, st, testKeys, sandbox.ClusterName, req.ID); err != nil || r.Result != topo.RequestResultWithdrawn {
		t.Fatalf("the withdrawn request afterwards: %+v %v", r, err)
	}
	// Taken up: not withdrawn.
	done := doSwitchover(t, st, "node2")
	if _, withdrawn, err := WithdrawRequest(ctx, st, testKeys, sandbox.ClusterName, done.ID, "late"); withdrawn || err != nil {
		t.Fatalf("withdraw a finished request: withdrawn %v, %v", withdrawn, err)
	}
}
