package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// The project's own check sets for clients whose suites need more than a
// server to run (checks/node/checks.js, checks/python/checks.py). A check
// script reads where to connect from COMPAT_* variables and writes one JSON
// object per check to stdout:
//
//	{"check": "mysql2/prepared_types", "status": "pass"|"fail"|"skip", "detail": "..."}
//
// Checks run one after another, each on its own connections, so one failing
// check does not take the next ones with it. A script that runs past
// scriptTimeout is killed (its process group); the checks it did not report
// count as "not run".
const scriptTimeout = 4 * time.Minute

const (
	pythonBin = "/usr/bin/python3" // Debian's, whose dist-packages hold python3-pymysql and python3-mysqldb
	nodeBin   = "node"
)

var nodeSuite = suite{
	name: "node",
	check: func(e *env) error {
		for _, tool := range [][2]string{{"node", "nodejs"}, {"npm", "npm"}} {
			if _, err := lookTool(tool[0], tool[1]); err != nil {
				return err
			}
		}
		return nil
	},
	prepare: prepareNode,
	run: func(ctx context.Context, e *env, t target) (result, error) {
		return runScript(ctx, e, t, "node", nodeBin, []string{filepath.Join(e.repo, "tools/compat/checks/node/checks.js")},
			[]string{"NODE_PATH=" + filepath.Join(nodeModules(e), "node_modules")})
	},
}

var pythonSuite = suite{
	name: "python",
	check: func(e *env) error {
		for _, mod := range [][2]string{{"pymysql", "python3-pymysql"}, {"MySQLdb", "python3-mysqldb"}} {
			if err := exec.Command(pythonBin, "-c", "import "+mod[0]).Run(); err != nil {
				return fmt.Errorf("%s cannot import %s: install the Debian package %s (./scripts/deps.sh)", pythonBin, mod[0], mod[1])
			}
		}
		return nil
	},
	run: func(ctx context.Context, e *env, t target) (result, error) {
		return runScript(ctx, e, t, "python", pythonBin, []string{filepath.Join(e.repo, "tools/compat/checks/python/checks.py")}, nil)
	},
}

// nodeModules is the cache directory npm ci installs checks/node's lock file
// into; its name is the lock file's SHA-256, so a changed lock file installs
// anew and an unchanged one is reused.
func nodeModules(e *env) string {
	lock, _ := os.ReadFile(filepath.Join(e.repo, "tools/compat/checks/node/package-lock.json"))
	sum := sha256.Sum256(lock)
	return filepath.Join(e.cache, "node-"+hex.EncodeToString(sum[:8]))
}

func prepareNode(ctx context.Context, e *env) error {
	dir := nodeModules(e)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(e.repo, "tools/compat/checks/node", f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return err
		}
	}
	e.log.Info("npm ci", "dir", dir)
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(filepath.Join(dir, "node_modules"))
		return fmt.Errorf("npm ci in %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runScript runs one check script against t and collects its JSON lines.
func runScript(ctx context.Context, e *env, t target, name, bin string, args, extraEnv []string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, scriptTimeout)
	defer cancel()
	cmd := exec.Command(bin, args...)
	cmd.Dir = e.work
	cmd.Env = append(os.Environ(),
		"COMPAT_TARGET="+t.name,
		"COMPAT_HOST="+t.host(), "COMPAT_PORT="+t.port(),
		"COMPAT_USER="+e.c.AppUser, "COMPAT_PASSWORD="+e.c.AppPassword,
		"COMPAT_USER2="+otherUser, "COMPAT_PASSWORD2="+e.otherPass,
		"COMPAT_SUPER_USER="+superUser, "COMPAT_SUPER_PASSWORD="+e.superPass,
		"COMPAT_DB="+checksDB, "COMPAT_OTHER_DB="+sandbox.OtherDatabase,
		"COMPAT_TMP="+e.work)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	errf, err := os.Create(filepath.Join(e.work, name+"-"+t.name+".stderr"))
	if err != nil {
		return result{}, err
	}
	defer errf.Close()
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	r := newResult()
	var raw io.Writer = io.Discard
	if e.keep {
		f, err := os.Create(filepath.Join(e.work, name+"-"+t.name+".jsonl"))
		if err == nil {
			defer f.Close()
			raw = f
		}
	}
	sc := bufio.NewScanner(io.TeeReader(stdout, raw))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct{ Check, Status, Detail string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Check == "" {
			continue
		}
		r.set(ev.Check, ev.Status, ev.Detail)
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		e.log.Warn("check script stopped at its time limit", "suite", name, "target", t.name, "limit", scriptTimeout)
	} else if werr != nil {
		e.log.Warn("check script exited with an error", "suite", name, "target", t.name, "err", werr, "stderr", errf.Name())
	}
	if len(r.status) == 0 {
		tail, _ := os.ReadFile(errf.Name())
		return r, fmt.Errorf("%s reported no check (%v): %s", bin, werr, lastLines(string(tail), 10))
	}
	return r, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
