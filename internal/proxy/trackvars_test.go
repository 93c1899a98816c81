package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// okState describes an OK payload's session-state part: whether
// SERVER_SESSION_STATE_CHANGED is set and each entry.
func okState(p []byte, caps uint32) string {
	ok, err := mysqlproto.ParseOK(p, caps)
	if err != nil {
		return "malformed OK: " + err.Error()
	}
	out := fmt.Sprintf("changed=%v", ok.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0)
	b := ok.SessionState
	for len(b) > 0 {
		typ := b[0]
		n, k, _ := mysqlproto.ReadLenEnc(b[1:])
		data := b[1+k : 1+k+int(n)]
		b = b[1+k+int(n):]
		switch typ {
		case mysqlproto.SessionTrackSystemVariables:
			name, value, _ := lenencPair(data)
			if name == "last_gtid" {
				value = "<gtid>" // differs between any two writes
			}
			out += fmt.Sprintf(" [var %s=%s]", name, value)
		default:
			out += fmt.Sprintf(" [%d %q]", typ, data)
		}
	}
	return out
}

// shape runs q and describes its answer: for each result (a
// multi-statement has several, joined by " ; "), the OK's session state,
// the ERR, or the rows.
func (rc *rawConn) shape(q string) string {
	rc.t.Helper()
	rc.cmd(mysql.COM_QUERY, []byte(q)...)
	var parts []string
	for {
		part, more := rc.shapeResult()
		parts = append(parts, part)
		if !more {
			return strings.Join(parts, " ; ")
		}
	}
}

// shapeResult reads one result of a COM_QUERY response and describes it;
// more reports SERVER_MORE_RESULTS_EXISTS.
func (rc *rawConn) shapeResult() (string, bool) {
	rc.t.Helper()
	p := rc.next()
	switch p[0] {
	case mysql.OK_HEADER:
		st, _ := mysqlproto.OKStatus(p)
		return "OK " + okState(p, rc.caps), st&mysql.SERVER_MORE_RESULTS_EXISTS != 0
	case mysql.ERR_HEADER:
		return describe(p), false
	}
	n, _, _ := mysqlproto.ReadLenEnc(p)
	for range n {
		rc.next()
	}
	if rc.caps&mysql.CLIENT_DEPRECATE_EOF == 0 {
		rc.next()
	}
	var rows []string
	for {
		p := rc.next()
		if p[0] == mysql.EOF_HEADER && len(p) < 0xffffff {
			var st uint16
			if rc.caps&mysql.CLIENT_DEPRECATE_EOF != 0 {
				st, _ = mysqlproto.OKStatus(p)
			} else {
				_, st, _ = mysqlproto.ParseEOF(p)
			}
			return "rows " + strings.Join(rows, " | "), st&mysql.SERVER_MORE_RESULTS_EXISTS != 0
		}
		var row []string
		for pos := 0; pos < len(p); {
			l, k, _ := mysqlproto.ReadLenEnc(p[pos:])
			row = append(row, string(p[pos+k:pos+k+int(l)]))
			pos += k + int(l)
		}
		rows = append(rows, strings.Join(row, ","))
	}
}

// TestClientSeesOwnTrackingSettings: the proxy's own session tracking
// settings ('*', state change ON) never reach a client. Reads of the
// tracking variables, SHOW VARIABLES over them and the session-state
// entries of OK packets are what the same statements give on a direct
// connection, also after the client changes its settings (with
// CLIENT_SESSION_TRACK, mariadb-connector-nodejs keeps `USE otherdb`'s
// schema only when the OK carries what its settings ask for), each
// statement in its own COM_QUERY or several in one, with transaction
// replay off and on, and after a switchover moved the session.
func TestClientSeesOwnTrackingSettings(t *testing.T) {
	seqs := [][]string{{
		"SELECT @@session.session_track_system_variables, @@session.session_track_state_change",
		"SELECT @@session_track_schema AS s, @@local.session_track_transaction_info, 1",
		"SHOW VARIABLES LIKE 'session_track%'",
		"SHOW SESSION VARIABLES WHERE Variable_name = 'session_track_state_change'",
		"USE otherdb",
		"USE sbtest",
		"CREATE TABLE IF NOT EXISTS trk_t (a INT)",
		"INSERT INTO trk_t VALUES (1)",
		"SET time_zone='+01:00'",
		"SET @u = 5",
		"SHOW VARIABLES LIKE 'session_track%'",
		"SET SESSION session_track_state_change=ON",
		"SELECT FOUND_ROWS()",
		"SELECT @@session_track_state_change",
		"USE otherdb",
		"SET @u = 6",
		"SET @@session.session_track_system_variables='time_zone,last_gtid'",
		"SELECT @@session_track_system_variables",
		"SET time_zone='+02:00', autocommit=1",
		"INSERT INTO sbtest.trk_t VALUES (2)",
		"SET session_track_schema=OFF, session_track_state_change=OFF",
		"USE sbtest",
		"SHOW VARIABLES LIKE 'session_track_s%'",
	}, {
		// What the mariadb client sends for
		// -e "SET SESSION session_track_schema=OFF; SELECT ...".
		"SET SESSION session_track_schema=OFF",
		"SELECT @@session_track_schema, @@session.session_track_schema",
		"SHOW SESSION VARIABLES LIKE 'session_track_schema'",
		"USE otherdb",
		"SET @@session.session_track_system_variables='time_zone'",
		"SELECT @@session_track_system_variables",
		"SET time_zone='+03:00', sql_mode='ANSI_QUOTES'",
		"USE sbtest",
		"SHOW VARIABLES LIKE 'session_track%'",
	}, {
		// The same in multi-statements.
		"SET SESSION session_track_schema=OFF; SELECT @@session_track_schema, @@session.session_track_schema; USE otherdb; SET @@session.session_track_system_variables='time_zone'; SELECT @@session_track_system_variables; SET time_zone='+03:00'",
		"SELECT @@session_track_schema, @@session_track_system_variables, @@session_track_state_change",
		"SHOW SESSION VARIABLES LIKE 'session_track%'",
		"USE sbtest",
		"SET session_track_schema=ON, session_track_system_variables='sql_mode'; USE otherdb; SET time_zone='+04:00', sql_mode='ANSI_QUOTES'; SELECT @@session_track_schema, @@session_track_state_change",
		"USE sbtest",
		"SET time_zone='+05:00', sql_mode=''",
		"SELECT @@session_track_schema, @@session_track_system_variables",
	}}
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay_%v", replay), func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) {
				c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
					Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
				c.Clusters[0].Failover.TransactionReplay = replay
			})
			for _, c := range []struct {
				listener string
				caps     uint32
			}{
				{"rw", 0}, {"rw", mysql.CLIENT_SESSION_TRACK}, {"rw", mysql.CLIENT_SESSION_TRACK | mysql.CLIENT_DEPRECATE_EOF},
				{"rwtx", mysql.CLIENT_SESSION_TRACK | mysql.CLIENT_DEPRECATE_EOF},
			} {
				caps := c.caps | mysql.CLIENT_MULTI_STATEMENTS
				t.Run(fmt.Sprintf("%s/caps_%x", c.listener, caps), func(t *testing.T) {
					for n, stmts := range seqs {
						var got [2][]string
						for i, addr := range []string{h.c.Nodes[0].Address, h.srv.ListenerAddr(c.listener)} {
							rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", caps, "")
							if err != nil {
								t.Fatal(err)
							}
							for _, q := range stmts {
								got[i] = append(got[i], rc.shape(q))
							}
							rc.Close()
						}
						for i, q := range stmts {
							if got[0][i] != got[1][i] {
								t.Errorf("sequence %d: %s\n  direct: %s\n  proxy:  %s", n, q, got[0][i], got[1][i])
							}
						}
					}
				})
			}
			t.Run("move", func(t *testing.T) {
				// The client's settings survive a switchover: what it
				// sees on node2 is what a direct connection there with
				// the same SETs sees.
				set := []string{"SET SESSION session_track_schema=OFF", "SET @@session.session_track_system_variables='time_zone'"}
				after := []string{
					"SELECT @@session_track_schema, @@session.session_track_schema, @@session_track_system_variables",
					"SHOW SESSION VARIABLES LIKE 'session_track%'",
					"USE otherdb",
					"SET time_zone='+03:00', sql_mode='ANSI_QUOTES'",
					"USE sbtest",
				}
				caps := uint32(mysql.CLIENT_SESSION_TRACK | mysql.CLIENT_DEPRECATE_EOF)
				prx, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "sbtest", caps, "")
				if err != nil {
					t.Fatal(err)
				}
				defer prx.Close()
				for _, q := range set {
					prx.shape(q)
				}
				reparent(t, h)
				h.srv.SetClusterState(sandboxState(h.c, 2, 1))
				if rows := prx.query("SELECT @@server_id"); rows[0][0] != "2" {
					t.Fatalf("session not moved to node2: server_id %v", rows)
				}
				direct, err := dialRaw(t, h.c.Nodes[1].Address, h.c.AppUser, h.c.AppPassword, "sbtest", caps, "")
				if err != nil {
					t.Fatal(err)
				}
				defer direct.Close()
				for _, q := range set {
					direct.shape(q)
				}
				for _, q := range after {
					if d, p := direct.shape(q), prx.shape(q); d != p {
						t.Errorf("after the move: %s\n  direct: %s\n  proxy:  %s", q, d, p)
					}
				}
			})
		})
	}
}
