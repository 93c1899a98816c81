// Command metricsdoc prints the README's metrics reference (a Markdown
// table: metric, type, labels, meaning) from the collectors defined in the
// code: every prometheus.New{Counter,Gauge,Histogram,Summary}[Vec] call with
// literal Opts and every prometheus.NewDesc call in the non-test Go files
// under the given directories.
//
// Usage:
//
//	go run ./tools/metricsdoc [dir ...]            print the table (dirs: internal cmd)
//	go run ./tools/metricsdoc -w README.md [dir ...] rewrite the table between
//	                                                 <!-- metrics:begin --> and <!-- metrics:end -->
//
// TestREADMEUpToDate fails when the README's table differs from the code.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Metric is one collector found in the code.
type Metric struct {
	Name, Type, Help string
	Labels           []string
	// Where is the file that defines it (slash-separated, relative).
	Where string
}

func main() {
	write := flag.String("w", "", "rewrite the table in this Markdown `file` between the metrics markers")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"internal", "cmd"}
	}
	ms, err := Collect(dirs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metricsdoc:", err)
		os.Exit(1)
	}
	table := Table(ms)
	if *write == "" {
		fmt.Print(table)
		return
	}
	b, err := os.ReadFile(*write)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metricsdoc:", err)
		os.Exit(1)
	}
	out, err := Replace(string(b), table)
	if err != nil {
		fmt.Fprintf(os.Stderr, "metricsdoc: %s: %v\n", *write, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*write, []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "metricsdoc:", err)
		os.Exit(1)
	}
}

// Markers around the generated table.
const (
	Begin = "<!-- metrics:begin -->"
	End   = "<!-- metrics:end -->"
)

// Replace puts table between the markers of doc; an error says which
// marker is missing.
func Replace(doc, table string) (string, error) {
	i := strings.Index(doc, Begin)
	j := strings.Index(doc, End)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %s ... %s markers", Begin, End)
	}
	return doc[:i+len(Begin)] + "\n" + table + doc[j:], nil
}

// Current returns the table between the markers of doc.
func Current(doc string) (string, error) {
	i := strings.Index(doc, Begin)
	j := strings.Index(doc, End)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %s ... %s markers", Begin, End)
	}
	return strings.TrimPrefix(doc[i+len(Begin):j], "\n"), nil
}

// Table renders ms as a Markdown table sorted by name.
func Table(ms []Metric) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning | defined in |\n|---|---|---|---|---|\n")
	for _, m := range ms {
		labels := "—"
		if len(m.Labels) > 0 {
			labels = "`" + strings.Join(m.Labels, "`, `") + "`"
		}
		help := strings.ReplaceAll(m.Help, "|", `\|`)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", m.Name, m.Type, labels, help, m.Where)
	}
	return b.String()
}

// Collect parses the non-test Go files under dirs and returns their
// metrics sorted by name. A metric defined twice with the same name (a
// collector shared by several instances) is listed once; one whose
// literal Name or Help cannot be read is an error naming its position.
func Collect(dirs ...string) ([]Metric, error) {
	seen := map[string]Metric{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			var ferr error
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || ferr != nil {
					return ferr == nil
				}
				m, ok, err := metricOf(call)
				if err != nil {
					ferr = fmt.Errorf("%s: %w", fset.Position(call.Pos()), err)
					return false
				}
				if ok {
					m.Where = filepath.ToSlash(path)
					if old, dup := seen[m.Name]; !dup || old.Where > m.Where {
						seen[m.Name] = m
					}
				}
				return true
			})
			return ferr
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]Metric, 0, len(seen))
	for _, m := range seen {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// kinds maps constructor names to the metric type.
var kinds = map[string]string{
	"NewCounter": "counter", "NewCounterVec": "counter",
	"NewGauge": "gauge", "NewGaugeVec": "gauge",
	"NewHistogram": "histogram", "NewHistogramVec": "histogram",
	"NewSummary": "summary", "NewSummaryVec": "summary",
}

func metricOf(call *ast.CallExpr) (Metric, bool, error) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return Metric{}, false, nil
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
		return Metric{}, false, nil
	}
	fn := sel.Sel.Name
	if fn == "NewDesc" {
		if len(call.Args) < 3 {
			return Metric{}, false, nil
		}
		name, err := str(call.Args[0])
		if err != nil {
			return Metric{}, false, fmt.Errorf("NewDesc name: %w", err)
		}
		help, err := str(call.Args[1])
		if err != nil {
			return Metric{}, false, fmt.Errorf("NewDesc help of %s: %w", name, err)
		}
		// A Desc's type is given where its metrics are made; the ones
		// in this code base are gauges (MustNewConstMetric GaugeValue).
		return Metric{Name: name, Type: "gauge", Help: help, Labels: strs(call.Args[2])}, true, nil
	}
	kind, ok := kinds[fn]
	if !ok || len(call.Args) == 0 {
		return Metric{}, false, nil
	}
	lit, ok := call.Args[0].(*ast.CompositeLit)
	if !ok {
		return Metric{}, false, fmt.Errorf("prometheus.%s with Opts that are not a literal: metricsdoc cannot read them", fn)
	}
	m := Metric{Type: kind}
	var ns, sub string
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil {
			continue
		}
		var err error
		switch key.Name {
		case "Name":
			m.Name, err = str(kv.Value)
		case "Help":
			m.Help, err = str(kv.Value)
		case "Namespace":
			ns, err = str(kv.Value)
		case "Subsystem":
			sub, err = str(kv.Value)
		}
		if err != nil {
			return Metric{}, false, fmt.Errorf("prometheus.%s %s: %w", fn, key.Name, err)
		}
	}
	for _, p := range []string{sub, ns} {
		if p != "" {
			m.Name = p + "_" + m.Name
		}
	}
	if m.Name == "" {
		return Metric{}, false, fmt.Errorf("prometheus.%s without a literal Name", fn)
	}
	if len(call.Args) > 1 {
		m.Labels = strs(call.Args[1])
	}
	return m, true, nil
}

// str evaluates a string literal or a + concatenation of them.
func str(e ast.Expr) (string, error) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			return strconv.Unquote(v.Value)
		}
	case *ast.BinaryExpr:
		if v.Op == token.ADD {
			a, err := str(v.X)
			if err != nil {
				return "", err
			}
			b, err := str(v.Y)
			if err != nil {
				return "", err
			}
			return a + b, nil
		}
	case *ast.ParenExpr:
		return str(v.X)
	}
	return "", fmt.Errorf("not a string literal")
}

// strs reads a []string{...} literal of string literals (nil otherwise).
func strs(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		if s, err := str(el); err == nil {
			out = append(out, s)
		}
	}
	return out
}
