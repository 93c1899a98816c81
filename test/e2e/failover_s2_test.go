package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestS2FlappingBlockedUntilAck (SCENARIOS.md S2): auto mode, semi-sync,
// ledger workload. The primary is killed: exactly one automatic failover.
// Within the block period the new primary is killed too: no second
// failover, an event explains the block, status shows it. `switchyard ack`
// lifts the block and the controller fails over again.
func TestS2FlappingBlockedUntilAck(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true})
	w := s.startWorkload(4)
	time.Sleep(time.Second)

	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	st, took := s.waitState("first failover", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	first, firstEpoch := st.Primary, st.Epoch
	t.Logf("kill -9 node1 → %s published %s later (epoch %d); block until %s", first, took.Round(time.Millisecond), st.Epoch, st.FailoverBlock.Until.Format(time.RFC3339))
	if st.FailoverBlock == nil {
		t.Fatal("no failover block after the failover")
	}
	time.Sleep(time.Second)

	// The new primary dies within the block period.
	if err := s.sb.KillNode(nodeIdx(first)); err != nil {
		t.Fatal(err)
	}
	blocked := s.waitEvent("not failing over: automatic failover is blocked until", 10*time.Second)
	t.Logf("event: %s", blocked.Message)
	time.Sleep(12 * foInterval) // many rounds of DeadPrimary, blocked
	st = s.state()
	// firstEpoch is 2, or 3 when a loaded machine cost the controller its
	// leadership mid-failover and the next leader redid it.
	if st.Primary != first || st.Epoch != firstEpoch {
		t.Fatalf("second failover happened within the block period: primary %s epoch %d\n%s", st.Primary, st.Epoch, s.eventText())
	}
	if n := s.failovers(); n != 1 {
		t.Fatalf("%d failovers before ack, want exactly 1", n)
	}
	out := s.cli("status")
	if !strings.Contains(out, "automatic failover BLOCKED until") || !strings.Contains(out, "DeadPrimary") {
		t.Fatalf("status does not show the block and the analysis:\n%s", out)
	}
	t.Logf("status while blocked:\n%s", out)

	out = s.cli("ack", "--cluster", "main", "--reason", "node1 and "+first+" checked")
	t.Logf("ack: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "automatic failover block lifted") {
		t.Fatalf("ack did not lift a block: %s", out)
	}
	st, took = s.waitState("failover after ack", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != first && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("after ack: failover to %s %s later (epoch %d)", st.Primary, took.Round(time.Millisecond), st.Epoch)
	time.Sleep(time.Second)
	w.stop(nodeIdx(st.Primary))
	if n := s.failovers(); n != 2 {
		t.Errorf("%d failovers in total, want 2 (one before, one after ack)", n)
	}
	t.Logf("events:\n%s", s.eventText())
}
