// Command compat runs real clients' own test suites and the project's check
// sets for them against a one-node MariaDB sandbox, once direct and once
// through each rw listener of a `switchyard up` process (pooling: session and
// pooling: transaction), compares the outcomes test by test and prints a
// table of the tests that pass direct but not through a listener.
//
// Suites (-suites, comma-separated; "ci" and "all" name sets):
//
//	gosqldriver  go-sql-driver/mysql's own `go test` suite (gosqldriver.go)
//	node         checks/node/checks.js with mysql2 and mariadb (npm ci of checks/node's lock file)
//	python       checks/python/checks.py with PyMySQL and mysqlclient (Debian's python3-pymysql, python3-mysqldb)
//	cli          the `mariadb` command-line client: cli/*.sql with --batch, and `status`
//	sysbench     a few seconds of oltp_read_write, prepared and --db-ps-mode=disable
//	mtr          mariadb-test-run --extern: main-suite tests (mtr.go), also with --cursor-protocol
//	clienttest   mariadb-client-test, one process per test
//
// "ci" is gosqldriver,node,python,cli,sysbench (make test-compat-ci, part of
// .ci/run); "all" adds clienttest and mtr (make compat), mtr last: its tests
// create and drop accounts and set globals.
//
// It starts a sandbox in -dir (removed at the end), creates the accounts the
// suites log in as, writes a config with the listeners "rw-session" and
// "rw-transaction", starts bin/switchyard up with it and stops everything it
// started by pid. Exit status 1 when a test passes direct and fails, errors or
// hangs through a listener and is not listed in known.txt; 2 on a setup error
// (a missing client binary or package is a setup error naming what to
// install).
//
// Usage: go run ./tools/compat [-dir .compat] [-suites ci] [-targets direct,session,transaction] [-run REGEXP] [-keep]
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// Accounts the runner creates (besides the sandbox's app account): compat
// holds ALL PRIVILEGES WITH GRANT OPTION (mtr and mariadb-client-test create
// users, set globals and read mysql.*), compat2 is a second plain account for
// COM_CHANGE_USER checks. Both are in the proxy's user list.
const (
	superUser  = "compat"
	otherUser  = "compat2"
	checksDB   = "compat"
	defaultSet = "ci"
)

var suiteSets = map[string][]string{
	"ci":  {"gosqldriver", "node", "python", "cli", "sysbench"},
	"all": {"gosqldriver", "node", "python", "cli", "sysbench", "clienttest", "mtr"},
}

// target is one place a suite runs against: "direct" (the node) or a listener.
type target struct {
	name string
	addr string // host:port
}

func (t target) host() string { h, _, _ := net.SplitHostPort(t.addr); return h }
func (t target) port() string { _, p, _ := net.SplitHostPort(t.addr); return p }

// env is what every suite gets: the sandbox, the accounts and scratch space.
type env struct {
	log        *slog.Logger
	c          *sandbox.Cluster
	repo       string // repository root (absolute)
	work       string // scratch directory for this run, removed unless -keep
	cache      string // cache directory kept between runs (npm packages)
	keep       bool
	run        *regexp.Regexp // nil = every test
	superPass  string
	otherPass  string
	gosql      gosqlOptions
	mtrTests   string
	mtrTimeout time.Duration
	// mtrCaseTimeout is mariadb-test-run's --testcase-timeout.
	mtrCaseTimeout time.Duration
	mtrTargets     []string
	// cliDirect holds direct's normalised mariadb outputs, by test, for the listeners' to be compared with.
	cliDirect map[string]string
	// baselines holds, by suite, the server state its tests start from (freshServer).
	baselines map[string]*serverState
}

// suite runs against one target and returns each test's outcome.
type suite struct {
	name string
	// check verifies the suite's client is installed; its error names what to install.
	check func(e *env) error
	// prepare runs once before the first target (e.g. npm ci).
	prepare func(ctx context.Context, e *env) error
	run     func(ctx context.Context, e *env, t target) (result, error)
}

var suites = map[string]suite{
	"gosqldriver": gosqlSuite,
	"node":        nodeSuite,
	"python":      pythonSuite,
	"cli":         cliSuite,
	"sysbench":    sysbenchSuite,
	"mtr":         mtrSuite,
	"clienttest":  clientTestSuite,
}

func main() {
	dir := flag.String("dir", ".compat", "sandbox directory (created, then removed)")
	bin := flag.String("switchyard", "bin/switchyard", "switchyard binary")
	suitesFlag := flag.String("suites", defaultSet, "comma-separated suites, or a set: ci (gosqldriver,node,python,cli,sysbench), all (ci + clienttest,mtr)")
	targets := flag.String("targets", "direct,session,transaction", "comma-separated targets: direct, session, transaction")
	run := flag.String("run", "", "only tests whose suite/name matches this regexp (\"\" = all); a pattern starting gosqldriver/ is also passed, without that prefix, as the driver suite's go test -run")
	cache := flag.String("cache", "", "cache directory for npm packages (\"\" = $XDG_CACHE_HOME or ~/.cache, /switchyard-compat)")
	keep := flag.Bool("keep", false, "keep the scratch directory (outputs of every run) and print its path")
	known := flag.String("known", "tools/compat/known.txt", "known differences file (suite, test, target, reason per line)")
	version := flag.String("gosqldriver-version", "v1.10.1", "go-sql-driver/mysql version whose suite runs")
	// TestConnectorReturnsTimeout dials 1.1.1.1:1234 and expects the dial to
	// time out; where something answers that address (a transparent proxy on
	// the build machine) the driver reads a handshake with a nil logger and the
	// panic aborts the whole suite, so it is skipped by default.
	// TestConcurrent opens @@max_connections connections; through a
	// listener the proxy keeps about that many idle pooled backend
	// connections afterwards, and every direct login of the suites after it
	// gets 1040 - skipped by default (-gosqldriver-skip '^TestConnectorReturnsTimeout$' runs it).
	gskip := flag.String("gosqldriver-skip", "^(TestConnectorReturnsTimeout|TestConcurrent)$", "go test -skip pattern for the driver suite")
	gtimeout := flag.Duration("gosqldriver-timeout", 10*time.Minute, "go test -timeout per target")
	mtrTests := flag.String("mtr-tests", "", "mtr test names, space-separated (\"\" = the list in tools/compat/mtr-tests.txt)")
	mtrTimeout := flag.Duration("mtr-timeout", 40*time.Minute, "time limit of mtr on one target (tests not started by then fail)")
	mtrCaseTimeout := flag.Duration("mtr-testcase-timeout", 5*time.Minute, "time limit of one mtr test (mariadb-test-run --testcase-timeout, whole minutes); main.create_delayed took 58-103 s direct on a loaded 2-core machine and more than 2 min through a listener")
	mtrTargets := flag.String("mtr-targets", "direct,session", "targets mtr runs on (each takes about 10 minutes on a loaded 2-core machine)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := &env{log: log, keep: *keep, gosql: gosqlOptions{version: *version, skip: *gskip, timeout: *gtimeout},
		mtrTests: *mtrTests, mtrTimeout: *mtrTimeout, mtrCaseTimeout: *mtrCaseTimeout, mtrTargets: strings.Split(*mtrTargets, ","), cliDirect: map[string]string{}, baselines: map[string]*serverState{}}
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintf(os.Stderr, "compat: -run: %v\n", err)
			os.Exit(2)
		}
		e.run = re
		if rest, ok := strings.CutPrefix(*run, "gosqldriver/"); ok {
			e.gosql.run = rest
		}
	}
	code, err := runCompat(e, *dir, *bin, *suitesFlag, *targets, *cache, *known)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func parseSuites(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if set, ok := suiteSets[name]; ok {
			out = append(out, set...)
			continue
		}
		if _, ok := suites[name]; !ok {
			return nil, fmt.Errorf("-suites: %q is not a suite (gosqldriver, node, python, cli, sysbench, mtr, clienttest, or the sets ci, all)", name)
		}
		out = append(out, name)
	}
	return out, nil
}

func runCompat(e *env, dir, bin, suitesFlag, targetsFlag, cache, knownPath string) (int, error) {
	// SIGINT or SIGTERM stops the running client (its process group) and
	// the deferred clean-up stops switchyard up and the sandbox.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	names, err := parseSuites(suitesFlag)
	if err != nil {
		return 0, err
	}
	if e.repo, err = os.Getwd(); err != nil {
		return 0, err
	}
	known, err := loadKnown(knownPath)
	if err != nil {
		return 0, err
	}
	for _, n := range names {
		if s := suites[n]; s.check != nil {
			if err := s.check(e); err != nil {
				return 0, fmt.Errorf("suite %s: %w", n, err)
			}
		}
	}
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return 0, fmt.Errorf("-cache: %w", err)
		}
		cache = filepath.Join(base, "switchyard-compat")
	}
	if e.cache, err = filepath.Abs(cache); err != nil {
		return 0, err
	}
	absBin, err := filepath.Abs(bin)
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(absBin); err != nil {
		return 0, fmt.Errorf("switchyard binary %s: %w (run make build)", bin, err)
	}
	if e.work, err = os.MkdirTemp("", "switchyard-compat-"); err != nil {
		return 0, err
	}
	if !e.keep {
		defer os.RemoveAll(e.work)
	}
	e.log.Info("starting sandbox", "dir", dir)
	// Every address is a free one, so a run beside another sandbox (or a
	// second run) never collides on the defaults (6446, 8080, 2379...).
	c, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, Nodes: 1, Log: e.log, StopWithParent: true,
		ListenerRW: freeAddr(), ListenerRO: freeAddr(), AdminAddress: freeAddr(),
		EtcdClientAddress: freeAddr(), EtcdPeerAddress: freeAddr()})
	if err != nil {
		return 0, err
	}
	e.c = c
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sandbox.Down(dctx, c.Dir, true); err != nil {
			e.log.Error("sandbox down", "err", err)
		}
	}()
	e.superPass, e.otherPass = randomPassword(), randomPassword()
	if err := createAccounts(ctx, e); err != nil {
		return 0, err
	}

	cfg := c.Config()
	sessAddr, txAddr := c.ListenerRW, freeAddr()
	cfg.Listeners = []config.Listener{
		{Name: "rw-session", Address: sessAddr, Cluster: sandbox.ClusterName, Role: config.RolePrimary, Pooling: config.PoolingSession},
		{Name: "rw-transaction", Address: txAddr, Cluster: sandbox.ClusterName, Role: config.RolePrimary, Pooling: config.PoolingTransaction},
	}
	cfg.Users = append(cfg.Users,
		config.User{Name: superUser, Password: e.superPass},
		config.User{Name: otherUser, Password: e.otherPass})
	// Both listeners offer TLS with the sandbox certificate, as the
	// sandbox's own listeners do, and backend connections use TLS too: the
	// driver's TestTLS reads Ssl_cipher, which is the backend session's.
	for i := range cfg.Listeners {
		cfg.Listeners[i].TLS = c.Config().Listeners[0].TLS
	}
	// Pass-through accounts: mariadb-client-test and mtr create accounts
	// at run time and log in or change user to them (test_change_user,
	// test_bug31669, main.change_user); the static users still come first.
	cfg.Proxy.BackendAccounts.Enabled = true
	// The backend login (TCP, greeting, TLS, authentication) within
	// proxy.connect_timeout (1s by default): on the loaded shared machine
	// a TLS handshake took longer (go-sql-driver TestCollation/cp1257_bin
	// got 1105 "TLS handshake failed: i/o timeout" through pooling:
	// session, load average 40-50), while a direct client's login has no
	// such bound.
	cfg.Proxy.ConnectTimeout = config.Duration(10 * time.Second)
	cfg.Clusters[0].TLS = config.ClusterTLS{Enabled: true, CAFile: c.TLS().CA, Verify: config.VerifyFull}
	data, err := cfg.Marshal()
	if err != nil {
		return 0, err
	}
	cfgPath := filepath.Join(c.Dir, "compat.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(e.work, "switchyard.log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	up := exec.Command(absBin, "up", "--config", cfgPath)
	up.Stdout, up.Stderr = logf, logf
	up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := up.Start(); err != nil {
		return 0, err
	}
	e.log.Info("switchyard up started", "pid", up.Process.Pid, "log", logf.Name())
	defer func() {
		_ = up.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = up.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = up.Process.Kill()
			<-done
		}
	}()
	all := map[string]string{"direct": c.Nodes[0].Address, "session": sessAddr, "transaction": txAddr}
	var ts []target
	for _, t := range strings.Split(targetsFlag, ",") {
		addr, ok := all[t]
		if !ok {
			return 0, fmt.Errorf("-targets: %q is not a target (direct, session, transaction)", t)
		}
		ts = append(ts, target{name: t, addr: addr})
	}
	for _, t := range ts {
		if t.name == "direct" {
			continue
		}
		if err := waitQuery(ctx, c, t.addr, 60*time.Second); err != nil {
			return 0, fmt.Errorf("listener %s (%s) not ready: %w; see %s", t.name, t.addr, err, logf.Name())
		}
	}

	var reports []suiteResults
	for _, n := range names {
		s := suites[n]
		if s.prepare != nil {
			if err := s.prepare(ctx, e); err != nil {
				return 0, fmt.Errorf("suite %s: %w", n, err)
			}
		}
		sr := suiteResults{suite: n}
		for _, t := range ts {
			waitQuiet(ctx, e)
			e.log.Info("running suite", "suite", n, "target", t.name, "addr", t.addr)
			start := time.Now()
			r, err := s.run(ctx, e, t)
			if err == nil && ctx.Err() != nil {
				err = ctx.Err()
			}
			if err != nil {
				return 0, fmt.Errorf("suite %s, target %s: %w", n, t.name, err)
			}
			r.target = t.name
			r.filter(n, e.run)
			r.redact(c.AppPassword, c.RootPassword, e.superPass, e.otherPass)
			e.log.Info("suite done", "suite", n, "target", t.name, "tests", len(r.status),
				"seconds", time.Since(start).Round(time.Second).Seconds())
			sr.results = append(sr.results, r)
		}
		reports = append(reports, sr)
	}
	if e.keep {
		fmt.Println("outputs kept in", e.work)
	}
	return report(os.Stdout, reports, known), nil
}

func createAccounts(ctx context.Context, e *env) error {
	db, err := sql.Open("mysql", e.c.RootDSN(0))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"SET sql_log_bin=0",
		fmt.Sprintf("CREATE USER %s@'%%' IDENTIFIED BY '%s'", superUser, e.superPass),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION", superUser),
		// An account at 127.0.0.1 sorts before an anonymous ''@'127.0.0.1'
		// that an mtr test may create and leave behind (main.kill-2 does).
		fmt.Sprintf("CREATE USER %s@'127.0.0.1' IDENTIFIED BY '%s'", superUser, e.superPass),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO %s@'127.0.0.1' WITH GRANT OPTION", superUser),
		fmt.Sprintf("CREATE USER %s@'%%' IDENTIFIED BY '%s'", otherUser, e.otherPass),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON %s.* TO %s@'%%'", checksDB, otherUser),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON %s.* TO %s@'%%'", sandbox.OtherDatabase, otherUser),
		"CREATE DATABASE IF NOT EXISTS gotest",
		"CREATE DATABASE IF NOT EXISTS " + checksDB,
		// mtr's extern mode needs the test database.
		"CREATE DATABASE IF NOT EXISTS test",
	} {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		_, err = conn.ExecContext(ctx, q)
		conn.Close()
		if err != nil {
			return fmt.Errorf("create accounts: %s: %w", strings.SplitN(q, " IDENTIFIED", 2)[0], err)
		}
	}
	return nil
}

// waitQuiet waits (at most 30 s) until the server has fewer than 100
// connected threads or their number stopped falling for a second:
// go-sql-driver's TestConcurrent ends with about 1,000 connections that the
// server is still closing when the go test process has exited, and a client
// that logs in then gets 1040. (Idle pooled connections of the proxy stay:
// they are why the count can stop falling above 100.)
func waitQuiet(ctx context.Context, e *env) {
	db, err := sql.Open("mysql", e.c.RootDSN(0))
	if err != nil {
		return
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	last, since := -1, time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var name string
		var n int
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &n); err != nil {
			return
		}
		if n < 100 {
			return
		}
		if last < 0 || n < last {
			last, since = n, time.Now()
		} else if time.Since(since) > time.Second {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.log.Warn("the server's connected threads were still falling after 30 s")
}

func randomPassword() string {
	b := make([]byte, 12)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("Cp%x", b)
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitQuery(ctx context.Context, c *sandbox.Cluster, addr string, d time.Duration) error {
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/gotest?timeout=2s", c.AppUser, c.AppPassword, addr)
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		db, err := sql.Open("mysql", dsn)
		if err == nil {
			var n int
			err = db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
			db.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return last
}

// lookTool finds a client binary on PATH or in dirs; the error names the
// Debian package that installs it.
func lookTool(name, pkg string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: install the Debian package %s (./scripts/deps.sh)", name, pkg)
}
