package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestSilenceBoundFreezes checks failover.silence_bound (1.2s by default)
// from both sides on a real sandbox (semi-sync, auto mode, 4 ledger
// writers, probe interval 250ms):
//
//   - a primary frozen with SIGSTOP for 1s — its replicas' IO threads stay
//     connected and hear nothing, the controller's and the proxy's probes
//     time out — is not failed over: same primary, same epoch, and the
//     writes that waited on it complete once it wakes;
//   - a primary that stays frozen is failed over (the replicas' silence
//     passes the bound and a round 150ms later confirms it), and no
//     acknowledged write is lost.
//
// It also checks that the controller gave the replicas the heartbeat
// period of the bound (100ms) and slave_net_timeout 3s.
func TestSilenceBoundFreezes(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true})
	first := s.state()
	for _, n := range []string{"node2", "node3"} {
		p := first.Node(n).Probe
		if p.HeartbeatPeriod != 0.1 || p.NetTimeoutSeconds != 3 {
			t.Fatalf("%s: heartbeat period %.3fs, slave_net_timeout %ds; want 0.100s and 3s", n, p.HeartbeatPeriod, p.NetTimeoutSeconds)
		}
	}
	w := s.startWorkload(4)
	time.Sleep(time.Second)
	pid := s.sb.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	freeze := func() time.Time {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen = true
		return time.Now()
	}
	wake := func() {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		frozen = false
	}

	// A 1s freeze: not dead.
	st0 := s.state()
	stoppedAt := freeze()
	time.Sleep(time.Second)
	wake()
	time.Sleep(3 * time.Second) // well past the bound and any confirmation round
	st := s.state()
	if st.Primary != "node1" || st.Epoch != st0.Epoch || s.failovers() != 0 {
		t.Fatalf("a 1s freeze was failed over: primary %s epoch %d (was %d)\n%s", st.Primary, st.Epoch, st0.Epoch, s.eventText())
	}
	seen := 0
	for _, ev := range s.events() {
		if ev.At.After(stoppedAt) && strings.Contains(ev.Message, "DeadPrimary") {
			seen++
			t.Logf("during the 1s freeze: %s", ev.Message)
		}
	}
	t.Logf("1s SIGSTOP of node1: no failover (primary node1, epoch %d); %d event(s) naming DeadPrimary", st.Epoch, seen)

	// Frozen for good: failed over.
	stoppedAt = freeze()
	st, took := s.waitState("failover away from the frozen node1", 30*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	var decided time.Duration
	for _, ev := range s.events() {
		if ev.Kind == topo.EventDecision && strings.HasPrefix(ev.Message, "failing over") && ev.At.After(stoppedAt) {
			decided = ev.At.Sub(stoppedAt)
			t.Logf("decision: %s", ev.Message)
			break
		}
	}
	t.Logf("SIGSTOP node1 for good → decision after %s, %s published after %s (semi-sync: the replicas' IO threads cut, their exit not waited for)",
		decided.Round(time.Millisecond), st.Primary, took.Round(time.Millisecond))
	if decided <= time.Second {
		t.Errorf("decided %s after the freeze: the silence bound is 1.2s", decided)
	}
	wake()
	time.Sleep(2 * time.Second) // the woken node is fenced, rejoined or quarantined
	r := w.stop(nodeIdx(st.Primary))
	if r.WritesByServer[int64(nodeIdx(st.Primary)+1)] == 0 {
		t.Errorf("no write landed on the new primary %s: %v", st.Primary, r.WritesByServer)
	}
	if f := s.failovers(); f != 1 {
		t.Errorf("%d failovers, want exactly 1", f)
	}
}
