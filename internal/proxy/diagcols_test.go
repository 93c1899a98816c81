package proxy

import (
	"fmt"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// rawResult runs q and returns its column definitions and rows (raw
// payloads in hex; none for an OK); an error fails the test.
func (rc *rawConn) rawResult(q string) (defs, rows []string) {
	rc.t.Helper()
	rc.cmd(mysql.COM_QUERY, []byte(q)...)
	p := rc.next()
	switch p[0] {
	case mysql.OK_HEADER:
		return nil, nil
	case mysql.ERR_HEADER:
		rc.t.Fatalf("%s: %s", q, describe(p))
	}
	n, _, _ := mysqlproto.ReadLenEnc(p)
	for range n {
		defs = append(defs, fmt.Sprintf("%x", rc.next()))
	}
	rc.next() // EOF
	for {
		p := rc.next()
		if p[0] == mysql.EOF_HEADER && len(p) < 9 {
			return defs, rows
		}
		if p[0] == mysql.ERR_HEADER {
			rc.t.Fatalf("%s: %s", q, describe(p))
		}
		rows = append(rows, fmt.Sprintf("%q", p))
	}
}

// On a transaction-pooled listener, SELECT ROW_COUNT() / FOUND_ROWS() that
// the proxy answers (the previous statement's connection went to another
// session) get the server's own column definitions, byte for byte, and
// its values.
func TestDiagnosticsColumnsMatchDirect(t *testing.T) {
	h := txHarness(t, 1)
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.dc_d (id INT PRIMARY KEY, v INT)")
	mustExec(t, h.direct(0), "CREATE TABLE sbtest.dc_p (id INT PRIMARY KEY, v INT)")
	addr := h.srv.ListenerAddr("rwtx")
	dial := func(addr string) *rawConn {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	direct, a, b := dial(h.c.Nodes[0].Address), dial(addr), dial(addr)
	steps := []struct{ stmt, read string }{
		{"INSERT INTO %s VALUES (1, 0), (2, 0), (3, 0)", "SELECT ROW_COUNT()"},
		{"UPDATE %s SET v = v + 1 WHERE id <= 2", "SELECT ROW_COUNT() AS rc, ROW_COUNT() n"},
		{"SELECT * FROM %s", "SELECT FOUND_ROWS()"},
		{"SELECT * FROM %s WHERE id = 1", "select found_rows() f, ROW_COUNT()"},
		{"DELETE FROM %s", "SELECT ROW_COUNT()"},
	}
	for _, st := range steps {
		direct.rawResult(fmt.Sprintf(st.stmt, "dc_d"))
		wantDefs, wantRows := direct.rawResult(st.read)
		a.rawResult(fmt.Sprintf(st.stmt, "dc_p"))
		b.query("SELECT 1") // b takes the one connection: a's diagnostics are not there any more
		gotDefs, gotRows := a.rawResult(st.read)
		if fmt.Sprint(gotDefs) != fmt.Sprint(wantDefs) || fmt.Sprint(gotRows) != fmt.Sprint(wantRows) {
			t.Errorf("%q then %q: through the proxy columns %v rows %v; direct columns %v rows %v",
				st.stmt, st.read, gotDefs, gotRows, wantDefs, wantRows)
		}
	}
}
