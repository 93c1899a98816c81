// Command txpool measures transaction-level multiplexing on this machine: a
// 3-node MariaDB sandbox, an embedded etcd, one controller and one proxy
// whose rw listener has pooling: transaction, in one process tree.
//
// N clients, each on its own connection to the proxy, run short
// transactions (BEGIN, insert a ledger row, COMMIT) for the given time,
// with at most -limit backend connections per node
// (proxy.max_connections_per_backend); with -switchover the primary is
// switched over to node2 halfway. It prints the transactions committed,
// the client errors (must be 0), the committed rows missing on the final
// primary (must be 0), the largest number of application connections and
// of Threads_connected seen on each primary (sampled every 50 ms), the
// backend connections the proxy opened, the transaction latency and the
// longest gap between two commits. The replicas apply in parallel
// (slave_parallel_threads 4, optimistic) so that the switchover's catch-up
// keeps up with 2,000 writers on two cores.
//
// Each client pauses -think between two transactions (many mostly idle
// clients, the case multiplexing is for); -think 0 runs them back to back.
//
// Usage: go run ./bench/txpool [-clients 2000] [-limit 64] [-duration 20s] [-think 1s] [-switchover=true] [-pooling transaction]
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/bench/internal/benchkit"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

type options struct {
	clients    int
	limit      int
	duration   time.Duration
	switchover bool
	pooling    string
	think      time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 2000, "client connections, one goroutine each")
	flag.IntVar(&o.limit, "limit", 64, "proxy.max_connections_per_backend")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long the clients run")
	flag.BoolVar(&o.switchover, "switchover", true, "switch the primary over to node2 halfway")
	flag.StringVar(&o.pooling, "pooling", config.PoolingTransaction, "the rw listener's pooling (session or transaction)")
	flag.DurationVar(&o.think, "think", time.Second, "each client's pause between two transactions (0: back to back, which saturates the primary and leaves the replicas far behind)")
	flag.Parse()
	_ = mysql.SetLogger(&mysql.NopLogger{})
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/txpool:", err)
		os.Exit(1)
	}
}

func run(o options) (err error) {
	if err := sandbox.CheckBinaries(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sy-bench-txpool")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
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
	for i := range cfg.Listeners {
		cfg.Listeners[i].Pooling = o.pooling
	}
	cfg.Proxy.MaxConnectionsPerBackend = o.limit
	// 2,000 writers outrun a replica's single SQL thread on two cores:
	// give the catch-up room (held statements wait for it) and the
	// replicas parallel appliers, as bench/switchover -parallel-replication.
	cfg.Switchover.CatchupTimeout = config.Duration(15 * time.Second)
	cfg.Switchover.MaxHold = config.Duration(20 * time.Second)
	cfg.Switchover.MaxDuration = config.Duration(30 * time.Second)
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
	reg := prometheus.NewRegistry()
	srv, err := proxy.New(proxy.Options{Config: cfg, ID: "bench-proxy", Log: log, Registry: reg})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); _ = ctl.Run(ctx) }()
	go func() { defer bg.Done(); _ = proxy.Follow(ctx, pst, keys, srv) }()
	defer func() {
		cancel()
		srv.Close()
		bg.Wait()
	}()
	if err := waitPrimary(ctx, cst, keys, srv, "node1"); err != nil {
		return err
	}
	roots := make([]*sql.DB, 2)
	for i := range roots {
		if roots[i], err = sql.Open("mysql", sb.RootDSN(i)); err != nil {
			return err
		}
		roots[i].SetMaxOpenConns(2)
		defer roots[i].Close()
	}
	for i := range sb.Nodes {
		root, err := sql.Open("mysql", sb.RootDSN(i))
		if err != nil {
			return err
		}
		for _, q := range []string{"STOP SLAVE", "SET GLOBAL slave_parallel_threads = 4", "SET GLOBAL slave_parallel_mode = 'optimistic'", "START SLAVE"} {
			if i == 0 && (q == "STOP SLAVE" || q == "START SLAVE") {
				continue
			}
			if _, err := root.Exec(q); err != nil {
				root.Close()
				return fmt.Errorf("node%d: %s: %w", i+1, q, err)
			}
		}
		root.Close()
	}
	if _, err := roots[0].Exec("CREATE TABLE sbtest.txpool_ledger (client INT, n INT, PRIMARY KEY (client, n))"); err != nil {
		return err
	}
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=10s&readTimeout=60s&writeTimeout=60s", sb.AppUser, sb.AppPassword, srv.ListenerAddr("rw"))
	fmt.Printf("== %d clients, short transactions (%s apart) through a %s-pooled rw listener, proxy.max_connections_per_backend %d, %s",
		o.clients, o.think, o.pooling, o.limit, o.duration)
	if o.switchover {
		fmt.Print(", switchover to node2 halfway")
	}
	fmt.Println()
	conns := make([]*sql.Conn, o.clients)
	loginStart := time.Now()
	for i := range conns {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		db.SetMaxOpenConns(1)
		defer db.Close()
		if conns[i], err = db.Conn(ctx); err != nil {
			return fmt.Errorf("client %d login: %w", i, err)
		}
	}
	fmt.Printf("logins: %d in %s\n", o.clients, time.Since(loginStart).Round(time.Millisecond))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var commits, failures atomic.Int64
	var firstErr atomic.Value
	var lastCommit atomic.Int64
	var gapMu sync.Mutex
	var maxGap time.Duration
	acked := make([][]int, o.clients)
	lat := make([][]time.Duration, o.clients)
	start := time.Now()
	lastCommit.Store(start.UnixNano())
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				tx, err := c.BeginTx(ctx, nil)
				if err == nil {
					_, err = tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO txpool_ledger VALUES (%d, %d)", i, n))
					if err == nil {
						err = tx.Commit()
					} else {
						_ = tx.Rollback()
					}
				}
				now := time.Now()
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("client %d transaction %d: %w", i, n, err))
					time.Sleep(100 * time.Millisecond)
					continue
				}
				acked[i] = append(acked[i], n)
				lat[i] = append(lat[i], now.Sub(t0))
				if o.think > 0 {
					select {
					case <-stop:
					case <-time.After(o.think):
					}
				}
				commits.Add(1)
				prev := time.Unix(0, lastCommit.Swap(now.UnixNano()))
				if g := now.Sub(prev); g > 0 {
					gapMu.Lock()
					maxGap = max(maxGap, g)
					gapMu.Unlock()
				}
			}
		}()
	}
	maxApp, maxThreads := make([]int, 2), make([]int, 2)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for i, r := range roots {
				var name string
				var v int
				if r.QueryRow("SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &v) == nil {
					maxThreads[i] = max(maxThreads[i], v)
				}
				if r.QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE user = ?", sb.AppUser).Scan(&v) == nil {
					maxApp[i] = max(maxApp[i], v)
				}
			}
		}
	}()
	var switched time.Duration
	if o.switchover {
		time.Sleep(o.duration / 2)
		t0 := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
		_, serr := controller.RequestSwitchoverWith(sctx, cst, keys, "main", controller.SwitchoverOptions{Target: "node2", By: "bench"})
		scancel()
		switched = time.Since(t0)
		if serr != nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("switchover: %w", serr)
		}
		time.Sleep(time.Until(start.Add(o.duration)))
	} else {
		time.Sleep(o.duration)
	}
	close(stop)
	wg.Wait()
	<-sampled
	elapsed := time.Since(start)

	final := roots[0]
	if o.switchover {
		final = roots[1]
	}
	present := map[[2]int]bool{}
	rs, err := final.Query("SELECT client, n FROM sbtest.txpool_ledger")
	if err != nil {
		return err
	}
	for rs.Next() {
		var c, n int
		if err := rs.Scan(&c, &n); err != nil {
			return err
		}
		present[[2]int{c, n}] = true
	}
	rs.Close()
	missing := 0
	var all []time.Duration
	for i, ns := range acked {
		for _, n := range ns {
			if !present[[2]int{i, n}] {
				missing++
			}
		}
		all = append(all, lat[i]...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[int(p*float64(len(all)-1))].Round(100 * time.Microsecond)
	}
	fmt.Printf("committed: %d transactions in %s (%.0f/s); client errors: %d; committed rows missing on the final primary: %d\n",
		commits.Load(), elapsed.Round(time.Millisecond), float64(commits.Load())/elapsed.Seconds(), failures.Load(), missing)
	if e := firstErr.Load(); e != nil {
		fmt.Printf("first error: %v\n", e)
	}
	fmt.Printf("transaction latency: p50 %s, p99 %s, max %s; longest gap between two commits: %s\n", q(0.5), q(0.99), q(1), maxGap.Round(time.Millisecond))
	if o.switchover {
		fmt.Printf("switchover: %s\n", switched.Round(time.Millisecond))
	}
	fmt.Printf("application connections at most: node1 %d, node2 %d; Threads_connected at most: node1 %d, node2 %d\n",
		maxApp[0], maxApp[1], maxThreads[0], maxThreads[1])
	fmt.Printf("backend connections opened by the proxy: %s\n", metricByNode(reg, "switchyard_backend_pool_connects_total"))
	fmt.Printf("pool checkouts (same/clean/reset): %s\n", checkouts(reg))
	return nil
}

// metricByNode formats a counter's value per node label.
func metricByNode(reg *prometheus.Registry, name string) string {
	mfs, err := reg.Gather()
	if err != nil {
		return err.Error()
	}
	out := ""
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "node" {
					out += fmt.Sprintf("%s %.0f ", lp.GetValue(), m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

func checkouts(reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		return err.Error()
	}
	sum := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_backend_pool_checkouts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "kind" {
					sum[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return fmt.Sprintf("%.0f/%.0f/%.0f", sum["same"], sum["clean"], sum["reset"])
}

func waitPrimary(ctx context.Context, store topo.Store, keys topo.Keys, srv *proxy.Server, primary string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var st topo.ClusterState
		if _, err := topo.GetJSON(ctx, store, keys.ClusterState("main"), &st); err == nil && st.Primary == primary &&
			st.Phase == topo.PhaseStable && srv.Epochs()["main"] == st.Epoch {
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
