package controller

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A wrong monitor password is logged as the cause with what to do, once
// per node while it lasts (not once per probe round), and its end once.
func TestMonitorAccessDeniedLoggedOnce(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
	st := topotest.NewStore(t)
	cfg := testConfig(c)
	cfg.Credentials.Monitor = config.Credential{User: c.MonitorUser, Password: "not-the-monitor-password"}
	var logs syncBuffer
	ctl, err := New(Options{Config: cfg, Store: st, Keys: testKeys, ID: "ctl-a",
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	const line = `msg="access denied for monitor user on node: check credentials.monitor`
	count := func(node string) int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, line) && strings.Contains(l, "node="+node+" ") {
				n++
			}
		}
		return n
	}
	// Wait for the first line of each node, then for at least 8 more
	// probe rounds.
	deadline := time.Now().Add(20 * time.Second)
	for (count("node1") == 0 || count("node2") == 0) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(8 * testInterval)
	for _, n := range []string{"node1", "node2"} {
		if got := count(n); got != 1 {
			t.Fatalf("%s: %d access-denied lines, want exactly 1:\n%s", n, got, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "user="+c.MonitorUser) {
		t.Fatalf("the line does not name the monitor user %s:\n%s", c.MonitorUser, logs.String())
	}
	// The right password: one "work again" line per node.
	fixed := testConfig(c)
	ctl.SetConfig(fixed)
	deadline = time.Now().Add(20 * time.Second)
	for strings.Count(logs.String(), `msg="monitor user's probes work again"`) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := strings.Count(logs.String(), `msg="monitor user's probes work again"`); got != 2 {
		t.Fatalf("%d recovery lines after fixing the password, want 2:\n%s", got, logs.String())
	}
}
