package e2e

import (
	"context"
	"strings"
	"testing"
)

// TestSwitchoverKeepsSessionState: a pooled connection that set sql_mode,
// changed its default schema and prepared a statement keeps all three
// after a switchover, without an error (verified by querying them through
// the same connection, which now runs on node2).
func TestSwitchoverKeepsSessionState(t *testing.T) {
	s := startSwitchStack(t, 1, nil)
	ctx := context.Background()
	db := s.open("primary", "sbtest")
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"SET @@session.sql_mode='ANSI_QUOTES,STRICT_ALL_TABLES'",
		"USE otherdb",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	stmt, err := conn.PrepareContext(ctx, "SELECT @@server_id, DATABASE(), ? + 1")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	var sid, n int
	var schema string
	if err := stmt.QueryRowContext(ctx, 1).Scan(&sid, &schema, &n); err != nil || sid != 1 {
		t.Fatalf("before: server_id %d, %v", sid, err)
	}

	if out, err := s.switchover("node2"); err != nil {
		t.Fatalf("switchover: %v\n%s", err, out)
	}

	if err := stmt.QueryRowContext(ctx, 41).Scan(&sid, &schema, &n); err != nil {
		t.Fatalf("prepared statement after the switchover: %v", err)
	}
	if sid != 2 || schema != "otherdb" || n != 42 {
		t.Fatalf("prepared statement after the switchover: server_id %d, schema %q, result %d; want 2, otherdb, 42", sid, schema, n)
	}
	var mode, db2 string
	if err := conn.QueryRowContext(ctx, "SELECT @@session.sql_mode, DATABASE()").Scan(&mode, &db2); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mode, "ANSI_QUOTES") || !strings.Contains(mode, "STRICT_ALL_TABLES") || db2 != "otherdb" {
		t.Fatalf("after the switchover: sql_mode %q, schema %q", mode, db2)
	}
	t.Logf("after the switchover the session runs on server_id %d with sql_mode %s in schema %s; its prepared statement answers", sid, mode, db2)
}
