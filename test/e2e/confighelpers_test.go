package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/status"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// fleet is a sandbox, an etcd, one controller and several proxies running
// in-process, each following the config revisions in etcd through
// configstore.Follow, the way `switchyard up` wires them.
type fleet struct {
	t         *testing.T
	sb        *sandbox.Cluster
	store     topo.Store
	keys      topo.Keys
	endpoints []string
	cfg       *config.Config // revision 1, as stored (the addresses of proxy 0)
	ctrl      *follower
	proxies   []*fleetProxy
	dir       string
}

// follower is one consumer with its config follower and metrics registry.
type follower struct {
	id  string
	f   *configstore.Follower
	reg *prometheus.Registry
}

// fleetProxy is one in-process proxy with its own listener addresses.
type fleetProxy struct {
	follower
	srv   *proxy.Server
	addrs map[string]string // listener name → address
}

// tenantListeners is the number of replica listeners added to rw and ro, so
// the config has ten listeners: with two nodes, twenty routes.
const tenantListeners = 8

// startFleet starts the sandbox (nodes mariadbd processes), etcd, and a
// controller and nProxies proxies that manage nodes node1..nManaged only.
func startFleet(t *testing.T, nodes, nManaged, nProxies int) *fleet {
	t.Helper()
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: nodes})
	endpoints := topotest.StartEtcd(t)
	store := topotest.Connect(t, endpoints)

	cfg := sb.Config()
	cfg.Etcd.Endpoints = endpoints
	cfg.Probe.Interval = config.Duration(probeInterval)
	cfg.Probe.Timeout = config.Duration(200 * time.Millisecond)
	cfg.Admin.Address = "off"
	cfg.Clusters[0].Nodes = cfg.Clusters[0].Nodes[:nManaged]
	cfg.Listeners = []config.Listener{
		{Name: "rw", Cluster: sandbox.ClusterName, Role: config.RolePrimary},
		{Name: "ro", Cluster: sandbox.ClusterName, Role: config.RoleReplica},
	}
	for i := range tenantListeners {
		cfg.Listeners = append(cfg.Listeners, config.Listener{Name: fmt.Sprintf("tenant%d", i), Cluster: sandbox.ClusterName, Role: config.RoleReplica})
	}
	fl := &fleet{t: t, sb: sb, store: store, keys: topo.Keys{Prefix: cfg.Etcd.Prefix}, endpoints: endpoints, dir: t.TempDir()}
	// The stored config names addresses of its own; every proxy binds its
	// own set and serves the shared config on it (see OnApply below).
	fl.cfg = withAddrs(cfg, listenerAddrs(t, cfg))
	if err := fl.cfg.Validate(); err != nil {
		t.Fatalf("fleet config does not validate: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := configstore.Bootstrap(ctx, store, fl.keys, fl.cfg, "e2e@test")
	if err != nil {
		t.Fatal(err)
	}
	rev := res.Revision.Rev

	log := topotest.Logger(t)
	var wg sync.WaitGroup
	ctrl, err := controller.New(controller.Options{Config: fl.cfg, Store: store, Keys: fl.keys, ID: "ctrl-1", Log: log.With("role", "controller")})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); ctrl.Run(ctx) }()
	fl.ctrl = &follower{id: "ctrl-1", reg: prometheus.NewRegistry()}
	fl.ctrl.f, err = configstore.Follow(ctx, store, fl.keys, configstore.FollowOptions{
		Name: "controller", ID: "ctrl-1", Log: log.With("role", "controller"), Registry: fl.ctrl.reg,
		Initial: fl.cfg, InitialRev: rev, Report: true,
		OnApply: func(c *config.Config, _ int64) error {
			if _, err := c.Credentials.Monitor.Resolve(); err != nil {
				return err
			}
			ctrl.SetConfig(c)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	for i := range nProxies {
		id := fmt.Sprintf("proxy-%d", i)
		p := &fleetProxy{follower: follower{id: id, reg: prometheus.NewRegistry()}}
		// A free port may be taken by another process between picking and
		// binding it: pick again.
		for attempt := 0; ; attempt++ {
			p.addrs = listenerAddrs(t, fl.cfg)
			p.srv, err = proxy.New(proxy.Options{Config: withAddrs(fl.cfg, p.addrs), ID: id, Log: log.With("role", "proxy", "proxy", id), Registry: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			if err = p.srv.Start(); err == nil {
				break
			}
			p.srv.Close()
			if !errors.Is(err, syscall.EADDRINUSE) || attempt == 4 {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); proxy.Follow(ctx, store, fl.keys, p.srv) }()
		p.f, err = configstore.Follow(ctx, store, fl.keys, configstore.FollowOptions{
			Name: "proxy", ID: id, Log: log.With("role", "proxy", "proxy", id), Registry: p.reg,
			Initial: fl.cfg, InitialRev: rev, Report: true,
			// Every proxy serves the shared config on its own addresses.
			OnApply: func(c *config.Config, _ int64) error { return p.srv.SetConfig(withAddrs(c, p.addrs)) },
		})
		if err != nil {
			t.Fatal(err)
		}
		fl.proxies = append(fl.proxies, p)
	}
	t.Cleanup(func() {
		cancel()
		for _, p := range fl.proxies {
			p.srv.Close()
		}
		done := make(chan struct{})
		go func() {
			wg.Wait()
			<-fl.ctrl.f.Done()
			for _, p := range fl.proxies {
				<-p.f.Done()
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("controller/proxies did not stop within 10s")
		}
	})
	fl.waitUntil("discovery and routing on every proxy", 20*time.Second, func() bool {
		st, err := fl.state()
		if err != nil || st.Primary != "node1" {
			return false
		}
		for _, p := range fl.proxies {
			if p.srv.Epochs()[sandbox.ClusterName] != st.Epoch {
				return false
			}
		}
		return true
	})
	return fl
}

// listenerAddrs picks a distinct free loopback address for every listener
// of c: all are bound at once, then released.
func listenerAddrs(t *testing.T, c *config.Config) map[string]string {
	t.Helper()
	out := map[string]string{}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, l := range c.Listeners {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out[l.Name] = ln.Addr().String()
	}
	return out
}

// withAddrs returns a copy of c whose listeners use addrs (by name).
func withAddrs(c *config.Config, addrs map[string]string) *config.Config {
	out := *c
	out.Listeners = append([]config.Listener(nil), c.Listeners...)
	for i := range out.Listeners {
		if a, ok := addrs[out.Listeners[i].Name]; ok {
			out.Listeners[i].Address = a
		}
	}
	return &out
}

func (fl *fleet) state() (topo.ClusterState, error) {
	var st topo.ClusterState
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := topo.GetJSON(ctx, fl.store, fl.keys.ClusterState(sandbox.ClusterName), &st)
	return st, err
}

// waitUntil polls cond every 5 ms; it returns how long it took.
func (fl *fleet) waitUntil(what string, timeout time.Duration, cond func() bool) time.Duration {
	fl.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			fl.t.Fatalf("%s: not reached within %s", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// consumers returns the controller's and every proxy's follower.
func (fl *fleet) consumers() []*follower {
	out := []*follower{fl.ctrl}
	for _, p := range fl.proxies {
		out = append(out, &p.follower)
	}
	return out
}

// writeConfigFile writes c as YAML into the fleet's directory.
func (fl *fleet) writeConfigFile(name string, c *config.Config) string {
	fl.t.Helper()
	data, err := c.Marshal()
	if err != nil {
		fl.t.Fatal(err)
	}
	return fl.writeFile(name, data)
}

func (fl *fleet) writeFile(name string, data []byte) string {
	fl.t.Helper()
	p := filepath.Join(fl.dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		fl.t.Fatal(err)
	}
	return p
}

// cli runs the switchyard binary against the fleet's etcd and returns its
// combined output and exit status.
func (fl *fleet) cli(args ...string) (string, int) {
	fl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all := append([]string{"--etcd-endpoints", fl.endpoints[0], "--etcd-prefix", fl.keys.Prefix}, args...)
	out, err := exec.CommandContext(ctx, binPath, all...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	fl.t.Fatalf("run switchyard %v: %v", args, err)
	return "", -1
}

// putCurrent writes value straight into the current config key, as a
// direct etcd write around the CLI would; it returns the new version.
func (fl *fleet) putCurrent(value []byte) topo.Version {
	fl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := fl.store.Get(ctx, fl.keys.Config())
	if err != nil {
		fl.t.Fatal(err)
	}
	v, err := fl.store.Update(ctx, fl.keys.Config(), value, kv.Version)
	if err != nil {
		fl.t.Fatal(err)
	}
	return v
}

// statusJSON runs `switchyard status --json`.
func (fl *fleet) statusJSON() *status.Report {
	fl.t.Helper()
	out, code := fl.cli("status", "--json")
	if code != 0 {
		fl.t.Fatalf("status --json: exit %d\n%s", code, out)
	}
	var r status.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		fl.t.Fatalf("status --json: %v\n%s", err, out)
	}
	return &r
}

// metric returns the value of a gauge or counter in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if g := m.GetGauge(); g != nil {
					return g.GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// connChecker opens a new connection through a listener every interval
// and runs one query, counting failures: new sessions are what a proxy
// that dropped its routes would fail first.
type connChecker struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	firstErrs  []string
}

func (c *connChecker) run(ctx context.Context, dsn string, interval time.Duration) {
	for ctx.Err() == nil {
		db, err := sql.Open("mysql", dsn)
		if err == nil {
			db.SetMaxOpenConns(1)
			var id int64
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = db.QueryRowContext(qctx, "SELECT @@server_id").Scan(&id)
			cancel()
			db.Close()
		}
		switch {
		case err == nil:
			c.ok.Add(1)
		case ctx.Err() != nil:
			return
		default:
			c.failed.Add(1)
			c.mu.Lock()
			if len(c.firstErrs) < 5 {
				c.firstErrs = append(c.firstErrs, err.Error())
			}
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// sysbench is one sysbench oltp_read_write run through a listener.
type sysbench struct {
	name string
	out  strings.Builder
	err  error
	done chan struct{}
}

// startSysbench prepares database db through addr and runs oltp_read_write
// (prepared statements on, no error ignored) for d in the background.
func startSysbench(t *testing.T, sb *sandbox.Cluster, name, addr, db string, d time.Duration) *sysbench {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + sb.AppUser, "--mysql-password=" + sb.AppPassword, "--mysql-db=" + db,
		"--tables=1", "--table-size=2000"}
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	t.Cleanup(cancel)
	if out, err := exec.CommandContext(ctx, "sysbench", append(args, "prepare")...).CombinedOutput(); err != nil {
		t.Fatalf("sysbench prepare %s: %v\n%s", name, err, out)
	}
	s := &sysbench{name: name, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, "sysbench", append(args, "--threads=1", fmt.Sprintf("--time=%d", int(d.Seconds())),
		"--mysql-ignore-errors=none", "--db-ps-mode=auto", "run")...)
	cmd.Stdout = &s.out
	cmd.Stderr = &s.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("sysbench run %s: %v", name, err)
	}
	go func() {
		defer close(s.done)
		s.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// result waits for the run and returns transactions and ignored errors as
// sysbench printed them.
func (s *sysbench) result() (tx, errs string, err error) {
	<-s.done
	sc := bufio.NewScanner(strings.NewReader(s.out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "transactions:" {
			tx = f[1]
		}
		if len(f) >= 3 && f[0] == "ignored" && f[1] == "errors:" {
			errs = f[2]
		}
	}
	return tx, errs, s.err
}
