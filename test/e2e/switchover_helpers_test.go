package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// swStack is the stack of startStack with a handle on the controller, a
// config hook and a choice of how many proxies share the store.
type swStack struct {
	*stack
	ctrl    *controller.Controller
	proxies []*proxy.Server
	// stepHook, when set, runs before each switchover or failover step
	// of the controller (controller.Options.StepHook).
	stepHook atomic.Pointer[func(ctx context.Context, step string)]
	// stopCtrl stops the controller (and waits until its Run returned);
	// the proxies go on.
	stopCtrl func()
}

// startSwitchStack brings up a 3-node sandbox, etcd, one controller and
// nProxies proxies (the first is stack.proxy), with mutate applied to the
// config, and waits until every proxy routes by the published state.
func startSwitchStack(t *testing.T, nProxies int, mutate func(*config.Config)) *swStack {
	t.Helper()
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	endpoints := topotest.StartEtcd(t)
	store := topotest.Connect(t, endpoints)
	cfg := sb.Config()
	cfg.Etcd.Endpoints = endpoints
	cfg.Probe.Interval = config.Duration(probeInterval)
	cfg.Probe.Timeout = config.Duration(200 * time.Millisecond)
	cfg.Switchover.CatchupTimeout = config.Duration(5 * time.Second)
	cfg.Admin.Address = "off"
	if mutate != nil {
		mutate(cfg)
	}
	s := &swStack{stack: &stack{t: t, sb: sb, cfg: cfg, store: store, keys: topo.Keys{Prefix: cfg.Etcd.Prefix}, endpoints: endpoints, done: make(chan struct{})}}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	log := topotest.Logger(t)
	ctrl, err := controller.New(controller.Options{Config: cfg, Store: store, Keys: s.keys, ID: "ctrl-1", Log: log.With("role", "controller"),
		StepHook: func(ctx context.Context, step string) {
			if h := s.stepHook.Load(); h != nil {
				(*h)(ctx, step)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	s.ctrl = ctrl
	for i := range nProxies {
		pcfg := *cfg
		pcfg.Listeners = append([]config.Listener(nil), cfg.Listeners...)
		for j := range pcfg.Listeners {
			pcfg.Listeners[j].Address = sandboxtest.FreeAddr(t)
		}
		if err := pcfg.Validate(); err != nil {
			t.Fatalf("config does not validate: %v", err)
		}
		srv, err := proxy.New(proxy.Options{Config: &pcfg, ID: fmt.Sprintf("proxy-%d", i+1), Log: log.With("role", "proxy", "proxy", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		s.proxies = append(s.proxies, srv)
	}
	s.proxy = s.proxies[0]
	cctx, ccancel := context.WithCancel(ctx)
	ctrlDone := make(chan struct{})
	s.stopCtrl = func() {
		ccancel()
		<-ctrlDone
	}
	go func() {
		defer close(s.done)
		errc := make(chan error, 1+len(s.proxies))
		go func() { errc <- ctrl.Run(cctx); close(ctrlDone) }()
		for _, p := range s.proxies {
			go func() { errc <- proxy.Follow(ctx, store, s.keys, p) }()
		}
		for range 1 + len(s.proxies) {
			<-errc
		}
	}()
	t.Cleanup(func() {
		cancel()
		for _, p := range s.proxies {
			p.Close()
		}
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Error("controller/proxies did not stop within 10s")
		}
	})
	s.waitFor("initial discovery", 15*time.Second, func(st topo.ClusterState) bool {
		if st.Primary != "node1" {
			return false
		}
		for _, p := range s.proxies {
			if p.Epochs()["main"] != st.Epoch {
				return false
			}
		}
		for _, n := range st.Nodes {
			if n.Name != "node1" && !n.Serving {
				return false
			}
		}
		return true
	})
	return s
}

// proxyDSN is a go-sql-driver DSN for the application user through the
// listener of role of proxy i.
func (s *swStack) proxyDSN(i int, role, db string) string {
	var addr string
	for _, l := range s.cfg.Listeners {
		if l.Role == role {
			addr = s.proxies[i].ListenerAddr(l.Name)
		}
	}
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?timeout=2s&readTimeout=30s&writeTimeout=30s", s.sb.AppUser, s.sb.AppPassword, addr, db)
}

// switchover runs the CLI switchover to node and returns its output.
func (s *swStack) switchover(to string, extra ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return s.cli(ctx, append([]string{"switchover", "--cluster", "main", "--to", to}, extra...)...)
}

// waitServing waits until the published state has primary and every other
// node serving again (after a switchover the replicas serve once probed).
func (s *swStack) waitServing(primary string) {
	s.t.Helper()
	s.waitFor("replicas serving under "+primary, 15*time.Second, func(st topo.ClusterState) bool {
		if st.Primary != primary || st.Phase != topo.PhaseStable {
			return false
		}
		for _, n := range st.Nodes {
			if n.Name != primary && !n.Serving {
				return false
			}
		}
		return true
	})
}

// needSysbench skips (or fails under SWITCHYARD_REQUIRE_MARIADB=1) without
// sysbench.
func needSysbench(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sysbench"); err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_MARIADB") == "1" {
			t.Fatal("sysbench not found: apt-get install -y sysbench")
		}
		t.Skip("sysbench not found: apt-get install -y sysbench")
	}
}

// durations summarises a list of durations: min, median, p90, max.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1)+0.5)].Round(time.Millisecond) }
	return fmt.Sprintf("min %s, median %s, p90 %s, max %s (n=%d)", q(0), q(0.5), q(0.9), q(1), len(s))
}

// sysbenchReport sums sysbench's per-second reports ("[ 5s ] thds: 16
// tps: 270.10 qps: ... err/s: 0.00 reconn/s: 0.00").
type sysbenchReport struct {
	seconds              int
	transactions, minTPS float64
	errors, reconnects   float64
}

func parseSysbenchReports(out string) sysbenchReport {
	var r sysbenchReport
	r.minTPS = -1
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "[") {
			continue
		}
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[i+1], ","), 64)
			if err != nil {
				continue
			}
			switch f[i] {
			case "tps:":
				r.seconds++
				r.transactions += v
				if r.minTPS < 0 || v < r.minTPS {
					r.minTPS = v
				}
			case "err/s:":
				r.errors += v
			case "reconn/s:":
				r.reconnects += v
			}
		}
	}
	return r
}
