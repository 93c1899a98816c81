// Package e2e runs Switchyard's roles together against a real MariaDB sandbox
// and a real embedded etcd: discovery, routing, switchover, the CLI, and real
// clients through the listeners.
package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// binPath is the switchyard binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sy-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "switchyard")
	out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/switchyard").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build switchyard: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stack is a sandbox with etcd, a controller and a proxy running in-process.
type stack struct {
	t         *testing.T
	sb        *sandbox.Cluster
	cfg       *config.Config
	store     topo.Store
	keys      topo.Keys
	endpoints []string
	proxy     *proxy.Server
	cancel    context.CancelFunc
	done      chan struct{}
}

const probeInterval = 300 * time.Millisecond

// startStack brings everything up and waits until the controller has
// published the cluster and the proxy routes by it.
func startStack(t *testing.T, nodes int) *stack {
	t.Helper()
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: nodes})
	endpoints := topotest.StartEtcd(t)
	store := topotest.Connect(t, endpoints)

	cfg := sb.Config()
	cfg.Etcd.Endpoints = endpoints
	cfg.Probe.Interval = config.Duration(probeInterval)
	cfg.Probe.Timeout = config.Duration(200 * time.Millisecond)
	cfg.Switchover.CatchupTimeout = config.Duration(5 * time.Second)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = sandboxtest.FreeAddr(t)
	}
	cfg.Admin.Address = "off"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("sandbox config does not validate: %v", err)
	}
	s := &stack{t: t, sb: sb, cfg: cfg, store: store, keys: topo.Keys{Prefix: cfg.Etcd.Prefix}, endpoints: endpoints, done: make(chan struct{})}

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	log := topotest.Logger(t)
	ctrl, err := controller.New(controller.Options{Config: cfg, Store: store, Keys: s.keys, ID: "ctrl-1", Log: log.With("role", "controller")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Options{Config: cfg, ID: "proxy-1", Log: log.With("role", "proxy")})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	s.proxy = srv
	go func() {
		defer close(s.done)
		errc := make(chan error, 2)
		go func() { errc <- ctrl.Run(ctx) }()
		go func() { errc <- proxy.Follow(ctx, store, s.keys, srv) }()
		<-errc
		<-errc
	}()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Error("controller/proxy did not stop within 10s")
		}
	})
	s.waitFor("initial discovery", 15*time.Second, func(st topo.ClusterState) bool {
		if st.Primary != "node1" || srv.Epochs()["main"] != st.Epoch {
			return false
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

// state reads the published cluster state.
func (s *stack) state() topo.ClusterState {
	s.t.Helper()
	var st topo.ClusterState
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st); err != nil {
		s.t.Fatalf("read cluster state: %v", err)
	}
	return st
}

// waitFor polls the published state until ok or timeout, returning how long it took.
func (s *stack) waitFor(what string, timeout time.Duration, ok func(topo.ClusterState) bool) time.Duration {
	s.t.Helper()
	start := time.Now()
	for {
		var st topo.ClusterState
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st)
		cancel()
		if err == nil && ok(st) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			s.t.Fatalf("%s: not reached within %s (last state %+v, err %v)", what, timeout, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *stack) listener(role string) string {
	for _, l := range s.cfg.Listeners {
		if l.Role == role {
			return s.proxy.ListenerAddr(l.Name)
		}
	}
	s.t.Fatalf("no %s listener", role)
	return ""
}

// appDSN is a go-sql-driver DSN for the application user through a listener.
func (s *stack) appDSN(role, db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?timeout=2s&readTimeout=30s&writeTimeout=30s", s.sb.AppUser, s.sb.AppPassword, s.listener(role), db)
}

func (s *stack) open(role, schema string) *sql.DB {
	s.t.Helper()
	db, err := sql.Open("mysql", s.appDSN(role, schema))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { db.Close() })
	return db
}

// direct opens a root connection straight to node i (over its unix socket).
func (s *stack) direct(i int) *sql.DB {
	s.t.Helper()
	db, err := sql.Open("mysql", s.sb.RootDSN(i))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { db.Close() })
	return db
}

// cli runs the switchyard binary against the stack's etcd.
func (s *stack) cli(ctx context.Context, args ...string) (string, error) {
	all := append([]string{"--etcd-endpoints", s.endpoints[0]}, args...)
	out, err := exec.CommandContext(ctx, binPath, all...).CombinedOutput()
	return string(out), err
}
