package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// response reads one whole COM_QUERY / COM_STMT_EXECUTE response (text rows
// as raw packets, an OK, or an ERR that ends it anywhere) and returns the
// number of rows, the ERR (nil if none) and whether the EOF after the
// column definitions said a cursor was opened (then no rows are read).
func (rc *rawConn) response(cursor bool) (rows int, merr *mysql.MyError, opened bool) {
	rc.t.Helper()
	for {
		p := rc.next()
		switch p[0] {
		case mysql.OK_HEADER:
			st, _ := mysqlproto.OKStatus(p)
			if st&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return rows, nil, false
			}
			continue
		case mysql.ERR_HEADER:
			return rows, mysqlproto.ParseERR(p), false
		}
		n, _, _ := mysqlproto.ReadLenEnc(p)
		for range n {
			if p := rc.next(); p[0] == mysql.ERR_HEADER {
				return rows, mysqlproto.ParseERR(p), false
			}
		}
		if rc.caps&mysql.CLIENT_DEPRECATE_EOF == 0 {
			p := rc.next()
			if p[0] == mysql.ERR_HEADER {
				return rows, mysqlproto.ParseERR(p), false
			}
			if _, st, _ := mysqlproto.ParseEOF(p); cursor && st&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
				return rows, nil, true
			}
		}
		for {
			p := rc.next()
			if p[0] == mysql.ERR_HEADER {
				return rows, mysqlproto.ParseERR(p), false
			}
			if p[0] == mysql.EOF_HEADER && len(p) < 0xffffff {
				var st uint16
				if rc.caps&mysql.CLIENT_DEPRECATE_EOF != 0 {
					st, _ = mysqlproto.OKStatus(p)
				} else {
					_, st, _ = mysqlproto.ParseEOF(p)
				}
				if cursor && st&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
					return rows, nil, true
				}
				if st&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
					return rows, nil, false
				}
				break
			}
			rows++
		}
	}
}

// TestStoredProgramCursorRows: a stored program with an open cursor makes
// the EOF after a result's column definitions carry
// SERVER_STATUS_CURSOR_EXISTS; that is no COM_STMT_EXECUTE cursor, the rows
// follow, and the client gets them as it does from the server directly
// (MariaDB mtr main.sp-expr, main.signal).
func TestStoredProgramCursorRows(t *testing.T) {
	h := newHarness(t, nil)
	const prog = "BEGIN NOT ATOMIC DECLARE va INT; DECLARE c CURSOR FOR SELECT a FROM spc_t1; " +
		"OPEN c; FETCH c INTO va; SELECT va; CLOSE c; END"
	for _, at := range []struct{ name, addr, user, password string }{
		{"direct", h.c.Nodes[0].Address, "root", h.c.RootPassword},
		{"proxy", h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword},
	} {
		t.Run(at.name, func(t *testing.T) {
			eofModes(t, func(t *testing.T, caps uint32) {
				rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", caps, "")
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				rc.query("CREATE TABLE IF NOT EXISTS spc_t1 (a INT)")
				rc.query("DELETE FROM spc_t1")
				rc.query("INSERT INTO spc_t1 VALUES (7)")
				rc.cmd(mysql.COM_QUERY, []byte(prog)...)
				rows, merr, opened := rc.response(false)
				if merr != nil || rows != 1 || opened {
					t.Fatalf("stored program: %d rows, err %v", rows, merr)
				}
				if got := rc.query("SELECT 41+1"); len(got) != 1 || got[0][0] != "42" {
					t.Fatalf("next statement: %v", got)
				}
			})
		})
	}
}

// TestCursorExecuteErrAfterColumns: a COM_STMT_EXECUTE with a cursor whose
// first row fails sends the column count, the definitions and an ERR (3037,
// no EOF). The client gets exactly that ERR and the session goes on.
func TestCursorExecuteErrAfterColumns(t *testing.T) {
	h := newHarness(t, nil)
	for _, at := range []struct{ name, addr, user, password string }{
		{"direct", h.c.Nodes[0].Address, "root", h.c.RootPassword},
		{"proxy", h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword},
	} {
		t.Run(at.name, func(t *testing.T) {
			eofModes(t, func(t *testing.T, caps uint32) {
				rc, err := dialRaw(t, at.addr, at.user, at.password, "sbtest", caps, "")
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				id, _ := rc.prepare("SELECT ST_DISTANCE_SPHERE(1,1,3)")
				rc.cmd(mysql.COM_STMT_EXECUTE, executeArgs(id, 1 /* CURSOR_TYPE_READ_ONLY */)...)
				_, merr, _ := rc.response(true)
				if merr == nil || merr.Code != 3037 {
					t.Fatalf("cursor execute: want ERR 3037, got %v", merr)
				}
				if got := rc.query("SELECT 41+1"); len(got) != 1 || got[0][0] != "42" {
					t.Fatalf("next statement: %v", got)
				}
			})
		})
	}
}
