package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// changeUserTo sends COM_CHANGE_USER as libmariadb's mysql_change_user does
// (a mysql_native_password token over the connection's current scramble, no
// token for an empty password), answers an AuthSwitchRequest with the
// same password, and returns the final OK or ERR. A switch's scramble
// becomes the connection's scramble, as in libmariadb.
func (rc *rawConn) changeUserTo(user, pw, db string) []byte {
	rc.t.Helper()
	var tok []byte
	if pw != "" {
		tok = mysqlproto.NativeToken(rc.scramble, mysqlproto.NativeStage1(pw))
	}
	cu := mysqlproto.ChangeUser{User: user, AuthResponse: tok, Database: db, Charset: 45, AuthPlugin: mysql.AUTH_NATIVE_PASSWORD}
	rc.write(0, mysqlproto.AppendChangeUser(nil, &cu, rc.caps))
	p := rc.next()
	if p[0] == 0xfe && len(p) > 1 {
		sw, err := mysqlproto.ParseAuthSwitchRequest(p)
		if err != nil {
			rc.t.Fatalf("auth switch: %v", err)
		}
		rc.scramble = sw.Data
		var tok []byte
		if pw != "" {
			tok = mysqlproto.NativeToken(sw.Data, mysqlproto.NativeStage1(pw))
		}
		rc.write(2, tok)
		p = rc.next()
	}
	return p
}

// COM_CHANGE_USER to accounts created while the session runs
// (proxy.backend_accounts), in the sequences of mariadb-client-test's
// test_change_user and test_bug31669, answered alike by the server and by
// the proxy: refused ones with 1045 (or 1044 for a schema the account may
// not use) keeping the connection, accepted ones with OK.
func TestChangeUserBackendAccounts(t *testing.T) { poolings(t, testChangeUserBackendAccounts) }

func testChangeUserBackendAccounts(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, func(c *config.Config) {
		pooling(c)
		c.Proxy.BackendAccounts = config.BackendAccounts{Enabled: true, Refresh: config.Duration(time.Hour)}
	})
	root := h.direct(0)
	const db = "mysqltest_cu_db"
	mustExec(t, root, "CREATE DATABASE IF NOT EXISTS "+db)
	mustExec(t, root, "CREATE USER mysqltest_pw@'%' IDENTIFIED BY 'password'")
	mustExec(t, root, "CREATE USER mysqltest_no_pw@'%'")
	mustExec(t, root, "GRANT SELECT ON "+db+".* TO mysqltest_pw@'%', mysqltest_no_pw@'%'")
	targets := []struct{ name, addr string }{{"server", h.c.Nodes[0].Address}, {"proxy", h.srv.ListenerAddr("rw")}}
	type step struct {
		user, pw, db string
		ok           bool
	}
	dial := func(addr string) *rawConn {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", mysql.CLIENT_DEPRECATE_EOF, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	// One connection per group, as the C test reconnects every few steps.
	groups := [][]step{
		{{"", "", "", false}, {"", "", "", false}},
		// A schema the account may not use (1044) or that does not exist
		// (1049): refused, the session stays as the previous user.
		{{"mysqltest_pw", "password", "mysqltest_no_such_db", false}},
		{{h.c.AppUser, h.c.AppPassword, "mysqltest_no_such_db", false}},
		{{"mysqltest_pw", "", db, false}, {"mysqltest_pw", "password", db, true}, {"mysqltest_pw", "password", "", true},
			{"mysqltest_no_pw", "password", db, false}, {"mysqltest_no_pw", "password", "", false}},
		{{"mysqltest_no_pw", "password", "", false}, {"mysqltest_no_pw", "", "", true}, {"mysqltest_no_pw", "", db, true},
			{"", "password", db, false}},
	}
	for _, tg := range targets {
		for gi, g := range groups {
			rc := dial(tg.addr)
			for si, s := range g {
				p := rc.changeUserTo(s.user, s.pw, s.db)
				if got := p[0] == mysql.OK_HEADER; got != s.ok {
					t.Fatalf("%s: group %d step %d (%q, pw %q, db %q): want ok=%v, got %s", tg.name, gi, si, s.user, s.pw, s.db, s.ok, describe(p))
				}
				if !s.ok {
					t.Logf("%s: %q, pw %q, db %q: %s", tg.name, s.user, s.pw, s.db, describe(p))
				}
				if rows := rc.query("SELECT CURRENT_USER()"); len(rows) != 1 || (!s.ok && si == 0 && !strings.HasPrefix(rows[0][0], h.c.AppUser+"@")) {
					t.Fatalf("%s: group %d step %d: after the change: %v", tg.name, gi, si, rows)
				}
			}
		}
	}
	// Over-long names (test_bug31669): refused, then a change back to the
	// login's own account, and the session runs statements.
	long := strings.Repeat("a", 2048)
	for _, tg := range targets {
		rc := dial(tg.addr)
		if p := rc.changeUserTo(long, long, long); p[0] != mysql.ERR_HEADER {
			t.Fatalf("%s: long names: %s", tg.name, describe(p))
		} else {
			t.Logf("%s: long names: %s", tg.name, describe(p))
		}
		if p := rc.changeUserTo(h.c.AppUser, h.c.AppPassword, "sbtest"); p[0] != mysql.OK_HEADER {
			t.Fatalf("%s: back to the login's account: %s", tg.name, describe(p))
		}
		rc.cmd(mysql.COM_QUERY, []byte("CREATE DATABASE IF NOT EXISTS "+strings.Repeat("a", 64))...)
		if p := rc.next(); p[0] != mysql.OK_HEADER {
			t.Fatalf("%s: statement after the change: %s", tg.name, describe(p))
		}
	}
	// A user created after a refused change of user in the same second.
	for _, tg := range targets {
		name := "cu_late_" + tg.name
		rc := dial(tg.addr)
		if p := rc.changeUserTo("cu_nobody", "x", ""); p[0] != mysql.ERR_HEADER {
			t.Fatalf("%s: unknown user: %s", tg.name, describe(p))
		}
		mustExec(t, root, "CREATE USER "+name+"@'%' IDENTIFIED BY 'late-pw'")
		if p := rc.changeUserTo(name, "late-pw", ""); p[0] != mysql.OK_HEADER {
			t.Fatalf("%s: account created a moment ago: %s", tg.name, describe(p))
		}
		if rows := rc.query("SELECT CURRENT_USER()"); !strings.HasPrefix(rows[0][0], name+"@") {
			t.Fatalf("%s: current user %v", tg.name, rows)
		}
	}
}
