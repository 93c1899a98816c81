package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard-db/switchyard/bench/internal/benchkit"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// runStop runs the -fault stop trials: the primary's mariadbd is frozen with
// SIGSTOP, the controller fails over, and after -stop-for it is woken with
// SIGCONT while the writers go on.
func runStop(o options) error {
	fmt.Printf("frozen primary: SIGSTOP of the primary for %s under write load, then SIGCONT; %d trials, probe.interval %s, probe.timeout %s, semi-sync %v, durability %s, %d writers, failover.mode auto\n",
		o.stopFor, o.trials, o.interval, probeTimeout(o.interval), o.semiSync, durabilityName(o), o.writers)
	var rec []time.Duration
	var acked, lost, late, woke, maxW, maxR, hung, kept int
	for i := 1; i <= o.trials; i++ {
		tr, err := stopTrial(o)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i, err)
		}
		if tr.noFailover {
			kept++
			fmt.Printf("trial %2d: no failover (primary %s kept, epoch unchanged)  first write sent after the stop acknowledged after %.0f ms  first write after the wake %.0f ms  acknowledged %5d  lost %d  writable at one probe ≤ %d  client errors %d  DeadPrimary events %d\n",
				i, tr.newPrimary, ms(tr.recovery), ms(tr.afterWake), tr.acked, tr.lost, tr.maxWritable, tr.errors, len(tr.deadSeen))
			for _, m := range tr.deadSeen {
				fmt.Printf("          %s\n", m)
			}
			acked += tr.acked
			lost += tr.lost
			maxW = max(maxW, tr.maxWritable)
			continue
		}
		first := "none (hung)"
		if tr.recovery >= 0 {
			first = fmt.Sprintf("%.0f ms", ms(tr.recovery))
		}
		fmt.Printf("trial %2d: stop → first write %s  new primary %s (failover %d ms)  acknowledged %5d  lost %d (acknowledged before the freeze %d)  late successes %d  commits on waking (never acknowledged) %d  writable at one probe ≤ %d  nodes taking routed writes in one 100 ms ≤ %d  client errors %d\n",
			i, first, tr.newPrimary, tr.failoverMS, tr.acked, tr.lost, tr.lostBeforeStop, tr.late, tr.wokeCommits, tr.maxWritable, tr.maxRouted, tr.errors)
		if tr.recovery < 0 {
			hung++
		} else {
			rec = append(rec, tr.recovery)
		}
		acked += tr.acked
		lost += tr.lost
		late += tr.late
		woke += tr.wokeCommits
		maxW = max(maxW, tr.maxWritable)
		maxR = max(maxR, tr.maxRouted)
	}
	fmt.Printf("failovers: %d of %d trials (no failover in %d)\n", o.trials-kept, o.trials, kept)
	sort.Slice(rec, func(i, j int) bool { return rec[i] < rec[j] })
	if len(rec) == 0 {
		rec = append(rec, -1)
	}
	if kept == o.trials {
		fmt.Printf("no failover in any trial; acknowledged writes lost: %d of %d; most nodes writable at one 100 ms probe: %d\n", lost, acked, maxW)
		if lost > 0 {
			return errors.New("acknowledged writes lost (see above)")
		}
		return nil
	}
	fmt.Printf("trials in which no write succeeded while the old primary was frozen (writers hung on it): %d\n", hung)
	fmt.Printf("stop → first write through rw: median %.0f ms, max %.0f ms over %d trials; acknowledged writes lost: %d of %d; late successes from the old primary: %d; never-acknowledged commits on waking: %d; most nodes writable at one 100 ms probe: %d; most nodes taking routed writes in one 100 ms window: %d\n",
		ms(percentile(rec, 50)), ms(rec[len(rec)-1]), len(rec), lost, acked, late, woke, maxW, maxR)
	if lost > 0 || late > 0 || maxR > 1 || hung > 0 {
		return errors.New("safety violated (see above)")
	}
	return nil
}

func stopTrial(o options) (tr trial, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := startStack(ctx, o)
	if err != nil {
		return tr, err
	}
	defer func() {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	st0, err := s.state(ctx)
	if err != nil {
		return tr, err
	}
	mon := startWritableMonitor(s)
	defer mon.stop()
	w := newWriters(s.rw, o.writers, false)
	wctx, wcancel := context.WithCancel(ctx)
	w.start(wctx)
	time.Sleep(2 * time.Second)

	pid := s.sb.PID(0)
	if pid == 0 {
		wcancel()
		w.wait()
		return tr, errors.New("node1 has no pid")
	}
	stopAt := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		wcancel()
		w.wait()
		return tr, err
	}
	woken := false
	wake := func() {
		if !woken {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			woken = true
		}
	}
	defer wake()
	// The new epoch, as the proxy applied it.
	var epochAt time.Time
	newEpoch := func() bool {
		if s.srv.Epochs()["main"] > st0.Epoch {
			epochAt = time.Now()
			return true
		}
		return false
	}
	failedOver := benchkit.WaitFor(ctx, o.stopFor, newEpoch) == nil
	time.Sleep(time.Until(stopAt.Add(o.stopFor)))
	wake()
	wokeAt := time.Now()
	if !failedOver {
		// A failover decided just before the wake would still publish
		// its epoch within a few seconds.
		failedOver = benchkit.WaitFor(ctx, 3*time.Second, newEpoch) == nil
	}
	if !failedOver {
		return tr, s.noFailover(ctx, &tr, w, wcancel, mon, st0, stopAt, wokeAt)
	}
	time.Sleep(5 * time.Second) // the woken node answers, is fenced, rejoined or quarantined
	wcancel()
	w.wait()
	mon.stop()
	// A write sent after the stop and acknowledged before the wake was
	// taken by the new primary; -1 when none was (every writer hung).
	tr.recovery = -1
	if first, ok := w.firstAfter(ctx, stopAt, 0); ok && first.Before(stopAt.Add(o.stopFor)) {
		tr.recovery = first.Sub(stopAt)
	}

	st, err := s.state(ctx)
	if err != nil {
		return tr, err
	}
	tr.newPrimary = st.Primary
	if st.LastFailover != nil {
		tr.failoverMS = st.LastFailover.DurationMS
	}
	if o.verbose {
		if evs, err := controller.ListEvents(ctx, s.store, s.keys, "main", 0); err == nil {
			for _, ev := range evs {
				fmt.Printf("  event %s %-9s %s\n", ev.At.Format("15:04:05.000"), ev.Kind, ev.Message)
			}
		}
	}
	if st.Primary == "" || st.Primary == "node1" {
		return tr, fmt.Errorf("final primary %q: the failover did not stick", st.Primary)
	}
	ackedIDs := w.acked()
	missing, err := loadgen.Check(ctx, withDB(s.sb.RootDSN(nodeIndex(st.Primary)), "sbtest"), "", ackedIDs)
	if err != nil {
		return tr, err
	}
	tr.acked, tr.lost, tr.errors = len(ackedIDs), len(missing), w.errors()
	// Every row any node holds, with the server that executed it and when.
	rows := map[int64]ledgerRow{}
	for i := range s.sb.Nodes {
		if err := readLedger(ctx, withDB(s.sb.RootDSN(i), "sbtest"), rows); err != nil {
			return tr, fmt.Errorf("%s: %w", s.sb.Nodes[i].Name, err)
		}
	}
	ackAt := w.ackTimes()
	for _, id := range missing {
		// Acknowledged before the freeze and missing from the new
		// primary: committed on the old primary but never shipped (the
		// asynchronous replication window, which semi-sync closes).
		if ackAt[id].Before(stopAt) {
			tr.lostBeforeStop++
		}
	}
	oldID := int64(s.sb.Nodes[0].ServerID)
	for id, r := range rows {
		if r.serverID != oldID || r.at.Before(epochAt) {
			continue
		}
		if at, ok := ackAt[id]; ok && at.After(epochAt) {
			tr.late++
		} else if !ok {
			tr.wokeCommits++
		}
	}
	tr.maxWritable = mon.max()
	tr.maxRouted = maxRoutedPerWindow(rows, ackAt, 100*time.Millisecond)
	return tr, nil
}

// noFailover finishes a -fault stop trial in which the frozen primary was
// not failed over (a freeze shorter than failover.silence_bound): the
// writers go on against node1 for a second, and the trial records how long
// the first write sent after the stop waited, that the epoch and primary
// are unchanged and that no acknowledged write is missing on node1.
func (s *stack) noFailover(ctx context.Context, tr *trial, w *writers, wcancel context.CancelFunc, mon *writableMonitor,
	st0 topo.ClusterState, stopAt, wokeAt time.Time) error {
	time.Sleep(time.Second)
	wcancel()
	w.wait()
	mon.stop()
	tr.noFailover = true
	tr.recovery = -1
	if first, ok := w.firstAfter(ctx, stopAt, 0); ok {
		tr.recovery = first.Sub(stopAt)
	}
	if first, ok := w.firstAfter(ctx, wokeAt, 0); ok {
		tr.afterWake = first.Sub(wokeAt)
	} else {
		return errors.New("no failover, and no write succeeded after the wake")
	}
	st, err := s.state(ctx)
	if err != nil {
		return err
	}
	tr.newPrimary = st.Primary
	if st.Primary != "node1" || st.Epoch != st0.Epoch {
		return fmt.Errorf("no new epoch at the proxy, but the store says primary %s epoch %d (was node1 epoch %d)", st.Primary, st.Epoch, st0.Epoch)
	}
	ackedIDs := w.acked()
	missing, err := loadgen.Check(ctx, withDB(s.sb.RootDSN(0), "sbtest"), "", ackedIDs)
	if err != nil {
		return err
	}
	tr.acked, tr.lost, tr.errors = len(ackedIDs), len(missing), w.errors()
	tr.maxWritable = mon.max()
	// How close it came: the rounds that saw DeadPrimary without
	// confirming it (the confirmation needs a round 150ms later).
	if evs, err := controller.ListEvents(ctx, s.store, s.keys, "main", 0); err == nil {
		for _, ev := range evs {
			if ev.At.After(stopAt) && strings.Contains(ev.Message, "DeadPrimary") {
				tr.deadSeen = append(tr.deadSeen, ev.Message)
			}
		}
	}
	return nil
}

type ledgerRow struct {
	serverID int64
	at       time.Time
}

func readLedger(ctx context.Context, dsn string, into map[int64]ledgerRow) error {
	db, err := sql.Open("mysql", dsn+"&parseTime=true&loc=Local")
	if err != nil {
		return err
	}
	defer db.Close()
	rs, err := db.QueryContext(ctx, "SELECT id, server_id, at FROM ledger")
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var id int64
		var r ledgerRow
		if err := rs.Scan(&id, &r.serverID, &r.at); err != nil {
			return err
		}
		into[id] = r
	}
	return rs.Err()
}

// maxRoutedPerWindow is the largest number of distinct servers that executed
// acknowledged writes within one window of width d (by commit time).
func maxRoutedPerWindow(rows map[int64]ledgerRow, acked map[int64]time.Time, d time.Duration) int {
	buckets := map[int64]map[int64]bool{}
	for id, r := range rows {
		if _, ok := acked[id]; !ok {
			continue
		}
		b := r.at.UnixNano() / int64(d)
		if buckets[b] == nil {
			buckets[b] = map[int64]bool{}
		}
		buckets[b][r.serverID] = true
	}
	m := 0
	for _, s := range buckets {
		m = max(m, len(s))
	}
	return m
}

// writableMonitor asks every node for @@read_only every 100 ms, directly as
// root, and remembers the most nodes that answered OFF at one probe. A
// frozen node does not answer and is not counted.
type writableMonitor struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	most   int
}

func startWritableMonitor(s *stack) *writableMonitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &writableMonitor{cancel: cancel}
	var dbs []*sql.DB
	for i := range s.sb.Nodes {
		db, err := sql.Open("mysql", s.sb.RootDSN(i))
		if err != nil {
			continue
		}
		db.SetMaxOpenConns(2)
		dbs = append(dbs, db)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() {
			for _, db := range dbs {
				db.Close()
			}
		}()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var n int
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, db := range dbs {
				wg.Add(1)
				go func(db *sql.DB) {
					defer wg.Done()
					qctx, qcancel := context.WithTimeout(ctx, 90*time.Millisecond)
					defer qcancel()
					var ro int
					if db.QueryRowContext(qctx, "SELECT @@read_only").Scan(&ro) == nil && ro == 0 {
						mu.Lock()
						n++
						mu.Unlock()
					}
				}(db)
			}
			wg.Wait()
			m.mu.Lock()
			m.most = max(m.most, n)
			m.mu.Unlock()
		}
	}()
	return m
}

func (m *writableMonitor) stop() { m.cancel(); m.wg.Wait() }

func (m *writableMonitor) max() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.most
}
