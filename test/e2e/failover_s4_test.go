package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestS4StaleNodeNeverPromoted (SCENARIOS.md S4): semi-sync on, auto mode,
// ledger and id writers through the proxy. node3's replication is stopped
// while writes go on, so it falls behind; then the primary is killed. The
// most advanced replica (node2) is promoted, never the stale node3; no
// acknowledged write is lost and no id is issued twice.
func TestS4StaleNodeNeverPromoted(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true})
	w := s.startWorkload(4)
	time.Sleep(time.Second)
	s.exec(2, "STOP SLAVE")
	s.waitState("node3 out of the read pool", 20*foInterval, func(st topo.ClusterState) bool {
		return !st.Node("node3").Serving
	})
	time.Sleep(2 * time.Second) // node3 falls behind
	st := s.state()
	t.Logf("before the kill: node2 at %s, node3 (stopped) at %s",
		st.Node("node2").Probe.GTIDCurrent, st.Node("node3").Probe.GTIDCurrent)

	killed := time.Now()
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	st, took := s.waitState("failover", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("kill -9 node1 → %s published %s after the kill", st.Primary, took.Round(time.Millisecond))
	if st.Primary != "node2" {
		t.Fatalf("promoted %s, want node2 (node3 is stale)\n%s", st.Primary, s.eventText())
	}
	_ = killed
	time.Sleep(2 * time.Second) // writes continue on node2
	r := w.stop(1)
	if r.WritesByServer[2] == 0 {
		t.Errorf("no acknowledged write on node2 after the failover: %v", r.WritesByServer)
	}
	if n := s.failovers(); n != 1 {
		t.Errorf("%d failovers, want 1", n)
	}
	// The plan said why node3 was rejected.
	var plan string
	for _, ev := range s.events() {
		if strings.Contains(ev.Message, "failing over: DeadPrimary confirmed") || ev.Code == "failover_done" {
			plan += ev.Message + "\n"
		}
	}
	t.Logf("events:\n%s", s.eventText())
}
