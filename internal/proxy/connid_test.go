package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestRewriteConnID(t *testing.T) {
	const c = "CAST(0000000042 AS UNSIGNED)"
	for _, tc := range []struct{ in, want string }{
		{"SELECT CONNECTION_ID()", "SELECT " + c + " AS `CONNECTION_ID()`"},
		{"select connection_id( )", "select " + c + " AS `connection_id( )`"},
		{"SELECT CONNECTION_ID() AS id", "SELECT " + c + " AS id"},
		{"SELECT CONNECTION_ID() id, 1", "SELECT " + c + " id, 1"},
		{"SELECT CONNECTION_ID() `x`", "SELECT " + c + " `x`"},
		{"SELECT 1, CONNECTION_ID()+0 FROM t", "SELECT 1, " + c + "+0 AS `CONNECTION_ID()+0` FROM t"},
		{"SELECT DISTINCT CONNECTION_ID();", "SELECT DISTINCT " + c + " AS `CONNECTION_ID()`;"},
		{"SELECT (SELECT CONNECTION_ID())", "SELECT (SELECT " + c + ") AS `(SELECT CONNECTION_ID())`"},
		{"SELECT a FROM t WHERE id = CONNECTION_ID()", "SELECT a FROM t WHERE id = " + c},
		{"SELECT a FROM t WHERE id IN (CONNECTION_ID(), 3)", "SELECT a FROM t WHERE id IN (" + c + ", 3)"},
		{"DO CONNECTION_ID(); SELECT CONNECTION_ID()", "DO " + c + "; SELECT " + c + " AS `CONNECTION_ID()`"},
		{"INSERT INTO t VALUES (CONNECTION_ID())", "INSERT INTO t VALUES (" + c + ")"},
		{"DO /*!50000 CONNECTION_ID() */", "DO /*!50000 " + c + " */"},
		// Left alone.
		{"SELECT 'CONNECTION_ID()'", ""},
		{"SELECT \"a\\\"CONNECTION_ID()\"", ""},
		{"SELECT `CONNECTION_ID()` FROM t", ""},
		{"SELECT 1 /* CONNECTION_ID() */", ""},
		{"SELECT 1 -- CONNECTION_ID()\n", ""},
		{"SELECT 1 # CONNECTION_ID()", ""},
		{"SELECT t.connection_id FROM t", ""},
		{"SELECT my_connection_id() FROM t", ""},
		{"SELECT t.connection_id() FROM t", ""},
		{"SELECT connection_id FROM t", ""},
		{"SELECT 1", ""},
	} {
		got := rewriteConnID(mysql.COM_QUERY, []byte(tc.in), 42)
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%q: rewritten to %q, want unchanged", tc.in, got[1:])
		case tc.want != "" && (got == nil || string(got[1:]) != tc.want || got[0] != mysql.COM_QUERY):
			t.Errorf("%q:\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	if hasConnIDCall([]byte("SELECT a_b FROM t_id")) || !hasConnIDCall([]byte("x CONNECTION_ID(")) {
		t.Error("hasConnIDCall")
	}
}

func FuzzRewriteConnID(f *testing.F) {
	f.Add([]byte("SELECT CONNECTION_ID(), 'x' FROM t WHERE a=CONNECTION_ID()"))
	f.Fuzz(func(t *testing.T, q []byte) {
		out := rewriteConnID(mysql.COM_QUERY, q, 7)
		if out != nil && hasConnIDCall(q) == false {
			t.Fatalf("rewrote %q without the token", q)
		}
	})
}

func BenchmarkConnIDNoToken(b *testing.B) {
	q := []byte("SELECT id, k, c, pad FROM sbtest1 WHERE id BETWEEN 100 AND 200 ORDER BY c")
	for range b.N {
		if hasConnIDCall(q) {
			b.Fatal("token")
		}
	}
}
