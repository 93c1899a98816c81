package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The mariadb command-line client: every tools/compat/cli/*.sql runs with
// `mariadb --batch --force --show-warnings` and its stdout, stderr and exit
// status are kept; `status` runs `mariadb -e status`. A test passes on a
// target when it finished within cliTimeout and, for a listener, its
// normalised output equals direct's (direct passes when it finished). The
// snippets avoid values that differ by connection (CONNECTION_ID(), ports);
// normalise() masks the rest (status's connection id, uptime, counters, the
// TCP port, the TLS cipher suite).
const cliTimeout = time.Minute

var cliSuite = suite{
	name: "cli",
	check: func(e *env) error {
		_, err := lookTool("mariadb", "mariadb-client")
		return err
	},
	run: runCLI,
}

func runCLI(ctx context.Context, e *env, t target) (result, error) {
	files, err := filepath.Glob(filepath.Join(e.repo, "tools/compat/cli/*.sql"))
	if err != nil || len(files) == 0 {
		return result{}, fmt.Errorf("no tools/compat/cli/*.sql (%v)", err)
	}
	sort.Strings(files)
	var csv strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&csv, "%d,line %d\n", i, i)
	}
	if err := os.WriteFile(filepath.Join(e.work, "cli-load.csv"), []byte(csv.String()), 0o644); err != nil {
		return result{}, err
	}
	r := newResult()
	type test struct {
		name  string
		input []byte
		args  []string
	}
	var tests []test
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return result{}, err
		}
		tests = append(tests, test{name: strings.TrimSuffix(filepath.Base(f), ".sql"), input: b,
			args: []string{"--batch", "--force", "--show-warnings", "--local-infile=1", checksDB}})
	}
	tests = append(tests, test{name: "status", args: []string{"-e", "status"}})
	for _, tc := range tests {
		out, status := mariadbCLI(ctx, e, t, tc.input, tc.args...)
		norm := normalise(out) + "\n" + status
		if e.keep {
			_ = os.WriteFile(filepath.Join(e.work, "cli-"+t.name+"-"+tc.name+".out"), []byte(norm), 0o644)
		}
		if status == "timeout" {
			r.set(tc.name, statusFail, "no answer within "+cliTimeout.String())
			continue
		}
		if t.name == "direct" {
			e.cliDirect[tc.name] = norm
			r.set(tc.name, statusPass, "")
			continue
		}
		want, ok := e.cliDirect[tc.name]
		if !ok {
			r.set(tc.name, statusSkip, "not run direct")
			continue
		}
		if norm == want {
			r.set(tc.name, statusPass, "")
		} else {
			r.set(tc.name, statusFail, firstDiff(want, norm))
		}
	}
	return r, nil
}

func mariadbCLI(ctx context.Context, e *env, t target, input []byte, args ...string) (string, string) {
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	base := []string{"--no-defaults", "--host=" + t.host(), "--port=" + t.port(), "--protocol=tcp",
		"--user=" + e.c.AppUser, "--password=" + e.c.AppPassword, "--max-allowed-packet=64M", "--default-character-set=utf8mb4"}
	cmd := exec.CommandContext(ctx, "mariadb", append(base, args...)...)
	cmd.Dir = e.work
	cmd.Stdin = bytes.NewReader(input)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return out.String(), "timeout"
	case err != nil:
		return out.String(), "exit: " + err.Error()
	}
	return out.String(), "exit 0"
}

var normalisers = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`(?m)^(Connection id|Uptime|TCP port|Threads|Current pager|Connection):.*$`), "$1: *"},
	{regexp.MustCompile(`(?m)^mariadb from .*$`), "mariadb from *"},
	// The proxy's TLS stack picks its own cipher suite (Go's crypto/tls
	// prefers AES-128-GCM, the server's OpenSSL AES-256-GCM).
	{regexp.MustCompile(`(?m)^(SSL:\s+Cipher in use is) .*$`), "$1 *"},
}

func normalise(s string) string {
	for _, n := range normalisers {
		s = n.re.ReplaceAllString(s, n.repl)
	}
	return s
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d: direct %q, here %q", i+1, a, b)
		}
	}
	return ""
}
