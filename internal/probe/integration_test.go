package probe

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// TestProbeSandbox probes a real 3-node MariaDB sandbox and exercises the
// administrative statements a switchover uses.
func TestProbeSandbox(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cred := Credentials{User: c.MonitorUser, Password: c.MonitorPassword}
	primary := NewProber(c.Nodes[0].Address, cred, FlavorMariaDB, time.Second)
	defer primary.Close()
	replica := NewProber(c.Nodes[1].Address, cred, FlavorMariaDB, time.Second)
	defer replica.Close()

	r := primary.ProbeResult(ctx)
	p := r.Probe
	t.Logf("primary probe: %+v (%s)", p, r.Kind)
	if r.Kind != KindOK || !p.Reachable || p.Error != "" {
		t.Fatalf("primary probe failed: kind %s, error %q", r.Kind, p.Error)
	}
	if p.ServerID != c.Nodes[0].ServerID || p.ReadOnly || p.Replicating || p.GTIDBinlog == "" || p.GTIDCurrent == "" {
		t.Fatalf("primary probe = %+v: want server_id %d, writable, not replicating, GTID positions set", p, c.Nodes[0].ServerID)
	}
	if p.BufferPoolPagesTotal <= 0 || p.ThreadsConnected <= 0 || p.Version == "" {
		t.Fatalf("primary probe = %+v: want buffer pool pages, threads and version", p)
	}

	rp := replica.Probe(ctx)
	t.Logf("replica probe: %+v", rp)
	if !rp.Reachable || !rp.ReadOnly || !rp.Replicating || rp.IORunning != "Yes" || !rp.SQLRunning ||
		rp.SourcePort != c.Nodes[0].Port || rp.LagSeconds == nil || rp.GTIDSlave == "" {
		t.Fatalf("replica probe = %+v: want a running replica of port %d", rp, c.Nodes[0].Port)
	}
	// IO-thread liveness columns (MariaDB SHOW ALL SLAVES STATUS): the
	// sandbox sets the controller's defaults, MASTER_HEARTBEAT_PERIOD=0.1
	// and slave_net_timeout=3.
	if rp.HeartbeatPeriod != 0.1 || rp.NetTimeoutSeconds != 3 || rp.GTIDIO == "" || rp.SourceLogFile == "" || rp.ReadSourceLogPos == 0 {
		t.Fatalf("replica probe = %+v: want heartbeat period 0.1, slave_net_timeout 3, Gtid_IO_Pos, Master_Log_File and Read_Master_Log_Pos", rp)
	}

	// Parallel apply: the alignment gives a replica with one SQL thread (the
	// sandbox's is set back to that) ParallelThreads in optimistic mode,
	// which restarts it, and then any other count asked for.
	if rp.ParallelThreads != 4 {
		t.Fatalf("replica probe: parallel threads %v, want read and 4 (the sandbox's)", rp.ParallelThreads)
	}
	root := sandboxtest.DB(t, c, 1, sandbox.RootUser, c.RootPassword, "")
	for _, q := range []string{"STOP SLAVE", "SET GLOBAL slave_parallel_threads = 0", "SET GLOBAL slave_parallel_mode = 'conservative'", "START SLAVE"} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if p := replica.Probe(ctx); p.ParallelThreads != 0 || p.ParallelMode != "conservative" {
		t.Fatalf("replica probe: parallel threads %v, want read and 0", p.ParallelThreads)
	}
	for _, want := range []int{4, 2} {
		replica.SetReplicaSettings(ReplicaSettings{HeartbeatPeriod: 100 * time.Millisecond, NetTimeout: 3, ParallelThreads: want})
		if err := replica.AlignReplicaSettings(ctx); err != nil {
			t.Fatalf("AlignReplicaSettings(ParallelThreads %d): %v", want, err)
		}
		ap := replica.Probe(ctx)
		for deadline := time.Now().Add(10 * time.Second); ap.IORunning != "Yes" && time.Now().Before(deadline); ap = replica.Probe(ctx) {
			time.Sleep(50 * time.Millisecond) // the IO thread reconnects after START SLAVE
		}
		threads := ap.ParallelThreads
		if threads != int64(want) || ap.IORunning != "Yes" || !ap.SQLRunning || ap.HeartbeatPeriod != 0.1 {
			t.Fatalf("after aligning with ParallelThreads %d: parallel threads %d, IO %s, SQL %v, heartbeat %.3f; want %d, both threads running, 0.1",
				want, threads, ap.IORunning, ap.SQLRunning, ap.HeartbeatPeriod, want)
		}
		var mode string
		if err := root.QueryRowContext(ctx, "SELECT @@global.slave_parallel_mode").Scan(&mode); err != nil || mode != "optimistic" {
			t.Fatalf("slave_parallel_mode = %q, %v; want optimistic", mode, err)
		}
	}

	for _, pr := range []*Prober{primary, replica} {
		missing, err := pr.CheckGrants(ctx)
		if err != nil || len(missing) != 0 {
			t.Fatalf("CheckGrants(%s) = %q, %v; the sandbox monitor account has every privilege", pr.Address(), missing, err)
		}
	}

	// An application session on the primary is killed by fencing; the
	// replication (binlog dump) thread survives.
	app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, "sbtest")
	app.SetMaxOpenConns(1)
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS probe_t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	// A session holding LOCK TABLES ... WRITE blocks SET GLOBAL read_only;
	// the server gives up by itself (lock_wait_timeout from the deadline).
	if _, err := conn.ExecContext(ctx, "LOCK TABLES probe_t WRITE"); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	begin := time.Now()
	err = primary.SetReadOnly(lctx, true)
	lcancel()
	t.Logf("SetReadOnly under LOCK TABLES: %v after %s", err, time.Since(begin).Round(time.Millisecond))
	if Classify(err) != KindLockWait {
		t.Fatalf("SetReadOnly while a table is write-locked = %v (kind %s); want %s", err, Classify(err), KindLockWait)
	}
	if ro, err := primary.ReadOnly(ctx); err != nil || ro {
		t.Fatalf("ReadOnly after the failed fence = %v, %v; want false", ro, err)
	}
	if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	if err := primary.SetReadOnly(ctx, true); err != nil {
		t.Fatalf("SetReadOnly(true): %v", err)
	}
	if ro, err := primary.ReadOnly(ctx); err != nil || !ro {
		t.Fatalf("ReadOnly after fencing = %v, %v", ro, err)
	}
	n, err := primary.KillClientSessions(ctx, c.ReplUser)
	if err != nil || n < 1 {
		t.Fatalf("KillClientSessions = %d, %v; want the application session killed", n, err)
	}
	if err := conn.PingContext(ctx); err == nil {
		t.Fatal("the application session survived KillClientSessions")
	}
	pos, err := primary.WrittenGTIDs(ctx)
	if err != nil || pos == "" {
		t.Fatalf("WrittenGTIDs = %q, %v", pos, err)
	}
	if res, err := replica.WaitForGTID(ctx, pos, 5*time.Second); err != nil || res != 0 {
		t.Fatalf("WaitForGTID(%s) on the replica = %d, %v; want 0", pos, res, err)
	}
	if rp := replica.Probe(ctx); rp.IORunning != "Yes" {
		t.Fatalf("replication broke after killing client sessions: %+v", rp)
	}
	// A position the replica will never reach times out with -1.
	if res, err := replica.WaitForGTID(ctx, "0-1-999999", 200*time.Millisecond); err != nil || res != -1 {
		t.Fatalf("WaitForGTID(unreachable) = %d, %v; want -1", res, err)
	}
	if err := primary.SetReadOnly(ctx, false); err != nil {
		t.Fatalf("SetReadOnly(false): %v", err)
	}

	// Stop and start replication; the probe sees it.
	if err := replica.StopReplica(ctx); err != nil {
		t.Fatal(err)
	}
	if rp := replica.Probe(ctx); !rp.Replicating || rp.IORunning == "Yes" || rp.SQLRunning {
		t.Fatalf("after STOP SLAVE probe = %+v", rp)
	}
	if err := replica.StartReplica(ctx); err != nil {
		t.Fatal(err)
	}
}
