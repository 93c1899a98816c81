package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// harness is a real sandbox (3 mariadbd) with a proxy in front of it.
type harness struct {
	t   testing.TB
	c   *sandbox.Cluster
	cfg *config.Config
	srv *Server
	reg *prometheus.Registry
}

// newHarness starts a sandbox and a proxy with listeners "rw" and "ro" on
// free ports, routing from a hand-built state: node1 primary, node2 and
// node3 serving replicas, epoch 1.
func newHarness(t testing.TB, mutate func(*config.Config)) *harness {
	t.Helper()
	c := sandboxtest.Start(t, sandbox.Options{})
	cfg := c.Config()
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	if mutate != nil {
		mutate(cfg)
	}
	h := &harness{t: t, c: c, cfg: cfg}
	h.srv = h.startProxy(cfg)
	h.srv.SetClusterState(sandboxState(c, 1, 0, 1, 2))
	return h
}

func (h *harness) startProxy(cfg *config.Config) *Server {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	srv, err := New(Options{Config: cfg, ID: "test-proxy", Log: testLogger(h.t), Registry: h.reg})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// sandboxState builds a ClusterState for the sandbox by hand: primary is a
// node index, serving lists the replicas that serve reads.
func sandboxState(c *sandbox.Cluster, epoch int64, primary int, serving ...int) topo.ClusterState {
	st := topo.ClusterState{Cluster: sandbox.ClusterName, Epoch: epoch, Phase: topo.PhaseStable,
		Primary: c.Nodes[primary].Name, Leader: "test", UpdatedAt: time.Now()}
	for i, n := range c.Nodes {
		ns := topo.NodeState{Name: n.Name, Address: n.Address, Role: topo.RoleReplica}
		if i == primary {
			ns.Role = topo.RolePrimary
		}
		for _, s := range serving {
			if s == i {
				ns.Serving = true
			}
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st
}

// dsn is a go-sql-driver DSN through listener as the app user.
func (h *harness) dsn(listener, db string, mod func(*mysql.Config)) string {
	cfg := mysql.NewConfig()
	cfg.User = h.c.AppUser
	cfg.Passwd = h.c.AppPassword
	cfg.Net = "tcp"
	cfg.Addr = h.srv.ListenerAddr(listener)
	cfg.DBName = db
	cfg.Timeout = 5 * time.Second
	cfg.ReadTimeout = 60 * time.Second
	cfg.WriteTimeout = 60 * time.Second
	if mod != nil {
		mod(cfg)
	}
	return cfg.FormatDSN()
}

// db opens a pool through listener and pings it.
func (h *harness) db(listener, db string, mod func(*mysql.Config)) *sql.DB {
	h.t.Helper()
	d, err := sql.Open("mysql", h.dsn(listener, db, mod))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.PingContext(ctx); err != nil {
		h.t.Fatalf("connect through listener %s: %v", listener, err)
	}
	return d
}

// direct opens a root pool straight to node i (no proxy).
func (h *harness) direct(i int) *sql.DB {
	h.t.Helper()
	d, err := sql.Open("mysql", h.c.RootDSN(i))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = d.Close() })
	return d
}

func serverID(t testing.TB, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) int {
	t.Helper()
	var id int
	if err := q.QueryRowContext(context.Background(), "SELECT @@server_id").Scan(&id); err != nil {
		t.Fatalf("SELECT @@server_id: %v", err)
	}
	return id
}

// waitReplicated waits until every replica has applied node1's GTID position.
func (h *harness) waitReplicated(replicas ...int) {
	h.t.Helper()
	var pos string
	if err := h.direct(0).QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		h.t.Fatal(err)
	}
	for _, i := range replicas {
		var r int
		if err := h.direct(i).QueryRow("SELECT MASTER_GTID_WAIT(?, 20)", pos).Scan(&r); err != nil || r != 0 {
			h.t.Fatalf("node%d did not reach %s: %v %d", i+1, pos, err, r)
		}
	}
}

// testLogger logs warnings and errors to t as they come. Info lines are
// kept, the last testLogKeep of them, and written to t only if the test
// failed, so that a failure seen once (on a loaded machine) comes with what
// the proxy did; SWITCHYARD_TEST_DEBUG=1 writes everything, debug
// included, as it comes.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SWITCHYARD_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r := &logRing{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Logf("the proxy's last %d info lines before the failure:", len(r.lines))
		for _, l := range r.lines {
			t.Log(l)
		}
	})
	return slog.New(slog.NewTextHandler(ringWriter{t: t, r: r}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// testLogKeep bounds the info lines a test keeps (testLogger).
const testLogKeep = 400

type logRing struct {
	mu    sync.Mutex
	lines []string
}

// ringWriter writes WARN and ERROR lines to t, and keeps every line in r.
type ringWriter struct {
	t testing.TB
	r *logRing
}

func (w ringWriter) Write(p []byte) (int, error) {
	l := strings.TrimRight(string(p), "\n")
	if strings.Contains(l, " level=WARN ") || strings.Contains(l, " level=ERROR ") {
		w.t.Log(l)
	}
	w.r.mu.Lock()
	if len(w.r.lines) >= testLogKeep {
		w.r.lines = append(w.r.lines[:0], w.r.lines[len(w.r.lines)-testLogKeep/2:]...)
	}
	w.r.lines = append(w.r.lines, l)
	w.r.mu.Unlock()
	return len(p), nil
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// mysqlErr returns err's MySQL error number (0 if it is not a server error).
func mysqlErr(err error) (uint16, string) {
	if me, ok := err.(*mysql.MySQLError); ok {
		return me.Number, me.Message
	}
	return 0, fmt.Sprint(err)
}
