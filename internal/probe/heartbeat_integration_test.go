package probe

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// TestHeartbeatSandbox writes the heartbeat on a real semi-sync sandbox:
// it creates its table, replicates, is skipped on a read-only node without
// a binlog entry, is blocked (and names the holder) under FLUSH TABLES
// WITH READ LOCK, and never piles up behind a commit waiting for a
// semi-sync acknowledgement.
func TestHeartbeatSandbox(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 2, SemiSync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cred := Credentials{User: c.MonitorUser, Password: c.MonitorPassword}
	primary := NewProber(c.Nodes[0].Address, cred, FlavorMariaDB, 500*time.Millisecond)
	defer primary.Close()
	replica := NewProber(c.Nodes[1].Address, cred, FlavorMariaDB, 500*time.Millisecond)
	defer replica.Close()
	row := Heartbeat{Cluster: "main", Node: "node1", Epoch: 7}

	if missing, err := primary.CheckGrants(ctx); err != nil || len(missing) > 0 {
		t.Fatalf("CheckGrants = %q, %v: the sandbox grants the heartbeat schema", missing, err)
	}
	hb := primary.Heartbeat(ctx, row)
	t.Logf("first heartbeat (creates the table): %+v", hb)
	if !hb.OK {
		t.Fatalf("heartbeat on the primary failed: %+v", hb)
	}
	// The commit marker table came with it; a marker older than
	// CommitMarkerMaxAge is deleted at the next sweep, a fresh one kept.
	proot := sandboxtest.DB(t, c, 0, sandbox.RootUser, c.RootPassword, "")
	if _, err := proot.ExecContext(ctx, "INSERT INTO "+CommitMarkerTable+" (owner, session, seq, at) VALUES "+
		"('old', 1, 5, NOW(6) - INTERVAL 11 MINUTE), ('fresh', 1, 6, NOW(6))"); err != nil {
		t.Fatalf("the commit marker table after the first heartbeat: %v", err)
	}
	primary.markerSwept.Store(0)
	if hb := primary.Heartbeat(ctx, row); !hb.OK {
		t.Fatalf("heartbeat: %+v", hb)
	}
	var owners string
	if err := proot.QueryRowContext(ctx, "SELECT GROUP_CONCAT(owner ORDER BY owner) FROM "+CommitMarkerTable).Scan(&owners); err != nil || owners != "fresh" {
		t.Fatalf("commit markers after the sweep: %q, %v; want only the fresh one", owners, err)
	}
	p := primary.Probe(ctx)
	if p.SemiSync == nil || !p.SemiSync.MasterEnabled || p.SemiSync.WaitPoint != "AFTER_SYNC" || p.SemiSync.Clients != 1 {
		t.Fatalf("primary semi-sync = %+v, want enabled, AFTER_SYNC, 1 client", p.SemiSync)
	}
	rp := replica.Probe(ctx)
	if rp.SemiSync == nil || !rp.SemiSync.SlaveEnabled || !rp.SemiSync.SlaveStatus {
		t.Fatalf("replica semi-sync = %+v, want slave enabled and active", rp.SemiSync)
	}
	// Replicated to the replica.
	rroot := sandboxtest.DB(t, c, 1, sandbox.RootUser, c.RootPassword, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var epoch sql.NullInt64
		_ = rroot.QueryRowContext(ctx, "SELECT epoch FROM "+HeartbeatTable+" WHERE cluster = 'main'").Scan(&epoch)
		if epoch.Int64 == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat row did not replicate within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// On a read-only node nothing is written, not even an empty GTID. The
	// replica first applies all the primary has (its parallel appliers may
	// still be committing what came before the row seen above).
	var primaryPos string
	if err := proot.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&primaryPos); err != nil {
		t.Fatal(err)
	}
	var waited int
	if err := rroot.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 10)", primaryPos).Scan(&waited); err != nil || waited != 0 {
		t.Fatalf("replica did not apply %s within 10s: %d %v", primaryPos, waited, err)
	}
	var before, after string
	_ = rroot.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&before)
	hb = replica.Heartbeat(ctx, row)
	_ = rroot.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&after)
	if hb.OK || hb.Kind != HeartbeatReadOnly || before != after {
		t.Fatalf("heartbeat on the read-only replica = %+v, binlog %s → %s: want kind read_only and no binlog entry", hb, before, after)
	}

	// FLUSH TABLES WITH READ LOCK held by root: blocked, holder named.
	root := sandboxtest.DB(t, c, 0, sandbox.RootUser, c.RootPassword, "")
	lock, err := root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	hb = primary.Heartbeat(ctx, row)
	t.Logf("heartbeat under FTWRL after %s: %+v", time.Since(start).Round(time.Millisecond), hb)
	if hb.OK || hb.Kind != HeartbeatTimeout || !strings.Contains(strings.Join(hb.Blockers, "|"), "FLUSH TABLES WITH READ LOCK held by root@") {
		t.Fatalf("heartbeat under FTWRL = %+v: want kind timeout and the FTWRL holder named", hb)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("blocked heartbeat took %s: it must be bounded by the probe timeout", d)
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	lock.Close()
	if hb = primary.Heartbeat(ctx, row); !hb.OK {
		t.Fatalf("heartbeat after UNLOCK TABLES = %+v", hb)
	}

	// Durable semi-sync and no replica acknowledging: the heartbeat's commit
	// waits in the server; the next heartbeat reports it pending instead of
	// adding a second waiter.
	on := true
	to := DurableSemiSyncTimeoutMS
	if err := primary.ApplySemiSyncPrimary(ctx, SemiSyncSettings{MasterEnabled: &on, WaitPoint: "AFTER_SYNC", TimeoutMS: &to, WaitNoSlave: &on}); err != nil {
		t.Fatal(err)
	}
	if _, err := rroot.ExecContext(ctx, "STOP SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	hb = primary.Heartbeat(ctx, row)
	t.Logf("heartbeat with no semi-sync replica: %+v", hb)
	if hb.OK || !strings.Contains(strings.Join(hb.Blockers, "|"), "Waiting for semi-sync ACK") {
		t.Fatalf("heartbeat with no replica = %+v: want a failure naming the semi-sync wait", hb)
	}
	for range 3 {
		hb = primary.Heartbeat(ctx, row)
		if hb.Kind != HeartbeatPending {
			t.Fatalf("next heartbeat = %+v: want kind pending (no pile-up)", hb)
		}
	}
	var waiting int
	_ = root.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%INTO "+HeartbeatTable+"%' AND ID <> CONNECTION_ID()").Scan(&waiting)
	if waiting != 1 {
		t.Fatalf("%d heartbeats waiting in the server, want exactly 1", waiting)
	}
	if _, err := rroot.ExecContext(ctx, "START SLAVE IO_THREAD"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for hb = primary.Heartbeat(ctx, row); !hb.OK; hb = primary.Heartbeat(ctx, row) {
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat still failing 20s after the replica reconnected: %+v", hb)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Application login check.
	if lc := primary.LoginCheck(ctx, c.AppUser, c.AppPassword); !lc.OK {
		t.Fatalf("LoginCheck as %s = %+v", c.AppUser, lc)
	}
	if lc := primary.LoginCheck(ctx, c.AppUser, "wrong"); lc.OK || lc.Code != 1045 {
		t.Fatalf("LoginCheck with a wrong password = %+v, want code 1045", lc)
	}
}
