// Command switchover measures planned switchovers on this machine: a 3-node
// MariaDB sandbox, an embedded etcd, one controller and one proxy, all in
// one process tree.
//
// Part "pause": writers insert ledger rows with unique ids through the
// proxy's rw listener (and, when sysbench is installed, sysbench
// oltp_read_write runs through it too, prepared statements on, no error
// tolerated) while the primary is switched over N times (alternating
// node2 and node1). For each switchover it prints how long the controller
// held statements and the longest gap between two acknowledged writes
// around it (the write pause clients saw), then the distribution, the
// client errors (must be 0) and the acknowledged writes missing on the
// final primary (must be 0).
//
// Part "warm": a read-heavy workload (prepared range reads over a table
// that fills most of the buffer pool) runs through the rw listener. The
// candidate is restarted with an empty buffer pool, then promoted twice:
// once as it is (cold) and, after another restart, with `--warm`. For both
// it prints the candidate's warmth at promotion and the read latency on the
// new primary in the seconds right after the switchover.
//
// Usage: go run ./bench/switchover [-part all|pause|warm] [-switchovers 20] [-writers 8] [-sysbench=true] [-parallel-replication 0] [-cpuprofile FILE]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
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
	part        string
	switchovers int
	writers     int
	sysbench    bool
	rows        int
	rangeRows   int
	readers     int
	parallel    int
	verbose     bool
	cpuprofile  string
}

func main() {
	var o options
	flag.StringVar(&o.part, "part", "all", "what to measure: all, pause or warm")
	flag.IntVar(&o.switchovers, "switchovers", 20, "switchovers under load (part pause)")
	flag.IntVar(&o.writers, "writers", 8, "ledger writers through the rw listener (part pause)")
	flag.BoolVar(&o.sysbench, "sysbench", true, "also run sysbench oltp_read_write, 16 threads, through the rw listener (part pause; skipped when sysbench is missing)")
	flag.IntVar(&o.rows, "rows", 200000, "rows of the read table (part warm; about 250 bytes each)")
	flag.IntVar(&o.rangeRows, "range", 100, "rows each read covers (part warm: SELECT SUM(k) ... WHERE id BETWEEN ? AND ?+range-1, the shape of sysbench's sum_ranges)")
	flag.IntVar(&o.readers, "readers", 8, "concurrent readers (part warm)")
	flag.IntVar(&o.parallel, "parallel-replication", 0, "slave_parallel_threads on every node (optimistic mode), set after discovery; 0 leaves the sandbox's single SQL thread to the controller, which gives a replica with none 4")
	flag.BoolVar(&o.verbose, "v", false, "log the controller and proxy (warnings)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of this process for the whole run to this file (the proxy, controller and embedded etcd, and the benchmark's own ledger writers and readers; not the mariadbd nodes or sysbench); read it with go tool pprof")
	flag.Parse()
	_ = mysql.SetLogger(&mysql.NopLogger{})
	if o.switchovers < 1 || o.writers < 1 || o.readers < 1 || o.rows < 1 || o.rangeRows < 1 {
		fmt.Fprintln(os.Stderr, "bench/switchover: -switchovers, -writers, -readers, -rows and -range must be at least 1")
		os.Exit(2)
	}
	handleInterrupt()
	stop, err := startCPUProfile(o.cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/switchover:", err)
		os.Exit(2)
	}
	err = run(o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/switchover:", err)
		os.Exit(1)
	}
}

// startCPUProfile starts a CPU profile written to path ("" for none) and
// returns the function that stops it and says where it is.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	// Ctrl-C: the profile so far is written before the process ends.
	undo := atInterrupt(func() {
		pprof.StopCPUProfile()
		f.Close()
		fmt.Fprintf(os.Stderr, "bench/switchover: CPU profile so far in %s\n", path)
	})
	return func() {
		undo()
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench/switchover: -cpuprofile:", err)
			return
		}
		fmt.Printf("CPU profile: %s (go tool pprof -top %s)\n", path, path)
	}, nil
}

// interrupt holds what Ctrl-C (or SIGTERM) runs before the process exits
// with status 130, the latest registered first: the CPU profile is
// written, the sandbox's servers are stopped and the temp dir removed.
var interrupt struct {
	mu    sync.Mutex
	next  int
	funcs map[int]func()
}

// atInterrupt registers f to run on Ctrl-C; the returned function
// unregisters it (when what f cleans up was cleaned up the normal way).
func atInterrupt(f func()) (undo func()) {
	interrupt.mu.Lock()
	defer interrupt.mu.Unlock()
	if interrupt.funcs == nil {
		interrupt.funcs = map[int]func(){}
	}
	id := interrupt.next
	interrupt.next++
	interrupt.funcs[id] = f
	return func() {
		interrupt.mu.Lock()
		delete(interrupt.funcs, id)
		interrupt.mu.Unlock()
	}
}

// handleInterrupt makes Ctrl-C and SIGTERM run the registered cleanups and
// exit 130. Children (sysbench) in the terminal's process group get the
// Ctrl-C themselves; the mariadbd nodes also stop with their parent.
func handleInterrupt() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench/switchover: %v: stopping\n", s)
		interrupt.mu.Lock()
		ids := make([]int, 0, len(interrupt.funcs))
		for id := range interrupt.funcs {
			ids = append(ids, id)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(ids)))
		for _, id := range ids {
			interrupt.funcs[id]()
		}
		os.Exit(130)
	}()
}

func run(o options) error {
	if err := sandbox.CheckBinaries(); err != nil {
		return err
	}
	if o.part == "all" || o.part == "pause" {
		if err := withStack(o, func(s *stack) error { return pause(s, o) }); err != nil {
			return fmt.Errorf("pause: %w", err)
		}
	}
	if o.part == "all" || o.part == "warm" {
		if err := withStack(o, func(s *stack) error { return warm(s, o) }); err != nil {
			return fmt.Errorf("warm: %w", err)
		}
	}
	return nil
}

// stack is a sandbox with etcd, a controller and a proxy.
type stack struct {
	sb    *sandbox.Cluster
	cfg   *config.Config
	store topo.Store
	keys  topo.Keys
	srv   *proxy.Server
}

func withStack(o options, f func(*stack) error) (err error) {
	dir, err := os.MkdirTemp("", "sy-bench-switchover")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var sbDir string // set once the sandbox is up (under interrupt.mu)
	undo := atInterrupt(func() {
		if sbDir != "" {
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = sandbox.Down(dctx, sbDir, true)
			dcancel()
		}
		os.RemoveAll(dir)
	})
	defer undo()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs, err := benchkit.FreeAddrs(5)
	if err != nil {
		return err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: filepath.Join(dir, "sb"), Nodes: 3, StopWithParent: true,
		TemplateDir: filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid())),
		ListenerRW:  addrs[0], ListenerRO: addrs[1], AdminAddress: addrs[2], EtcdClientAddress: addrs[3], EtcdPeerAddress: addrs[4]})
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	interrupt.mu.Lock()
	sbDir = sb.Dir
	interrupt.mu.Unlock()
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if derr := sandbox.Down(dctx, sb.Dir, true); derr != nil && err == nil {
			err = derr
		}
	}()
	etcd, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: filepath.Join(dir, "etcd"), ClientAddress: addrs[3], PeerAddress: addrs[4]})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()
	cfg := sb.Config()
	cfg.Etcd.Endpoints = etcd.Endpoints()
	cfg.Admin.Address = "off"
	cfg.Listeners[0].Address, cfg.Listeners[1].Address = addrs[0], addrs[1]
	if err := cfg.Validate(); err != nil {
		return err
	}
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	newStore := func() (topo.Store, error) {
		return topo.NewEtcd(topo.EtcdOptions{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Log: log})
	}
	cst, err := newStore()
	if err != nil {
		return err
	}
	defer cst.Close()
	pst, err := newStore()
	if err != nil {
		return err
	}
	defer pst.Close()
	ctl, err := controller.New(controller.Options{Config: cfg, Store: cst, Keys: keys, ID: "bench-ctl", Log: log})
	if err != nil {
		return err
	}
	srv, err := proxy.New(proxy.Options{Config: cfg, ID: "bench-proxy", Log: log})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = ctl.Run(ctx) }()
	go func() { defer wg.Done(); _ = proxy.Follow(ctx, pst, keys, srv) }()
	defer func() {
		cancel()
		srv.Close()
		wg.Wait()
	}()
	s := &stack{sb: sb, cfg: cfg, store: cst, keys: keys, srv: srv}
	if err := s.waitServing(ctx, "node1"); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	if o.parallel > 0 {
		for i := range sb.Nodes {
			root, err := sql.Open("mysql", sb.RootDSN(i))
			if err != nil {
				return err
			}
			for _, q := range []string{"STOP SLAVE", fmt.Sprintf("SET GLOBAL slave_parallel_threads = %d", o.parallel),
				"SET GLOBAL slave_parallel_mode = 'optimistic'", "START SLAVE"} {
				if i == 0 && strings.HasSuffix(q, "SLAVE") {
					continue
				}
				if _, err := root.ExecContext(ctx, q); err != nil {
					root.Close()
					return fmt.Errorf("node%d: %s: %w", i+1, q, err)
				}
			}
			root.Close()
		}
	}
	return f(s)
}

func (s *stack) state(ctx context.Context) (topo.ClusterState, error) {
	var st topo.ClusterState
	_, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st)
	return st, err
}

// waitServing waits until primary is published, the proxy routes by it and
// every other node serves reads.
func (s *stack) waitServing(ctx context.Context, primary string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := s.state(ctx)
		if err == nil && st.Primary == primary && st.Phase == topo.PhaseStable && s.srv.Epochs()["main"] == st.Epoch {
			ok := true
			for _, n := range st.Nodes {
				if n.Name != primary && !n.Serving {
					ok = false
				}
			}
			if ok {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not primary with serving replicas within 30s", primary)
}

func (s *stack) switchover(ctx context.Context, to string, warm bool) (topo.Request, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return controller.RequestSwitchoverWith(sctx, s.store, s.keys, "main", controller.SwitchoverOptions{Target: to, Warm: warm, By: "bench"})
}

func (s *stack) rwDSN(db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?timeout=2s&readTimeout=30s&writeTimeout=30s", s.sb.AppUser, s.sb.AppPassword, s.srv.ListenerAddr("rw"), db)
}

// pause is part "pause".
func pause(s *stack, o options) error {
	ctx := context.Background()
	startLoad := loadAverage()
	fmt.Printf("\n== write pause: %d switchovers under load (%d ledger writers", o.switchovers, o.writers)
	sysbench := o.sysbench
	if _, err := exec.LookPath("sysbench"); err != nil {
		sysbench = false
	}
	if sysbench {
		fmt.Print(" + sysbench oltp_read_write 16 threads, prepared statements")
	}
	repl := "as the sandbox and the controller set it"
	if o.parallel > 0 {
		repl = fmt.Sprintf("slave_parallel_threads=%d optimistic", o.parallel)
	}
	fmt.Printf(") through the rw listener; drain_timeout %s, catchup_timeout %s; replication: %s\n",
		s.cfg.Switchover.DrainTimeout, s.cfg.Switchover.CatchupTimeout, repl)
	rw := s.rwDSN("sbtest")
	if err := loadgen.Setup(ctx, rw, ""); err != nil {
		return err
	}
	host, port, _ := strings.Cut(s.srv.ListenerAddr("rw"), ":")
	sbArgs := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + s.sb.AppUser, "--mysql-password=" + s.sb.AppPassword, "--mysql-db=sbtest",
		"--tables=4", "--table-size=10000", "--rand-type=uniform"}
	if sysbench {
		if out, err := exec.Command("sysbench", append(sbArgs, "prepare")...).CombinedOutput(); err != nil {
			return fmt.Errorf("sysbench prepare: %v\n%s", err, out)
		}
	}
	if err := s.waitServing(ctx, "node1"); err != nil {
		return err
	}
	var threads []string
	for i := range s.sb.Nodes {
		root, err := sql.Open("mysql", s.sb.RootDSN(i))
		if err != nil {
			return err
		}
		var n int
		err = root.QueryRowContext(ctx, "SELECT @@global.slave_parallel_threads").Scan(&n)
		root.Close()
		if err != nil {
			return err
		}
		threads = append(threads, fmt.Sprintf("node%d %d", i+1, n))
	}
	fmt.Printf("slave_parallel_threads at the start: %s\n", strings.Join(threads, ", "))
	w := newWriters(rw, o.writers)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w.start(wctx)
	var sbCmd *exec.Cmd
	var sbOut strings.Builder
	if sysbench {
		sbCmd = exec.Command("sysbench", append(sbArgs, "--threads=16", "--time=3600", "--mysql-ignore-errors=none",
			"--db-ps-mode=auto", "run")...)
		sbCmd.Stdout, sbCmd.Stderr = &sbOut, &sbOut
		if err := sbCmd.Start(); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	type one struct {
		to          string
		start, end  time.Time
		held, total time.Duration
		phases      []topo.PhaseTiming
	}
	var runs []one
	for i := range o.switchovers {
		to := []string{"node2", "node1"}[i%2]
		start := time.Now()
		req, err := s.switchover(ctx, to, false)
		end := time.Now()
		if err != nil {
			wcancel()
			return fmt.Errorf("switchover %d to %s: %w\n%s", i+1, to, err, strings.Join(req.Steps, "\n"))
		}
		runs = append(runs, one{to: to, start: start, end: end, held: heldFor(req), total: end.Sub(start), phases: req.Phases})
		if err := s.waitServing(ctx, to); err != nil {
			return err
		}
		time.Sleep(time.Second)
	}
	time.Sleep(time.Second)
	wcancel()
	w.wait()
	sbErrors := "-"
	if sbCmd != nil {
		_ = sbCmd.Process.Signal(os.Interrupt)
		_ = sbCmd.Wait()
		if strings.Contains(sbOut.String(), "FATAL") {
			sbErrors = "FATAL: " + firstLine(sbOut.String(), "FATAL")
		} else {
			sbErrors = "0"
		}
	}
	var pauses, helds []time.Duration
	for i, r := range runs {
		p := w.longestGap(r.start.Add(-200*time.Millisecond), r.end.Add(500*time.Millisecond))
		pauses, helds = append(pauses, p), append(helds, r.held)
		fmt.Printf("switchover %2d → %s: statements held %4.0f ms, write pause %4.0f ms, switchover request %4.0f ms\n",
			i+1, r.to, ms(r.held), ms(p), ms(r.total))
	}
	st, err := s.state(ctx)
	if err != nil {
		return err
	}
	idx := map[string]int{"node1": 0, "node2": 1, "node3": 2}[st.Primary]
	missing, err := loadgen.Check(ctx, withDB(s.sb.RootDSN(idx), "sbtest"), "", w.acked())
	if err != nil {
		return err
	}
	fmt.Printf("load average at the start %s, at the end %s\n", startLoad, loadAverage())
	fmt.Printf("write pause over %d switchovers: %s\n", len(pauses), dist(pauses))
	fmt.Printf("statements held:                %s\n", dist(helds))
	// Per phase, in the order of the first switchover (repoints summed).
	var order []string
	byPhase := map[string][]time.Duration{}
	for _, r := range runs {
		sum := map[string]time.Duration{}
		for _, p := range r.phases {
			if _, ok := byPhase[p.Phase]; !ok {
				order = append(order, p.Phase)
				byPhase[p.Phase] = nil
			}
			sum[p.Phase] += time.Duration(p.MS * float64(time.Millisecond))
		}
		for ph, d := range sum {
			byPhase[ph] = append(byPhase[ph], d)
		}
	}
	fmt.Println("per phase (prepare … publish-primary hold statements):")
	for _, ph := range order {
		fmt.Printf("  %-16s %s\n", ph, dist(byPhase[ph]))
	}
	fmt.Printf("ledger: %d writes acknowledged, client errors %d, missing on the final primary %d; sysbench errors: %s\n",
		len(w.acked()), w.errors(), len(missing), sbErrors)
	if w.errors() > 0 || len(missing) > 0 {
		return fmt.Errorf("clients saw %d errors, %d acknowledged writes missing (first error: %s)", w.errors(), len(missing), w.firstError())
	}
	return nil
}

// heldFor reads "statements held for X" from the publish step of a
// switchover request.
func heldFor(req topo.Request) time.Duration {
	for _, s := range req.Steps {
		if i := strings.Index(s, "statements held for "); i >= 0 {
			f := strings.Fields(s[i+len("statements held for "):])
			if len(f) > 0 {
				d, _ := time.ParseDuration(strings.TrimRight(f[0], ")"))
				return d
			}
		}
	}
	return 0
}

func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// warm is part "warm".
func warm(s *stack, o options) error {
	ctx := context.Background()
	fmt.Printf("\n== cold vs warmed candidate: read latency on the new primary right after the switchover (%d rows, %d readers of prepared range reads of %d rows through rw; innodb_buffer_pool_size 64M)\n",
		o.rows, o.readers, o.rangeRows)
	rw := s.rwDSN("sbtest")
	db, err := sql.Open("mysql", rw)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE TABLE warm_t (id INT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60)) ENGINE=InnoDB",
		fmt.Sprintf("INSERT INTO warm_t SELECT seq, seq, REPEAT('c', 120), REPEAT('p', 60) FROM seq_1_to_%d", o.rows),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if err := s.waitServing(ctx, "node1"); err != nil {
		return err
	}
	r := newReaders(rw, o.readers, o.rows, o.rangeRows)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	r.start(rctx)
	// Let the primary warm up and the proxy publish its hot read set.
	time.Sleep(8 * time.Second)
	measure := func(label string, warmIt bool) error {
		if err := s.coldRestart(ctx, 1); err != nil {
			return err
		}
		if err := s.waitServing(ctx, "node1"); err != nil {
			return err
		}
		before, err := controller.Warmth(ctx, s.cfg, &s.cfg.Clusters[0], "node2", "node1")
		if err != nil {
			return err
		}
		t0 := time.Now()
		req, err := s.switchover(ctx, "node2", warmIt)
		if err != nil {
			return fmt.Errorf("switchover to node2: %w\n%s", err, strings.Join(req.Steps, "\n"))
		}
		done := time.Now()
		time.Sleep(3 * time.Second)
		w := req.Warmth
		fmt.Printf("%-8s candidate node2 warmth %3.0f%% before", label, 100*before.Fraction)
		if w != nil {
			fmt.Printf(", %3.0f%% at promotion (%d of %d data pages)", 100*w.Fraction, w.DataPages, w.PrimaryDataPages)
		}
		fmt.Printf("; switchover took %s\n", done.Sub(t0).Round(time.Millisecond))
		for _, st := range req.Steps {
			if strings.HasPrefix(st, "warmth") {
				fmt.Printf("         %s\n", st)
			}
		}
		for _, win := range []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second} {
			fmt.Printf("         reads on node2 in the first %-5s %s\n", win.String()+":", r.window(done, done.Add(win)))
		}
		// Back to node1 (warm) for the next trial.
		if _, err := s.switchover(ctx, "node1", false); err != nil {
			return err
		}
		return s.waitServing(ctx, "node1")
	}
	steady := r.window(time.Now().Add(-3*time.Second), time.Now())
	fmt.Printf("steady   reads on warm node1 before any switchover: %s\n", steady)
	if err := measure("cold", false); err != nil {
		return err
	}
	if err := measure("warmed", true); err != nil {
		return err
	}
	rcancel()
	r.wait()
	if n := r.errors(); n > 0 {
		return fmt.Errorf("readers saw %d errors", n)
	}
	fmt.Println("readers: 0 errors")
	return nil
}

// coldRestart restarts node i with an empty buffer pool: no dump at
// shutdown, and the dump file removed so nothing is loaded at startup.
func (s *stack) coldRestart(ctx context.Context, i int) error {
	root, err := sql.Open("mysql", s.sb.RootDSN(i))
	if err != nil {
		return err
	}
	_, err = root.ExecContext(ctx, "SET GLOBAL innodb_buffer_pool_dump_at_shutdown = OFF")
	root.Close()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.sb.StopNode(sctx, i); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.sb.Nodes[i].DataDir, "ib_buffer_pool")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.sb.StartNode(sctx, i)
}

// readers run prepared range reads and record each one's latency.
type readers struct {
	dsn            string
	n, rows, width int
	wg             sync.WaitGroup
	mu             sync.Mutex
	at             []time.Time
	lat            []time.Duration
	errs           int
}

func newReaders(dsn string, n, rows, width int) *readers {
	return &readers{dsn: dsn, n: n, rows: rows, width: max(1, width)}
}

func (r *readers) start(ctx context.Context) {
	for range r.n {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			db, err := sql.Open("mysql", r.dsn)
			if err != nil {
				return
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			stmt, err := db.PrepareContext(ctx, "SELECT SUM(k) FROM warm_t WHERE id BETWEEN ? AND ?")
			if err != nil {
				return
			}
			defer stmt.Close()
			var sum sql.NullInt64
			for ctx.Err() == nil {
				start := time.Now()
				id := 1 + rand.IntN(r.rows-r.width+1)
				err := stmt.QueryRowContext(ctx, id, id+r.width-1).Scan(&sum)
				d := time.Since(start)
				r.mu.Lock()
				if err != nil {
					if ctx.Err() == nil {
						r.errs++
					}
				} else {
					r.at = append(r.at, start)
					r.lat = append(r.lat, d)
				}
				r.mu.Unlock()
			}
		}()
	}
}

func (r *readers) wait() { r.wg.Wait() }

func (r *readers) errors() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs
}

// window summarises reads started in [from, to).
func (r *readers) window(from, to time.Time) string {
	r.mu.Lock()
	var ds []time.Duration
	for i, t := range r.at {
		if !t.Before(from) && t.Before(to) {
			ds = append(ds, r.lat[i])
		}
	}
	r.mu.Unlock()
	if len(ds) == 0 {
		return "no reads"
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	secs := to.Sub(from).Seconds()
	return fmt.Sprintf("%6.0f reads/s, mean %5.2f ms, p50 %5.2f ms, p99 %6.2f ms, max %6.1f ms",
		float64(len(ds))/secs, ms(sum)/float64(len(ds)), ms(pct(ds, 50)), ms(pct(ds, 99)), ms(ds[len(ds)-1]))
}

// writers insert ledger rows with unique ids and remember when each
// acknowledged one returned.
type writers struct {
	dsn string
	n   int
	wg  sync.WaitGroup

	mu    sync.Mutex
	ids   []int64
	at    []time.Time
	errs  int64
	first string
}

func newWriters(dsn string, n int) *writers { return &writers{dsn: dsn, n: n} }

func (w *writers) start(ctx context.Context) {
	db, err := sql.Open("mysql", w.dsn)
	if err != nil {
		return
	}
	db.SetMaxOpenConns(w.n)
	db.SetMaxIdleConns(w.n)
	for i := 0; i < w.n; i++ {
		w.wg.Add(1)
		go func(i int) {
			defer w.wg.Done()
			for seq := int64(1); ctx.Err() == nil; seq++ {
				id := int64(i+1)*1_000_000_000 + seq
				_, err := db.ExecContext(ctx, "INSERT INTO ledger (id, server_id) VALUES (?, @@server_id)", id)
				now := time.Now()
				w.mu.Lock()
				if err == nil {
					w.ids = append(w.ids, id)
					w.at = append(w.at, now)
				} else if ctx.Err() == nil {
					w.errs++
					if w.first == "" {
						w.first = err.Error()
					}
				}
				w.mu.Unlock()
			}
		}(i)
	}
	go func() { w.wg.Wait(); db.Close() }()
}

func (w *writers) wait() { w.wg.Wait() }

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

func (w *writers) firstError() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// longestGap is the longest time between two consecutive acknowledged
// writes (any writer) within [from, to].
func (w *writers) longestGap(from, to time.Time) time.Duration {
	w.mu.Lock()
	var ts []time.Time
	for _, t := range w.at {
		if !t.Before(from) && !t.After(to) {
			ts = append(ts, t)
		}
	}
	w.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	var longest time.Duration
	prev := from
	for _, t := range ts {
		longest = max(longest, t.Sub(prev))
		prev = t
	}
	return max(longest, to.Sub(prev))
}

func dist(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("min %4.0f ms, median %4.0f ms, p90 %4.0f ms, max %4.0f ms", ms(s[0]), ms(pct(s, 50)), ms(pct(s, 90)), ms(s[len(s)-1]))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the nearest-rank percentile of sorted values.
func pct(sorted []time.Duration, p int) time.Duration {
	k := (p*len(sorted) + 99) / 100
	if k < 1 {
		k = 1
	}
	return sorted[k-1]
}

func withDB(dsn, db string) string {
	for i := 0; i < len(dsn); i++ {
		if dsn[i] == '/' && i > 0 && dsn[i-1] == ')' {
			return dsn[:i+1] + db + dsn[i+1:]
		}
	}
	return dsn
}

// loadAverage returns the machine's 1, 5 and 15 minute load averages as
// /proc/loadavg gives them ("?" where it cannot be read): the state of the
// machine the figures were measured on.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
