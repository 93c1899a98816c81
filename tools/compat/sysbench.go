package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// sysbench: oltp_read_write for sysbenchSeconds on four 10,000-row tables,
// once in sysbench's default prepared-statement mode and once with
// --db-ps-mode=disable (text protocol). A run passes when sysbench exits 0
// (it stops at the first error outside its default ignore list: 1213
// deadlock, 1020 record changed, 1205 lock wait timeout, which InnoDB gives
// direct too and sysbench retries), made transactions, and reconnected
// never; the detail gives the count of ignored errors. The tables are prepared
// direct once (prepare is not what is compared) and dropped at the end.
const (
	sysbenchSeconds = 5
	sysbenchThreads = 2
)

var sysbenchSuite = suite{
	name: "sysbench",
	check: func(e *env) error {
		_, err := lookTool("sysbench", "sysbench")
		return err
	},
	prepare: func(ctx context.Context, e *env) error {
		out, err := sysbench(ctx, e, target{name: "direct", addr: e.c.Nodes[0].Address}, "cleanup")
		if err != nil {
			return fmt.Errorf("sysbench cleanup: %w: %s", err, lastLines(out, 5))
		}
		out, err = sysbench(ctx, e, target{name: "direct", addr: e.c.Nodes[0].Address}, "prepare")
		if err != nil {
			return fmt.Errorf("sysbench prepare: %w: %s", err, lastLines(out, 5))
		}
		return nil
	},
	run: runSysbench,
}

var (
	sysbenchIgnored    = regexp.MustCompile(`ignored errors:\s+(\d+)`)
	sysbenchReconnects = regexp.MustCompile(`reconnects:\s+(\d+)`)
	sysbenchTx         = regexp.MustCompile(`transactions:\s+(\d+)`)
)

func runSysbench(ctx context.Context, e *env, t target) (result, error) {
	r := newResult()
	for _, mode := range []struct{ name, flag string }{{"oltp_read_write/prepared", ""}, {"oltp_read_write/ps-mode-disable", "--db-ps-mode=disable"}} {
		args := []string{"run", fmt.Sprintf("--time=%d", sysbenchSeconds), fmt.Sprintf("--threads=%d", sysbenchThreads)}
		if mode.flag != "" {
			args = append(args, mode.flag)
		}
		out, err := sysbench(ctx, e, t, args...)
		if e.keep {
			_ = os.WriteFile(filepath.Join(e.work, "sysbench-"+t.name+"-"+strings.ReplaceAll(mode.name, "/", "_")+".out"), []byte(out), 0o644)
		}
		num := func(re *regexp.Regexp) string {
			if m := re.FindStringSubmatch(out); m != nil {
				return m[1]
			}
			return "?"
		}
		ign, rec, tx := num(sysbenchIgnored), num(sysbenchReconnects), num(sysbenchTx)
		detail := fmt.Sprintf("transactions %s, ignored errors %s, reconnects %s", tx, ign, rec)
		switch {
		case err != nil:
			r.set(mode.name, statusFail, fmt.Sprintf("sysbench: %v: %s", err, lastLines(out, 3)))
		case rec != "0" || tx == "?" || tx == "0" || ign == "?":
			r.set(mode.name, statusFail, detail)
		default:
			r.set(mode.name, statusPass, detail)
		}
		e.log.Info("sysbench", "target", t.name, "mode", mode.name, "result", detail)
	}
	return r, nil
}

func sysbench(ctx context.Context, e *env, t target, cmdArgs ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := []string{"oltp_read_write", "--db-driver=mysql",
		"--mysql-host=" + t.host(), "--mysql-port=" + t.port(),
		"--mysql-user=" + e.c.AppUser, "--mysql-password=" + e.c.AppPassword,
		"--mysql-db=" + sandbox.SysbenchDatabase, "--tables=4", "--table-size=10000"}
	args = append(args, cmdArgs...)
	out, err := exec.CommandContext(ctx, "sysbench", args...).CombinedOutput()
	return string(out), err
}
