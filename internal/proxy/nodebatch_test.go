package proxy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// nodeBatch installs test/nodebatch (npm ci, into a temporary directory)
// and returns a function running its batch.js against an address. Without
// node or npm, or when the npm registry cannot be reached, the test skips
// (or fails under SWITCHYARD_REQUIRE_MARIADB=1).
func nodeBatch(t *testing.T) func(t *testing.T, addr, user, password string, rows int) nodeBatchResult {
	t.Helper()
	node, npm := lookTool(t, "node"), lookTool(t, "npm")
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "batch.js"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "test", "nodebatch", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv(sandboxtest.RequireEnv) == "1" {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
		t.Skipf("npm ci failed (registry unreachable?): %v\n%s", err, out)
	}
	return func(t *testing.T, addr, user, password string, rows int) nodeBatchResult {
		t.Helper()
		host, port := hostPort(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "batch.js", host, port, user, password, "sbtest", strconv.Itoa(rows))
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("batch.js against %s: %v\n%s%s", addr, err, out, stderr)
		}
		var r nodeBatchResult
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("batch.js output %q: %v", out, err)
		}
		return r
	}
}

type nodeBatchResult struct {
	Ms       float64 `json:"ms"`
	Affected int     `json:"affected"`
	Count    int     `json:"count"`
	Types    []struct {
		Name         string `json:"name"`
		JSON         bool   `json:"json"`
		DataTypeName string `json:"dataTypeName"`
	} `json:"types"`
	// JSONValue is the JSON column's value: an object when the connector
	// saw the column's "json" format in the extended metadata.
	JSONValue any `json:"jsonValue"`
	// Compression is SHOW STATUS LIKE 'Compression' on a compressed
	// connection, ZRows the rows of a prepared SELECT over it.
	Compression string `json:"compression"`
	ZRows       int    `json:"zrows"`
}

// mariadb-connector-nodejs batch() of 20 000 rows through the rw listener
// and straight to the primary: all rows inserted through few commands
// (COM_STMT_BULK_EXECUTE, not one execute per row), and the JSON and POINT
// columns keep the type names of the extended metadata; a compressed
// connection (with CLIENT_DEPRECATE_EOF) reports
// Compression ON and reads a prepared result. Times are logged.
func TestNodeConnectorBatch(t *testing.T) {
	run := nodeBatch(t)
	poolings(t, func(t *testing.T, pooling func(*config.Config)) { testNodeConnectorBatch(t, pooling, run) })
}

func testNodeConnectorBatch(t *testing.T, pooling func(*config.Config), run func(*testing.T, string, string, string, int) nodeBatchResult) {
	h := newHarness(t, pooling)
	const rows = 20000
	direct := run(t, h.c.Nodes[0].Address, h.c.AppUser, h.c.AppPassword, rows)
	before := listenerQueries(t, h, "rw")
	via := run(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, rows)
	commands := listenerQueries(t, h, "rw") - before
	t.Logf("batch() of %d rows: %.0f ms direct, %.0f ms through the proxy (%.0f commands)", rows, direct.Ms, via.Ms, commands)
	if via.Affected != rows || via.Count != rows {
		t.Fatalf("through the proxy: %d affected, %d rows in the table, want %d", via.Affected, via.Count, rows)
	}
	if commands > 100 {
		t.Fatalf("the batch took %.0f commands through the proxy: not sent as bulk executes", commands)
	}
	if len(via.Types) != 2 || !via.Types[0].JSON || via.Types[1].DataTypeName != "point" {
		t.Fatalf("extended type information through the proxy: %+v (direct %+v)", via.Types, direct.Types)
	}
	if obj, ok := via.JSONValue.(map[string]any); !ok || obj["k"] != float64(1) {
		t.Fatalf("the JSON column came back as %#v, not as an object", via.JSONValue)
	}
	if via.Compression != "ON" || direct.Compression != "ON" || via.ZRows != 3000 {
		t.Fatalf("compressed connection: status %q through the proxy (%q direct), %d rows", via.Compression, direct.Compression, via.ZRows)
	}
}

// listenerQueries reads switchyard_proxy_queries_total{listener=name}.
func listenerQueries(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_proxy_queries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" && l.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no switchyard_proxy_queries_total for listener %s", name)
	return 0
}
