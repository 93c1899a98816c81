package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

func TestRewriteTrackRefs(t *testing.T) {
	ts := newTrackSettings("autocommit,time_zone", "0", "1", "OFF")
	cases := []struct{ q, want string }{
		{"SELECT 1", ""},
		{"SELECT @@session.session_track_system_variables, @@session.session_track_state_change",
			"SELECT 'autocommit,time_zone' AS `@@session.session_track_system_variables`, 0 AS `@@session.session_track_state_change`"},
		{"select @@SESSION_TRACK_SCHEMA as s FROM dual", "select 1 as s FROM dual"},
		{"SELECT @@local.session_track_transaction_info;", "SELECT 'OFF' AS `@@local.session_track_transaction_info`;"},
		{"SELECT @@global.session_track_schema", ""},
		{"SELECT '@@session_track_schema'", ""},
		{"SELECT IF(@@session_track_state_change, 'y', 'n')", "SELECT IF(0, 'y', 'n')"},
		{"SET @@session.session_track_schema = 0", ""},
		{"SET @a = @@session_track_schema", "SET @a = 1"},
		// After a SET of a variable in a multi-statement the server
		// holds the client's value.
		{"SET session_track_schema=OFF; SELECT @@session_track_schema, @@session_track_state_change",
			"SET session_track_schema=OFF; SELECT @@session_track_schema, 0 AS `@@session_track_state_change`"},
		{"SET @x=';'; SELECT @@session_track_schema; SET session_track_schema=0; SELECT @@session_track_schema",
			"SET @x=';'; SELECT 1 AS `@@session_track_schema`; SET session_track_schema=0; SELECT @@session_track_schema"},
	}
	for _, c := range cases {
		got := ts.rewriteTrackRefs([]byte(c.q))
		if c.want == "" {
			if got != nil {
				t.Errorf("%q: rewritten to %q, want unchanged", c.q, got[1:])
			}
			continue
		}
		if len(got) == 0 || got[0] != mysql.COM_QUERY || string(got[1:]) != c.want {
			t.Errorf("%q:\n got  %q\n want %q", c.q, got, c.want)
		}
	}
	if got := ts.rewriteTrackRefs([]byte("SHOW VARIABLES LIKE 'session_track%'")); !bytes.Contains(got, []byte("information_schema.SESSION_VARIABLES")) ||
		!bytes.Contains(got, []byte("LIKE 'session_track%'")) {
		t.Errorf("SHOW VARIABLES: %q", got)
	}
}

func TestTrackAssigned(t *testing.T) {
	cases := []struct {
		q    string
		want []string
	}{
		{"SET time_zone='+01:00'", nil},
		{"SET SESSION session_track_state_change=ON", []string{tvStateChange}},
		{"SET @@session.session_track_system_variables = 'a', session_track_schema:=OFF", []string{tvSysVars, tvSchema}},
		{"SET GLOBAL session_track_schema=OFF", nil},
		{"SET @@global.session_track_schema=OFF", nil},
		{"SET @x = @@session_track_schema", nil},
	}
	for _, c := range cases {
		got := trackAssigned([]byte(c.q))
		if len(got) != len(c.want) {
			t.Errorf("%q: %v, want %v", c.q, got, c.want)
			continue
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("%q: %v, want %v", c.q, got, c.want)
			}
		}
	}
}

func TestFilterState(t *testing.T) {
	entry := func(typ byte, data []byte) []byte {
		return append(append([]byte{typ}, mysql.AppendLengthEncodedInteger(nil, uint64(len(data)))...), data...)
	}
	sysVar := func(n, v string) []byte {
		d := mysql.AppendLengthEncodedInteger(nil, uint64(len(n)))
		d = append(d, n...)
		d = mysql.AppendLengthEncodedInteger(d, uint64(len(v)))
		return entry(mysqlproto.SessionTrackSystemVariables, append(d, v...))
	}
	schema := entry(mysqlproto.SessionTrackSchema, append([]byte{7}, "otherdb"...))
	changed := entry(mysqlproto.SessionTrackStateChange, []byte{1, '1'})
	build := func(entries ...[]byte) []byte {
		st := mysql.SERVER_STATUS_AUTOCOMMIT
		var state []byte
		for _, e := range entries {
			state = append(state, e...)
		}
		if len(state) > 0 {
			st |= mysql.SERVER_SESSION_STATE_CHANGED
		}
		return mysqlproto.AppendOK(nil, mysql.CLIENT_SESSION_TRACK, &mysqlproto.OK{AffectedRows: 3, LastInsertID: 7, Status: st, Warnings: 1, SessionState: state})
	}
	defaults := newTrackSettings("autocommit,time_zone", "0", "1", "OFF")
	cases := []struct {
		name     string
		in, want []byte
	}{
		{"schema kept, state change dropped", build(schema, changed), build(schema)},
		{"last_gtid dropped, time_zone kept", build(sysVar("last_gtid", "0-1-2"), sysVar("time_zone", "+01:00")), build(sysVar("time_zone", "+01:00"))},
		{"nothing left", build(sysVar("last_gtid", "0-1-2"), changed), build()},
	}
	for _, c := range cases {
		got := defaults.filterState(nil, c.in)
		// An OK without state written by AppendOK has an empty info
		// string; filterState writes it too (CLIENT_SESSION_TRACK layout).
		if !bytes.Equal(got, c.want) {
			a, _ := mysqlproto.ParseOK(got, mysql.CLIENT_SESSION_TRACK)
			b, _ := mysqlproto.ParseOK(c.want, mysql.CLIENT_SESSION_TRACK)
			if a.Status != b.Status || a.AffectedRows != b.AffectedRows || a.LastInsertID != b.LastInsertID || a.Warnings != b.Warnings ||
				!bytes.Equal(a.SessionState, b.SessionState) {
				t.Errorf("%s:\n got  %x\n want %x", c.name, got, c.want)
			}
		}
	}
}

func TestRewriteDiagnostics(t *testing.T) {
	cases := []struct {
		q         string
		found     int64
		want      string
		calcFound bool
	}{
		{"SELECT FOUND_ROWS()", 50, "SELECT COALESCE(50, ROW_COUNT()) AS `FOUND_ROWS()`", false},
		{"select found_rows() n, ROW_COUNT() AS r", 2, "SELECT COALESCE(2, ROW_COUNT()) AS n, COALESCE(3, ROW_COUNT()) AS r", false},
		{"SELECT FOUND_ROWS()", -1, "", false},
		{"SELECT FOUND_ROWS() + 1", 5, "", false},
		{"SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1", 5, "", true},
	}
	for _, c := range cases {
		got := rewriteDiagnostics([]byte(c.q), 3, c.found)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%q: rewritten to %q", c.q, got[1:])
		case c.want != "" && (len(got) == 0 || string(got[1:]) != c.want):
			t.Errorf("%q: %q, want %q", c.q, got, c.want)
		}
		if calcFoundRows([]byte(c.q)) != c.calcFound {
			t.Errorf("calcFoundRows(%q) = %v", c.q, !c.calcFound)
		}
	}
}

func FuzzTrackRewrites(f *testing.F) {
	f.Add("SELECT @@session.session_track_schema, 'x' FROM t")
	f.Add("SHOW VARIABLES WHERE Variable_name LIKE 'session_track%'")
	f.Add("SET session_track_state_change=ON, @@global.session_track_schema=0")
	f.Add("SELECT FOUND_ROWS() AS `x`, ROW_COUNT()")
	ts := newTrackSettings("*", "1", "0", "STATE")
	f.Fuzz(func(t *testing.T, q string) {
		_ = ts.rewriteTrackRefs([]byte(q))
		_ = trackAssigned([]byte(q))
		_ = hasTrackRef([]byte(q))
		_ = calcFoundRows([]byte(q))
		_ = rewriteDiagnostics([]byte(q), 1, 2)
		_ = ts.filterState(nil, []byte(q))
	})
}
