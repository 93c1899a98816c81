package proxy

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// Transaction pooling: a user variable set by a prepared statement
// (COM_STMT_PREPARE + COM_STMT_EXECUTE) keeps its value at the session's
// next statements after other sessions used the pool, whether the session
// was pinned (a value from an expression) or the variable is re-created
// on another connection (a literal).
func TestTxPoolPreparedUserVariables(t *testing.T) {
	h := txHarness(t, 0)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.prepvar_t (v INT)")
	mustExec(t, h.direct(0), "INSERT INTO sbtest.prepvar_t VALUES (40), (42)")
	mustExec(t, h.direct(0), "CREATE PROCEDURE sbtest.prepvar_set() SET @pv_call = (SELECT MAX(v) FROM sbtest.prepvar_t)")
	mustExec(t, h.direct(0), "CREATE PROCEDURE sbtest.prepvar_lit() SET @pv_call_lit = 42")
	cases := []struct {
		name  string
		stmt  string
		args  []any
		check string // its first column must be 42 (1 for a comparison)
		want  int64
	}{
		{name: "SET from a system variable", stmt: "SET @pv_sys = @@global.max_allowed_packet",
			check: "SELECT @pv_sys = @@global.max_allowed_packet", want: 1},
		{name: "SET from an expression", stmt: "SET @pv_expr = (SELECT MAX(v) FROM prepvar_t)",
			check: "SELECT @pv_expr", want: 42},
		{name: "SET literal", stmt: "SET @pv_lit = 42", check: "SELECT @pv_lit", want: 42},
		{name: "SET parameter", stmt: "SET @pv_arg = ?", args: []any{42}, check: "SELECT @pv_arg", want: 42},
		{name: "SELECT INTO", stmt: "SELECT MAX(v) INTO @pv_into FROM prepvar_t", check: "SELECT @pv_into", want: 42},
		{name: "SELECT :=", stmt: "SELECT @pv_assign := MAX(v) FROM prepvar_t", check: "SELECT @pv_assign", want: 42},
		{name: "CALL", stmt: "CALL prepvar_set()", check: "SELECT @pv_call", want: 42},
		{name: "CALL literal", stmt: "CALL prepvar_lit()", check: "SELECT @pv_call_lit", want: 42},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a := h.client("rwtx", "sbtest")
			defer a.close()
			a.int(t, "SELECT 1")
			st, err := a.conn.PrepareContext(ctx, tc.stmt)
			if err != nil {
				t.Fatalf("prepare %s: %v", tc.stmt, err)
			}
			if rows, err := st.QueryContext(ctx, tc.args...); err != nil {
				t.Fatalf("execute %s: %v", tc.stmt, err)
			} else {
				for rows.Next() {
				}
				if err := rows.Err(); err != nil {
					t.Fatalf("execute %s: %v", tc.stmt, err)
				}
				rows.Close()
			}
			// b holds a connection in a transaction: the one a gave back,
			// if a was not pinned, so a's next statement runs on another.
			b := h.client("rwtx", "sbtest")
			defer b.close()
			bt, err := b.conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = bt.Rollback() }()
			if _, err := bt.Exec("SELECT COUNT(*) FROM prepvar_t"); err != nil {
				t.Fatal(err)
			}
			other := h.client("rwtx", "sbtest")
			defer other.close()
			for range 3 {
				other.int(t, "SELECT COUNT(*) FROM prepvar_t")
			}
			if got := a.int(t, tc.check); got != tc.want {
				t.Fatalf("%s after %s and other sessions' statements: %d, want %d", tc.check, tc.stmt, got, tc.want)
			}
			_ = st.Close()
			_ = bt.Rollback()
			// The variables are a's own.
			for _, c := range []*client{b, other} {
				if got := c.str(t, "SELECT CONCAT_WS(',', @pv_sys, @pv_expr, @pv_lit, @pv_arg, @pv_into, @pv_assign, @pv_call, @pv_call_lit)"); got.String != "" {
					t.Fatalf("another session sees user variables %q", got.String)
				}
			}
		})
	}
}

// Transaction pooling: user variables set by a text-protocol statement
// whose first word is not SET (a multi-statement, a CALL) keep their
// values after other sessions used the pool.
func TestTxPoolMultiStatementUserVariables(t *testing.T) {
	h := txHarness(t, 0)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.multivar_t (v INT)")
	mustExec(t, h.direct(0), "INSERT INTO sbtest.multivar_t VALUES (40), (42)")
	mustExec(t, h.direct(0), "CREATE PROCEDURE sbtest.multivar_set() SET @mv_call = (SELECT MAX(v) FROM sbtest.multivar_t)")
	cases := []struct{ name, q, check string }{
		{"SELECT then SET", "SELECT 1; SET @mv_sel = (SELECT MAX(v) FROM multivar_t)", "SELECT @mv_sel"},
		{"SET literal then SET expression", "SET @mv_lit = 41; SET @mv_expr = (SELECT MAX(v) FROM multivar_t)", "SELECT @mv_expr"},
		{"CALL", "CALL multivar_set()", "SELECT @mv_call"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := sql.Open("mysql", h.dsn("rwtx", "sbtest", func(c *mysql.Config) { c.MultiStatements = true }))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			a := &client{db: db, conn: conn}
			defer a.close()
			a.int(t, "SELECT 1")
			a.exec(t, tc.q)
			b := h.client("rwtx", "sbtest")
			defer b.close()
			bt, err := b.conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = bt.Rollback() }()
			if _, err := bt.Exec("SELECT COUNT(*) FROM multivar_t"); err != nil {
				t.Fatal(err)
			}
			other := h.client("rwtx", "sbtest")
			defer other.close()
			for range 3 {
				other.int(t, "SELECT COUNT(*) FROM multivar_t")
			}
			if got := a.int(t, tc.check); got != 42 {
				t.Fatalf("%s after %q and other sessions' statements: %d, want 42", tc.check, tc.q, got)
			}
		})
	}
}
