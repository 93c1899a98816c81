package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// MariaDB's own tests, from the Debian package mariadb-test:
//
// mtr: mariadb-test-run in extern mode (--extern host=,port=,user=,password=:
// mysqltest connects to a running server instead of starting one) on the
// main-suite tests listed in mtr-tests.txt (the ones that pass direct against
// the sandbox: a test that restarts the server, reads its error log or
// connects as a passwordless root cannot run extern), once with the text
// protocol and once with --cursor-protocol (every SELECT through a prepared
// statement with a read-only cursor: COM_STMT_EXECUTE with CURSOR_TYPE_READ_ONLY
// and COM_STMT_FETCH); tests are named main.x and cursor/main.x.
//
// clienttest: mariadb-client-test, the C API's own test program
// (tests/mysql_client_test.c), one process per test it lists with -T, each
// against a client_test_db created anew; a test passes when the process exits
// 0 within clientTestTimeout.
const (
	mtrDir            = "/usr/share/mysql/mysql-test"
	clientTestTimeout = time.Minute
)

var mtrSuite = suite{
	name: "mtr",
	check: func(e *env) error {
		if _, err := os.Stat(filepath.Join(mtrDir, "mariadb-test-run")); err != nil {
			return fmt.Errorf("%s/mariadb-test-run not found: install the Debian package mariadb-test (./scripts/deps.sh)", mtrDir)
		}
		return nil
	},
	prepare: prepareMTR,
	run:     runMTR,
}

// prepareMTR creates the mtr database that mariadb-test-run's bootstrap
// creates on the servers it starts itself (mtr.add_suppression() and
// mtr.check_testcase(), which tests call): include/mtr_warnings.sql and
// include/mtr_check.sql, whose statements end in "||".
func prepareMTR(ctx context.Context, e *env) error {
	db, err := sql.Open("mysql", e.c.RootDSN(0))
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stmts := []string{"SET sql_log_bin=0", "DROP DATABASE IF EXISTS mtr", "CREATE DATABASE mtr CHARSET=latin1"}
	for _, f := range []string{"include/mtr_warnings.sql", "include/mtr_check.sql"} {
		b, err := os.ReadFile(filepath.Join(mtrDir, f))
		if err != nil {
			return err
		}
		text := string(b)
		if i := strings.Index(text, "delimiter ||;"); i >= 0 {
			text = text[i+len("delimiter ||;"):]
		}
		for _, st := range strings.Split(text, "||") {
			var lines []string
			for _, l := range strings.Split(st, "\n") {
				if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") && !strings.HasPrefix(strings.ToLower(t), "delimiter") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 0 {
				stmts = append(stmts, strings.Join(lines, "\n"))
			}
		}
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create the mtr database: %q: %w", oneLine(q, 80), err)
		}
	}
	return nil
}

var clientTestSuite = suite{
	name: "clienttest",
	check: func(e *env) error {
		_, err := lookTool("mariadb-client-test", "mariadb-test")
		return err
	},
	run: runClientTest,
}

func mtrTestList(e *env) ([]string, error) {
	if e.mtrTests == "all" {
		return nil, nil
	}
	if e.mtrTests != "" {
		return strings.Fields(e.mtrTests), nil
	}
	b, err := os.ReadFile(filepath.Join(e.repo, "tools/compat/mtr-tests.txt"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out, nil
}

// An mtr result line: "main.alias                               [ pass ]     12".
var mtrLine = regexp.MustCompile(`^(?:\[\s*\d+%\]\s+)?(?:w\d+\s+)?(\S+\.\S+)\s+(?:'[^']*'\s+)?\[ (pass|fail|skipped|disabled) \]`)

func runMTR(ctx context.Context, e *env, t target) (result, error) {
	if !slices.Contains(e.mtrTargets, t.name) {
		e.log.Info("mtr not run on this target (-mtr-targets)", "target", t.name)
		r := newResult()
		r.excluded = true
		return r, nil
	}
	tests, err := mtrTestList(e)
	if err != nil {
		return result{}, err
	}
	root, err := sql.Open("mysql", e.c.RootDSN(0))
	if err != nil {
		return result{}, err
	}
	defer root.Close()
	r := newResult()
	for _, mode := range []struct{ prefix, flag string }{{"", ""}, {"cursor/", "--cursor-protocol"}} {
		// A failed test can leave anonymous accounts behind, which would
		// take the next logins from 127.0.0.1, and its tables in test,
		// which the next run's tests would trip over (1050).
		for _, q := range []string{"DELETE FROM mysql.global_priv WHERE user = ''", "FLUSH PRIVILEGES",
			"DROP DATABASE IF EXISTS test", "CREATE DATABASE test"} {
			if _, err := root.ExecContext(ctx, q); err != nil {
				return result{}, fmt.Errorf("reset before mtr: %s: %w", q, err)
			}
		}
		vardir := filepath.Join(e.work, "mtr-"+t.name+strings.TrimSuffix(mode.prefix, "/"))
		args := []string{"--extern", "host=" + t.host(), "--extern", "port=" + t.port(),
			"--extern", "user=" + superUser, "--extern", "password=" + e.superPass,
			"--vardir=" + vardir, "--force", "--max-test-fail=0", "--parallel=1",
			"--testcase-timeout=2", "--suite-timeout=" + fmt.Sprint(int(e.mtrTimeout.Minutes())), "--nowarnings",
			"--skip-test-list=/dev/null"}
		if mode.flag != "" {
			args = append(args, mode.flag)
		}
		if tests == nil {
			args = append(args, "--suite=main")
		} else {
			for _, tc := range tests {
				args = append(args, "main."+strings.TrimPrefix(tc, "main."))
			}
		}
		mctx, cancel := context.WithTimeout(ctx, e.mtrTimeout+time.Minute)
		cmd := exec.Command("perl", append([]string{"./mariadb-test-run"}, args...)...)
		cmd.Dir = mtrDir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		outPath := filepath.Join(e.work, "mtr-"+t.name+"-"+strings.TrimSuffix(mode.prefix, "/")+".out")
		outf, err := os.Create(outPath)
		if err != nil {
			cancel()
			return result{}, err
		}
		cmd.Stdout, cmd.Stderr = outf, outf
		if err := cmd.Start(); err != nil {
			outf.Close()
			cancel()
			return result{}, err
		}
		stop := context.AfterFunc(mctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		werr := cmd.Wait()
		stop()
		cancel()
		outf.Close()
		raw, err := os.ReadFile(outPath)
		if err != nil {
			return result{}, err
		}
		n := 0
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		last := ""
		for sc.Scan() {
			line := sc.Text()
			m := mtrLine.FindStringSubmatch(line)
			if m == nil {
				if last != "" && r.status[last] == statusFail && len(r.detail[last]) < 300 && strings.TrimSpace(line) != "" {
					r.detail[last] += strings.TrimSpace(line) + " | "
				}
				continue
			}
			name := mode.prefix + m[1]
			switch m[2] {
			case "pass":
				r.set(name, statusPass, "")
			case "fail":
				r.set(name, statusFail, "")
			default:
				r.set(name, statusSkip, strings.TrimSpace(line[len(m[0]):]))
			}
			last, n = name, n+1
		}
		e.log.Info("mtr done", "target", t.name, "mode", mode.flag, "tests", n, "exit", fmt.Sprint(werr))
		// A test that shuts the server down takes every later test with
		// it; start the node again (sandbox.Up starts the nodes that are
		// down) so the next run starts on a live server.
		if err := root.PingContext(ctx); err != nil {
			e.log.Warn("the node is down after mtr; starting it again", "err", err)
			if _, err := sandbox.Up(ctx, sandbox.Options{Dir: e.c.Dir, Log: e.log, StopWithParent: true}); err != nil {
				return r, fmt.Errorf("restart the node after mtr: %w", err)
			}
		}
		if n == 0 {
			return r, fmt.Errorf("mariadb-test-run reported no test (%v): %s", werr, lastLines(string(raw), 15))
		}
	}
	return r, nil
}

func runClientTest(ctx context.Context, e *env, t target) (result, error) {
	bin, err := lookTool("mariadb-client-test", "mariadb-test")
	if err != nil {
		return result{}, err
	}
	list, err := exec.CommandContext(ctx, bin, "--no-defaults", "-T").Output()
	if err != nil {
		return result{}, fmt.Errorf("%s -T: %w", bin, err)
	}
	vardir := filepath.Join(e.work, "clienttest-"+t.name)
	if err := os.MkdirAll(vardir, 0o755); err != nil {
		return result{}, err
	}
	// A test that dies leaves its tables in client_test_db, which the next
	// test would trip over ("Table 't1' already exists"): every test starts
	// without it.
	root, err := sql.Open("mysql", e.c.RootDSN(0))
	if err != nil {
		return result{}, err
	}
	defer root.Close()
	r := newResult()
	for _, name := range strings.Fields(string(list)) {
		if !strings.HasPrefix(name, "test_") && !strings.HasPrefix(name, "client_") {
			continue
		}
		if e.run != nil && !e.run.MatchString("clienttest/"+name) {
			continue
		}
		if _, err := root.ExecContext(ctx, "DROP DATABASE IF EXISTS client_test_db"); err != nil {
			return result{}, fmt.Errorf("drop client_test_db: %w", err)
		}
		tctx, cancel := context.WithTimeout(ctx, clientTestTimeout)
		cmd := exec.CommandContext(tctx, bin, "--no-defaults", "--host="+t.host(), "--port="+t.port(),
			"--user="+superUser, "--password="+e.superPass, "--vardir="+vardir, name)
		cmd.Dir = vardir
		out, err := cmd.CombinedOutput()
		timedOut := tctx.Err() != nil
		cancel()
		switch {
		case timedOut:
			r.set(name, statusFail, "no answer within "+clientTestTimeout.String())
		case err != nil:
			r.set(name, statusFail, lastLines(string(out), 3))
			if e.keep {
				_ = os.WriteFile(filepath.Join(vardir, name+".out"), out, 0o644)
			}
		default:
			r.set(name, statusPass, "")
		}
	}
	return r, nil
}
