package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestS1BusyPrimaryIsNotDead (SCENARIOS.md S1): auto mode, ledger workload.
// The primary is made busy — CPU burners and a long ALTER TABLE, then
// max_connections exhausted so that the monitor account is refused with
// error 1040 — while its replicas stay connected. Zero failovers; the
// analysis calls the primary overloaded or unreachable-but-replicating and
// events say why it did not fail over.
func TestS1BusyPrimaryIsNotDead(t *testing.T) {
	s := startFO(t, foOpts{})
	s.exec(0, "CREATE TABLE sbtest.big (id INT PRIMARY KEY, pad VARCHAR(200)) ENGINE=InnoDB")
	s.exec(0, "INSERT INTO sbtest.big SELECT seq, REPEAT('x', 200) FROM sbtest.seq_1_to_300000")
	w := s.startWorkload(4)
	time.Sleep(time.Second)

	// Phase A: CPU burners and a long ALTER TABLE on the primary.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sql.Open("mysql", s.appDirect(0, 30*time.Second))
			if err != nil {
				return
			}
			defer db.Close()
			for ctx.Err() == nil {
				_, _ = db.ExecContext(ctx, "SELECT BENCHMARK(20000000, SHA2('switchyard', 256))")
			}
		}()
	}
	alterStart := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		db := s.root(0)
		if _, err := db.ExecContext(ctx, "ALTER TABLE sbtest.big FORCE"); err != nil && ctx.Err() == nil {
			t.Errorf("ALTER TABLE: %v", err)
		}
		t.Logf("ALTER TABLE sbtest.big FORCE (300,000 rows) ran %s on the primary", time.Since(alterStart).Round(time.Millisecond))
	}()
	time.Sleep(4 * time.Second)
	cancel()
	wg.Wait()
	t.Logf("phase A (CPU burners + ALTER TABLE): analysis %s", analysisCodes(s.state()))

	// Phase B: max_connections exhausted; the monitor account's sessions are
	// killed so that its next probe needs a new connection and gets 1040.
	hold := s.exhaustConnections(0)
	st, took := s.waitState("probe refused with 1040", 20*foInterval, func(st topo.ClusterState) bool {
		p := st.Node("node1").Probe
		return p.ErrorKind == "too_many_connections"
	})
	t.Logf("phase B: monitor refused (%s) %s after the connections were exhausted; analysis %s",
		st.Node("node1").Probe.Error, took.Round(time.Millisecond), analysisCodes(st))
	time.Sleep(12 * foInterval) // many rounds of it
	ev := s.waitEvent("refuses the monitor account: too many connections", 5*time.Second)
	t.Logf("event: %s", ev.Message)
	hold.release()

	time.Sleep(2 * time.Second)
	w.stop(0)
	st = s.state()
	if st.Primary != "node1" || st.Epoch != 1 {
		t.Fatalf("busy primary was failed over: primary %s epoch %d\n%s", st.Primary, st.Epoch, s.eventText())
	}
	if n := s.failovers(); n != 0 {
		t.Fatalf("%d failovers, want 0", n)
	}
	var reasons []string
	for _, ev := range s.events() {
		if strings.HasPrefix(ev.Message, "not failing over") {
			reasons = append(reasons, ev.Code)
		}
	}
	t.Logf("0 failovers; non-decision events by code: %v\nevents:\n%s", reasons, s.eventText())
}

func analysisCodes(st topo.ClusterState) string {
	var c []string
	for _, a := range st.Analysis {
		c = append(c, a.Code+"("+a.Node+")")
	}
	if len(c) == 0 {
		return "none"
	}
	return strings.Join(c, ", ")
}

// connHold keeps a node's connection slots filled.
type connHold struct {
	s     *foStack
	i     int
	root  *sql.Conn
	rootD *sql.DB
	mu    sync.Mutex
	conns []*sql.Conn
	dbs   []*sql.DB
	extra *sql.DB
	stop  chan struct{}
	done  chan struct{}
}

// fill opens application sessions on the node until it answers 1040.
func (h *connHold) fill(ctx context.Context) error {
	for n := 0; n < 200; n++ {
		db, err := sql.Open("mysql", h.s.appDirect(h.i, 2*time.Second))
		if err != nil {
			return err
		}
		c, err := db.Conn(ctx)
		if err != nil {
			db.Close()
			if mysqlErrNo(err) != 1040 {
				return fmt.Errorf("filling connections: %w", err)
			}
			return nil
		}
		h.mu.Lock()
		h.conns, h.dbs = append(h.conns, c), append(h.dbs, db)
		h.mu.Unlock()
	}
	return nil
}

// killMonitor kills the monitor account's sessions; it returns how many.
func (h *connHold) killMonitor(ctx context.Context) int {
	rows, err := h.root.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", h.s.sb.MonitorUser)
	if err != nil {
		return 0
	}
	var ids []int64
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = h.root.ExecContext(ctx, "KILL CONNECTION ?", id)
	}
	return len(ids)
}

// exhaustConnections lowers max_connections on node i to just above what
// is in use and fills the rest (and the one extra slot MariaDB keeps for
// CONNECTION ADMIN holders, which the monitor account has) with idle
// sessions, killing the monitor account's sessions so that its next probe
// must connect anew.
func (s *foStack) exhaustConnections(i int) *connHold {
	s.t.Helper()
	ctx := context.Background()
	h := &connHold{s: s, i: i}
	h.rootD = s.root(i)
	var err error
	if h.root, err = h.rootD.Conn(ctx); err != nil {
		s.t.Fatal(err)
	}
	if _, err := h.root.ExecContext(ctx, "SET GLOBAL max_connections = (SELECT COUNT(*) FROM information_schema.PROCESSLIST) + 3"); err != nil {
		s.t.Fatal(err)
	}
	h.killMonitor(ctx)
	if err := h.fill(ctx); err != nil {
		s.t.Fatal(err)
	}
	// The extra slot for CONNECTION ADMIN holders: take it as root.
	h.extra = s.root(i)
	h.extra.SetMaxOpenConns(1)
	_ = h.extra.PingContext(ctx)
	// Slots freed later (a proxy's health check logs in and quits, a
	// session ends) are taken again at once, and a monitor session that
	// slipped in is killed.
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.done)
		for {
			select {
			case <-h.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = h.fill(ctx)
			if h.killMonitor(ctx) > 0 {
				_ = h.fill(ctx)
			}
		}
	}()
	s.t.Logf("max_connections exhausted on %s with %d idle application sessions", s.sb.Nodes[i].Name, len(h.conns))
	return h
}

func (h *connHold) release() {
	close(h.stop)
	<-h.done
	ctx := context.Background()
	if _, err := h.root.ExecContext(ctx, "SET GLOBAL max_connections = 1000"); err != nil {
		h.s.t.Errorf("restore max_connections: %v", err)
	}
	for j, c := range h.conns {
		c.Close()
		h.dbs[j].Close()
	}
	if h.extra != nil {
		h.extra.Close()
	}
	h.root.Close()
}
