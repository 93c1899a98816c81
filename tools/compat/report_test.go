package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKnownFileParses(t *testing.T) {
	known, err := loadKnown("known.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range known {
		if !strings.HasPrefix(k.reason, "inherent: ") && !strings.HasPrefix(k.reason, "open: ") {
			t.Errorf("known.txt: %s %s %s: the reason starts with neither inherent: nor open:", k.suite, k.test, k.target)
		}
		if _, ok := suites[k.suite]; !ok {
			t.Errorf("known.txt: %q is not a suite", k.suite)
		}
	}
}

func TestLoadKnownRejectsShortLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "known.txt")
	if err := os.WriteFile(p, []byte("# comment\n\nnode mysql2/x session\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadKnown(p); err == nil || !strings.Contains(err.Error(), ":3:") {
		t.Fatalf("loadKnown: %v, want an error naming line 3", err)
	}
}

func res(target string, kv ...string) result {
	r := newResult()
	r.target = target
	for i := 0; i+1 < len(kv); i += 2 {
		r.set(kv[i], kv[i+1], "")
	}
	return r
}

func TestReportComparesTestByTest(t *testing.T) {
	known := []knownDiff{
		{suite: "node", test: "mysql2/known*", target: "*", reason: "open: x"},
		{suite: "node", test: "mysql2/tx_only", target: "transaction", reason: "inherent: y"},
	}
	cases := []struct {
		name      string
		listeners []result
		code      int
		last      string
	}{
		{"same", []result{res("session", "a", statusPass, "b", statusFail)}, 0, "compat: 1 passed, 0 failed, 0 skipped"},
		{"differs", []result{res("session", "a", statusFail, "b", statusFail)}, 1, "compat: 0 passed, 1 failed, 0 skipped"},
		{"not run counts as a difference", []result{res("session")}, 1, "compat: 0 passed, 1 failed, 0 skipped"},
		{"fails only where direct fails", []result{res("session", "a", statusPass, "b", statusPass)}, 0, "compat: 1 passed, 0 failed, 0 skipped"},
		{"known prefix", []result{res("session", "a", statusPass, "mysql2/known/sub", statusFail, "mysql2/tx_only", statusPass)}, 0, "compat: 2 passed, 0 failed, 1 skipped"},
		{"known on another target only", []result{res("session", "a", statusPass, "mysql2/known/sub", statusPass, "mysql2/tx_only", statusFail)}, 1, "compat: 2 passed, 1 failed, 0 skipped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			direct := res("direct", "a", statusPass, "b", statusFail)
			if strings.HasPrefix(tc.name, "known") {
				direct = res("direct", "a", statusPass, "mysql2/known/sub", statusPass, "mysql2/tx_only", statusPass)
			}
			var w bytes.Buffer
			code := report(&w, []suiteResults{{suite: "node", results: append([]result{direct}, tc.listeners...)}}, known)
			lines := strings.Split(strings.TrimSpace(w.String()), "\n")
			if code != tc.code || lines[len(lines)-1] != tc.last {
				t.Fatalf("code %d, last line %q; want %d, %q\n%s", code, lines[len(lines)-1], tc.code, tc.last, w.String())
			}
		})
	}
}
