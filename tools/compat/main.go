// Command compat runs go-sql-driver/mysql's own test suite against a one-node
// MariaDB sandbox, once direct and once through each of two rw listeners of a
// `switchyard up` process (pooling: session and pooling: transaction), and
// prints pass/fail/skip counts per target and the tests that pass direct but
// fail through a listener.
//
// It starts a sandbox in -dir (removed at the end), writes a config with the
// listeners "rw-session" and "rw-transaction", starts bin/switchyard up with
// it, copies the driver's module (go mod download -json
// github.com/go-sql-driver/mysql@VERSION, Dir) to a temporary directory and
// runs `go test -json` there with the driver's MYSQL_TEST_* variables
// (driver_test.go: MYSQL_TEST_USER, MYSQL_TEST_PASS, MYSQL_TEST_PROT,
// MYSQL_TEST_ADDR, MYSQL_TEST_DBNAME, MYSQL_TEST_CONCURRENT). Everything it
// started is stopped by pid. Exit status 1 when a test passes direct and fails
// through a listener, 2 on a setup error.
//
// Usage: go run ./tools/compat [-dir .compat] [-version v1.10.1] [-run REGEXP] [-skip REGEXP] [-targets direct,session,transaction] [-keep]
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
)

const driverModule = "github.com/go-sql-driver/mysql"

func main() {
	dir := flag.String("dir", ".compat", "sandbox directory (created, then removed)")
	version := flag.String("version", "v1.10.1", "go-sql-driver/mysql version to test")
	bin := flag.String("switchyard", "bin/switchyard", "switchyard binary")
	run := flag.String("run", "", "go test -run pattern for the driver suite (\"\" = all)")
	// TestConnectorReturnsTimeout dials 1.1.1.1:1234 and expects the dial to
	// time out; where something answers that address (a transparent proxy on
	// the build machine) the driver reads a handshake with a nil logger and the
	// panic aborts the whole suite, so it is skipped by default.
	skip := flag.String("skip", "^TestConnectorReturnsTimeout$", "go test -skip pattern for the driver suite")
	targets := flag.String("targets", "direct,session,transaction", "comma-separated targets: direct, session, transaction")
	timeout := flag.Duration("timeout", 10*time.Minute, "go test -timeout per target")
	keep := flag.Bool("keep", false, "leave the go test output files in the driver copy and print its path")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	code, err := runCompat(log, *dir, *version, *bin, *run, *skip, strings.Split(*targets, ","), *timeout, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// result is one target's outcome: test name → "pass", "fail" or "skip"
// (subtests named Parent/Sub).
type result struct {
	target string
	status map[string]string
	output map[string][]string
}

func runCompat(log *slog.Logger, dir, version, bin, run, skip string, targets []string, timeout time.Duration, keep bool) (int, error) {
	ctx := context.Background()
	absBin, err := filepath.Abs(bin)
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(absBin); err != nil {
		return 0, fmt.Errorf("switchyard binary %s: %w (run make build)", bin, err)
	}
	log.Info("starting sandbox", "dir", dir)
	c, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, Nodes: 1, Log: log, StopWithParent: true})
	if err != nil {
		return 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sandbox.Down(dctx, c.Dir, true); err != nil {
			log.Error("sandbox down", "err", err)
		}
	}()

	db, err := sql.Open("mysql", c.DSN(0, c.AppUser, c.AppPassword, ""))
	if err != nil {
		return 0, err
	}
	_, err = db.Exec("CREATE DATABASE IF NOT EXISTS gotest")
	db.Close()
	if err != nil {
		return 0, fmt.Errorf("create database gotest: %w", err)
	}

	cfg := c.Config()
	sessAddr, txAddr := c.ListenerRW, freeAddr()
	cfg.Listeners = []config.Listener{
		{Name: "rw-session", Address: sessAddr, Cluster: sandbox.ClusterName, Role: config.RolePrimary, Pooling: config.PoolingSession},
		{Name: "rw-transaction", Address: txAddr, Cluster: sandbox.ClusterName, Role: config.RolePrimary, Pooling: config.PoolingTransaction},
	}
	// Both listeners offer TLS with the sandbox certificate, as the
	// sandbox's own listeners do, and backend connections use TLS too: the
	// driver's TestTLS reads Ssl_cipher, which is the backend session's.
	for i := range cfg.Listeners {
		cfg.Listeners[i].TLS = c.Config().Listeners[0].TLS
	}
	cfg.Clusters[0].TLS = config.ClusterTLS{Enabled: true, CAFile: c.TLS().CA, Verify: config.VerifyFull}
	data, err := cfg.Marshal()
	if err != nil {
		return 0, err
	}
	cfgPath := filepath.Join(c.Dir, "compat.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(c.Dir, "switchyard.log"))
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
	log.Info("switchyard up started", "pid", up.Process.Pid, "log", logf.Name())
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
	addrs := map[string]string{"direct": c.Nodes[0].Address, "session": sessAddr, "transaction": txAddr}
	for _, t := range []string{"session", "transaction"} {
		if err := waitQuery(ctx, c, addrs[t], 60*time.Second); err != nil {
			return 0, fmt.Errorf("listener %s (%s) not ready: %w; see %s", t, addrs[t], err, logf.Name())
		}
	}

	src, err := moduleDir(version)
	if err != nil {
		return 0, err
	}
	work, err := os.MkdirTemp("", "compat-gosqldriver-")
	if err != nil {
		return 0, err
	}
	if !keep {
		defer os.RemoveAll(work)
	}
	if err := copyTree(src, work); err != nil {
		return 0, err
	}

	var results []result
	for _, t := range targets {
		addr, ok := addrs[t]
		if !ok {
			return 0, fmt.Errorf("-targets: %q is not a target (direct, session, transaction)", t)
		}
		log.Info("running driver suite", "target", t, "addr", addr)
		start := time.Now()
		r, err := goTest(work, t, addr, c.AppUser, c.AppPassword, run, skip, timeout, keep)
		if err != nil {
			return 0, err
		}
		log.Info("driver suite done", "target", t, "seconds", time.Since(start).Round(time.Second).Seconds())
		redact(r, c.AppPassword)
		results = append(results, r)
	}
	if keep {
		fmt.Println("driver copy and outputs kept in", work)
	}
	return report(os.Stdout, results), nil
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

func moduleDir(version string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", driverModule+"@"+version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", driverModule, version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", err
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", driverModule, version, m.Error)
	}
	return m.Dir, nil
}

// copyTree copies the module (read-only in the cache) into dst, writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// goTest runs the driver's suite in dir against addr and returns every
// test's final action from go test -json.
func goTest(dir, target, addr, user, pass, run, skip string, timeout time.Duration, keep bool) (result, error) {
	args := []string{"test", "-json", "-count=1", "-timeout", timeout.String()}
	if run != "" {
		args = append(args, "-run", run)
	}
	if skip != "" {
		args = append(args, "-skip", skip)
	}
	args = append(args, ".")
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"MYSQL_TEST_USER="+user, "MYSQL_TEST_PASS="+pass, "MYSQL_TEST_PROT=tcp",
		"MYSQL_TEST_ADDR="+addr, "MYSQL_TEST_DBNAME=gotest", "MYSQL_TEST_CONCURRENT=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	var raw io.Writer = io.Discard
	if keep {
		f, err := os.Create(filepath.Join(dir, "gotest-"+target+".json"))
		if err != nil {
			return result{}, err
		}
		defer f.Close()
		raw = f
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	r := result{target: target, status: map[string]string{}, output: map[string][]string{}}
	sc := bufio.NewScanner(io.TeeReader(stdout, raw))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			r.status[ev.Test] = ev.Action
		case "output":
			if len(r.output[ev.Test]) < 40 {
				r.output[ev.Test] = append(r.output[ev.Test], strings.TrimRight(ev.Output, "\n"))
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) { // a failing suite exits 1; that is a result
			return r, err
		}
	}
	return r, nil
}

// redact removes the sandbox's password from the kept output lines (the
// driver's tests print their DSN when a connect fails).
func redact(r result, pass string) {
	for name, lines := range r.output {
		for i, l := range lines {
			lines[i] = strings.ReplaceAll(l, pass, "***")
		}
		r.output[name] = lines
	}
}

// report prints the counts per target and the tests that pass direct but not
// through a listener; it returns 1 when there are such tests.
func report(w io.Writer, results []result) int {
	fmt.Fprintf(w, "\n%-12s %6s %6s %6s\n", "target", "pass", "fail", "skip")
	var direct *result
	for i, r := range results {
		n := map[string]int{}
		for _, s := range r.status {
			n[s]++
		}
		fmt.Fprintf(w, "%-12s %6d %6d %6d\n", r.target, n["pass"], n["fail"], n["skip"])
		if r.target == "direct" {
			direct = &results[i]
		}
	}
	if direct == nil {
		return 0
	}
	code := 0
	for _, r := range results {
		if r.target == "direct" {
			continue
		}
		var diff []string
		for name, s := range direct.status {
			if s == "pass" && r.status[name] != "pass" {
				diff = append(diff, name)
			}
		}
		sort.Strings(diff)
		if len(diff) == 0 {
			fmt.Fprintf(w, "\n%s: every test that passes direct passes\n", r.target)
			continue
		}
		code = 1
		fmt.Fprintf(w, "\n%s: %d tests pass direct but not here:\n", r.target, len(diff))
		for _, name := range diff {
			st := r.status[name]
			if st == "" {
				st = "not run"
			}
			fmt.Fprintf(w, "  %s (%s)\n", name, st)
			for _, line := range r.output[name] {
				if strings.Contains(line, "_test.go:") || strings.Contains(line, "Error") {
					fmt.Fprintf(w, "      %s\n", strings.TrimSpace(line))
				}
			}
		}
	}
	return code
}
