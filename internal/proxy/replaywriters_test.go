package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestReplayAmongAutocommitWriters: transactions open when the primary is
// killed are replayed on the new primary while autocommit writers (text and
// prepared, session- and transaction-pooled listeners) keep inserting into
// the same table through the failover. A released autocommit INSERT must
// not take an auto-increment id that an open transaction's client was told
// on the old primary (the replay gives the client those ids again): every
// transaction not interrupted in its COMMIT completes, and the only errors
// are the outcome-unknown ones of statements in flight at the kill.
func TestReplayAmongAutocommitWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	h := newFailoverReplayHarness(t, addTxListener)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu        sync.Mutex
		errs      []string
		unknown   int
		committed = map[int64]int{} // id → v of every row a COMMIT acknowledged
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		nextV     = 1000
	)
	newV := func() int { mu.Lock(); defer mu.Unlock(); nextV++; return nextV }
	fail := func(who string, err error) {
		mu.Lock()
		defer mu.Unlock()
		var me *mysql.MySQLError
		if errors.As(err, &me) && strings.Contains(me.Message, "outcome of") && strings.Contains(me.Message, "unknown") {
			unknown++
			return
		}
		errs = append(errs, fmt.Sprintf("%s: %v", who, err))
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	open := func(listener string, prepared bool) *sql.Conn {
		db := h.db(listener, "sbtest", func(c *mysql.Config) { c.InterpolateParams = !prepared })
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	txWriter := func(name, listener string, prepared bool) {
		c := open(listener, prepared)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped() {
				v := newV()
				if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
					fail(name+" BEGIN", err)
					continue
				}
				var ids []int64
				var err error
				for i := 0; i < 3 && err == nil; i++ {
					var res sql.Result
					if res, err = c.ExecContext(ctx, "INSERT INTO ri (v) VALUES (?)", v); err == nil {
						id, _ := res.LastInsertId()
						ids = append(ids, id)
					}
				}
				var n int
				if err == nil {
					err = c.QueryRowContext(ctx, "SELECT COUNT(*) FROM ri WHERE v = ?", v).Scan(&n)
					if err == nil && n != 3 {
						err = fmt.Errorf("transaction reads %d of its 3 rows", n)
					}
				}
				if err != nil {
					fail(name, err)
					_, _ = c.ExecContext(ctx, "ROLLBACK")
					continue
				}
				if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
					fail(name+" COMMIT", err)
					continue
				}
				mu.Lock()
				for _, id := range ids {
					committed[id] = v
				}
				mu.Unlock()
			}
		}()
	}
	acWriter := func(name, listener string, prepared bool) {
		c := open(listener, prepared)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped() {
				v := newV()
				res, err := c.ExecContext(ctx, "INSERT INTO ri (v) VALUES (?)", v)
				if err != nil {
					fail(name, err)
					continue
				}
				id, _ := res.LastInsertId()
				mu.Lock()
				committed[id] = v
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 3; i++ {
		txWriter(fmt.Sprintf("tx-rw-%d", i), "rw", i%2 == 0)
		txWriter(fmt.Sprintf("tx-rwtx-%d", i), "rw-tx", i%2 == 1)
	}
	acWriter("ac-rw-text", "rw", false)
	acWriter("ac-rw-prep", "rw", true)
	acWriter("ac-rwtx-text", "rw-tx", false)
	acWriter("ac-rwtx-prep", "rw-tx", true)
	// Sessions idle in a transaction that inserted.
	type idle struct {
		c   *sql.Conn
		v   int
		ids []int64
	}
	var idles []idle
	for i, l := range []string{"rw", "rw-tx", "rw"} {
		c := open(l, i == 1)
		v := newV()
		mustExec(t, c, "BEGIN")
		var ids []int64
		for j := 0; j < 2; j++ {
			res, err := c.ExecContext(ctx, "INSERT INTO ri (v) VALUES (?)", v)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := res.LastInsertId()
			ids = append(ids, id)
		}
		idles = append(idles, idle{c, v, ids})
	}
	time.Sleep(time.Second)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	// Detection, and the candidate applying its relay log.
	time.Sleep(400 * time.Millisecond)
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	done.AutoFailover = &topo.AutoFailover{Class: topo.AutoBlocked, Reason: "blocked after a failover"}
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(done)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	for i, s := range idles {
		if _, err := s.c.ExecContext(ctx, "COMMIT"); err != nil {
			fail(fmt.Sprintf("idle-%d COMMIT", i), err)
			continue
		}
		for _, id := range s.ids {
			committed[id] = s.v
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("%d client errors besides %d outcome-unknown ones:\n%s", len(errs), unknown, strings.Join(errs, "\n"))
	}
	// Every acknowledged row is on the new primary with its value (async
	// replication may lose what the old primary acknowledged last: only
	// rows written after the failover, and the replayed ones, are sure).
	rows, err := h.direct(1).QueryContext(ctx, "SELECT id, v FROM sbtest.ri")
	if err != nil {
		t.Fatal(err)
	}
	have := map[int64]int{}
	for rows.Next() {
		var id int64
		var v int
		_ = rows.Scan(&id, &v)
		have[id] = v
	}
	rows.Close()
	wrong := 0
	for id, v := range committed {
		if got, ok := have[id]; ok && got != v {
			wrong++
			if wrong < 5 {
				t.Errorf("row %d holds v=%d, its client was told v=%d", id, got, v)
			}
		}
	}
	t.Logf("%d rows acknowledged, %d outcome-unknown errors, %d other errors, %d ids holding another client's row", len(committed), unknown, len(errs), wrong)
}

// TestReplayLockWaitBounded: a replayed statement that needs a row lock
// another session holds on the new primary (here a transaction opened
// there directly, which inserted the id the replayed INSERT must give its
// client again) waits at most replayLockWait, not the replay's 5 s
// network bound, and the client's error says what happened (error 1205 on
// the new primary) instead of an i/o timeout.
func TestReplayLockWaitBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	h := newFailoverReplayHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := h.db("rw", "sbtest", nil).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mustExec(t, a, "BEGIN")
	a1 := insertRI(t, ctx, a, 1)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	n2 := h.direct(1)
	makeWritable(t, n2)
	blocker, err := n2.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	mustExec(t, blocker, "BEGIN")
	if _, err := blocker.ExecContext(ctx, "INSERT INTO sbtest.ri (id, v) VALUES (?, 99)", a1); err != nil {
		t.Fatal(err)
	}
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	start := time.Now()
	h.srv.SetClusterState(done)
	_, err = a.ExecContext(ctx, "COMMIT")
	took := time.Since(start)
	mustExec(t, blocker, "ROLLBACK")
	if err == nil {
		t.Fatal("COMMIT after a replay whose INSERT met another session's lock on its id succeeded")
	}
	if !strings.Contains(err.Error(), "error 1205") || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("COMMIT: %v, want the rolled-back error naming the lock wait (error 1205)", err)
	}
	t.Logf("replay rolled back %s after the failover was published: %v", took.Round(time.Millisecond), err)
	// The session goes on, with the client's own lock wait timeout.
	var lwt int
	if err := a.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&lwt); err != nil || lwt <= 1 {
		t.Fatalf("innodb_lock_wait_timeout after the replay: %d (%v), want the server's default back", lwt, err)
	}
}

// TestSlowReplayKeepsItsIDs: a transaction whose replay takes longer than
// the 1 s snapshot wait (a SELECT SLEEP(1.3) before its INSERT) keeps the
// auto-increment id its client was told: an autocommit INSERT sent on
// the new primary right after the failover waits while the replay runs,
// instead of taking that id after 1 s and making the replay fail.
func TestSlowReplayKeepsItsIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	h := newFailoverReplayHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := h.db("rw", "sbtest", nil)
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "SELECT 1")
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "SELECT SLEEP(1.3)")
	a1 := insertRI(t, ctx, a, 1)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(done)
	time.Sleep(50 * time.Millisecond) // A's replay has begun
	c1 := insertRI(t, ctx, c, 2)
	if c1 == a1 {
		t.Fatalf("the INSERT after the failover got id %d, the one A's client was told", c1)
	}
	if _, err := a.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT of A after its slow replay: %v", err)
	}
	var n int
	if err := h.direct(1).QueryRowContext(ctx, "SELECT COUNT(*) FROM sbtest.ri WHERE (id, v) IN ((?, 1), (?, 2))", a1, c1).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows of A and C on the new primary: %d of 2 (%v)", n, err)
	}
}

// addTxListener adds "rw-tx", a transaction-pooled copy of the "rw"
// listener, to c.
func addTxListener(c *config.Config) {
	var rw config.Listener
	for _, l := range c.Listeners {
		if l.Name == "rw" {
			rw = l
		}
	}
	rw.Name, rw.Pooling = "rw-tx", config.PoolingTransaction
	c.Listeners = append(c.Listeners, rw)
}

// newFailoverReplayHarness starts a harness with automatic failover, transaction
// replay (COMMIT outcome unknown), the readiness published and table
// sbtest.ri (id auto-increment, v) created and replicated; mut edits the
// config further.
func newFailoverReplayHarness(t *testing.T, mut func(*config.Config)) *harness {
	t.Helper()
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = true
		c.Clusters[0].Failover.CommitOutcome = config.CommitOutcomeUnknown
		if mut != nil {
			mut(c)
		}
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.ri (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, KEY (v))")
	mustExec(t, root, "INSERT INTO sbtest.ri (v) VALUES (0)")
	h.waitReplicated(1, 2)
	return h
}
