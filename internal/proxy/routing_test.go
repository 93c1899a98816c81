package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
)

// newSessionServerID opens a brand-new session through listener and
// returns the server_id it lands on.
func newSessionServerID(t *testing.T, h *harness, listener string) int {
	t.Helper()
	d, err := sql.Open("mysql", h.dsn(listener, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return serverID(t, d)
}

func TestWriteThroughRWLandsOnPrimary(t *testing.T) {
	h := newHarness(t, nil)
	db := h.db("rw", "sbtest", nil)
	mustExec(t, db, "CREATE TABLE land_t (marker VARCHAR(40) PRIMARY KEY, sid INT)")
	marker := fmt.Sprintf("m-%d", time.Now().UnixNano())
	mustExec(t, db, "INSERT INTO land_t VALUES (?, @@server_id)", marker)
	var sid int
	if err := h.direct(0).QueryRow("SELECT sid FROM sbtest.land_t WHERE marker = ?", marker).Scan(&sid); err != nil {
		t.Fatalf("row not on node1: %v", err)
	}
	if sid != 1 {
		t.Fatalf("write executed on server_id %d, want 1", sid)
	}
	// Replicas refuse writes (read_only), so the rw route is the only way in.
	h.waitReplicated(1, 2)
	ro := h.db("ro", "sbtest", nil)
	if _, err := ro.Exec("INSERT INTO land_t VALUES ('ro', 0)"); err == nil {
		t.Fatal("write through the ro listener succeeded on a read-only replica")
	} else if n, _ := mysqlErr(err); n != 1290 {
		t.Fatalf("write through ro: %v, want 1290 (read-only)", err)
	}
}

func TestReadsRoundRobinAndServingChanges(t *testing.T) {
	h := newHarness(t, nil)
	seen := map[int]int{}
	for range 6 {
		seen[newSessionServerID(t, h, "ro")]++
	}
	if len(seen) != 2 || seen[2] != 3 || seen[3] != 3 {
		t.Fatalf("ro sessions by server_id %v, want 3 on each of 2 and 3", seen)
	}

	// A session parked on node2 before node2 stops serving.
	ro := h.db("ro", "", nil)
	ro.SetMaxOpenConns(1)
	ro.SetMaxIdleConns(1)
	for serverID(t, ro) != 2 { // the pool's one session: get it onto node2
		ro.SetMaxIdleConns(0)
		ro.SetMaxIdleConns(1)
	}

	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 2)) // node2 no longer serving
	for range 4 {
		if id := newSessionServerID(t, h, "ro"); id != 3 {
			t.Fatalf("new ro session on server_id %d after node2 stopped serving", id)
		}
	}
	if id := serverID(t, ro); id != 3 {
		t.Fatalf("idle ro session stayed on server_id %d, want moved to 3", id)
	}

	// No serving replica: fallback to the primary (default) ...
	h.srv.SetClusterState(sandboxState(h.c, 1, 0))
	if id := newSessionServerID(t, h, "ro"); id != 1 {
		t.Fatalf("fallback: server_id %d, want 1", id)
	}
	// ... or a clear error when fallback is off.
	cfg := *h.cfg
	off := false
	cfg.Clusters = append([]config.Cluster(nil), h.cfg.Clusters...)
	cfg.Clusters[0].ReadRouting.FallbackToPrimary = &off
	if err := h.srv.SetConfig(&cfg); err != nil {
		t.Fatal(err)
	}
	d, _ := sql.Open("mysql", h.dsn("ro", "", nil))
	defer d.Close()
	err := d.Ping()
	if n, msg := mysqlErr(err); n != 1105 || !strings.Contains(msg, "no healthy replica") {
		t.Fatalf("no replica, no fallback: %v", err)
	}
	// Replicas back: reads go to them again.
	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
	if id := newSessionServerID(t, h, "ro"); id != 2 && id != 3 {
		t.Fatalf("after recovery: server_id %d", id)
	}
}

// reparent makes node2 (index 1) the primary for real: node1 read_only,
// node2 catches up, stops replicating and becomes writable.
func reparent(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	n1, n2 := h.direct(0), h.direct(1)
	mustExec(t, n1, "SET GLOBAL read_only = 1")
	var pos string
	if err := n1.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var r int
	if err := n2.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 20)", pos).Scan(&r); err != nil || r != 0 {
		t.Fatalf("node2 catch-up: %v %d", err, r)
	}
	mustExec(t, n2, "STOP SLAVE")
	mustExec(t, n2, "RESET SLAVE ALL")
	mustExec(t, n2, "SET GLOBAL read_only = 0")
}

// After a real reparent and a new snapshot (epoch 2, primary node2), an idle
// pooled connection's next write lands on node2 with its schema restored, a
// session holding a prepared statement moves with it, and a session inside
// a transaction gets one error (its transaction is gone) and goes on.
func TestReparentMovesIdleSessions(t *testing.T) {
	h := newHarness(t, nil)
	idle := h.db("rw", "sbtest", nil)
	idle.SetMaxOpenConns(1)
	mustExec(t, idle, "CREATE TABLE rp_t (id INT PRIMARY KEY, sid INT)")
	mustExec(t, idle, "CREATE TABLE otherdb.rp_o (id INT PRIMARY KEY, sid INT)")
	mustExec(t, idle, "USE otherdb")
	mustExec(t, idle, "INSERT INTO rp_o VALUES (1, @@server_id)")

	prep := h.db("rw", "sbtest", nil)
	prep.SetMaxOpenConns(1)
	stmt, err := prep.Prepare("INSERT INTO rp_t VALUES (?, @@server_id)")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	if _, err := stmt.Exec(200); err != nil {
		t.Fatal(err)
	}

	busy := h.db("rw", "sbtest", nil)
	busy.SetMaxOpenConns(1)
	tx, err := busy.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("SELECT COUNT(*) FROM rp_t"); err != nil {
		t.Fatal(err)
	}

	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	if got := h.srv.Epochs()["main"]; got != 2 {
		t.Fatalf("epoch applied %d, want 2", got)
	}

	// Idle session: next write goes to node2, in the schema it had.
	if _, err := idle.Exec("INSERT INTO rp_o VALUES (2, @@server_id)"); err != nil {
		t.Fatalf("idle session write after reparent: %v", err)
	}
	var sid int
	if err := h.direct(1).QueryRow("SELECT sid FROM otherdb.rp_o WHERE id = 2").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("write after reparent: on node2 sid=%d err=%v", sid, err)
	}
	var n int
	_ = h.direct(0).QueryRow("SELECT COUNT(*) FROM otherdb.rp_o WHERE id = 2").Scan(&n)
	if n != 0 {
		t.Fatal("write after reparent also reached node1")
	}

	// Session in a transaction: one clear error saying the transaction was
	// rolled back; the session itself goes on, on node2.
	_, err = tx.Exec("INSERT INTO rp_t VALUES (102, @@server_id)")
	if code, msg := mysqlErr(err); code != 1105 || !strings.Contains(msg, "transaction was rolled back") {
		t.Fatalf("in-transaction session after reparent: %v", err)
	}
	_ = tx.Rollback()
	var after int
	if err := busy.QueryRow("SELECT @@server_id").Scan(&after); err != nil || after != 2 {
		t.Fatalf("session after its transaction was ended: server_id %d, %v", after, err)
	}

	// Session holding a prepared statement: moved with its statement.
	if _, err := stmt.Exec(201); err != nil {
		t.Fatalf("prepared-statement session after reparent: %v", err)
	}
	if err := h.direct(1).QueryRow("SELECT sid FROM sbtest.rp_t WHERE id = 201").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("prepared insert after reparent: sid=%d err=%v", sid, err)
	}
	// New sessions and retried statements work against node2.
	if id := newSessionServerID(t, h, "rw"); id != 2 {
		t.Fatalf("new rw session on server_id %d, want 2", id)
	}
	if _, err := stmt.Exec(202); err != nil {
		t.Fatalf("prepared statement re-prepared on a new session: %v", err)
	}
	if err := h.direct(1).QueryRow("SELECT sid FROM sbtest.rp_t WHERE id = 202").Scan(&sid); err != nil || sid != 2 {
		t.Fatalf("re-prepared insert: sid=%d err=%v", sid, err)
	}
}

// A lower epoch never replaces a higher one.
func TestOlderEpochIgnored(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.SetClusterState(sandboxState(h.c, 5, 0, 1, 2))
	h.srv.SetClusterState(sandboxState(h.c, 4, 2))
	if e := h.srv.Epochs()["main"]; e != 5 {
		t.Fatalf("epoch %d after an older state, want 5", e)
	}
	if id := newSessionServerID(t, h, "rw"); id != 1 {
		t.Fatalf("rw on server_id %d, want 1", id)
	}
}
