package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// go-sql-driver/mysql's own test suite: the module is copied from the Go
// module cache (go mod download -json github.com/go-sql-driver/mysql@VERSION,
// Dir) to the scratch directory and `go test -json` runs there with the
// driver's MYSQL_TEST_* variables (driver_test.go: MYSQL_TEST_USER,
// MYSQL_TEST_PASS, MYSQL_TEST_PROT, MYSQL_TEST_ADDR, MYSQL_TEST_DBNAME,
// MYSQL_TEST_CONCURRENT). Subtests count as tests (Parent/Sub).

const driverModule = "github.com/go-sql-driver/mysql"

type gosqlOptions struct {
	version, run, skip string
	timeout            time.Duration
}

var gosqlSuite = suite{
	name:    "gosqldriver",
	prepare: prepareGosql,
	run:     runGosql,
}

func gosqlCopy(e *env) string { return filepath.Join(e.work, "gosqldriver") }

func prepareGosql(ctx context.Context, e *env) error {
	src, err := moduleDir(e.gosql.version)
	if err != nil {
		return err
	}
	return copyTree(src, gosqlCopy(e))
}

func runGosql(ctx context.Context, e *env, t target) (result, error) {
	return goTest(gosqlCopy(e), t.name, t.addr, e.c.AppUser, e.c.AppPassword, e.gosql.run, e.gosql.skip, e.gosql.timeout, e.keep)
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
	r := newResult()
	output := map[string][]string{}
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
			if len(output[ev.Test]) < 40 {
				output[ev.Test] = append(output[ev.Test], strings.TrimRight(ev.Output, "\n"))
			}
		}
	}
	for name, lines := range output {
		if r.status[name] == statusPass {
			continue
		}
		var keep []string
		for _, line := range lines {
			if strings.Contains(line, "_test.go:") || strings.Contains(line, "Error") {
				keep = append(keep, strings.TrimSpace(line))
			}
		}
		r.detail[name] = strings.Join(keep, " | ")
	}
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) { // a failing suite exits 1; that is a result
			return r, err
		}
	}
	return r, nil
}
