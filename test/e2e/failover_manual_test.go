package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestManualFailoverCLI: in the default manual mode a dead primary is only
// reported; `switchyard failover --plan` shows the candidate, why the others
// were rejected and the estimated loss; a stale candidate is refused unless
// forced with a reason; a forced failover reports the loss, quarantines the
// replica that was ahead (never resets it) and raises an alarm.
func TestManualFailoverCLI(t *testing.T) {
	s := startFO(t, foOpts{Mode: config.FailoverManual})
	rw, err := sql.Open("mysql", s.dsn(0, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.Exec("CREATE TABLE m (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	insert := func(from, to int) {
		for i := from; i <= to; i++ {
			if _, err := rw.Exec("INSERT INTO m VALUES (?)", i); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(1, 50)
	s.waitState("replicas caught up", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Node("node3").Probe.GTIDCurrent == st.Node("node1").Probe.GTIDCurrent && st.Node("node3").Probe.GTIDCurrent != ""
	})
	s.exec(2, "STOP SLAVE") // node3 falls behind
	insert(51, 100)
	// node1's position read after the last insert, not from a probe that may
	// predate it.
	root0, err := sql.Open("mysql", s.sb.RootDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	var pos string
	err = root0.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos)
	root0.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := gtid.ParseMariaDB(pos)
	if err != nil {
		t.Fatal(err)
	}
	s.waitState("node2 has every write", 10*time.Second, func(st topo.ClusterState) bool {
		// Contains, not equal: the write-path heartbeat goes on committing
		// on node1 after pos was read.
		got, err := gtid.ParseMariaDB(st.Node("node2").Probe.GTIDCurrent)
		return err == nil && got.Contains(want)
	})
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	s.waitEvent("not failing over: failover.mode is manual", 10*time.Second)

	out := s.cli("failover", "--cluster", "main", "--plan")
	t.Logf("switchyard failover --plan:\n%s", out)
	for _, want := range []string{"candidate: node2", "node3", "SQL thread stopped", "plan only"} {
		if !strings.Contains(out, want) {
			t.Fatalf("plan output lacks %q", want)
		}
	}
	if st := s.state(); st.Primary != "node1" || st.Epoch != 1 {
		t.Fatalf("--plan acted: primary %s epoch %d", st.Primary, st.Epoch)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err = runCLI(ctx, s.endpoints[0], "failover", "--cluster", "main", "--to", "node3")
	if err == nil || !strings.Contains(out, "SQL thread stopped") {
		t.Fatalf("failover to node3 with its SQL thread stopped: err %v\n%s", err, out)
	}
	t.Logf("--to node3 (SQL thread stopped) refused:\n%s", lastLines(out, 2))

	s.exec(2, "START SLAVE") // applies what it has; its source is dead
	s.waitState("node3 SQL thread running", 10*time.Second, func(st topo.ClusterState) bool {
		return st.Node("node3").Probe.SQLRunning
	})
	out, err = runCLI(ctx, s.endpoints[0], "failover", "--cluster", "main", "--to", "node3")
	if err == nil || !strings.Contains(out, "stale: behind node2") || !strings.Contains(out, "--force-stale") {
		t.Fatalf("failover to stale node3: err %v\n%s", err, out)
	}
	t.Logf("--to node3 (stale) refused:\n%s", lastLines(out, 2))

	out = s.cli("failover", "--cluster", "main", "--to", "node3", "--force-stale", "--reason", "e2e: node2 is being rebuilt")
	t.Logf("forced failover:\n%s", out)
	st := s.state()
	if st.Primary != "node3" || st.LastFailover == nil || st.LastFailover.Lost == "" || st.Quarantined["node2"] == "" {
		t.Fatalf("after the forced failover: primary %s, last %+v, quarantined %v", st.Primary, st.LastFailover, st.Quarantined)
	}
	alarm := false
	for _, a := range st.Alarms {
		if a.Code == topo.AlarmAheadOfPrimary && a.Node == "node2" {
			alarm = true
		}
	}
	if !alarm {
		t.Fatalf("no ahead-of-primary alarm for node2: %+v", st.Alarms)
	}
	s.waitEvent("forced failover to node3 past the staleness checks: e2e: node2 is being rebuilt", 5*time.Second)
	// node2 kept its data (never reset) and is not served.
	if n := s.rootInt(1, "SELECT COUNT(*) FROM sbtest.m"); n != 100 {
		t.Fatalf("quarantined node2 has %d rows, want its 100", n)
	}
	if st := s.state(); st.Node("node2").Serving {
		t.Fatal("quarantined node2 is served")
	}
	status := s.cli("status")
	if !strings.Contains(status, "QUARANTINED node2") || !strings.Contains(status, "estimated lost GTIDs: "+st.LastFailover.Lost) {
		t.Fatalf("status does not show the quarantine and the loss:\n%s", status)
	}
	t.Logf("estimated lost GTIDs %s; node3 has %d rows; node2 quarantined: %s", st.LastFailover.Lost,
		s.rootInt(2, "SELECT COUNT(*) FROM sbtest.m"), st.Quarantined["node2"])
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
