// Command failsafe measures a topology-store outage under load: a 3-node
// MariaDB sandbox (semi-sync AFTER_SYNC), a 3-member etcd cluster of real
// etcd processes (the etcd binary, Debian package etcd-server), one
// controller in failover.mode auto and two proxies, each role with its own
// etcd client; 4 ledger writers and 2 readers run through each proxy. Two
// etcd members are killed (SIGKILL) for -outage and restarted. It prints,
// per trial: when each proxy entered failsafe, the client errors, the
// acknowledged writes missing from the primary, the most nodes answering
// read_only=OFF at one 100 ms sample, whether the primary or epoch changed,
// and how long after quorum returned the proxies were registered again and
// the controller published again (internal/topo/FAILSAFE.md).
//
// -failsafe=false runs the same outage with proxy.failsafe off (proxies
// refuse writes once their registration is lost), for comparison.
//
// Usage: go run ./bench/failsafe [-trials 1] [-outage 60s] [-interval 1s] [-failsafe=false] [-v]
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
	"os/exec"
	"path/filepath"
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
	trials   int
	outage   time.Duration
	interval time.Duration
	verbose  bool
	failsafe bool
}

func main() {
	var o options
	flag.IntVar(&o.trials, "trials", 1, "number of outages, each on a fresh stack")
	flag.DurationVar(&o.outage, "outage", 60*time.Second, "how long the etcd cluster stays without quorum")
	flag.DurationVar(&o.interval, "interval", time.Second, "probe.interval")
	flag.BoolVar(&o.verbose, "v", false, "log warnings of every role to stderr")
	flag.BoolVar(&o.failsafe, "failsafe", true, "proxy.failsafe (false: a proxy without its registration refuses writes, for comparison)")
	flag.Parse()
	if o.trials < 1 || o.outage <= 0 || o.interval <= 0 {
		fmt.Fprintln(os.Stderr, "failsafe: -trials, -outage and -interval must be positive")
		os.Exit(2)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		fmt.Fprintln(os.Stderr, "failsafe: the etcd binary is needed (Debian: apt-get install -y etcd-server etcd-client)")
		os.Exit(1)
	}
	fmt.Printf("store outage: etcd 3 members, 2 killed for %s; 2 proxies × (4 writers + 2 readers); semi-sync; probe interval %s; proxy.failsafe %v\n", o.outage, o.interval, o.failsafe)
	failed := false
	for i := range o.trials {
		line, err := trial(o, bin)
		if err != nil {
			fmt.Printf("trial %d: %v\n", i+1, err)
			failed = true
			continue
		}
		fmt.Printf("trial %d: %s\n", i+1, line)
	}
	if failed {
		os.Exit(1)
	}
}

func trial(o options, bin string) (string, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sy-bench-failsafe")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	addrs, err := benchkit.FreeAddrs(11)
	if err != nil {
		return "", err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: filepath.Join(dir, "sb"), Nodes: 3, SemiSync: true, StopWithParent: true,
		TemplateDir: filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid())),
		ListenerRW:  addrs[0], ListenerRO: addrs[1], AdminAddress: addrs[2], EtcdClientAddress: addrs[3], EtcdPeerAddress: addrs[4]})
	if err != nil {
		return "", fmt.Errorf("sandbox: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sandbox.Down(dctx, sb.Dir, true)
	}()
	ec := newEtcdCluster(bin, dir, addrs[5:11])
	defer ec.killAll()
	if err := ec.startAll(); err != nil {
		return "", err
	}

	cfg := sb.Config()
	cfg.Etcd.Endpoints = ec.endpoints()
	cfg.Probe.Interval = config.Duration(o.interval)
	cfg.Probe.Timeout = config.Duration(min(500*time.Millisecond, o.interval*4/5))
	cfg.Clusters[0].Failover.Mode = config.FailoverAuto
	cfg.Proxy.Failsafe = &o.failsafe
	cfg.Admin.Address = "off"
	cfg.Listeners[0].Address, cfg.Listeners[1].Address = "127.0.0.1:0", "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		return "", err
	}
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	newStore := func() (topo.Store, error) {
		return topo.NewEtcd(topo.EtcdOptions{Endpoints: ec.endpoints(), DialTimeout: 5 * time.Second, Log: log})
	}
	rctx, rcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer rcancel()
	cst, err := newStore()
	if err != nil {
		return "", err
	}
	defer cst.Close()
	ctl, err := controller.New(controller.Options{Config: cfg, Store: cst, Keys: keys, ID: "bench-ctl", Log: log})
	if err != nil {
		return "", err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = ctl.Run(rctx) }()
	var proxies []*proxy.Server
	for i := range 2 {
		pcfg := *cfg
		pcfg.Listeners = append([]config.Listener(nil), cfg.Listeners...)
		srv, err := proxy.New(proxy.Options{Config: &pcfg, ID: fmt.Sprintf("bench-proxy-%d", i+1), Log: log})
		if err != nil {
			return "", err
		}
		if err := srv.Start(); err != nil {
			return "", err
		}
		defer srv.Close()
		pst, err := newStore()
		if err != nil {
			return "", err
		}
		defer pst.Close()
		wg.Add(1)
		go func() { defer wg.Done(); _ = proxy.Follow(rctx, pst, keys, srv) }()
		proxies = append(proxies, srv)
	}
	var before topo.ClusterState
	if err := waitFor(30*time.Second, func() bool {
		_, gerr := topo.GetJSON(ctx, cst, keys.ClusterState("main"), &before)
		return gerr == nil && before.Primary == "node1" && proxies[0].Epochs()["main"] == before.Epoch &&
			proxies[1].Epochs()["main"] == before.Epoch && before.Node("node2").Serving && before.Node("node3").Serving
	}); err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	dsn := func(p *proxy.Server, l string) string {
		return fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=1s&readTimeout=10s&writeTimeout=10s", sb.AppUser, sb.AppPassword, p.ListenerAddr(l))
	}
	if err := loadgen.Setup(ctx, dsn(proxies[0], "rw"), ""); err != nil {
		return "", err
	}
	watch := newWritableWatch(sb)
	defer watch.stop()
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	results := make([]chan *loadgen.Result, len(proxies))
	for i, p := range proxies {
		results[i] = make(chan *loadgen.Result, 1)
		go func() {
			r, err := loadgen.Run(lctx, loadgen.Options{RW: dsn(p, "rw"), RO: dsn(p, "ro"), Writers: 4, Readers: 2,
				Interval: 5 * time.Millisecond, IDBase: int64(i+1) * 100_000_000_000})
			if err != nil {
				fmt.Fprintln(os.Stderr, "loadgen:", err)
			}
			results[i] <- r
		}()
	}
	time.Sleep(2 * time.Second)
	ec.kill(1)
	ec.kill(2)
	lost := time.Now()
	entered := make([]time.Duration, len(proxies))
	for time.Since(lost) < o.outage {
		for i, p := range proxies {
			if fs, ok := p.Failsafe()["main"]; ok && entered[i] == 0 && fs.Until.IsZero() {
				entered[i] = time.Since(lost)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	stillIn := 0
	for _, p := range proxies {
		if fs, ok := p.Failsafe()["main"]; ok && fs.Until.IsZero() {
			stillIn++
		}
	}
	if err := ec.start(1); err != nil {
		return "", err
	}
	if err := ec.start(2); err != nil {
		return "", err
	}
	back := time.Now()
	var registered, leading time.Duration
	err = waitFor(60*time.Second, func() bool {
		if registered == 0 && proxies[0].WritesFenced() == "" && proxies[1].WritesFenced() == "" {
			registered = time.Since(back)
		}
		if leading == 0 {
			var st topo.ClusterState
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			_, gerr := topo.GetJSON(gctx, cst, keys.ClusterState("main"), &st)
			cancel()
			if gerr == nil && st.UpdatedAt.After(back) {
				leading = time.Since(back)
			}
		}
		return registered > 0 && leading > 0
	})
	if err != nil {
		return "", fmt.Errorf("after quorum returned: registered %s, leading %s: %w", registered, leading, err)
	}
	time.Sleep(2 * time.Second)
	lcancel()
	var writes, errs, acked, missing int64
	var pause time.Duration
	for i := range proxies {
		r := <-results[i]
		if r == nil {
			return "", errors.New("a load run returned no result")
		}
		writes += r.Writes
		errs += r.Errors()
		if r.Errors() > 0 {
			fmt.Printf("  proxy-%d errors by MySQL error number %v; first: %s\n", i+1, r.ErrorsByCode, strings.Join(r.FirstErrors, " | "))
		}
		acked += int64(len(r.Acked))
		pause = max(pause, r.LongestWritePause)
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		m, err := loadgen.Check(cctx, withDB(sb.RootDSN(0), "sbtest", 0), "", r.Acked)
		cancel()
		if err != nil {
			return "", err
		}
		missing += int64(len(m))
	}
	samples, most := watch.stop()
	var after topo.ClusterState
	if _, err := topo.GetJSON(ctx, cst, keys.ClusterState("main"), &after); err != nil {
		return "", err
	}
	changed := "unchanged"
	if after.Primary != before.Primary || after.Epoch != before.Epoch {
		changed = fmt.Sprintf("CHANGED to %s epoch %d", after.Primary, after.Epoch)
	}
	return fmt.Sprintf("failsafe entered after %s / %s (registration TTL %s), %d of 2 proxies still in failsafe at the end; "+
		"%d writes, %d client errors, %d acknowledged, %d missing, longest write pause %s; at most %d writable node(s) in %d samples; primary %s; "+
		"after quorum returned: proxies registered in %s, controller publishing in %s",
		entered[0].Round(100*time.Millisecond), entered[1].Round(100*time.Millisecond), proxy.RegistrationTTL, stillIn,
		writes, errs, acked, missing, pause.Round(time.Millisecond), most, samples, changed,
		registered.Round(10*time.Millisecond), leading.Round(10*time.Millisecond)), nil
}

// withDB returns dsn with database db and, when timeout > 0, that connect
// and I/O timeout.
func withDB(dsn, db string, timeout time.Duration) string {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return dsn
	}
	c.DBName = db
	if timeout > 0 {
		c.Timeout, c.ReadTimeout, c.WriteTimeout = timeout, timeout, timeout
	}
	return c.FormatDSN()
}

func waitFor(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// etcdCluster is 3 etcd processes on loopback, killed and started by pid.
type etcdCluster struct {
	bin, dir, initial string
	client, peer      []string
	cmds              []*exec.Cmd
	exited            []chan struct{}
}

func newEtcdCluster(bin, dir string, addrs []string) *etcdCluster {
	c := &etcdCluster{bin: bin, dir: dir}
	var initial []string
	for i := range 3 {
		c.client = append(c.client, addrs[2*i])
		c.peer = append(c.peer, addrs[2*i+1])
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i+1, addrs[2*i+1]))
	}
	c.initial = strings.Join(initial, ",")
	c.cmds, c.exited = make([]*exec.Cmd, 3), make([]chan struct{}, 3)
	return c
}

func (c *etcdCluster) endpoints() []string {
	out := make([]string, len(c.client))
	for i, a := range c.client {
		out[i] = "http://" + a
	}
	return out
}

func (c *etcdCluster) startAll() error {
	for i := range c.cmds {
		if err := c.start(i); err != nil {
			return err
		}
	}
	cli, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: c.endpoints(), DialTimeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("etcd cluster: %w", err)
	}
	return cli.Close()
}

func (c *etcdCluster) start(i int) error {
	name := fmt.Sprintf("m%d", i+1)
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "--name", name, "--data-dir", filepath.Join(c.dir, name),
		"--listen-client-urls", "http://"+c.client[i], "--advertise-client-urls", "http://"+c.client[i],
		"--listen-peer-urls", "http://"+c.peer[i], "--initial-advertise-peer-urls", "http://"+c.peer[i],
		"--initial-cluster", c.initial, "--initial-cluster-state", "new", "--initial-cluster-token", "switchyard-bench",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start etcd %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	c.cmds[i], c.exited[i] = cmd, done
	return nil
}

func (c *etcdCluster) kill(i int) {
	if c.cmds[i] == nil {
		return
	}
	_ = syscall.Kill(c.cmds[i].Process.Pid, syscall.SIGKILL)
	<-c.exited[i]
	c.cmds[i] = nil
}

func (c *etcdCluster) killAll() {
	for i := range c.cmds {
		c.kill(i)
	}
}

// writableWatch counts the nodes answering read_only=OFF (as the
// application user) every 100 ms.
type writableWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples int
	most    int
}

func newWritableWatch(sb *sandbox.Cluster) *writableWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writableWatch{cancel: cancel, done: make(chan struct{})}
	dbs := make([]*sql.DB, len(sb.Nodes))
	for i := range dbs {
		dbs[i], _ = sql.Open("mysql", withDB(sb.DSN(i, sb.AppUser, sb.AppPassword, "sbtest"), "sbtest", 300*time.Millisecond))
		dbs[i].SetMaxOpenConns(1)
	}
	go func() {
		defer close(w.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			n := 0
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, db := range dbs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					qctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					defer cancel()
					var ro int
					if db.QueryRowContext(qctx, "SELECT @@global.read_only").Scan(&ro) == nil && ro == 0 {
						mu.Lock()
						n++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if ctx.Err() == nil {
				w.samples++
				w.most = max(w.most, n)
			}
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
		for _, db := range dbs {
			db.Close()
		}
	}()
	return w
}

func (w *writableWatch) stop() (samples, most int) {
	w.cancel()
	<-w.done
	return w.samples, w.most
}
