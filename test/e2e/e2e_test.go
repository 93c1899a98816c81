package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func serverID(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var id int64
	if err := db.QueryRow("SELECT @@server_id").Scan(&id); err != nil {
		t.Fatalf("SELECT @@server_id: %v", err)
	}
	return id
}

// TestDiscoveryAndRouting: the controller names node1 primary and the others
// serving replicas; a write through rw lands on node1; reads through ro land on
// the replicas, both of them.
func TestDiscoveryAndRouting(t *testing.T) {
	s := startStack(t, 3)
	st := s.state()
	if st.Primary != "node1" || st.Epoch < 1 || st.Phase != topo.PhaseStable {
		t.Fatalf("discovery: primary %q epoch %d phase %q, want node1, ≥1, stable", st.Primary, st.Epoch, st.Phase)
	}
	for _, n := range st.Nodes {
		wantRole := topo.RoleReplica
		if n.Name == "node1" {
			wantRole = topo.RolePrimary
		}
		if n.Role != wantRole {
			t.Errorf("%s: role %q, want %q", n.Name, n.Role, wantRole)
		}
		if n.Name != "node1" && !n.Serving {
			t.Errorf("%s: not serving: %s", n.Name, n.Reason)
		}
		if n.Probe.GTIDCurrent == "" || !n.Probe.Reachable {
			t.Errorf("%s: probe incomplete: %+v", n.Name, n.Probe)
		}
	}

	rw := s.open("primary", "sbtest")
	if _, err := rw.Exec("CREATE TABLE routing (id INT PRIMARY KEY, sid INT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Exec("INSERT INTO routing VALUES (1, @@server_id)"); err != nil {
		t.Fatal(err)
	}
	var sid int64
	if err := s.direct(0).QueryRow("SELECT sid FROM sbtest.routing WHERE id = 1").Scan(&sid); err != nil {
		t.Fatalf("row written through rw is not on node1: %v", err)
	}
	if sid != 1 {
		t.Fatalf("write executed on server_id %d, want 1 (node1)", sid)
	}

	seen := map[int64]int{}
	for i := 0; i < 12; i++ {
		db := s.open("replica", "")
		db.SetMaxOpenConns(1)
		seen[serverID(t, db)]++
		db.Close()
	}
	if seen[1] > 0 || seen[2] == 0 || seen[3] == 0 {
		t.Fatalf("ro reads by server_id = %v, want only replicas 2 and 3, both used", seen)
	}
	t.Logf("ro reads over 12 new connections: %v", seen)
}

// TestStoppedReplicaLeavesReadPool: STOP SLAVE on node2 takes it out of the ro
// listener within two probe intervals (plus the publish and watch hop).
func TestStoppedReplicaLeavesReadPool(t *testing.T) {
	s := startStack(t, 3)
	if _, err := s.direct(1).Exec("STOP SLAVE"); err != nil {
		t.Fatal(err)
	}
	took := s.waitFor("node2 not serving", 20*probeInterval, func(st topo.ClusterState) bool {
		n := st.Node("node2")
		return n != nil && !n.Serving
	})
	t.Logf("node2 left the read pool %s after STOP SLAVE (probe interval %s)", took.Round(time.Millisecond), probeInterval)
	if took > 2*probeInterval+500*time.Millisecond {
		t.Errorf("took %s, want within two probe intervals (%s) plus propagation", took, 2*probeInterval)
	}
	time.Sleep(200 * time.Millisecond) // watch → proxy
	for i := 0; i < 8; i++ {
		db := s.open("replica", "")
		if id := serverID(t, db); id != 3 {
			t.Fatalf("ro connection %d answered by server_id %d after node2 stopped replicating, want 3", i, id)
		}
		db.Close()
	}
	if _, err := s.direct(1).Exec("START SLAVE"); err != nil {
		t.Fatal(err)
	}
	s.waitFor("node2 serving again", 20*probeInterval, func(st topo.ClusterState) bool {
		n := st.Node("node2")
		return n != nil && n.Serving
	})
}

// TestSwitchoverCLI: `switchyard switchover` moves the primary; writes through
// the rw listener then land on the new primary and the old primary
// replicates from it; `status` shows it.
func TestSwitchoverCLI(t *testing.T) {
	s := startStack(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	out, err := s.cli(ctx, "switchover", "--cluster", "main", "--to", "node2")
	if err != nil {
		t.Fatalf("switchover: %v\n%s", err, out)
	}
	t.Logf("switchover output:\n%s", out)
	st := s.waitFor("node2 primary", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Primary == "node2" && st.Phase == topo.PhaseStable
	})
	_ = st
	s.waitFor("proxy on new epoch", 10*time.Second, func(st topo.ClusterState) bool {
		return s.proxy.Epochs()["main"] == st.Epoch
	})

	rw := s.open("primary", "sbtest")
	var sid int64
	if err := rw.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("rw listener answers from server_id %d (err %v), want 2", sid, err)
	}
	if _, err := rw.Exec("CREATE TABLE after_switch (id INT PRIMARY KEY, sid INT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Exec("INSERT INTO after_switch VALUES (1, @@server_id)"); err != nil {
		t.Fatal(err)
	}
	// The old primary replicates from the new one and receives the write.
	old := s.direct(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int64
		err := old.QueryRow("SELECT sid FROM sbtest.after_switch WHERE id = 1").Scan(&got)
		if err == nil && got == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write on node2 did not reach node1 (old primary): %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := old.Query("SHOW SLAVE STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if !rows.Next() {
		t.Fatal("old primary has no replication configured")
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, c := range cols {
		got[c] = string(vals[i])
	}
	rows.Close()
	if got["Master_Port"] != fmt.Sprint(s.sb.Nodes[1].Port) || got["Slave_IO_Running"] != "Yes" || got["Slave_SQL_Running"] != "Yes" {
		t.Fatalf("old primary replication: source port %s IO %s SQL %s, want %d Yes Yes",
			got["Master_Port"], got["Slave_IO_Running"], got["Slave_SQL_Running"], s.sb.Nodes[1].Port)
	}
	var ro int
	if err := old.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Fatalf("old primary read_only=%d (err %v), want 1", ro, err)
	}

	out, err = s.cli(ctx, "status")
	if err != nil || !strings.Contains(out, "primary: node2") {
		t.Fatalf("status after switchover: %v\n%s", err, out)
	}
	t.Logf("status:\n%s", out)

	// Refusals are explained.
	out, err = s.cli(ctx, "switchover", "--cluster", "main", "--to", "nosuch")
	if err == nil || !strings.Contains(out, "nosuch") {
		t.Fatalf("switchover to an unknown node: err %v, output %q; want a refusal naming it", err, out)
	}
}

// TestLedgerThroughSwitchover drives the ledger workload while switching
// over and back, then proves that every acknowledged write is on the final
// primary. Errors on the rw listener during the switchover are allowed here
// (session migration is not part of the basic switchover); lost writes are not.
func TestLedgerThroughSwitchover(t *testing.T) {
	s := startStack(t, 3)
	ctx := context.Background()
	if err := loadgen.Setup(ctx, s.appDSN("primary", "sbtest"), ""); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	resc := make(chan *loadgen.Result, 1)
	go func() {
		r, err := loadgen.Run(rctx, loadgen.Options{RW: s.appDSN("primary", "sbtest"), RO: s.appDSN("replica", "sbtest"), Writers: 4, Readers: 2})
		if err != nil {
			t.Error(err)
		}
		resc <- r
	}()
	time.Sleep(time.Second)
	for _, to := range []string{"node2", "node1"} {
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		out, err := s.cli(cctx, "switchover", "--cluster", "main", "--to", to)
		ccancel()
		if err != nil {
			cancel()
			t.Fatalf("switchover to %s: %v\n%s", to, err, out)
		}
		time.Sleep(1500 * time.Millisecond)
	}
	cancel()
	r := <-resc
	var sb strings.Builder
	r.Print(&sb, "ledger", map[int64]string{1: "node1", 2: "node2", 3: "node3"})
	t.Log("\n" + sb.String())
	if r.Writes == 0 || r.WritesByServer[2] == 0 || r.WritesByServer[1] == 0 {
		t.Fatalf("writes by server %v: want writes on node1 and node2", r.WritesByServer)
	}
	missing, err := loadgen.Check(ctx, s.appDSN("primary", "sbtest"), "", r.Acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("%d acknowledged writes lost (first %d)", len(missing), missing[0])
	}
}

// TestSysbenchReadWrite30s: sysbench oltp_read_write, prepared statements on,
// for 30 s through the rw listener, with no errors tolerated.
func TestSysbenchReadWrite30s(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s sysbench run skipped in -short mode")
	}
	if _, err := exec.LookPath("sysbench"); err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_MARIADB") == "1" {
			t.Fatal("sysbench not found: apt-get install -y sysbench")
		}
		t.Skip("sysbench not found: apt-get install -y sysbench")
	}
	s := startStack(t, 3)
	host, port, _ := strings.Cut(s.listener("primary"), ":")
	args := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + s.sb.AppUser, "--mysql-password=" + s.sb.AppPassword, "--mysql-db=sbtest",
		// Uniform keys over 4 tables: sysbench's default skewed distribution
		// makes InnoDB deadlocks (1213) likely even straight against the
		// primary, and --mysql-ignore-errors=none would abort on them.
		"--tables=4", "--table-size=10000", "--rand-type=uniform"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "sysbench", append(args, "prepare")...).CombinedOutput(); err != nil {
		t.Fatalf("sysbench prepare: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, "sysbench", append(args, "--threads=8", "--time=30", "--mysql-ignore-errors=none", "--db-ps-mode=auto", "run")...).CombinedOutput()
	if err != nil {
		t.Fatalf("sysbench run: %v\n%s", err, out)
	}
	var tx, errs string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "transactions:" {
			tx = f[1]
		}
		if len(f) >= 3 && f[0] == "ignored" && f[1] == "errors:" {
			errs = f[2]
		}
	}
	t.Logf("sysbench oltp_read_write 30 s, 8 threads, through rw: transactions %s, ignored errors %s", tx, errs)
	if tx == "" || tx == "0" || errs != "0" {
		t.Fatalf("sysbench: transactions %q errors %q\n%s", tx, errs, out)
	}
}

// TestInvalidConfigRefused: config validate names the field and up refuses
// to start.
func TestInvalidConfigRefused(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`
credentials:
  monitor: {user: m, password: x}
  replication: {user: r, password: y}
users: [{name: app, password: p}]
clusters:
  - name: main
    nodes: [{name: n1, address: "127.0.0.1:3306"}]
listeners:
  - {name: rw, address: "127.0.0.1:6446", cluster: nosuch, role: primary}
`), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, "config", "validate", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listeners[0].cluster") {
		t.Fatalf("config validate: err %v, output %q; want failure naming listeners[0].cluster", err, out)
	}
	out, err = exec.CommandContext(ctx, binPath, "up", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listeners[0].cluster") || !strings.Contains(string(out), "refusing to start") {
		t.Fatalf("up with an invalid config: err %v, output %q; want refusal naming the field", err, out)
	}
}
