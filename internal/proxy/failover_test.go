package proxy

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestWritesFencedWhileLeaseLost: while the registration lease is lost the
// primary listener refuses new and existing sessions with error 1290 and a
// message saying why, the replica listener keeps serving, and lifting the
// fence restores writes.
func TestWritesFencedWhileLeaseLost(t *testing.T) {
	h := newHarness(t, nil)
	rw := h.db("rw", "", nil)
	rw.SetMaxOpenConns(1)
	if id := serverID(t, rw); id != 1 {
		t.Fatalf("rw answered by server_id %d, want 1", id)
	}

	h.srv.fenceWrites("registration lease lost")
	if h.srv.WritesFenced() == "" {
		t.Fatal("WritesFenced() is empty after fenceWrites")
	}
	// The pooled (idle) session is moved off the primary: its next command fails.
	var x int
	err := rw.QueryRow("SELECT 1").Scan(&x)
	code, msg := mysqlErr(err)
	if code != mysql.ER_OPTION_PREVENTS_STATEMENT || !strings.Contains(msg, "lost its registration") {
		t.Fatalf("existing rw session while fenced: err %v (code %d), want 1290 naming the lost registration", err, code)
	}
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
	rw3 := h.db("rw", "", nil)
	if id := serverID(t, rw3); id != 1 {
		t.Fatalf("rw after the fence was lifted answered by server_id %d, want 1", id)
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
