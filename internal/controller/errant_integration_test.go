package controller

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestErrantHiddenBehindHigherSeqno: a transaction
// written straight on a replica (root holds READ_ONLY ADMIN) gets the
// replica's server_id at the next seqno; the primary then writes more, so
// in a position comparison the replica looks behind (0-3-n < 0-1-m) and its
// SQL thread stops on gtid_strict_mode. The analysis names it ErrantGTID
// from the primary's @@gtid_binlog_state (per domain and server_id), and the
// failover plan rejects it as errant.
func TestErrantHiddenBehindHigherSeqno(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	p := rootDB(t, c, 0)
	mustExec(t, p, "CREATE TABLE sbtest.errant_t (id INT PRIMARY KEY)")
	mustExec(t, p, "INSERT INTO sbtest.errant_t VALUES (1)")
	waitState(t, st, 10*time.Second, "node3 applied", func(s topo.ClusterState) bool {
		return s.Node("node3").Probe.GTIDCurrent == s.Node("node1").Probe.GTIDCurrent && s.Node("node3").Serving
	})
	// The errant write: on node3 directly.
	mustExec(t, rootDB(t, c, 2), "INSERT INTO sbtest.errant_t VALUES (1000)")
	for i := 2; i <= 6; i++ {
		mustExec(t, p, "INSERT INTO sbtest.errant_t VALUES (?)", i)
	}
	s := waitState(t, st, 20*time.Second, "ErrantGTID node3", func(s topo.ClusterState) bool {
		for _, a := range s.Analysis {
			if a.Code == "ErrantGTID" && a.Node == "node3" {
				return true
			}
		}
		return false
	})
	var state string
	if err := p.QueryRow("SELECT @@gtid_binlog_state").Scan(&state); err != nil {
		t.Fatal(err)
	}
	n3 := s.Node("node3").Probe
	t.Logf("primary gtid_binlog_state %s; node3 gtid_current_pos %s, SQL thread running %v, last SQL error %q",
		state, n3.GTIDCurrent, n3.SQLRunning, n3.LastSQLError)
	for _, a := range s.Analysis {
		if a.Code == "ErrantGTID" {
			t.Logf("finding: %s %s: %s", a.Code, a.Node, a.Detail)
			if a.Node == "node3" && !strings.Contains(a.Detail, "0-3-") {
				t.Errorf("finding does not name node3's errant GTID: %s", a.Detail)
			}
		}
		if a.Code == "ErrantGTID" && a.Node != "node3" {
			t.Errorf("false errant finding on %s: %s", a.Node, a.Detail)
		}
	}
	// The SQL thread of node3 stopped on the strict-mode conflict (what
	// MariaDB 10.11 says, checked here).
	var sqlErr string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		sqlErr = lastSQLError(t, rootDB(t, c, 2))
		if sqlErr != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("node3 Last_SQL_Error: %s", sqlErr)
	if !strings.Contains(strings.ToLower(sqlErr), "gtid strict mode") {
		t.Errorf("node3's SQL error is not the strict-mode conflict: %q", sqlErr)
	}
}

func lastSQLError(t *testing.T, db *sql.DB) string {
	t.Helper()
	return slaveStatus(t, db)["Last_SQL_Error"]
}
