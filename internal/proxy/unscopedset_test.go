package proxy

import (
	"slices"
	"testing"
)

func TestUnscopedSysVars(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"SET @@wait_timeout = 2", []string{"wait_timeout"}},
		{"set @@SQL_MODE='', @@time_zone := '+01:00'", []string{"sql_mode", "time_zone"}},
		{"SET @@sql_mode = 'ANSI', SESSION wait_timeout = 6, @x = 1", []string{"sql_mode"}},
		{"SET @@session.wait_timeout = 2, @@local.sql_mode = '', @@global.max_connections = 10", nil},
		{"SET SESSION wait_timeout = 2", nil},
		{"SET @@session_track_schema = OFF", nil},
		{"SET @v = '@@sql_mode = 1'", nil},
		{"SET NAMES utf8mb4", nil},
		{"SET @@sql_mode = CONCAT(@@sql_mode, ',ANSI')", []string{"sql_mode"}},
	} {
		if got := unscopedSysVars([]byte(tc.q)); !slices.Equal(got, tc.want) {
			t.Errorf("unscopedSysVars(%q) = %q, want %q", tc.q, got, tc.want)
		}
	}
}

// TestUnscopedSetReplayed: system variables set as @@name, which MariaDB's
// session tracking does not report, are re-created when a
// transaction-pooled session takes a connection another session used in
// between (one pooled connection: each statement may run on another
// session's).
func TestUnscopedSetReplayed(t *testing.T) {
	h := txHarness(t, 1)
	a := h.client("rwtx", "sbtest")
	if _, err := a.conn.ExecContext(t.Context(), "SET @@sql_mode = 'ANSI_QUOTES', @@time_zone = '+01:00', @@wait_timeout = 12345"); err != nil {
		t.Fatal(err)
	}
	b := h.client("rwtx", "sbtest")
	if got := b.int(t, "SELECT @@wait_timeout"); got == 12345 {
		t.Fatalf("another session sees wait_timeout %d", got)
	}
	var mode, tz string
	var wait int64
	if err := a.conn.QueryRowContext(t.Context(), "SELECT @@sql_mode, @@time_zone, @@wait_timeout").Scan(&mode, &tz, &wait); err != nil {
		t.Fatal(err)
	}
	if mode != "ANSI_QUOTES" || tz != "+01:00" || wait != 12345 {
		t.Fatalf("after the connection served another session: sql_mode %q, time_zone %q, wait_timeout %d", mode, tz, wait)
	}
	if n := h.checkouts("node1", checkoutReset); n == 0 {
		t.Fatalf("no reset checkout: the sessions did not share the connection")
	}
}
