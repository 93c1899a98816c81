package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// nodelessConfig writes a valid config whose nodes are closed loopback
// ports (nothing answers there) and whose listeners, admin endpoint and
// embedded etcd use free ports under dir. mutate, when set, edits it first.
func nodelessConfig(t *testing.T, dir string, mutate func(*config.Config)) (*config.Config, string) {
	t.Helper()
	y := fmt.Sprintf(`
credentials:
  monitor: {user: monitor, password: monitor-secret}
  replication: {user: repl, password: repl-secret}
users:
  - name: app
    password: app-secret
clusters:
  - name: main
    nodes:
      - {name: db1, address: %s}
      - {name: db2, address: %s}
      - {name: db3, address: %s}
listeners:
  - {name: rw, address: %s, cluster: main, role: primary}
  - {name: ro, address: %s, cluster: main, role: replica}
admin:
  address: %s
etcd:
  embedded:
    data_dir: %s
    client_address: %s
    peer_address: %s
`, sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t),
		sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t),
		filepath.Join(dir, "etcd"), sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t))
	p := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(c)
		data, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c, p
}

// startUp runs `switchyard up` in the test process until the test ends and
// waits for its admin endpoint to answer.
func startUp(t *testing.T, cfgPath, adminAddr string) {
	t.Helper()
	g := &globalFlags{configPath: cfgPath, logLevel: "warn", logFormat: "text"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRoles(ctx, g, &roleFlags{}, true, true, true) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("up did not stop within 20s of its context")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := get("http://" + adminAddr + "/healthz"); code == 200 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("up returned %v before its admin endpoint answered", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("up's admin endpoint did not answer within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runCLI runs the switchyard command line with args and returns its
// output (stdout and stderr together) and error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestSecondUpOnLockedDataDir: a second `up` on the data directory of a
// running one (other ports) fails at once, naming the lock file and the
// pid holding it, instead of hanging on etcd's database lock.
func TestSecondUpOnLockedDataDir(t *testing.T) {
	dir := t.TempDir()
	first, firstPath := nodelessConfig(t, dir, nil)
	startUp(t, firstPath, first.Admin.Address)

	dir2 := t.TempDir()
	_, secondPath := nodelessConfig(t, dir2, func(c *config.Config) {
		c.Etcd.Embedded.DataDir = first.Etcd.Embedded.DataDir
	})
	g := &globalFlags{configPath: secondPath, logLevel: "warn", logFormat: "text"}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- runRoles(context.Background(), g, &roleFlags{}, true, true, true) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the second up did not return within 20s: it waits on the data directory lock")
	}
	if err == nil {
		t.Fatal("the second up on a locked data directory started")
	}
	lockFile := filepath.Join(first.Etcd.Embedded.DataDir, dataDirLockName)
	for _, want := range []string{lockFile, "process " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Logf("second up refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// operatorStore starts an embedded etcd with a published state of cluster
// "main" (nodes db1..db3, primary db1) and a controller leader key held by
// a campaign that serves no request: requests wait until their timeout.
func operatorStore(t *testing.T) (topo.Store, topo.Keys, string) {
	t.Helper()
	e, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: filepath.Join(t.TempDir(), "etcd"),
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := topo.Keys{Prefix: "/switchyard"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cs := topo.ClusterState{Cluster: "main", Primary: "db1", Epoch: 1, Phase: topo.PhaseStable,
		Nodes: []topo.NodeState{{Name: "db1", Role: topo.RolePrimary}, {Name: "db2", Role: topo.RoleReplica}, {Name: "db3", Role: topo.RoleReplica}}}
	if _, err := topo.PutJSON(ctx, st, keys.ClusterState("main"), cs, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Campaign(ctx, keys.Election(), "idle-leader"); err != nil {
		t.Fatal(err)
	}
	return st, keys, strings.TrimPrefix(e.Endpoints()[0], "http://")
}

// TestOperatorCommandEdges: bad input to the operator commands gives a
// clear message and a non-zero exit, and writes nothing.
func TestOperatorCommandEdges(t *testing.T) {
	st, keys, ep := operatorStore(t)
	ctx := context.Background()
	etcd := []string{"--etcd-endpoints", ep}

	t.Run("mistyped cluster leaves no request", func(t *testing.T) {
		for _, args := range [][]string{
			{"switchover", "--cluster", "mian", "--timeout", "5s"},
			{"failover", "--cluster", "mian", "--plan", "--timeout", "5s"},
			{"maintenance", "on", "--cluster", "mian", "--reason", "x", "--timeout", "5s"},
			{"ack", "--cluster", "mian", "--timeout", "5s"},
		} {
			_, err := runCLI(t, append(args, etcd...)...)
			if err == nil || !strings.Contains(err.Error(), `unknown cluster "mian"`) || !strings.Contains(err.Error(), "known clusters: main") {
				t.Errorf("%v: %v; want an unknown-cluster error naming main", args, err)
			}
		}
		if kvs, err := st.List(ctx, keys.Requests("mian")); err != nil || len(kvs) != 0 {
			t.Fatalf("request keys left for the mistyped cluster: %d %v", len(kvs), err)
		}
	})

	t.Run("undrain of an unknown node", func(t *testing.T) {
		_, err := runCLI(t, append([]string{"undrain", "node9", "--cluster", "main"}, etcd...)...)
		if err == nil || !strings.Contains(err.Error(), "node9 is not a node of cluster main (its nodes: db1, db2, db3)") {
			t.Fatalf("undrain node9: %v", err)
		}
	})

	t.Run("SWITCHYARD_CONFIG is the default --config", func(t *testing.T) {
		_, p := nodelessConfig(t, t.TempDir(), func(c *config.Config) { c.Etcd.Endpoints = []string{ep} })
		t.Chdir(t.TempDir()) // no ./switchyard.yaml to fall back on
		t.Setenv(configEnv, p)
		_, err := runCLI(t, "undrain", "node9", "--cluster", "main")
		if err == nil || !strings.Contains(err.Error(), "its nodes: db1, db2, db3") {
			t.Fatalf("undrain through $%s: %v; want the store of that config to answer", configEnv, err)
		}
		t.Setenv(configEnv, filepath.Join(t.TempDir(), "missing.yaml"))
		if _, err := runCLI(t, "undrain", "node9", "--cluster", "main"); err == nil || !strings.Contains(err.Error(), configEnv+"=") {
			t.Fatalf("a missing $%s file: %v", configEnv, err)
		}
	})

	t.Run("maintenance without on or off", func(t *testing.T) {
		_, err := runCLI(t, append([]string{"maintenance", "--cluster", "main", "--reason", "x"}, etcd...)...)
		if err == nil || !strings.Contains(err.Error(), "say on, off or history") || !strings.Contains(err.Error(), "switchyard maintenance on --cluster C") {
			t.Fatalf("maintenance without on/off: %v", err)
		}
	})

	t.Run("version", func(t *testing.T) {
		for _, args := range [][]string{{"version"}, {"--version"}} {
			out, err := runCLI(t, args...)
			if err != nil || !strings.HasPrefix(out, "switchyard ") || !strings.Contains(out, "commit ") || !strings.Contains(out, runtime.Version()) {
				t.Errorf("%v: %q %v", args, out, err)
			}
		}
	})

	t.Run("switchover timeout withdraws the request it names", func(t *testing.T) {
		// The leader here never serves requests: past --timeout the
		// request is withdrawn, so that it cannot run later.
		_, err := runCLI(t, append([]string{"switchover", "--cluster", "main", "--timeout", "2s"}, etcd...)...)
		var ee exitError
		if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(ee.msg, "was not started within --timeout 2s") ||
			!strings.Contains(ee.msg, "the request was withdrawn and nothing was changed") {
			t.Fatalf("switchover past its timeout: %v", err)
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(ee.msg, "switchover request "), " ")
		if _, err := runCLI(t, append([]string{"switchover", "--cluster", "main", "--status", id}, etcd...)...); err == nil || !strings.Contains(err.Error(), "withdrawn") {
			t.Fatalf("--status of the withdrawn request: %v", err)
		}
		var req topo.Request
		v, err := topo.GetJSON(ctx, st, keys.Request("main", id), &req)
		if err != nil {
			t.Fatalf("request %q: %v", id, err)
		}
		req.State, req.Message = topo.RequestDone, "switched over to db2"
		if _, err := topo.PutJSON(ctx, st, keys.Request("main", id), req, v); err != nil {
			t.Fatal(err)
		}
		out, err := runCLI(t, append([]string{"switchover", "--cluster", "main", "--status", id}, etcd...)...)
		if err != nil || !strings.Contains(out, "switched over to db2") || !strings.Contains(out, ": done") {
			t.Fatalf("--status of the finished request: %q %v", out, err)
		}
		if _, err := runCLI(t, append([]string{"switchover", "--cluster", "main", "--status", "nosuch"}, etcd...)...); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("--status of an unknown request: %v", err)
		}
	})
}

// TestFailedStartWritesNothing: `up` with a password_env variable that is
// not set refuses to start naming the field, and leaves no config revision
// in its etcd; `config validate` warns about the same variable and, with
// --require-secrets, fails.
func TestFailedStartWritesNothing(t *testing.T) {
	const env = "SWITCHYARD_TEST_UNSET_MONITOR_PW"
	os.Unsetenv(env)
	dir := t.TempDir()
	cfg, p := nodelessConfig(t, dir, func(c *config.Config) {
		c.Credentials.Monitor.Password, c.Credentials.Monitor.PasswordEnv = "", env
	})

	out, err := runCLI(t, "config", "validate", p)
	if err != nil || !strings.Contains(out, "valid (1 clusters") || !strings.Contains(out, "but 1 secret(s) cannot be resolved") ||
		!strings.Contains(out, "credentials.monitor.password_env: environment variable "+env+" is not set") {
		t.Fatalf("config validate: %q %v", out, err)
	}
	if _, err := runCLI(t, "config", "validate", "--require-secrets", p); err == nil || !strings.Contains(err.Error(), env) {
		t.Fatalf("config validate --require-secrets: %v", err)
	}

	g := &globalFlags{configPath: p, logLevel: "error", logFormat: "text"}
	err = runRoles(context.Background(), g, &roleFlags{}, true, true, true)
	if err == nil || !strings.Contains(err.Error(), "credentials.monitor.password_env") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("up with %s unset: %v", env, err)
	}
	e, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: cfg.Etcd.Embedded.DataDir,
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kvs, err := st.List(ctx, cfg.Etcd.Prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 0 {
		t.Fatalf("the refused start left %d keys in etcd, the first %s", len(kvs), kvs[0].Key)
	}
}

// TestSandboxRole: `sandbox up` prints the roles the nodes report, not the
// creation order.
func TestSandboxRole(t *testing.T) {
	for _, tc := range []struct {
		n    sandbox.NodeStatus
		want string
	}{
		{sandbox.NodeStatus{Reachable: true}, "primary"},
		{sandbox.NodeStatus{Reachable: true, ReadOnly: true, ReplicatingFrom: "127.0.0.1:3307", SourceNode: "node2"}, "replica of node2"},
		{sandbox.NodeStatus{Name: "node1", Reachable: true, ReadOnly: true}, "read-only and not replicating (no primary"},
		{sandbox.NodeStatus{Name: "node1", Reachable: true, ReadOnly: true}, "read-only and not replicating (primary is node2: a fenced old primary"},
		{sandbox.NodeStatus{Reachable: true, ReplicatingFrom: "127.0.0.1:3307", SourceNode: "node2"}, "WRITABLE"},
		{sandbox.NodeStatus{Error: "connection refused"}, "NOT ANSWERING: connection refused"},
	} {
		all := []sandbox.NodeStatus{tc.n}
		if strings.Contains(tc.want, "primary is node2") {
			all = append(all, sandbox.NodeStatus{Name: "node2", Reachable: true})
		}
		if got := sandboxRole(tc.n, all); !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestFailoverPlanPrintedOnce: `failover --plan` that finds no candidate
// (a missing --to node, every replica unreachable) prints the plan once and
// exits non-zero with the refusal.
func TestFailoverPlanPrintedOnce(t *testing.T) {
	e, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: filepath.Join(t.TempDir(), "etcd"),
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := topo.Keys{Prefix: "/switchyard"}
	cfg, _ := nodelessConfig(t, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := topo.ClusterState{Cluster: "main", Primary: "db1", Epoch: 1, Phase: topo.PhaseStable}
	for _, n := range cfg.Clusters[0].Nodes {
		cs.Nodes = append(cs.Nodes, topo.NodeState{Name: n.Name, Address: n.Address, Role: topo.RoleUnknown})
	}
	if _, err := topo.PutJSON(ctx, st, keys.ClusterState("main"), cs, 0); err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New(controller.Options{Config: cfg, Store: st, Keys: keys, ID: "ctl-test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ctrl.Run(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	for !ctrl.IsLeader() {
		if ctx.Err() != nil {
			t.Fatal("the controller did not lead within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ep := strings.TrimPrefix(e.Endpoints()[0], "http://")
	for _, to := range []string{"node9", ""} {
		out, err := runCLI(t, "failover", "--cluster", "main", "--plan", "--to", to, "--etcd-endpoints", ep)
		if n := strings.Count(out, "failover plan for cluster main"); n != 1 {
			t.Errorf("--to %q: the plan is printed %d times:\n%s", to, n, out)
		}
		var ee exitError
		if !errors.As(err, &ee) || ee.code != exitRefused || !strings.HasPrefix(ee.msg, "failover refused: no safe candidate") ||
			!strings.Contains(ee.msg, "; override: none") || strings.Contains(ee.msg, "\n") {
			t.Errorf("--to %q: %v; want exit %d with the one-line refusal and its override", to, err, exitRefused)
		}
	}
	// A refusal is not a failure: the failover and the switchover say
	// "refused", why, and which flag (none here) would override it.
	for _, args := range [][]string{
		{"failover", "--cluster", "main"},
		{"failover", "--cluster", "main", "--json"},
		{"switchover", "--cluster", "main", "--to", "db2"},
	} {
		out, err := runCLI(t, append(args, "--etcd-endpoints", ep)...)
		var ee exitError
		want := args[0] + " refused: "
		if !errors.As(err, &ee) || ee.code != exitRefused || !strings.HasPrefix(ee.msg, want) || !strings.Contains(ee.msg, "; override: none") ||
			strings.Contains(ee.msg, "failed") || strings.Contains(ee.msg, "\n") {
			t.Errorf("%v: %v (%T); want exit %d with %q...; override: none\n%s", args, err, err, exitRefused, want, out)
		}
		t.Logf("%v: exit %d: %s", args, ee.code, ee.msg)
	}
}

// requestExit tells refusals (exit 2, with the override) from failures
// (exit 1), also for requests of controllers that do not record a result.
func TestRequestExit(t *testing.T) {
	for _, c := range []struct {
		kind string
		req  topo.Request
		code int
		msg  string
	}{
		{"failover", topo.Request{State: topo.RequestFailed, Result: "refused", Override: "--force --reason TEXT"}, exitRefused,
			"failover refused: primary db1 is healthy; override: --force --reason TEXT"},
		{"failover", topo.Request{State: topo.RequestFailed, Result: "refused"}, exitRefused,
			"failover refused: by veto hook \"freeze\": change freeze; override: none"},
		{"failover", topo.Request{State: topo.RequestFailed, Result: "timed_out"}, 1, "failover timed_out: took too long"},
		{"switchover", topo.Request{State: topo.RequestFailed, Result: "rolled_back"}, 1, "switchover rolled_back: catch up failed"},
		{"switchover", topo.Request{State: topo.RequestFailed}, exitRefused, "switchover refused: candidate lags; override: none"},
		{"switchover", topo.Request{State: topo.RequestFailed}, 1, "switchover failed: fence failed"},
	} {
		msg := map[string]string{
			"--force --reason TEXT": "primary db1 is healthy",
		}[c.req.Override]
		switch {
		case msg != "":
		case strings.Contains(c.msg, "veto"):
			msg = `refused by veto hook "freeze": change freeze`
		case strings.Contains(c.msg, "took too long"):
			msg = "took too long"
		case strings.Contains(c.msg, "catch up"):
			msg = "catch up failed"
		case strings.Contains(c.msg, "lags"):
			msg = "refused: candidate lags"
		default:
			msg = "fence failed"
		}
		var ee exitError
		if err := requestExit(c.kind, c.req, msg); !errors.As(err, &ee) || ee.code != c.code || !strings.HasPrefix(ee.msg, c.msg) {
			t.Errorf("%s %+v %q: %v (code %d), want exit %d %q", c.kind, c.req, msg, err, ee.code, c.code, c.msg)
		}
	}
}

// TestSIGHUPDoesNotUndoAnotherApply: `up` runs revision 1 from its file;
// another operator applies revision 2. SIGHUP with the file unchanged, and
// then with the file edited (still based on revision 1), changes nothing:
// the store stays at revision 2 and each refusal is counted. `config diff`
// of a file with a new listener address flags it as pending a restart.
func TestSIGHUPDoesNotUndoAnotherApply(t *testing.T) {
	dir := t.TempDir()
	cfg, p := nodelessConfig(t, dir, nil)
	startUp(t, p, cfg.Admin.Address)
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{cfg.Etcd.Embedded.ClientAddress}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rev := func() int64 {
		t.Helper()
		r, _, _, err := configstore.Current(ctx, st, keys)
		if err != nil {
			t.Fatal(err)
		}
		return r.Rev
	}
	if r := rev(); r != 1 {
		t.Fatalf("revision after start: %d", r)
	}
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	withLag := func(name string, lag time.Duration) string {
		c, err := config.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		c.Clusters[0].ReadRouting.MaxLag = config.Duration(lag)
		data, _ := c.Marshal()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	refusals := func() string {
		_, body := get("http://" + cfg.Admin.Address + "/metrics")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "switchyard_config_reload_refused_total ") {
				return strings.TrimPrefix(l, "switchyard_config_reload_refused_total ")
			}
		}
		return ""
	}
	// A SIGHUP for the certificates: the file is unchanged and nothing is
	// to undo, so nothing is refused.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got := refusals(); got != "0" || rev() != 1 {
		t.Fatalf("SIGHUP with nothing to do: refused %q, revision %d", got, rev())
	}
	other := withLag("other.yaml", 7*time.Second)
	if out, err := runCLI(t, "config", "apply", other, "--reason", "another operator", "--config", p); err != nil || rev() != 2 {
		t.Fatalf("config apply: %q %v", out, err)
	}
	hup := func(want string) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for refusals() != want {
			if time.Now().After(deadline) {
				t.Fatalf("switchyard_config_reload_refused_total %q, want %s", refusals(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if r := rev(); r != 2 {
			t.Fatalf("SIGHUP replaced revision 2 by %d: another operator's apply was undone", r)
		}
	}
	hup("1") // the file is unchanged
	data, _ := os.ReadFile(withLag("edited.yaml", 3*time.Second))
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	hup("2") // edited, but based on revision 1

	// The file back as it was loaded, and the store rolled back to that
	// content under a new number: nothing to undo, nothing refused.
	if err := os.WriteFile(p, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "config", "rollback", "--to", "1", "--reason", "back to the file", "--config", p); err != nil || rev() != 3 {
		t.Fatalf("config rollback 1: %q %v (revision %d)", out, err, rev())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got := refusals(); got != "2" || rev() != 3 {
		t.Fatalf("SIGHUP with the store rolled back to the file's content: refused %q (want still 2), revision %d", got, rev())
	}

	c, _ := config.Load(p)
	c.Listeners[0].Address = sandboxtest.FreeAddr(t)
	moved, _ := c.Marshal()
	mf := filepath.Join(dir, "moved.yaml")
	os.WriteFile(mf, moved, 0o600)
	out, err := runCLI(t, "config", "diff", mf, "--config", p)
	if err != nil || !strings.Contains(out, "PENDING RESTART") || !strings.Contains(out, "listener rw changed") {
		t.Fatalf("config diff of a moved listener: %q %v", out, err)
	}
	// Applied, the move waits for a restart of the running `up`: status
	// says so for the proxy (its row and its config consumer), in text and
	// JSON.
	if out, err := runCLI(t, "config", "apply", mf, "--reason", "move rw", "--config", p); err != nil {
		t.Fatalf("config apply of a moved listener: %q %v", out, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err = runCLI(t, "status", "--config", p)
		if err == nil && strings.Contains(out, "PENDING RESTART proxy ") && strings.Contains(out, "listener rw changed; these take effect only when this process restarts") &&
			strings.Contains(out, "PENDING RESTART: listener rw changed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not show the pending restart of the moved listener: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("status after the move:\n%s", out)
	js, err := runCLI(t, "status", "--json", "--config", p)
	if err != nil || !strings.Contains(js, `"pending_restart": [`) || !strings.Contains(js, `"listener rw changed"`) {
		t.Fatalf("status --json does not carry the pending restart: %v\n%s", err, js)
	}
}

// TestLockDataDirDatabaseHeld: a data directory whose etcd database file is
// locked by a process that wrote no pid file is refused naming that file;
// once free, the lock is taken, holds this pid, and is released by Close.
func TestLockDataDirDatabaseHeld(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "member", "snap", "db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(db, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), db) {
		t.Fatalf("database file held: %v", err)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	l, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, dataDirLockName)); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("pid file holds %q", b)
	}
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), "held by process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	l.Close()
	l2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after Close: %v", err)
	}
	l2.Close()
}

// TestCheckRoleSecrets: each role checks the secrets it uses.
func TestCheckRoleSecrets(t *testing.T) {
	_, p := nodelessConfig(t, t.TempDir(), func(c *config.Config) {
		c.Credentials.Monitor.Password, c.Credentials.Monitor.PasswordEnv = "", "SWITCHYARD_TEST_UNSET_MON"
		c.Credentials.Replication.Password, c.Credentials.Replication.PasswordEnv = "", "SWITCHYARD_TEST_UNSET_REPL"
		c.Users[0].Password, c.Users[0].PasswordEnv = "", "SWITCHYARD_TEST_UNSET_APP"
	})
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		proxy, controller bool
		want, not         []string
	}{
		{true, true, []string{"credentials.monitor", "credentials.replication", "users[0]"}, nil},
		{false, true, []string{"credentials.monitor", "credentials.replication"}, []string{"users[0]"}},
		{true, false, []string{"credentials.monitor", "users[0]"}, []string{"credentials.replication"}},
	} {
		err := checkRoleSecrets(cfg, tc.proxy, tc.controller)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("proxy %v controller %v: %v; want %s named", tc.proxy, tc.controller, err, w)
			}
		}
		for _, n := range tc.not {
			if err != nil && strings.Contains(err.Error(), n) {
				t.Errorf("proxy %v controller %v: %v names %s, which this role does not use", tc.proxy, tc.controller, err, n)
			}
		}
	}
}
