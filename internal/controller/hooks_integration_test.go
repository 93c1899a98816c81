package controller

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/hooks"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestHooksOnlyLeader: two controllers share the store, the primary is
// killed in manual mode: dead_primary runs once, from the leader, however
// many rounds see it. When the leader stops, the new leader — which starts
// with no memory of what was sent — sends it once more, and only once.
func TestHooksOnlyLeader(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	out := filepath.Join(t.TempDir(), "payloads")
	cfg := testConfig(c)
	cfg.Clusters[0].Failover.Mode = config.FailoverManual
	cfg.Hooks = []config.Hook{{Name: "log", Events: []string{config.HookDeadPrimary},
		Command: []string{"/bin/sh", "-c", `{ cat; echo; } >> "$1"`, "sh", out}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, stopA := runController(t, cfg, st, "ctl-a")
	b, stopB := runController(t, cfg, st, "ctl-b")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	if err := c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	payloads := func() []hooks.Payload {
		data, _ := os.ReadFile(out)
		var ps []hooks.Payload
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var p hooks.Payload
			if len(bytes.TrimSpace(sc.Bytes())) > 0 && json.Unmarshal(sc.Bytes(), &p) == nil {
				ps = append(ps, p)
			}
		}
		return ps
	}
	waitN := func(n int, what string) []hooks.Payload {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if ps := payloads(); len(ps) >= n {
				return ps
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: %d dead_primary payloads within 20s, want %d", what, len(payloads()), n)
		return nil
	}
	ps := waitN(1, "first leader")
	leader, stopLeader, other := "ctl-a", stopA, "ctl-b"
	if b.IsLeader() && !a.IsLeader() {
		leader, stopLeader, other = "ctl-b", stopB, "ctl-a"
	}
	if ps[0].Controller != leader || ps[0].Event != config.HookDeadPrimary || ps[0].Plan == nil {
		t.Fatalf("first payload: controller %q event %q plan %v; leader %s", ps[0].Controller, ps[0].Event, ps[0].Plan, leader)
	}
	time.Sleep(10 * testInterval)
	if n := len(payloads()); n != 1 {
		t.Fatalf("%d dead_primary payloads with two controllers over 10 rounds, want 1", n)
	}
	stopLeader()
	ps = waitN(2, "after the leader stopped")
	if ps[1].Controller != other {
		t.Errorf("second payload from %q, want the new leader %s", ps[1].Controller, other)
	}
	time.Sleep(10 * testInterval)
	if n := len(payloads()); n != 2 {
		t.Errorf("%d dead_primary payloads after one change of leader, want 2", n)
	}
}
