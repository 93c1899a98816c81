package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEUpToDate fails when the README's metrics reference is not what
// the code defines: run `go run ./tools/metricsdoc -w README.md`.
func TestREADMEUpToDate(t *testing.T) {
	t.Chdir("../..")
	ms, err := Collect("internal", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 50 {
		t.Fatalf("found %d metrics in internal/ and cmd/, expected the whole set", len(ms))
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Current(string(b))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if want := Table(ms); got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("README.md's metrics reference is out of date (run `go run ./tools/metricsdoc -w README.md`); first difference at table line %d:\nREADME: %s\ncode:   %s", i+1, g, w)
			}
		}
	}
}

// TestNamesFollowConventions: base units and _total on counters, as the
// Prometheus naming guide asks; every metric has help text.
func TestNamesFollowConventions(t *testing.T) {
	t.Chdir("../..")
	ms, err := Collect("internal", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		switch {
		case !strings.HasPrefix(m.Name, "switchyard_"):
			t.Errorf("%s (%s): not prefixed switchyard_", m.Name, m.Where)
		case m.Type == "counter" && !strings.HasSuffix(m.Name, "_total"):
			t.Errorf("counter %s (%s) does not end in _total", m.Name, m.Where)
		case m.Type != "counter" && strings.HasSuffix(m.Name, "_total"):
			t.Errorf("%s %s (%s) ends in _total", m.Type, m.Name, m.Where)
		case strings.Contains(m.Name, "_ms") || strings.Contains(m.Name, "milliseconds"):
			t.Errorf("%s (%s): use seconds, the base unit", m.Name, m.Where)
		case strings.TrimSpace(m.Help) == "":
			t.Errorf("%s (%s) has no help text", m.Name, m.Where)
		}
	}
}

// TestReplace: the table goes between the markers; missing markers are an
// error.
func TestReplace(t *testing.T) {
	out, err := Replace("a\n"+Begin+"\nold\n"+End+"\nb\n", "new\n")
	if err != nil || out != "a\n"+Begin+"\nnew\n"+End+"\nb\n" {
		t.Fatalf("Replace: %q, %v", out, err)
	}
	if _, err := Replace("no markers", "x"); err == nil {
		t.Fatal("Replace without markers: no error")
	}
}
