package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
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
// and COM_STMT_FETCH); tests are named main.x and cursor/main.x. Each test
// runs in its own mariadb-test-run on a freshly reset server (freshServer),
// mysqltest over TCP only.
//
// clienttest: mariadb-client-test, the C API's own test program
// (tests/mysql_client_test.c), one process per test it lists with -T, each
// on a freshly reset server without client_test_db; a test passes when the
// process exits 0 within clientTestTimeout.
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
	// The dynamic settings of include/default_mysqld.cnf, which the
	// servers mtr starts itself have and the result files assume (latin1
	// as the server's charset and MyISAM as the default engine: SHOW CREATE
	// TABLE in main.case).
	stmts = append(stmts, "SET GLOBAL character_set_server = latin1", "SET GLOBAL collation_server = latin1_swedish_ci",
		"SET GLOBAL log_bin_trust_function_creators = 1", "SET GLOBAL local_infile = 1", "SET GLOBAL connect_timeout = 60",
		"SET GLOBAL key_buffer_size = 1048576", "SET GLOBAL sort_buffer_size = 262144", "SET GLOBAL max_heap_table_size = 1048576",
		"SET GLOBAL default_storage_engine = MyISAM", "SET GLOBAL use_stat_tables = preferably", "SET GLOBAL histogram_type = JSON_HB",
		"SET GLOBAL binlog_direct_non_transactional_updates = 1")
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
	deadline := time.Now().Add(e.mtrTimeout)
	for _, mode := range []struct{ prefix, flag string }{{"", ""}, {"cursor/", "--cursor-protocol"}} {
		if tests == nil {
			// -mtr-tests all: the whole main suite in one run (state
			// left by one test reaches the next).
			if err := mtrReset(ctx, e, root, t); err != nil {
				return r, err
			}
			if err := runMTROnce(ctx, e, t, mode.prefix, mode.flag, nil, time.Until(deadline), r); err != nil {
				return r, err
			}
			continue
		}
		for _, tc := range tests {
			name := "main." + strings.TrimPrefix(tc, "main.")
			if e.run != nil && !e.run.MatchString("mtr/"+mode.prefix+name) {
				continue
			}
			left := time.Until(deadline)
			if left <= 0 {
				r.set(mode.prefix+name, statusFail, fmt.Sprintf("not run: the mtr time limit (-mtr-timeout %s) was used up", e.mtrTimeout))
				continue
			}
			if err := mtrReset(ctx, e, root, t); err != nil {
				return r, err
			}
			if err := runMTROnce(ctx, e, t, mode.prefix, mode.flag, []string{name}, min(left, e.mtrCaseTimeout+time.Minute), r); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// mtrReset gives the next mtr run a fresh server state (freshServer).
func mtrReset(ctx context.Context, e *env, root *sql.DB, t target) error {
	conn, err := root.Conn(ctx)
	if err != nil {
		return fmt.Errorf("reset before mtr: %w", err)
	}
	defer conn.Close()
	if err := e.freshServer(ctx, "mtr", conn, t); err != nil {
		return fmt.Errorf("reset before mtr: %w", err)
	}
	return nil
}

// runMTROnce runs mariadb-test-run once on tests (nil: the main suite)
// within limit and records each test it reports in r, named prefix+test.
func runMTROnce(ctx context.Context, e *env, t target, prefix, flag string, tests []string, limit time.Duration, r result) error {
	vardir := filepath.Join(e.work, "mtr-"+t.name+strings.TrimSuffix(prefix, "/"))
	// mysqltest's "connect c,localhost,…" would take the unix socket,
	// which reaches no listener: mysqltest runs with --protocol=tcp (after
	// its --defaults-file, which must come first), so every connection
	// goes over TCP to the target's port. mariadb-test-run takes the
	// mysqltest program from MYSQL_TEST.
	mysqltest, err := lookTool("mariadb-test", "mariadb-test")
	if err != nil {
		return err
	}
	wrapper := filepath.Join(e.work, "mysqltest-tcp")
	script := "#!/bin/sh\nfirst=$1\nshift\nexec " + mysqltest + " \"$first\" --protocol=tcp \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return err
	}
	args := []string{"--extern", "host=" + t.host(), "--extern", "port=" + t.port(),
		"--extern", "user=" + superUser, "--extern", "password=" + e.superPass,
		"--vardir=" + vardir, "--force", "--max-test-fail=0", "--parallel=1",
		"--testcase-timeout=" + fmt.Sprint(max(1, int(e.mtrCaseTimeout.Minutes()))), "--suite-timeout=" + fmt.Sprint(max(1, int(limit.Minutes()))), "--nowarnings",
		"--skip-test-list=/dev/null"}
	if flag != "" {
		args = append(args, flag)
	}
	if tests == nil {
		args = append(args, "--suite=main")
	} else {
		args = append(args, tests...)
	}
	mctx, cancel := context.WithTimeout(ctx, limit+30*time.Second)
	defer cancel()
	cmd := exec.Command("perl", append([]string{"./mariadb-test-run"}, args...)...)
	cmd.Dir = mtrDir
	cmd.Env = append(os.Environ(), "MYSQL_TEST="+wrapper)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outPath := filepath.Join(e.work, "mtr-"+t.name+"-"+strings.TrimSuffix(prefix, "/")+".out")
	outf, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	start, _ := outf.Seek(0, io.SeekEnd)
	cmd.Stdout, cmd.Stderr = outf, outf
	if err := cmd.Start(); err != nil {
		outf.Close()
		return err
	}
	stop := context.AfterFunc(mctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	werr := cmd.Wait()
	stop()
	outf.Close()
	raw, err := os.ReadFile(outPath)
	if err != nil {
		return err
	}
	raw = raw[min(int(start), len(raw)):]
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
		name := prefix + m[1]
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
	e.log.Debug("mtr done", "target", t.name, "mode", flag, "tests", n, "exit", fmt.Sprint(werr))
	// A test that shuts the server down takes every later test with it;
	// start the node again (sandbox.Up starts the nodes that are down) so
	// the next run starts on a live server.
	root, err := sql.Open("mysql", e.c.RootDSN(0))
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.PingContext(ctx); err != nil {
		e.log.Warn("the node is down after mtr; starting it again", "err", err)
		if _, err := sandbox.Up(ctx, sandbox.Options{Dir: e.c.Dir, Log: e.log, StopWithParent: true}); err != nil {
			return fmt.Errorf("restart the node after mtr: %w", err)
		}
	}
	if n == 0 {
		if tests != nil && mctx.Err() != nil {
			for _, tc := range tests {
				r.set(prefix+tc, statusFail, fmt.Sprintf("no result within %s", limit.Round(time.Second)))
			}
			return nil
		}
		if tests != nil {
			for _, tc := range tests {
				r.set(prefix+tc, statusFail, "mariadb-test-run reported no result: "+oneLine(lastLines(string(raw), 3), 200))
			}
			return nil
		}
		return fmt.Errorf("mariadb-test-run reported no test (%v): %s", werr, lastLines(string(raw), 15))
	}
	return nil
}

// clientTestReset gives the next mariadb-client-test a fresh server state
// (freshServer): test_bug31669 deletes its account from mysql.user without
// FLUSH PRIVILEGES, which made its next run (on the next target) fail.
func clientTestReset(ctx context.Context, e *env, root *sql.DB, t target) error {
	conn, err := root.Conn(ctx)
	if err != nil {
		return fmt.Errorf("reset before mariadb-client-test: %w", err)
	}
	defer conn.Close()
	if err := e.freshServer(ctx, "clienttest", conn, t); err != nil {
		return fmt.Errorf("reset before mariadb-client-test: %w", err)
	}
	return nil
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
		if err := clientTestReset(ctx, e, root, t); err != nil {
			return result{}, err
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
