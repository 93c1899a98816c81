package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Test outcomes. A test that ran direct but has no outcome through a
// listener (the client hung and was stopped, or crashed) counts as "not run".
const (
	statusPass = "pass"
	statusFail = "fail"
	statusSkip = "skip"
)

// result is one suite's outcome on one target: test name → status, and a
// short detail (the error, the first differing output line) per test.
type result struct {
	target string
	status map[string]string
	detail map[string]string
	// excluded: the suite does not run on this target (mtr's -mtr-targets);
	// it is neither counted nor compared.
	excluded bool
}

func newResult() result {
	return result{status: map[string]string{}, detail: map[string]string{}}
}

func (r *result) set(name, status, detail string) {
	r.status[name] = status
	if detail != "" {
		r.detail[name] = detail
	}
}

// filter drops the tests whose "suite/name" does not match re.
func (r *result) filter(suite string, re *regexp.Regexp) {
	if re == nil {
		return
	}
	for name := range r.status {
		if !re.MatchString(suite + "/" + name) {
			delete(r.status, name)
			delete(r.detail, name)
		}
	}
}

// redact removes the sandbox's passwords from the details (clients print
// their DSN or command line when a connect fails).
func (r *result) redact(secrets ...string) {
	for name, d := range r.detail {
		for _, s := range secrets {
			if s != "" {
				d = strings.ReplaceAll(d, s, "***")
			}
		}
		r.detail[name] = d
	}
}

type suiteResults struct {
	suite   string
	results []result
}

// knownDiff is one line of known.txt: a test that passes direct and not
// through the named target, with the reason the README gives. A test ending
// in "*" matches every test with that prefix (subtests); target "*" matches
// every listener.
type knownDiff struct{ suite, test, target, reason string }

func (k knownDiff) matches(suite, test, target string) bool {
	if k.suite != suite || (k.target != "*" && k.target != target) {
		return false
	}
	if p, ok := strings.CutSuffix(k.test, "*"); ok {
		return strings.HasPrefix(test, p)
	}
	return k.test == test
}

func findKnown(known []knownDiff, suite, test, target string) (knownDiff, bool) {
	for _, k := range known {
		if k.matches(suite, test, target) {
			return k, true
		}
	}
	return knownDiff{}, false
}

// loadKnown reads the known differences: one per line, "suite test target
// reason..." separated by whitespace, # comments. A missing file is an empty
// list.
func loadKnown(path string) ([]knownDiff, error) {
	var out []knownDiff
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) < 4 {
			return nil, fmt.Errorf("%s:%d: want \"suite test target reason\", got %q", path, n, line)
		}
		out = append(out, knownDiff{suite: fs[0], test: fs[1], target: fs[2], reason: strings.Join(fs[3:], " ")})
	}
	return out, sc.Err()
}

// report prints per suite the counts per target and a table of the tests
// whose outcome through a listener differs from direct. It returns 1 when a
// test passes direct and does not pass through a listener and is not known.
// Its last line counts the comparisons (a test that passes direct, on one
// listener): "compat: N passed, N failed, N skipped", failed being the
// unknown differences and skipped the known ones.
func report(w io.Writer, reports []suiteResults, known []knownDiff) int {
	code := 0
	same, diffs, knownN := 0, 0, 0
	defer func() { fmt.Fprintf(w, "\ncompat: %d passed, %d failed, %d skipped\n", same, diffs, knownN) }()
	fmt.Fprintf(w, "\n%-12s %-12s %6s %6s %6s %8s\n", "suite", "target", "pass", "fail", "skip", "not run")
	for _, sr := range reports {
		var direct *result
		for i := range sr.results {
			if sr.results[i].target == "direct" {
				direct = &sr.results[i]
			}
		}
		for _, r := range sr.results {
			if r.excluded {
				fmt.Fprintf(w, "%-12s %-12s %6s\n", sr.suite, r.target, "not run on this target")
				continue
			}
			n := map[string]int{}
			for _, s := range r.status {
				n[s]++
			}
			notRun := 0
			if direct != nil {
				for name := range direct.status {
					if _, ok := r.status[name]; !ok {
						notRun++
					}
				}
			}
			fmt.Fprintf(w, "%-12s %-12s %6d %6d %6d %8d\n", sr.suite, r.target, n[statusPass], n[statusFail], n[statusSkip], notRun)
		}
	}
	for _, sr := range reports {
		var direct *result
		for i := range sr.results {
			if sr.results[i].target == "direct" {
				direct = &sr.results[i]
			}
		}
		if direct == nil {
			continue
		}
		type row struct {
			test   string
			states []string
			known  string
			detail string
		}
		var rows []row
		var names []string
		for name := range direct.status {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if direct.status[name] != statusPass {
				continue
			}
			rw := row{test: name}
			differs, allKnown := false, true
			for _, r := range sr.results {
				if r.target == "direct" || r.excluded {
					continue
				}
				st := r.status[name]
				if st == "" {
					st = "not run"
				}
				rw.states = append(rw.states, r.target+"="+st)
				if st == statusPass {
					same++
					continue
				}
				differs = true
				if k, ok := findKnown(known, sr.suite, name, r.target); ok {
					rw.known = k.reason
					knownN++
				} else {
					allKnown = false
					diffs++
				}
				if d := r.detail[name]; d != "" && rw.detail == "" {
					rw.detail = r.target + ": " + d
				}
			}
			if !differs {
				continue
			}
			if !allKnown {
				code = 1
				rw.known = ""
			}
			rows = append(rows, rw)
		}
		if len(rows) == 0 {
			fmt.Fprintf(w, "\n%s: every test that passes direct passes through every listener\n", sr.suite)
			continue
		}
		fmt.Fprintf(w, "\n%s: %d tests pass direct but not through a listener:\n", sr.suite, len(rows))
		for _, rw := range rows {
			tag := "DIFF"
			if rw.known != "" {
				tag = "known"
			}
			fmt.Fprintf(w, "  %-5s %-50s %s\n", tag, rw.test, strings.Join(rw.states, " "))
			if rw.known != "" {
				fmt.Fprintf(w, "        reason: %s\n", rw.known)
			}
			if rw.detail != "" {
				fmt.Fprintf(w, "        %s\n", oneLine(rw.detail, 300))
			}
		}
	}
	return code
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
