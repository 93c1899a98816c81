package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// startHold announces a switchover node1 → node2 at epoch 1 (step) the way
// the controller does: the switchover document, then phase switching.
func startHold(h *harness, id, step string) {
	h.srv.SetSwitchover(topo.SwitchoverProgress{ID: id, Cluster: "main", Epoch: 1, From: "node1", To: "node2", Step: step, Since: time.Now()})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.Phase, st.Target = topo.PhaseSwitching, "node2"
	h.srv.SetClusterState(st)
}

func (h *harness) ack() topo.SwitchoverAck {
	return h.srv.acks.snapshot()["main"]
}

func waitAck(t *testing.T, h *harness, what string, ok func(topo.SwitchoverAck) bool) topo.SwitchoverAck {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := h.ack()
		if ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: acknowledgement %+v", what, a)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type result struct {
	err error
	at  time.Time
}

func execAsync(db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) chan result {
	ch := make(chan result, 1)
	go func() {
		_, err := db.ExecContext(context.Background(), q, args...)
		ch <- result{err, time.Now()}
	}()
	return ch
}

// During a switchover the primary listener holds new statements (pooled
// sessions and a connection opened meanwhile) while a transaction that was
// already open finishes (the drain: the acknowledgement counts it busy
// until its COMMIT); the held statements run on the new primary once it is
// published, and the acknowledgement disappears.
func TestHoldDrainAndRelease(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	mustExec(t, db, "CREATE TABLE hd (id INT PRIMARY KEY, sid INT)")
	h.waitReplicated(1, 2)
	txConn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txConn.Close()
	tx, err := txConn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO hd VALUES (1, @@server_id)"); err != nil {
		t.Fatal(err)
	}

	startHold(h, "sw-1", topo.SwitchStepHold)
	a := waitAck(t, h, "holding with the open transaction busy", func(a topo.SwitchoverAck) bool { return a.ID == "sw-1" && a.Holding && a.Busy == 1 })
	t.Logf("acknowledgement while a transaction is open: %+v", a)

	held := execAsync(db, "INSERT INTO hd VALUES (2, @@server_id)")
	fresh := h.db("rw", "sbtest", nil) // a new connection logs in during the switchover
	heldNew := execAsync(fresh, "INSERT INTO hd VALUES (3, @@server_id)")
	waitAck(t, h, "two statements held", func(a topo.SwitchoverAck) bool { return a.Held == 2 })

	// The open transaction goes on and commits on node1 (the drain).
	if _, err := tx.Exec("INSERT INTO hd VALUES (4, @@server_id)"); err != nil {
		t.Fatalf("statement of an open transaction during the drain: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit during the drain: %v", err)
	}
	waitAck(t, h, "drained", func(a topo.SwitchoverAck) bool { return a.Busy == 0 })
	select {
	case r := <-held:
		t.Fatalf("held statement ran during the switchover: %v", r.err)
	default:
	}

	h.waitReplicated(1, 2)
	reparent(t, h)
	released := time.Now()
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	for _, ch := range []chan result{held, heldNew} {
		r := <-ch
		if r.err != nil {
			t.Fatalf("held statement after release: %v", r.err)
		}
		if d := r.at.Sub(released); d > 2*time.Second {
			t.Fatalf("held statement finished %s after the release", d)
		}
	}
	for id, want := range map[int]int{1: 1, 4: 1, 2: 2, 3: 2} {
		var sid int
		if err := h.direct(1).QueryRow("SELECT sid FROM sbtest.hd WHERE id = ?", id).Scan(&sid); err != nil || sid != want {
			t.Fatalf("row %d: server_id %d (%v), want %d", id, sid, err, want)
		}
	}
	waitAck(t, h, "acknowledgement removed", func(a topo.SwitchoverAck) bool { return a.ID == "" })
	if n := counterValue(t, h, "switchyard_proxy_hold_refused_total"); n != 0 {
		t.Fatalf("%v statements refused", n)
	}
}

// Buffer limits give a clear error, never a hang, and the session goes on.
func TestHoldLimits(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Switchover.MaxHold = config.Duration(300 * time.Millisecond)
		c.Switchover.MaxHeld = 1
	})
	db := h.db("rw", "sbtest", nil)
	db.SetMaxOpenConns(4)
	mustExec(t, db, "CREATE TABLE hl (id INT PRIMARY KEY)")
	startHold(h, "sw-2", topo.SwitchStepHold)
	first := execAsync(db, "INSERT INTO hl VALUES (1)")
	waitAck(t, h, "one held", func(a topo.SwitchoverAck) bool { return a.Held == 1 })
	start := time.Now()
	_, err := db.Exec("INSERT INTO hl VALUES (2)")
	if code, msg := mysqlErr(err); code != 1105 || !strings.Contains(msg, "switchover of cluster main is in progress") || !strings.Contains(msg, "max_held") {
		t.Fatalf("second held statement over max_held: %v", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Fatalf("max_held refusal took %s", d)
	}
	r := <-first
	if code, msg := mysqlErr(r.err); code != 1105 || !strings.Contains(msg, "max_hold") {
		t.Fatalf("statement held past max_hold: %v", r.err)
	}
	// Rolled back: statements run on node1 again.
	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
	if _, err := db.Exec("INSERT INTO hl VALUES (3)"); err != nil {
		t.Fatalf("after the rollback: %v", err)
	}
	if n := counterValue(t, h, "switchyard_proxy_hold_refused_total"); n != 2 {
		t.Fatalf("%v statements refused, want 2", n)
	}
}

// At the fence step a transaction still open is ended with one clear error
// (drain mode fail); if the switchover then rolls back, every session
// reconnects to the old primary (whose connections the fence killed) and
// goes on.
func TestHoldFenceFailsOpenTransactionAndRollback(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("rw", "sbtest", nil)
	mustExec(t, db, "CREATE TABLE hf (id INT PRIMARY KEY)")
	idle, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	serverID(t, idle)
	txConn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txConn.Close()
	tx, err := txConn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO hf VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	startHold(h, "sw-3", topo.SwitchStepHold)
	waitAck(t, h, "busy", func(a topo.SwitchoverAck) bool { return a.Busy == 1 })
	startHold(h, "sw-3", topo.SwitchStepFence)
	// What the controller's fence does: kill the application's sessions.
	root := h.direct(0)
	rows, err := root.Query("SELECT id FROM information_schema.PROCESSLIST WHERE user = ?", h.c.AppUser)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = root.Exec("KILL ?", id)
	}
	_, err = tx.Exec("INSERT INTO hf VALUES (2)")
	if code, msg := mysqlErr(err); code != 1105 || !strings.Contains(msg, "transaction was rolled back") || !strings.Contains(msg, "drain") {
		t.Fatalf("open transaction at the fence: %v", err)
	}
	rolledBack := make(chan error, 1)
	go func() { rolledBack <- tx.Rollback() }() // held: the session is no longer in a transaction
	held := execAsync(idle, "INSERT INTO hf VALUES (3)")
	waitAck(t, h, "two held", func(a topo.SwitchoverAck) bool { return a.Held == 2 })
	// Roll back: same primary, same epoch, phase stable.
	h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2))
	if r := <-held; r.err != nil {
		t.Fatalf("held statement after a rollback past the fence: %v", r.err)
	}
	if err := <-rolledBack; err != nil {
		t.Fatalf("client ROLLBACK after its transaction was ended: %v", err)
	}
	if _, err := txConn.ExecContext(ctx, "INSERT INTO hf VALUES (4)"); err != nil {
		t.Fatalf("session whose transaction was ended: %v", err)
	}
	var n int
	if err := root.QueryRow("SELECT COUNT(*) FROM sbtest.hf").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows %d (%v), want 2 (ids 3 and 4; 1 was rolled back)", n, err)
	}
}

// The drain acknowledgement (Busy 0) is what lets the controller fence the
// old primary, so no statement may reach the old primary after it: not one
// of a session that read the route just before the hold, nor one of a
// transaction-pooled session taking a pooled connection between
// transactions. Many sessions run transactions and autocommit writes on
// both pooling modes while switchovers start, drain and roll back; after
// each drained acknowledgement node1 is made read-only for a while (what
// the fence does), and no client may get ER_OPTION_PREVENTS_STATEMENT
// (1290) or any other error.
func TestHoldDrainedMeansNoStatementOnOldPrimary(t *testing.T) {
	const txClients, sessClients, rounds = 200, 4, 10
	h := txHarness(t, 12) // 4 for the session-pooled clients, 8 shared
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.hdrain (client INT, n INT, PRIMARY KEY (client, n))")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures, commits atomic.Int64
	var firstErr atomic.Value
	run := func(i int, c *client, inTx bool) {
		defer wg.Done()
		ctx := context.Background()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			q := fmt.Sprintf("INSERT INTO hdrain VALUES (%d, %d)", i, n)
			var err error
			if inTx {
				var tx *sql.Tx
				if tx, err = c.conn.BeginTx(ctx, nil); err == nil {
					if _, err = tx.ExecContext(ctx, q); err == nil {
						err = tx.Commit()
					} else {
						_ = tx.Rollback()
					}
				}
			} else {
				_, err = c.conn.ExecContext(ctx, q)
			}
			if err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("client %d write %d: %w", i, n, err))
				return
			}
			commits.Add(1)
		}
	}
	for i := range txClients + sessClients {
		listener := "rwtx"
		if i >= txClients {
			listener = "rw"
		}
		c := h.client(listener, "sbtest")
		wg.Add(1)
		go run(i, c, i%2 == 0)
	}
	root := h.direct(0)
	defer func() { _, _ = root.Exec("SET GLOBAL read_only = 0") }()
	for r := 1; r <= rounds && failures.Load() == 0; r++ {
		time.Sleep(100 * time.Millisecond)
		id := fmt.Sprintf("sw-drain-%d", r)
		startHold(h, id, topo.SwitchStepHold)
		waitAck(t, h, "drained", func(a topo.SwitchoverAck) bool { return a.ID == id && a.Holding && a.Busy == 0 })
		mustExec(t, root, "SET GLOBAL read_only = 1")
		time.Sleep(150 * time.Millisecond)
		mustExec(t, root, "SET GLOBAL read_only = 0")
		h.srv.SetClusterState(sandboxState(h.c, 1, 0, 1, 2)) // rolled back: node1 stays
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d writes over %d drained switchovers", commits.Load(), rounds)
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d clients got an error; first: %v", n, firstErr.Load())
	}
}
