package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// nodelessConfig writes a valid config whose nodes are closed loopback
// ports (nothing answers there) and whose listeners, admin endpoint and
// embedded etcd use free ports under dir. mutate, when set, edits it first.
func nodelessConfig(t *testing.T, dir string, mutate func(*config.Config)) (*config.Config, string) {
	t.Helper()
	y := fmt.Sprintf(`
credentials:
  monitor: {user: monitor, password: monitor-secret}
  replication: {user: repl, password: repl-secret}
users:
  - name: app
    password: app-secret
clusters:
  - name: main
    nodes:
      - {name: db1, address: %s}
      - {name: db2, address: %s}
      - {name: db3, address: %s}
listeners:
  - {name: rw, address: %s, cluster: main, role: primary}
  - {name: ro, address: %s, cluster: main, role: replica}
admin:
  address: %s
etcd:
  embedded:
    data_dir: %s
    client_address: %s
    peer_address: %s
`, sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t),
		sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t),
		filepath.Join(dir, "etcd"), sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t))
	p := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(c)
		data, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c, p
}

// startUp runs `switchyard up` in the test process until the test ends and
// waits for its admin endpoint to answer.
func startUp(t *testing.T, cfgPath, adminAddr string) {
	t.Helper()
	g := &globalFlags{configPath: cfgPath, logLevel: "warn", logFormat: "text"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRoles(ctx, g, &roleFlags{}, true, true, true) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("up did not stop within 20s of its context")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := get("http://" + adminAddr + "/healthz"); code == 200 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("up returned %v before its admin endpoint answered", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("up's admin endpoint did not answer within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runCLI runs the switchyard command line with args and returns its
// output (stdout and stderr together) and error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestSecondUpOnLockedDataDir: a second `up` on the data directory of a
// running one (other ports) fails at once, naming the lock file and the
// pid holding it, instead of hanging on etcd's database lock.
func TestSecondUpOnLockedDataDir(t *testing.T) {
	dir := t.TempDir()
	first, firstPath := nodelessConfig(t, dir, nil)
	startUp(t, firstPath, first.Admin.Address)

	dir2 := t.TempDir()
	_, secondPath := nodelessConfig(t, dir2, func(c *config.Config) {
		c.Etcd.Embedded.DataDir = first.Etcd.Embedded.DataDir
	})
	g := &globalFlags{configPath: secondPath, logLevel: "warn", logFormat: "text"}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- runRoles(context.Background(), g, &roleFlags{}, true, true, true) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the second up did not return within 20s: it waits on the data directory lock")
	}
	if err == nil {
		t.Fatal("the second up on a locked data directory started")
	}
	lockFile := filepath.Join(first.Etcd.Embedded.DataDir, dataDirLockName)
	for _, want := range []string{lockFile, "process " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Logf("second up refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
}
