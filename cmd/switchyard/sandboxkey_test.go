package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestSandboxUpWritesIntegrityKey: `switchyard sandbox up` makes a random
// integrity key file (0600) beside the config it writes and names it as
// etcd.integrity_key_file, so the config validates without the no-key
// warning, `config apply` signs, and a revision forged by a direct etcd
// write is refused by `config show` and listed as refused, not as history,
// by `config history`.
func TestSandboxUpWritesIntegrityKey(t *testing.T) {
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	dir := filepath.Join(t.TempDir(), "sb")
	t.Cleanup(func() {
		if out, err := runCLI(t, "sandbox", "down", "--dir", dir, "--purge"); err != nil {
			t.Errorf("sandbox down: %q %v", out, err)
		}
	})
	// The node's port: one FreeAddr also holds (the node would otherwise
	// pick a free port of its own, which a released FreeAddr may take).
	_, base, _ := strings.Cut(sandboxtest.FreeAddr(t), ":")
	if out, err := runCLI(t, "sandbox", "up", "--dir", dir, "--nodes", "1", "--base-port", base,
		"--rw-address", sandboxtest.FreeAddr(t), "--ro-address", sandboxtest.FreeAddr(t),
		"--admin-address", sandboxtest.FreeAddr(t),
		"--etcd-client-address", sandboxtest.FreeAddr(t), "--etcd-peer-address", sandboxtest.FreeAddr(t)); err != nil {
		t.Fatalf("sandbox up: %q %v", out, err)
	}
	p := filepath.Join(dir, sandbox.ConfigFile)
	keyPath := filepath.Join(dir, sandbox.IntegrityKeyFile)
	fi, err := os.Stat(keyPath)
	if err != nil {
		t.Fatalf("no integrity key file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("integrity key file mode %v, want 0600", fi.Mode().Perm())
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if abs, _ := filepath.Abs(keyPath); cfg.Etcd.IntegrityKeyFile != abs {
		t.Fatalf("etcd.integrity_key_file = %q, want %q", cfg.Etcd.IntegrityKeyFile, abs)
	}
	keys1, err := cfg.IntegrityKeys()
	if err != nil || len(keys1) != 1 || len(keys1[0]) != 64 {
		t.Fatalf("integrity keys: %d keys, %v", len(keys1), err)
	}
	if out, err := runCLI(t, "config", "validate", p); err != nil || strings.Contains(out, "integrity_key") {
		t.Fatalf("config validate of the sandbox config: %q %v", out, err)
	}

	e, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: cfg.Etcd.Embedded.DataDir,
		ClientAddress: cfg.Etcd.Embedded.ClientAddress, PeerAddress: cfg.Etcd.Embedded.PeerAddress, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if out, err := runCLI(t, "config", "apply", p, "--reason", "first", "--config", p); err != nil {
		t.Fatalf("config apply: %q %v", out, err)
	}
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	kv, err := st.Get(ctx, keys.Config())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kv.Value), `"mac":"hmac-sha256:`) {
		t.Fatal("config apply with the sandbox config wrote an unsigned revision")
	}
	var r configstore.Revision
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		t.Fatal(err)
	}
	// A hand-written revision 2 (no valid MAC), as current and in the history.
	r.Rev, r.Parent, r.Author, r.Reason = 2, 1, "mallory@etcd", "forged"
	forged, _ := json.Marshal(r)
	if _, err := st.Update(ctx, keys.Config(), forged, kv.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, keys.ConfigRevision(2), forged); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "config", "show", "--config", p)
	if err != nil || !strings.Contains(out, "ALARM") || !strings.Contains(out, "revision 2: integrity check failed") {
		t.Fatalf("config show over a forged revision: %q %v", out, err)
	}
	out, err = runCLI(t, "config", "history", "--config", p)
	if err != nil {
		t.Fatalf("config history: %q %v", out, err)
	}
	var line1, line2 string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "1"):
			line1 = l
		case strings.HasPrefix(l, "2"):
			line2 = l
		}
	}
	if !strings.Contains(line2, "REFUSED: integrity") || strings.HasPrefix(line2, "2*") {
		t.Fatalf("config history lists the forged revision as history:\n%s", out)
	}
	if strings.Contains(line1, "REFUSED") || !strings.Contains(out, "ALARM") {
		t.Fatalf("config history:\n%s", out)
	}
	out, err = runCLI(t, "config", "history", "--json", "--config", p)
	if err != nil || !strings.Contains(out, `"refused": "integrity"`) {
		t.Fatalf("config history --json: %q %v", out, err)
	}
}
