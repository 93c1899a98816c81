package monitoring

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// requireEnv makes a missing promtool a failure (CI sets it), as for
// mariadbd in internal/sandbox/sandboxtest.
const requireEnv = "SWITCHYARD_REQUIRE_MARIADB"

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("promtool not found (%s=1 requires it; scripts/deps.sh installs Debian's prometheus package)", requireEnv)
		}
		t.Skipf("skipping: promtool not found (install Debian's prometheus package, scripts/deps.sh; set %s=1 to fail instead)", requireEnv)
	}
	return p
}

// TestRules runs `promtool check rules` on the rules file and `promtool
// test rules` on its unit tests: the dead-primary alert fires on the
// recorded kill, and every other alert where its test expects it.
func TestRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "switchyard.rules.yml"},
		{"test", "rules", "tests/switchyard.test.yml"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}
}

// readScrape reads a /metrics text into series → value.
func readScrape(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		out[line[:i]] = line[i+1:]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type ruleTests struct {
	Tests []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
	} `yaml:"tests"`
}

// TestRecordedInput: the first promtool test's input series are the
// recorded scrapes, value for value: 20 scrapes of before-kill.prom, 40 of
// after-kill.prom, "_" where a scrape lacks the series.
func TestRecordedInput(t *testing.T) {
	before := readScrape(t, "tests/recorded/before-kill.prom")
	after := readScrape(t, "tests/recorded/after-kill.prom")
	b, err := os.ReadFile("tests/switchyard.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	if len(rt.Tests) == 0 || !strings.HasPrefix(rt.Tests[0].Name, "recorded:") {
		t.Fatal("the first test of tests/switchyard.test.yml is not the recorded one")
	}
	scrapeLabels := regexp.MustCompile(`,?instance="[^"]*",job="[^"]*"`)
	dead := false
	for _, in := range rt.Tests[0].InputSeries {
		series := strings.Replace(scrapeLabels.ReplaceAllString(in.Series, ""), "{}", "", 1)
		get := func(m map[string]string) string {
			if v, ok := m[series]; ok {
				return v
			}
			return "_"
		}
		want := fmt.Sprintf("%sx19 %sx40", get(before), get(after))
		if in.Values != want {
			t.Errorf("input %s: values %q, the recorded scrapes give %q", in.Series, in.Values, want)
		}
		if get(before) == "_" && get(after) == "_" {
			t.Errorf("input %s is in neither recorded scrape", in.Series)
		}
		if series == `switchyard_cluster_finding{cluster="main",code="DeadPrimary"}` && get(before) == "0" && get(after) == "1" {
			dead = true
		}
	}
	if !dead {
		t.Error("the recorded input lacks the DeadPrimary finding going from 0 to 1")
	}
}

// TestDashboard: the Grafana dashboard is valid JSON, and every metric its
// panels query is one the rules' recorded scrapes or the metrics reference
// know (a renamed metric breaks the test, not the dashboard).
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`switchyard_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				m = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !strings.Contains(string(readme), "`"+m+"`") {
					t.Errorf("panel %q queries %s, which the README's metrics reference does not list", p.Title, m)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no switchyard metric")
	}
}
