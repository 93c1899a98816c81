package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// floor reads the cluster's promotion floor document.
func (s *foStack) floor() topo.PromotionFloor {
	s.t.Helper()
	var f topo.PromotionFloor
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := topo.GetJSON(ctx, s.store, s.keys.Floor("main"), &f); err != nil {
		s.t.Fatalf("read the promotion floor: %v", err)
	}
	return f
}

// cliErr runs the switchyard binary and returns its output and error
// (for commands expected to fail).
func (s *foStack) cliErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return runCLI(ctx, s.endpoints[0], args...)
}

// TestS12StaleNodeReturnsAlone (the 2012 incident's node
// 'c'): auto mode, writers running. node3 is shut down cleanly, writes go
// on, then node1 and node2 are killed and only node3 starts again. node3 is
// behind the promotion floor recorded in etcd: it is never promoted
// automatically, a manual failover is refused, `failover --plan` and
// `status` name the floor and the missing GTIDs; with --force-stale
// --reason it is promoted and the events record the loss.
func TestS12StaleNodeReturnsAlone(t *testing.T) {
	s := startFO(t, foOpts{})
	w := s.startWorkload(4)
	time.Sleep(time.Second)
	ctx := context.Background()
	if err := s.sb.StopNode(ctx, 2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // writes go on without node3
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	if err := s.sb.KillNode(1); err != nil {
		t.Fatal(err)
	}
	r := w.halt()
	floor := s.floor()
	t.Logf("floor after the kills: %s (primary %s, epoch %d); %d acknowledged ledger writes", floor.GTID, floor.Primary, floor.Epoch, len(r.Acked))
	if err := s.sb.StartNode(ctx, 2); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	s.waitState("node3 answers", 20*time.Second, func(st topo.ClusterState) bool {
		n := st.Node("node3")
		return n != nil && n.Probe.Reachable && n.Probe.Error == ""
	})
	// Far longer than the ~1 s it took to promote node3 before the floor.
	ev := s.waitEvent("behind the promotion floor", 20*time.Second)
	t.Logf("refusal event %s after node3 answered: %s", time.Since(answered).Round(time.Millisecond), firstLine(ev.Message))
	time.Sleep(5 * time.Second)
	st := s.state()
	if st.Primary == "node3" || s.failovers() != 0 {
		t.Fatalf("stale node3 promoted: primary %s, %d failovers\n%s", st.Primary, s.failovers(), s.eventText())
	}
	node3 := st.Node("node3").Probe.GTIDCurrent
	t.Logf("node3 at %s, floor %s: not promoted after %s", node3, floor.GTID, time.Since(answered).Round(time.Millisecond))
	// Nor does it serve reads: it was not serving when the primary was
	// lost, so its data may be stale (it is).
	if n := st.Node("node3"); n.Serving {
		t.Fatalf("stale node3 serves reads on the ro listener: %+v", n)
	} else {
		t.Logf("node3 not served: %s", n.Reason)
	}
	if db, err := sql.Open("mysql", s.dsn(0, "replica")); err == nil {
		var port int
		if qerr := db.QueryRow("SELECT @@port").Scan(&port); qerr == nil && port == s.sb.Nodes[2].Port {
			t.Fatalf("a read through the ro listener was answered by stale node3")
		}
		db.Close()
	}

	// --plan exits 2 when the failover would be refused, and says why.
	plan, _ := s.cliErr("failover", "--cluster", "main", "--plan")
	t.Logf("failover --plan:\n%s", plan)
	if !strings.Contains(plan, "promotion floor: "+floor.GTID) || !strings.Contains(plan, "behind the floor: missing "+floor.GTID) {
		t.Fatalf("plan does not name the floor %s and node3's missing GTIDs:\n%s", floor.GTID, plan)
	}
	status := s.cli("status")
	if !strings.Contains(status, "promotion floor: "+floor.GTID) || !strings.Contains(status, "node3: behind the floor") {
		t.Fatalf("status does not name the floor and node3's gap:\n%s", status)
	}
	out, err := s.cliErr("failover", "--cluster", "main")
	if exitCode(err) != 2 || !strings.Contains(out, "behind the promotion floor") || !strings.Contains(out, "failover refused: ") {
		t.Fatalf("manual failover to stale node3 without --force-stale: err %v\n%s", err, out)
	}
	if st := s.state(); st.Primary == "node3" {
		t.Fatal("manual failover without --force-stale promoted node3")
	}
	out = s.cli("failover", "--cluster", "main", "--to", "node3", "--force-stale", "--reason", "S12: node1 and node2 are lost for good")
	t.Logf("forced failover:\n%s", out)
	st = s.state()
	if st.Primary != "node3" {
		t.Fatalf("forced failover: primary %s, want node3", st.Primary)
	}
	ev = s.waitEvent("forced failover to node3 past the staleness checks", 5*time.Second)
	if !strings.Contains(ev.Message, floor.GTID) {
		t.Errorf("force_stale event does not record the loss up to %s: %s", floor.GTID, ev.Message)
	}
	s.waitEvent("estimated lost GTIDs: "+floor.GTID, 5*time.Second)
	nf := s.floor()
	if nf.ResetAt == nil || nf.Lowered != floor.GTID {
		t.Errorf("floor after the forced failover: %+v; want reset from %s", nf, floor.GTID)
	}
	t.Logf("floor reset to %s (was %s): %s", nf.GTID, nf.Lowered, nf.ResetReason)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	missing, err := loadgen.Check(cctx, s.rootDSN(2, "sbtest"), "", r.Acked)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the forced promotion gave up %d of %d acknowledged ledger writes (the plan's estimate: the floor gap above)", len(missing), len(r.Acked))
}

// halt ends the workload without checking it against a node.
func (w *workload) halt() *loadgen.Result {
	w.cancel()
	r := <-w.resc
	w.ids.wait()
	return r
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// TestS12StalledAppliersThenPrimaryDeath: semi-sync,
// auto mode. Both replicas' SQL threads are stalled (LOCK TABLES ledger
// READ as root) for longer than failover.max_lag, the primary is killed,
// then the locks are released. The last Seconds_Behind_Master (> max_lag)
// must not block the failover: a candidate is promoted once it applied
// everything it received, and no acknowledged write is lost.
func TestS12StalledAppliersThenPrimaryDeath(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true})
	w := s.startWorkload(4)
	time.Sleep(time.Second)
	var locks []*sql.Conn
	for _, i := range []int{1, 2} {
		conn, err := s.root(i).Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "LOCK TABLES sbtest.ledger READ"); err != nil {
			t.Fatal(err)
		}
		locks = append(locks, conn)
	}
	stalled := time.Now()
	maxLag := s.cfg.Clusters[0].Failover.MaxLag.D()
	s.waitState("replicas lag beyond failover.max_lag", 40*time.Second, func(st topo.ClusterState) bool {
		for _, n := range []string{"node2", "node3"} {
			p := st.Node(n).Probe
			if p.LagSeconds == nil || time.Duration(*p.LagSeconds)*time.Second <= maxLag+time.Second {
				return false
			}
		}
		return true
	})
	st := s.state()
	t.Logf("after %s of stalled appliers: node2 lag %ds, node3 lag %ds (failover.max_lag %s)", time.Since(stalled).Round(time.Second),
		*st.Node("node2").Probe.LagSeconds, *st.Node("node3").Probe.LagSeconds, maxLag)
	killed := time.Now()
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	released := time.Now()
	for _, c := range locks {
		if _, err := c.ExecContext(context.Background(), "UNLOCK TABLES"); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	st, _ = s.waitState("failover", 40*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("kill -9 node1 → %s published %s after the kill, %s after the locks were released",
		st.Primary, time.Since(killed).Round(time.Millisecond), time.Since(released).Round(time.Millisecond))
	for _, ev := range s.events() {
		if strings.Contains(ev.Message, "exceeds failover.max_lag") {
			t.Errorf("a stale lag figure was held against a candidate: %s", ev.Message)
		}
		if ev.Code == "failover_done" {
			t.Logf("failover: %s", strings.ReplaceAll(ev.Message, " | ", "\n  "))
		}
	}
	time.Sleep(2 * time.Second)
	w.stop(nodeIdx(st.Primary))
	// No false errant finding once the cluster settled (the per
	// (domain, server_id) comparison with the new primary's binlog state).
	for _, a := range s.state().Analysis {
		if a.Code == "ErrantGTID" {
			t.Errorf("false ErrantGTID after the failover: %s %s", a.Node, a.Detail)
		}
	}
}

// TestFailoverOfHealthyPrimaryRefused: `switchyard
// failover` of a healthy, reachable primary is refused with a pointer to
// switchover; --plan warns; --force --reason fails over.
func TestFailoverOfHealthyPrimaryRefused(t *testing.T) {
	s := startFO(t, foOpts{Mode: config.FailoverManual})
	const msg = "primary node1 is healthy and reachable: use `switchyard switchover` (or --force --reason to fail over anyway)"
	out, err := s.cliErr("failover", "--cluster", "main")
	if exitCode(err) != 2 || !strings.Contains(out, "failover refused: "+msg+"; override: --force --reason TEXT") {
		t.Fatalf("failover of a healthy primary: err %v, want exit 2 (refused) with the override\n%s", err, out)
	}
	if st := s.state(); st.Primary != "node1" || st.Epoch != 1 || st.FailoverBlock != nil {
		t.Fatalf("refused failover changed the cluster: primary %s epoch %d block %+v", st.Primary, st.Epoch, st.FailoverBlock)
	}
	var ro int
	if err := s.root(0).QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 0 {
		t.Fatalf("refused failover fenced node1 (read_only=%d, %v)", ro, err)
	}
	plan, perr := s.cliErr("failover", "--cluster", "main", "--plan")
	if exitCode(perr) != 2 || !strings.Contains(plan, "override: --force --reason TEXT") {
		t.Fatalf("failover --plan of a healthy primary: %v; want exit 2 (the failover would be refused) naming the override:\n%s", perr, plan)
	}
	if !strings.Contains(plan, "WARNING: "+msg) {
		t.Fatalf("plan has no warning:\n%s", plan)
	}
	t.Logf("refused: %s\nplan:\n%s", firstLine(out), plan)
	if out, err := s.cliErr("failover", "--cluster", "main", "--force"); err == nil {
		t.Fatalf("--force without --reason accepted:\n%s", out)
	}
	out = s.cli("failover", "--cluster", "main", "--force", "--reason", "test: replace a live primary")
	if st := s.state(); st.Primary == "node1" || st.Epoch != 2 {
		t.Fatalf("forced failover: primary %s epoch %d\n%s", st.Primary, st.Epoch, out)
	}
	s.waitEvent("forced a failover of healthy, reachable primary node1", 5*time.Second)
}

// TestFailoverLeavesStoppedReplicaStopped: an operator
// stopped node3's replication; the primary is killed; the failover
// repoints node3 to the new primary but leaves its replication stopped (as
// a switchover does), says so in an event, and node3 is not served.
func TestFailoverLeavesStoppedReplicaStopped(t *testing.T) {
	s := startFO(t, foOpts{})
	s.exec(2, "STOP SLAVE")
	s.waitState("node3 out of the read pool", 20*foInterval, func(st topo.ClusterState) bool { return !st.Node("node3").Serving })
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	st, took := s.waitState("failover", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary == "node2" && st.Phase == topo.PhaseStable
	})
	t.Logf("failed over to node2 in %s", took.Round(time.Millisecond))
	s.waitEvent("left its replication stopped", 5*time.Second)
	time.Sleep(3 * time.Second) // several repair rounds
	port, io, sqlRun := s.replicaSource(2)
	if port != fmt.Sprint(s.sb.Nodes[1].Port) || io != "No" || sqlRun != "No" {
		t.Fatalf("node3 after the failover: source port %s IO %s SQL %s; want port %d with replication still stopped",
			port, io, sqlRun, s.sb.Nodes[1].Port)
	}
	if st = s.state(); st.Node("node3").Serving {
		t.Fatal("node3 (replication stopped) is served")
	}
	s.exec(2, "START SLAVE")
	s.waitState("node3 serving again", 40*foInterval, func(st topo.ClusterState) bool { return st.Node("node3").Serving })
}

// TestDrainUnmovablePrimary: drain of the primary when
// no replica may take over (node2 drained, node3's replication stopped)
// is refused naming each candidate's real reason; nothing is recorded as
// drained and status never calls the primary safe to stop.
func TestDrainUnmovablePrimary(t *testing.T) {
	s := startFO(t, foOpts{Mode: config.FailoverManual})
	s.cli("drain", "node2", "--cluster", "main", "--reason", "test")
	s.exec(2, "STOP SLAVE")
	s.waitState("node3 out of the read pool", 20*foInterval, func(st topo.ClusterState) bool { return !st.Node("node3").Serving })
	out, err := s.cliErr("drain", "node1", "--cluster", "main", "--reason", "test")
	t.Logf("drain of the primary:\n%s", out)
	if err == nil || !strings.Contains(out, "not drained: still the primary") {
		t.Fatalf("drain of an unmovable primary: err %v\n%s", err, out)
	}
	if !strings.Contains(out, "node2 is drained") || strings.Contains(out, "must_not") || !strings.Contains(out, "node3 replication threads not running") {
		t.Fatalf("refusal does not name the real reasons (node2 drained, node3 stopped):\n%s", out)
	}
	var d topo.DrainedNodes
	if _, err := topo.GetJSON(context.Background(), s.store, s.keys.Drained("main"), &d); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Nodes["node1"]; ok {
		t.Fatalf("node1 recorded as drained: %+v", d.Nodes)
	}
	status := s.cli("status")
	for _, line := range strings.Split(status, "\n") {
		if strings.Contains(line, "node1") && strings.Contains(line, "safe to stop") && !strings.Contains(line, "NOT safe") {
			t.Fatalf("status calls the primary safe to stop: %s", line)
		}
	}
	if st := s.state(); st.Primary != "node1" {
		t.Fatalf("primary %s, want node1", st.Primary)
	}
}

// exitCode is the exit status of a CLI run's error (0 for nil, -1 when it
// did not exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
