package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestStartWaitsForTheStore: a controller and a proxy (`switchyard up`
// with etcd.endpoints) started while their etcd does not answer wait for
// it instead of exiting, and serve once it is started: the listeners take
// a query, /readyz is 200.
func TestStartWaitsForTheStore(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
	dir := t.TempDir()
	clientAddr, peerAddr := sandboxtest.FreeAddr(t), sandboxtest.FreeAddr(t)
	cfg := sb.Config()
	cfg.Etcd.Endpoints = []string{"http://" + clientAddr}
	cfg.Etcd.DialTimeout = config.Duration(500 * time.Millisecond)
	cfg.Admin.Address = sandboxtest.FreeAddr(t)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = sandboxtest.FreeAddr(t)
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	g := &globalFlags{configPath: cfgPath, logLevel: "warn", logFormat: "text"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRoles(ctx, g, &roleFlags{}, false, true, true) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the process did not stop within 20s of its context")
		}
	}()
	// Nothing answers on the etcd address for 3 s: the process waits.
	select {
	case err := <-done:
		t.Fatalf("the process returned while etcd did not answer: %v", err)
	case <-time.After(3 * time.Second):
	}
	e, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: filepath.Join(dir, "etcd"), ClientAddress: clientAddr, PeerAddress: peerAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	started := time.Now()
	admin := "http://" + cfg.Admin.Address
	for {
		if code, _ := get(admin + "/readyz"); code == 200 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the process returned after etcd started: %v", err)
		default:
		}
		if time.Since(started) > 30*time.Second {
			code, body := get(admin + "/readyz")
			t.Fatalf("not ready 30s after etcd started: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var rw string
	for _, l := range cfg.Listeners {
		if l.Role == "primary" {
			rw = l.Address
		}
	}
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=2s", sb.AppUser, sb.AppPassword, rw))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("query through the proxy after etcd started: %v", err)
	}
	t.Logf("ready %s after etcd started", time.Since(started).Round(time.Millisecond))
}
