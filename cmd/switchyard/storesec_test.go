package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestConfigCommandsVerifyIntegrity: operator commands take the integrity
// key from the config like the roles: `config apply` signs, and `config show`
// flags a revision forged by a direct etcd write. `config validate` warns
// without a key and refuses an embedded etcd off loopback.
func TestConfigCommandsVerifyIntegrity(t *testing.T) {
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	const env = "SWITCHYARD_TEST_INTEGRITY_KEY"
	t.Setenv(env, "cli-key-0123456789abcdef")
	dir := t.TempDir()
	cfg, p := nodelessConfig(t, dir, func(c *config.Config) { c.Etcd.IntegrityKeyEnv = env })
	if out, err := runCLI(t, "config", "validate", p); err != nil || strings.Contains(out, "integrity_key") {
		t.Fatalf("config validate with a key: %q %v", out, err)
	}

	e, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: cfg.Etcd.Embedded.DataDir,
		ClientAddress: cfg.Etcd.Embedded.ClientAddress, PeerAddress: cfg.Etcd.Embedded.PeerAddress, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if out, err := runCLI(t, "config", "apply", p, "--reason", "signed", "--config", p); err != nil {
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
		t.Fatal("config apply wrote an unsigned revision")
	}
	var r configstore.Revision
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		t.Fatal(err)
	}
	r.Rev, r.Parent, r.GuardOverridden, r.Author = 2, 1, true, "mallory@etcd"
	forged, _ := json.Marshal(r)
	if _, err := st.Update(ctx, keys.Config(), forged, kv.Version); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "config", "show", "--config", p)
	if err != nil || !strings.Contains(out, "ALARM") || !strings.Contains(out, "revision 2: integrity check failed") {
		t.Fatalf("config show over a forged revision: %q %v", out, err)
	}

	_, plain := nodelessConfig(t, t.TempDir(), nil)
	if out, err := runCLI(t, "config", "validate", plain); err != nil || !strings.Contains(out, "warning: etcd.integrity_key_env") {
		t.Fatalf("config validate without a key: %q %v", out, err)
	}
	_, open := nodelessConfig(t, t.TempDir(), func(c *config.Config) { c.Etcd.Embedded.ClientAddress = "0.0.0.0:2379" })
	if _, err := runCLI(t, "config", "validate", open); err == nil || !strings.Contains(err.Error(), "etcd.embedded.client_address") ||
		!strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("config validate with the embedded etcd on 0.0.0.0: %v", err)
	}
}
