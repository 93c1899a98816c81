package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func hasCode(st topo.ClusterState, code, node string) bool {
	for _, a := range st.Analysis {
		if a.Code == code && (node == "" || a.Node == node) {
			return true
		}
	}
	return false
}

// TestS5Partitions (SCENARIOS.md S5) runs every node in its own network
// namespace (see netLab; the controller, both proxies, etcd and the test
// share the host address). Semi-sync on, auto mode, ledger workload.
//
// Case 1: the primary is cut off from the host (controller and proxies)
// but not from its replicas: its replicas keep receiving, so it is
// UnreachablePrimary, never DeadPrimary: 0 failovers.
//
// Case 2: the primary is cut off from everything: exactly one failover;
// every proxy applies the new epoch; no write routed by a proxy reaches the
// old primary after it; at every probe at most one node the host can reach
// is writable by the application user. When the partition heals, the old
// primary (still writable, it never knew) is fenced at once and rejoined
// or, holding transactions the new primary lacks, quarantined.
func TestS5Partitions(t *testing.T) {
	s := startFO(t, foOpts{SemiSync: true, NetNS: true, Proxies: 2})
	w := s.startWorkload(4)
	watch := s.watchWritable()
	time.Sleep(time.Second)

	// Case 1.
	s.lab.cutFromHost(0)
	cutAt := time.Now()
	st, _ := s.waitState("UnreachablePrimary", 10*time.Second, func(st topo.ClusterState) bool {
		return hasCode(st, "UnreachablePrimary", "node1")
	})
	time.Sleep(6 * time.Second) // twice the IO silence bound, ~24 probe rounds
	st = s.state()
	if st.Primary != "node1" || st.Epoch != 1 || s.failovers() != 0 {
		t.Fatalf("case 1 failed over: primary %s epoch %d\n%s", st.Primary, st.Epoch, s.eventText())
	}
	ev := s.waitEvent("not failing over: UnreachablePrimary", time.Second)
	t.Logf("case 1: node1 cut off from the controller and the proxies for %s: 0 failovers; %s", time.Since(cutAt).Round(time.Millisecond), ev.Message)
	s.lab.heal(0)
	s.waitState("node1 reachable again", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Node("node1").Probe.Reachable && !hasCode(st, "UnreachablePrimary", "")
	})

	// Case 2.
	isolatedAt := time.Now()
	s.lab.isolate(0)
	st, took := s.waitState("failover", 30*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("case 2: node1 isolated → %s published primary of epoch %d %s later", st.Primary, st.Epoch, took.Round(time.Millisecond))
	newPrimary, epoch := st.Primary, st.Epoch
	publishedAt := st.LastFailover.At
	checkCutPublication(t, s, st)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range s.proxies {
		for p.Epochs()["main"] != epoch {
			if time.Now().After(deadline) {
				t.Fatalf("proxy %s still on epoch %d", p.ID(), p.Epochs()["main"])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // writes on the new primary
	samples, most, over := watch.stop()
	t.Logf("writable-node watch until the heal: %d probes, at most %d node(s) writable by the application user at once", samples, most)
	if most > 1 {
		t.Errorf("two nodes writable at once: %v", over)
	}

	// Heal: the old primary comes back writable; it is fenced, then rejoined
	// or quarantined, never made writable.
	after := s.watchWritable()
	healAt := time.Now()
	s.lab.heal(0)
	// Fenced by the fence kept pending on the old primary since the
	// failover ("fenced old primary node1 the moment it answered again") or
	// by the repair loop ("fenced node1").
	fenced := s.waitEvent("fenced ", 10*time.Second)
	fenceTook := fenced.At.Sub(healAt)
	t.Logf("after the heal: node1 (writable, it never knew it was replaced) fenced %s later (%.1f probe intervals)",
		fenceTook.Round(time.Millisecond), float64(fenceTook)/float64(foInterval))
	if fenceTook > 20*foInterval {
		t.Errorf("fencing the returning old primary took %s, want within a few probe intervals", fenceTook)
	}
	deadline = time.Now().Add(15 * time.Second)
	var outcome string
	for outcome == "" && time.Now().Before(deadline) {
		for _, ev := range s.events() {
			if strings.Contains(ev.Message, "rejoined node1") || strings.Contains(ev.Message, "node1 quarantined") {
				outcome = ev.Message
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if outcome == "" {
		t.Fatalf("node1 neither rejoined nor quarantined after the heal\n%s", s.eventText())
	}
	if strings.Contains(outcome, "node1 quarantined") && !strings.Contains(outcome, "it was the primary until the failover of") {
		t.Errorf("the quarantine of the old primary does not say its extra transactions are likely lost acknowledged commits: %s", outcome)
	}
	t.Logf("old primary: %s", outcome)
	samples, most, over = after.stop()
	t.Logf("writable-node watch from the heal until then: %d probes, %d with two nodes writable by the application user %v (the returning node is writable until fenced; no proxy routes to it)",
		samples, len(over), over)
	if ro := s.rootInt(0, "SELECT @@read_only"); ro != 1 {
		t.Fatalf("old primary read_only=%d after the heal", ro)
	}
	// No write routed after the new epoch landed on the old primary.
	n := s.rootInt(0, "SELECT COUNT(*) FROM sbtest.ledger WHERE server_id = 1 AND UNIX_TIMESTAMP(at) > "+
		strconv.FormatFloat(float64(publishedAt.UnixMicro())/1e6, 'f', 6, 64))
	t.Logf("ledger rows written on node1 after epoch %d was published: %d", epoch, n)
	if n != 0 {
		t.Errorf("%d writes reached the old primary after the new epoch", n)
	}
	r := w.stop(nodeIdx(newPrimary))
	if r.WritesByServer[int64(nodeIdx(newPrimary)+1)] == 0 {
		t.Errorf("no write landed on the new primary %s: %v", newPrimary, r.WritesByServer)
	}
	if f := s.failovers(); f != 1 {
		t.Errorf("%d failovers, want exactly 1", f)
	}
	_ = isolatedAt
	t.Logf("events:\n%s", s.eventText())
}

// rootInt runs a one-integer query as root on node i.
func (s *foStack) rootInt(i int, q string) int64 {
	s.t.Helper()
	db := s.root(i)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v int64
	if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		s.t.Fatalf("%s on %s: %v", q, s.sb.Nodes[i].Name, err)
	}
	return v
}

// cutPublicationMax bounds a partitioned semi-sync primary's failover from
// its start to the publication, apart from applying the relay log (which
// is the replicas' lag): stopping a semi-sync replica's IO thread waits
// rpl_semi_sync_slave_kill_conn_timeout (1s, probe.SemiSyncKillConnTimeout)
// for its dump-thread kill on the unreachable old primary, so a failover
// that waited for it takes over 1s; cut, the rest takes ~0.1-0.2s on a
// loaded machine.
const cutPublicationMax = 700 * time.Millisecond

// checkCutPublication checks that the failover of a partitioned semi-sync
// primary cut its replicas' IO threads and published the new primary
// without waiting for them to exit: from the failover's start to the
// publication, less the relay log's application, within
// cutPublicationMax; and that the candidate's replication was reset after
// the publication.
func checkCutPublication(t *testing.T, s *foStack, st topo.ClusterState) {
	t.Helper()
	done := s.waitEvent("failover done", 10*time.Second)
	steps := failoverSteps(done.Message)
	stop, ok := steps["stop replication IO threads"]
	if !ok || !strings.Contains(done.Message, "cut by KILL") {
		t.Fatalf("the failover did not cut the semi-sync replicas' IO threads: %s", done.Message)
	}
	toPublish := time.Duration(st.LastFailover.DurationMS) * time.Millisecond
	apply := steps["apply relay log on "+st.Primary]
	t.Logf("failover start → publication %s (applying the relay log %s, stopping the IO threads %s); reset of %s's replication after it: %s",
		toPublish, apply, stop, st.Primary, steps["reset replication on "+st.Primary])
	if toPublish-apply >= cutPublicationMax {
		t.Errorf("failover start → publication took %s less %s applying the relay log, want < %s (the IO threads' exit was waited for?): %s",
			toPublish, apply, cutPublicationMax, done.Message)
	}
	if _, ok := steps["reset replication on "+st.Primary]; !ok {
		t.Errorf("no step reset replication on %s after the publication: %s", st.Primary, done.Message)
	}
	if p := s.probeRoot(nodeIdx(st.Primary)); p != "" {
		t.Errorf("new primary %s still replicating after the failover: %s", st.Primary, p)
	}
	checkWaitNoSlaveWindow(t, s, st, done.Message, steps)
}

// checkWaitNoSlaveWindow checks that the semi-sync new primary of a
// partitioned primary's failover (durability not semi_sync_durable) took
// writes without waiting for a replica still being repointed: semi-sync
// was switched on before the repointing with
// rpl_semi_sync_master_wait_no_slave OFF, switched back ON once a
// semi-sync replica was repointed (and ON on the server afterwards), and
// commits meanwhile returned without an acknowledgement
// (Rpl_semi_sync_master_no_tx > 0). It logs how many ledger rows the new
// primary committed before the repointing ended.
func checkWaitNoSlaveWindow(t *testing.T, s *foStack, st topo.ClusterState, msg string, steps map[string]time.Duration) {
	t.Helper()
	if !strings.Contains(msg, "rpl_semi_sync_master_wait_no_slave=OFF until one is") {
		t.Errorf("semi-sync was not switched on before the repointing with wait_no_slave OFF: %s", msg)
	}
	if !strings.Contains(msg, "rpl_semi_sync_master_wait_no_slave=ON again") {
		t.Errorf("wait_no_slave not switched back on after the repointing: %s", msg)
	}
	i := nodeIdx(st.Primary)
	if v := s.rootInt(i, "SELECT @@GLOBAL.rpl_semi_sync_master_wait_no_slave"); v != 1 {
		t.Errorf("new primary %s: rpl_semi_sync_master_wait_no_slave=%d after the failover, want 1", st.Primary, v)
	}
	if v := s.rootInt(i, "SELECT @@GLOBAL.rpl_semi_sync_master_enabled"); v != 1 {
		t.Errorf("new primary %s: rpl_semi_sync_master_enabled=%d after the failover, want 1", st.Primary, v)
	}
	noTx := s.rootInt(i, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_NO_TX'")
	if noTx == 0 {
		t.Errorf("new primary %s: Rpl_semi_sync_master_no_tx 0: no commit returned before a replica was attached", st.Primary)
	}
	repointEnd := st.LastFailover.At.Add(steps["publish primary "+st.Primary] + steps["repoint replicas"])
	early := s.rootInt(i, fmt.Sprintf("SELECT COUNT(*) FROM sbtest.ledger WHERE server_id = %d AND UNIX_TIMESTAMP(at) < %s",
		i+1, strconv.FormatFloat(float64(repointEnd.UnixMicro())/1e6, 'f', 6, 64)))
	t.Logf("new primary %s: %d commits without an acknowledgement (Rpl_semi_sync_master_no_tx) while no semi-sync replica was attached; %d ledger rows committed before the repointing (%s) ended",
		st.Primary, noTx, early, steps["repoint replicas"])
}

// failoverSteps returns the duration of each step of a failover event's
// "steps: a: detail (1ms) | b (1.2s) | ..." list, by step name (the text
// before the first ": ").
func failoverSteps(msg string) map[string]time.Duration {
	out := map[string]time.Duration{}
	_, list, ok := strings.Cut(msg, "steps: ")
	if !ok {
		return out
	}
	for _, st := range strings.Split(list, " | ") {
		i := strings.LastIndex(st, " (")
		if i < 0 || !strings.HasSuffix(st, ")") {
			continue
		}
		d, err := time.ParseDuration(st[i+2 : len(st)-1])
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(st[:i], ": ")
		out[name] = d
	}
	return out
}

// probeRoot returns node i's replication source as root if it has one
// (SHOW ALL SLAVES STATUS rows: "host:port IO x SQL y"), else "".
func (s *foStack) probeRoot(i int) string {
	s.t.Helper()
	db := s.root(i)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SHOW ALL SLAVES STATUS")
	if err != nil {
		s.t.Fatalf("SHOW ALL SLAVES STATUS on %s: %v", s.sb.Nodes[i].Name, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for j := range vals {
			ptrs[j] = &vals[j]
		}
		if err := rows.Scan(ptrs...); err != nil {
			s.t.Fatal(err)
		}
		row := map[string]string{}
		for j, c := range cols {
			row[c] = vals[j].String
		}
		out = append(out, fmt.Sprintf("%s:%s IO %s SQL %s", row["Master_Host"], row["Master_Port"], row["Slave_IO_Running"], row["Slave_SQL_Running"]))
	}
	return strings.Join(out, "; ")
}
