// Command failover measures crash failover end to end: a 3-node MariaDB
// sandbox (semi-sync AFTER_SYNC by default), an embedded etcd, one
// controller in failover.mode auto and one proxy, all on this machine;
// writers insert ledger rows with unique ids through the proxy's rw
// listener; the primary gets SIGKILL; the figure is the time from the kill
// to the first write acknowledged through the rw listener afterwards, and
// the number of acknowledged writes missing from the new primary, and the
// client errors after the kill in three classes: sessions with a statement
// in flight at the kill, sessions in an open transaction at the kill (half
// the writers run BEGIN; INSERT; UPDATE; COMMIT, -tx), and all others
// (statements sent after the kill: 0 while failover.hold holds them; with
// -hold=false they fail until the new primary is published). Every
// trial uses a fresh sandbox. It prints each trial and the median, p90 and
// max.
//
// With -fault stop the primary is frozen (SIGSTOP) instead of killed, for
// -stop-for, and then woken (SIGCONT): the figures are then also the
// acknowledged writes missing from the final primary, the writes
// acknowledged after the new epoch that the old primary executed (late
// successes: must be 0), the writes the old primary committed on waking
// that no client saw succeed, and the most nodes that answered
// read_only=OFF at one 100 ms probe (read directly, as root) and that took
// routed writes within one 100 ms window (read from the ledger's server_id
// and commit time).
//
// With -fault partition every node runs in its own network namespace and
// the primary's link is taken down (see partition.go): the figures are the
// times from the isolation to the decision, to the new primary published
// and to the first write through the rw listener.
//
// Usage: go run ./bench/failover [-trials 10] [-interval 1s] [-semisync=true] [-hold=true] [-tx=true]
// [-durability async|semi_sync|semi_sync_durable] [-fault kill|stop|partition] [-stop-for 15s]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/bench/internal/benchkit"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

type options struct {
	trials     int
	interval   time.Duration
	semiSync   bool
	writers    int
	verbose    bool
	fault      string
	stopFor    time.Duration
	durability string
	hold       bool
	replay     bool
	tx         bool
	failsafe   bool
	parallel   int // clusters[].failover.replica_parallel_threads
}

type trial struct {
	recovery   time.Duration // kill → first acknowledged write
	failoverMS int64         // controller's decision → published primary
	acked      int
	lost       int
	errors     int64
	newPrimary string
	classed    [nClasses]int64  // errors after the kill: in flight, in a transaction, COMMIT in flight, other
	samples    [nClasses]string // one message of each class

	// -fault stop only.
	late           int // acknowledged after the new epoch, executed by the old primary
	lostBeforeStop int // lost writes acknowledged before the freeze (never shipped)
	wokeCommits    int // committed by the old primary after the new epoch, never acknowledged
	maxWritable    int // most nodes answering read_only=OFF at one 100 ms probe
	maxRouted      int // most nodes executing routed writes within one 100 ms window

	// -fault stop when no failover came (a freeze the silence bound
	// tolerates): the frozen primary was kept (no new epoch), and how long
	// after the wake the first write was acknowledged.
	noFailover bool
	afterWake  time.Duration
	deadSeen   []string // events naming DeadPrimary during the freeze
}

func main() {
	var o options
	flag.IntVar(&o.trials, "trials", 10, "number of kill -9 trials (fresh sandbox each)")
	flag.DurationVar(&o.interval, "interval", time.Second, "probe.interval (the default is 1s)")
	flag.BoolVar(&o.semiSync, "semisync", true, "semi-synchronous replication (AFTER_SYNC)")
	flag.IntVar(&o.writers, "writers", 4, "concurrent writers through the rw listener")
	flag.BoolVar(&o.verbose, "v", false, "log the controller and proxy (warnings)")
	flag.StringVar(&o.durability, "durability", "", "clusters[].durability: async, semi_sync or semi_sync_durable (default: async, or semi_sync with -semisync)")
	flag.StringVar(&o.fault, "fault", "kill", "kill (SIGKILL the primary), stop (SIGSTOP it for -stop-for, then SIGCONT) or partition (take its network link down; needs root and ip netns)")
	flag.DurationVar(&o.stopFor, "stop-for", 15*time.Second, "with -fault stop: how long the primary stays frozen")
	flag.BoolVar(&o.hold, "hold", true, "clusters[].failover.hold: hold statements while the primary is lost (false: fail them at once)")
	flag.BoolVar(&o.replay, "replay", false, "clusters[].failover.transaction_replay: replay a transaction interrupted by the loss of the primary on the new one")
	flag.BoolVar(&o.tx, "tx", true, "odd-numbered writers run BEGIN; INSERT; UPDATE; COMMIT transactions")
	flag.BoolVar(&o.failsafe, "failsafe", true, "proxy.failsafe (off: a failover that cannot fence the old primary never waits the failsafe window; on, it waits up to 1s unless the replicas' silence rules it out)")
	flag.IntVar(&o.parallel, "parallel-replication", -1, "clusters[].failover.replica_parallel_threads: optimistic parallel appliers the controller keeps on the replicas (-1: the default, 4; 0: leave the servers' setting)")
	flag.Parse()
	// Clients see the kill as broken connections; the driver's own log of
	// them is noise here (the figures count them).
	_ = mysql.SetLogger(&mysql.NopLogger{})
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/failover:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if err := sandbox.CheckBinaries(); err != nil {
		return err
	}
	if o.durability == "" && o.semiSync {
		o.durability = config.DurabilitySemiSync
	}
	if o.durability != "" && o.durability != config.DurabilityAsync && !o.semiSync {
		return fmt.Errorf("-durability %s needs -semisync", o.durability)
	}
	if o.fault == "stop" {
		return runStop(o)
	}
	if o.fault == "partition" {
		return runPartition(o)
	}
	if o.fault != "kill" {
		return fmt.Errorf("-fault %q: want kill, stop or partition", o.fault)
	}
	fmt.Printf("crash failover: kill -9 of the primary under write load, %d trials, probe.interval %s, probe.timeout %s, semi-sync %v, durability %s, %d writers (transactions: %v), failover.mode auto (confirm_rounds 2), failover.hold %v, transaction_replay %v\n",
		o.trials, o.interval, probeTimeout(o.interval), o.semiSync, durabilityName(o), o.writers, o.tx, o.hold, o.replay)
	var res []trial
	for i := 1; i <= o.trials; i++ {
		tr, err := runTrial(o)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i, err)
		}
		res = append(res, tr)
		fmt.Printf("trial %2d: kill → first write %6.0f ms  (failover %4d ms)  new primary %s  acknowledged %5d  lost %d  client errors %d (in flight %d, open transaction %d, its COMMIT in flight %d, other %d)\n",
			i, ms(tr.recovery), tr.failoverMS, tr.newPrimary, tr.acked, tr.lost, tr.errors, tr.classed[classInFlight], tr.classed[classInTx], tr.classed[classCommit], tr.classed[classOther])
		// One message of each class: what the clients got.
		for c, m := range tr.samples {
			if m != "" {
				fmt.Printf("          %s: %s\n", classNames[c], m)
			}
		}
	}
	var sum [nClasses]int64
	var maxOther int64
	for _, r := range res {
		for c := range sum {
			sum[c] += r.classed[c]
		}
		maxOther = max(maxOther, r.classed[classOther])
	}
	fmt.Printf("client errors after the kill over %d trials: in flight at the kill %d, in an open transaction at the kill %d (its COMMIT not yet sent), a transaction's COMMIT in flight at the kill %d, all others %d (most in one trial %d)\n",
		len(res), sum[classInFlight], sum[classInTx], sum[classCommit], sum[classOther], maxOther)
	var rec []time.Duration
	lost, acked := 0, 0
	for _, r := range res {
		rec = append(rec, r.recovery)
		lost += r.lost
		acked += r.acked
	}
	sort.Slice(rec, func(i, j int) bool { return rec[i] < rec[j] })
	fmt.Printf("kill → first write through rw: median %.0f ms, p90 %.0f ms, max %.0f ms over %d trials; acknowledged writes lost: %d of %d\n",
		ms(percentile(rec, 50)), ms(percentile(rec, 90)), ms(rec[len(rec)-1]), len(rec), lost, acked)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	k := (p*len(sorted) + 99) / 100
	if k < 1 {
		k = 1
	}
	return sorted[k-1]
}

func probeTimeout(interval time.Duration) time.Duration {
	return min(500*time.Millisecond, interval*4/5)
}

// stack is one trial's sandbox, etcd, controller and proxy.
type stack struct {
	sb    *sandbox.Cluster
	store topo.Store // the controller's client, also used to read state
	keys  topo.Keys
	srv   *proxy.Server
	rw    string // DSN of the rw listener (ledger database)
	close func() error

	// lab holds the nodes' network namespaces (-fault partition only).
	lab *sandbox.NetLab
}

func startStack(ctx context.Context, o options) (_ *stack, err error) {
	var closers []func() error
	cleanup := func() error {
		var first error
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i](); cerr != nil && first == nil {
				first = cerr
			}
		}
		return first
	}
	defer func() {
		if err != nil {
			_ = cleanup()
		}
	}()
	dir, err := os.MkdirTemp("", "sy-bench-failover")
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() error { return os.RemoveAll(dir) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	addrs, err := benchkit.FreeAddrs(6)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: filepath.Join(dir, "sb"), Nodes: 3, SemiSync: o.semiSync, StopWithParent: true,
		TemplateDir: filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid())),
		ListenerRW:  addrs[0], ListenerRO: addrs[1], AdminAddress: addrs[2], EtcdClientAddress: addrs[3], EtcdPeerAddress: addrs[4]})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	closers = append(closers, func() error {
		// A frozen node must be woken before it can be stopped.
		for i := range sb.Nodes {
			if pid := sb.PID(i); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		return sandbox.Down(dctx, sb.Dir, true)
	})
	etcd, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: filepath.Join(dir, "etcd"), ClientAddress: addrs[3], PeerAddress: addrs[4], UnsafeNoFsync: true})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	closers = append(closers, func() error { etcd.Close(); return nil })

	cfg := sb.Config()
	var lab *sandbox.NetLab
	if o.fault == "partition" {
		if lab, err = sandbox.NewNetLab(ctx, sb); err != nil {
			return nil, err
		}
		closers = append(closers, func() error { lab.Teardown(); return nil })
		for i := range cfg.Clusters[0].Nodes {
			cfg.Clusters[0].Nodes[i].Address = lab.Addr(i)
		}
	}
	if o.fault == "partition" || o.fault == "stop" {
		// The proxy's check must be able to see a silent primary within
		// the silence bound at short probe intervals.
		cfg.Proxy.ConnectTimeout = config.Duration(partitionConnectTimeout(o.interval))
	}
	cfg.Etcd.Endpoints = etcd.Endpoints()
	cfg.Probe.Interval = config.Duration(o.interval)
	cfg.Probe.Timeout = config.Duration(probeTimeout(o.interval))
	cfg.Clusters[0].Failover.Mode = config.FailoverAuto
	cfg.Clusters[0].Failover.Hold = &o.hold
	cfg.Clusters[0].Failover.TransactionReplay = o.replay
	if o.parallel >= 0 {
		n := o.parallel // the controller keeps them (and sets them on a repointed replica)
		cfg.Clusters[0].Failover.ReplicaParallelThreads = &n
	}
	cfg.Proxy.Failsafe = &o.failsafe
	if o.durability != "" {
		cfg.Clusters[0].Durability = o.durability
	}
	cfg.Admin.Address = "off"
	cfg.Listeners[0].Address, cfg.Listeners[1].Address = addrs[0], addrs[1]
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	newStore := func() (topo.Store, error) {
		return topo.NewEtcd(topo.EtcdOptions{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Log: log})
	}
	cst, err := newStore()
	if err != nil {
		return nil, err
	}
	closers = append(closers, cst.Close)
	pst, err := newStore()
	if err != nil {
		return nil, err
	}
	closers = append(closers, pst.Close)
	ctl, err := controller.New(controller.Options{Config: cfg, Store: cst, Keys: keys, ID: "bench-ctl", Log: log})
	if err != nil {
		return nil, err
	}
	srv, err := proxy.New(proxy.Options{Config: cfg, ID: "bench-proxy", Log: log})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = ctl.Run(rctx) }()
	go func() { defer wg.Done(); _ = proxy.Follow(rctx, pst, keys, srv) }()
	closers = append(closers, func() error {
		rcancel()
		srv.Close()
		wg.Wait()
		return nil
	})
	var st topo.ClusterState
	if err := benchkit.WaitFor(ctx, 30*time.Second, func() bool {
		_, gerr := topo.GetJSON(ctx, cst, keys.ClusterState("main"), &st)
		return gerr == nil && st.Primary == "node1" && srv.Epochs()["main"] == st.Epoch && st.Node("node2").Serving && st.Node("node3").Serving
	}); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	// With a frozen primary, a client that gives up after a few seconds
	// never sees what the proxy would relay when it wakes: the writers wait
	// a minute, as an application without a read timeout would.
	readTimeout := 5 * time.Second
	if o.fault == "stop" {
		readTimeout = time.Minute
	}
	rw := fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=1s&readTimeout=%s&writeTimeout=5s", sb.AppUser, sb.AppPassword, srv.ListenerAddr("rw"), readTimeout)
	if err := loadgen.Setup(ctx, rw, ""); err != nil {
		return nil, err
	}
	return &stack{sb: sb, store: cst, keys: keys, srv: srv, lab: lab, rw: rw, close: cleanup}, nil
}

func (s *stack) state(ctx context.Context) (topo.ClusterState, error) {
	var st topo.ClusterState
	_, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st)
	return st, err
}

func nodeIndex(name string) int { return map[string]int{"node1": 0, "node2": 1, "node3": 2}[name] }

func runTrial(o options) (tr trial, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	w := newWriters(s.rw, o.writers, o.tx)
	wctx, wcancel := context.WithCancel(ctx)
	w.start(wctx)
	time.Sleep(2 * time.Second)

	killAt := time.Now()
	w.markKill()
	if err := s.sb.KillNode(0); err != nil {
		wcancel()
		w.wait()
		return tr, err
	}
	// Only a write started once the old primary is gone counts (a write in
	// flight at the kill may be acknowledged by it just after).
	first, ok := w.firstAfter(ctx, time.Now(), 60*time.Second)
	if !ok {
		wcancel()
		w.wait()
		return tr, errors.New("no write succeeded within 60s of the kill")
	}
	tr.recovery = first.Sub(killAt)
	time.Sleep(time.Second)
	wcancel()
	w.wait()
	st, err := s.state(ctx)
	if err != nil {
		return tr, err
	}
	tr.newPrimary = st.Primary
	if st.LastFailover != nil {
		tr.failoverMS = st.LastFailover.DurationMS
	}
	missing, err := loadgen.Check(ctx, withDB(s.sb.RootDSN(nodeIndex(st.Primary)), "sbtest"), "", w.acked())
	if err != nil {
		return tr, err
	}
	tr.acked, tr.lost, tr.errors = len(w.acked()), len(missing), w.errors()
	tr.classed, tr.samples = w.classErrors()
	return tr, nil
}

func withDB(dsn, db string) string {
	// RootDSN has the form user:pw@unix(path)/?params.
	for i := 0; i < len(dsn); i++ {
		if dsn[i] == '/' && i > 0 && dsn[i-1] == ')' {
			return dsn[:i+1] + db + dsn[i+1:]
		}
	}
	return dsn
}

// writers insert ledger rows with unique ids through the rw listener and
// remember when each acknowledged one returned. Even-numbered writers run
// autocommit INSERTs; odd-numbered ones (with -tx) run transactions of
// BEGIN; INSERT; UPDATE of the same row; COMMIT. Each writer's state at the
// kill (a statement in flight, a transaction open, neither) classes the
// first error it gets after the kill; every other error counts as "other".
type writers struct {
	dsn string
	n   int
	tx  bool
	wg  sync.WaitGroup

	mu   sync.Mutex
	ids  []int64
	sent []time.Time // when each acknowledged write was sent
	at   []time.Time // when it was acknowledged
	errs int64
	// Per writer: a statement is in flight, a transaction is open; the
	// class taken at the kill (used for its first error after it).
	inflight, inTx, commit []bool
	class                  []errClass
	killed                 bool
	classed                [nClasses]int64 // errors after the kill by class
	sample                 [nClasses]string
}

// errClass classes a client error by the session's state at the kill.
type errClass int

const (
	classInFlight errClass = iota // a statement was in flight at the kill
	classInTx                     // a transaction was open at the kill, its COMMIT not yet sent
	classCommit                   // a transaction's COMMIT was in flight at the kill (outcome unknown)
	classOther                    // everything else: must be 0 with the hold
	nClasses
)

var classNames = [nClasses]string{"in flight", "open transaction", "COMMIT in flight", "other"}

func newWriters(dsn string, n int, tx bool) *writers {
	return &writers{dsn: dsn, n: n, tx: tx, inflight: make([]bool, n), inTx: make([]bool, n), commit: make([]bool, n), class: make([]errClass, n)}
}

// markKill takes every writer's class at the kill.
func (w *writers) markKill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.killed = true
	for i := range w.n {
		switch {
		case w.inTx[i] && w.commit[i]:
			w.class[i] = classCommit
		case w.inTx[i]:
			w.class[i] = classInTx
		case w.inflight[i]:
			w.class[i] = classInFlight
		default:
			w.class[i] = classOther
		}
	}
}

// failed records an error of writer i (w.mu held).
func (w *writers) failed(i int, err error) {
	w.errs++
	if !w.killed {
		return
	}
	c := w.class[i]
	w.class[i] = classOther // later errors of this writer are "other"
	w.classed[c]++
	if w.sample[c] == "" {
		w.sample[c] = err.Error()
	}
}

// set records writer i's state.
func (w *writers) set(i int, inflight, inTx bool) {
	w.mu.Lock()
	w.inflight[i], w.inTx[i] = inflight, inTx
	w.mu.Unlock()
}

func (w *writers) start(ctx context.Context) {
	for i := 0; i < w.n; i++ {
		w.wg.Add(1)
		go func(i int) {
			defer w.wg.Done()
			db, err := sql.Open("mysql", w.dsn)
			if err != nil {
				return
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			for seq := int64(1); ctx.Err() == nil; seq++ {
				id := int64(i+1)*1_000_000_000 + seq
				sent := time.Now()
				var err error
				if w.tx && i%2 == 1 {
					err = w.txWrite(ctx, db, i, id)
				} else {
					w.set(i, true, false)
					_, err = db.ExecContext(ctx, "INSERT INTO ledger (id, server_id) VALUES (?, @@server_id)", id)
				}
				now := time.Now()
				w.mu.Lock()
				w.inflight[i], w.inTx[i], w.commit[i] = false, false, false
				if err == nil {
					w.ids = append(w.ids, id)
					w.sent = append(w.sent, sent)
					w.at = append(w.at, now)
				} else if ctx.Err() == nil {
					w.failed(i, err)
				}
				w.mu.Unlock()
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		}(i)
	}
}

// txWrite runs one ledger transaction for writer i: BEGIN; INSERT; UPDATE
// of the same row; COMMIT (rolled back on any error).
func (w *writers) txWrite(ctx context.Context, db *sql.DB, i int, id int64) error {
	w.set(i, true, false)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	w.set(i, true, true)
	if _, err = tx.ExecContext(ctx, "INSERT INTO ledger (id, server_id) VALUES (?, 0)", id); err == nil {
		_, err = tx.ExecContext(ctx, "UPDATE ledger SET server_id = @@server_id WHERE id = ?", id)
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	w.mu.Lock()
	w.commit[i] = true
	w.mu.Unlock()
	return tx.Commit()
}

// classErrors returns the errors after the kill by class and one message
// of each.
func (w *writers) classErrors() ([nClasses]int64, [nClasses]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.classed, w.sample
}

func (w *writers) wait() { w.wg.Wait() }

// firstAfter waits until a write sent after t was acknowledged and returns
// its acknowledgement time.
func (w *writers) firstAfter(ctx context.Context, t time.Time, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		for i, sent := range w.sent {
			if sent.After(t) {
				a := w.at[i]
				w.mu.Unlock()
				return a, true
			}
		}
		w.mu.Unlock()
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return time.Time{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *writers) acked() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int64(nil), w.ids...)
}

func (w *writers) errors() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

// ackTimes maps every acknowledged id to when its acknowledgement arrived.
func (w *writers) ackTimes() map[int64]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[int64]time.Time, len(w.ids))
	for i, id := range w.ids {
		m[id] = w.at[i]
	}
	return m
}

func durabilityName(o options) string {
	if o.durability == "" {
		return config.DurabilityAsync
	}
	return o.durability
}
