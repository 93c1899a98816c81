package proxy

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// eofModes runs f with and without CLIENT_DEPRECATE_EOF (the two result-set
// layouts the relay must follow), and with and without session tracking.
func eofModes(t *testing.T, f func(t *testing.T, caps uint32)) {
	for _, m := range []struct {
		name string
		caps uint32
	}{
		{"eof", 0},
		{"deprecate_eof", mysql.CLIENT_DEPRECATE_EOF},
		{"deprecate_eof+session_track", mysql.CLIENT_DEPRECATE_EOF | mysql.CLIENT_SESSION_TRACK},
	} {
		t.Run(m.name, func(t *testing.T) { f(t, m.caps) })
	}
}

func TestRawCommands(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	eofModes(t, func(t *testing.T, caps uint32) {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", caps, "")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if rc.greeting.ServerVersion == "" || !strings.Contains(rc.greeting.ServerVersion, "MariaDB") {
			t.Fatalf("greeting version %q does not come from the backend", rc.greeting.ServerVersion)
		}
		if rc.greeting.Capabilities&mysql.CLIENT_COMPRESS == 0 {
			t.Fatal("proxy does not offer compression")
		}
		if rc.greeting.Capabilities&mysql.CLIENT_SSL == 0 {
			t.Fatal("listener with tls.cert_file does not offer CLIENT_SSL")
		}

		rc.cmd(mysql.COM_PING)
		rc.expectOK()

		rc.cmd(mysql.COM_INIT_DB, []byte("otherdb")...)
		rc.expectOK()
		if rows := rc.query("SELECT DATABASE()"); rows[0][0] != "otherdb" {
			t.Fatalf("COM_INIT_DB: database %v", rows)
		}
		rc.cmd(mysql.COM_INIT_DB, []byte("sbtest")...)
		rc.expectOK()
		rc.query("CREATE TABLE IF NOT EXISTS raw_t (id INT PRIMARY KEY, s VARCHAR(10))")
		rc.query("REPLACE INTO raw_t VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),(5,NULL)")

		// COM_FIELD_LIST: column definitions until EOF/OK.
		rc.cmd(mysql.COM_FIELD_LIST, append([]byte("raw_t"), 0)...)
		defs := 0
		for {
			p := rc.next()
			if p[0] == mysql.EOF_HEADER {
				break
			}
			if p[0] == mysql.ERR_HEADER {
				t.Fatalf("COM_FIELD_LIST: %s", describe(p))
			}
			defs++
		}
		if defs != 2 {
			t.Fatalf("COM_FIELD_LIST returned %d columns", defs)
		}

		// COM_STATISTICS: one string packet.
		rc.cmd(mysql.COM_STATISTICS)
		if p := rc.next(); !strings.HasPrefix(string(p), "Uptime:") {
			t.Fatalf("COM_STATISTICS: %q", p)
		}

		// COM_SET_OPTION: multi-statements off then on.
		rc.cmd(mysql.COM_SET_OPTION, 1, 0) // MYSQL_OPTION_MULTI_STATEMENTS_OFF
		if p := rc.next(); p[0] == mysql.ERR_HEADER {
			t.Fatalf("COM_SET_OPTION: %s", describe(p))
		}
		rc.cmd(mysql.COM_SET_OPTION, 0, 0)
		if p := rc.next(); p[0] == mysql.ERR_HEADER {
			t.Fatalf("COM_SET_OPTION: %s", describe(p))
		}

		// Unknown / refused commands: ER_UNKNOWN_COM_ERROR, or 1227 for
		// the ones never relayed (rejectError); the session goes on.
		for _, c := range []struct {
			cmd   byte
			code  uint16
			state string
		}{
			{mysql.COM_BINLOG_DUMP, mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, "42000"},
			{mysql.COM_SHUTDOWN, mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, "42000"},
			{0xfe, mysql.ER_UNKNOWN_COM_ERROR, "08S01"},
			{0x99, mysql.ER_UNKNOWN_COM_ERROR, "08S01"},
		} {
			rc.cmd(c.cmd, 1, 2, 3)
			p := rc.next()
			if e := mysqlproto.ParseERR(p); p[0] != mysql.ERR_HEADER || e.Code != c.code || e.State != c.state {
				t.Fatalf("command 0x%02x: %s", c.cmd, describe(p))
			}
		}

		// Prepared statement with a cursor: execute opens it, fetch streams it.
		id, cols := rc.prepare("SELECT id, s FROM raw_t ORDER BY id")
		if cols != 2 {
			t.Fatalf("prepare: %d columns", cols)
		}
		rc.cmd(mysql.COM_STMT_EXECUTE, executeArgs(id, 1 /* CURSOR_TYPE_READ_ONLY */)...)
		p := rc.next()
		if n, _, _ := mysqlproto.ReadLenEnc(p); n != 2 {
			t.Fatalf("execute with cursor: %s", describe(p))
		}
		rc.next()
		rc.next()
		p = rc.next() // EOF (or OK) carrying SERVER_STATUS_CURSOR_EXISTS
		var st uint16
		if caps&mysql.CLIENT_DEPRECATE_EOF != 0 {
			st, _ = mysqlproto.OKStatus(p)
		} else {
			_, st, _ = mysqlproto.ParseEOF(p)
		}
		if p[0] != mysql.EOF_HEADER || st&mysql.SERVER_STATUS_CURSOR_EXISTS == 0 {
			t.Fatalf("no cursor opened: %x", p)
		}
		fetched := 0
		for round := 0; round < 10; round++ {
			rc.cmd(mysql.COM_STMT_FETCH, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, id), 2)...)
			last := false
			for {
				p := rc.next()
				if p[0] == mysql.ERR_HEADER {
					t.Fatalf("fetch: %s", describe(p))
				}
				if p[0] == mysql.EOF_HEADER {
					var st uint16
					if caps&mysql.CLIENT_DEPRECATE_EOF != 0 {
						st, _ = mysqlproto.OKStatus(p)
					} else {
						_, st, _ = mysqlproto.ParseEOF(p)
					}
					last = st&mysql.SERVER_STATUS_LAST_ROW_SEND != 0
					break
				}
				fetched++
			}
			if last {
				break
			}
		}
		if fetched != 5 {
			t.Fatalf("fetched %d rows through the cursor, want 5", fetched)
		}
		rc.cmd(mysql.COM_STMT_RESET, binary.LittleEndian.AppendUint32(nil, id)...)
		rc.expectOK()
		rc.cmd(mysql.COM_STMT_CLOSE, binary.LittleEndian.AppendUint32(nil, id)...) // no response

		// COM_STMT_SEND_LONG_DATA (no response) then execute.
		id, _ = rc.prepare("SELECT LENGTH(?)")
		long := append(binary.LittleEndian.AppendUint32(nil, id), 0, 0) // param 0
		long = append(long, strings.Repeat("z", 100000)...)
		rc.cmd(mysql.COM_STMT_SEND_LONG_DATA, long...)
		exec := executeArgs(id, 0)
		exec = append(exec, 0, 1, mysql.MYSQL_TYPE_BLOB, 0) // null bitmap, new-params-bound, type
		rc.cmd(mysql.COM_STMT_EXECUTE, exec...)
		p = rc.next()
		if n, _, _ := mysqlproto.ReadLenEnc(p); n != 1 {
			t.Fatalf("execute after long data: %s", describe(p))
		}
		rc.next()
		if caps&mysql.CLIENT_DEPRECATE_EOF == 0 {
			rc.next()
		}
		row := rc.next()
		if len(row) != 6 || row[0] != 0 || binary.LittleEndian.Uint32(row[2:]) != 100000 { // header, null bitmap, INT
			t.Fatalf("LENGTH of long data: %x", row)
		}
		if p := rc.next(); p[0] != mysql.EOF_HEADER {
			t.Fatalf("no terminator: %x", p)
		}
		rc.cmd(mysql.COM_STMT_CLOSE, binary.LittleEndian.AppendUint32(nil, id)...)

		// COM_RESET_CONNECTION clears user variables.
		rc.query("SET @x = 5")
		if rows := rc.query("SELECT @x"); rows[0][0] != "5" {
			t.Fatalf("@x = %v", rows)
		}
		rc.cmd(mysql.COM_RESET_CONNECTION)
		rc.expectOK()
		if rows := rc.query("SELECT @x"); rows[0][0] != "<nil>" {
			t.Fatalf("after COM_RESET_CONNECTION @x = %v", rows)
		}
		// Still usable; quit ends it cleanly.
		if rows := rc.query("SELECT 1+1"); rows[0][0] != "2" {
			t.Fatalf("after reset: %v", rows)
		}
		rc.cmd(mysql.COM_QUIT)
	})
}

// A client that starts with another auth plugin is switched to
// mysql_native_password and logs in.
func TestAuthSwitchFromOtherPlugin(t *testing.T) {
	h := newHarness(t, nil)
	for _, plugin := range []string{mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_MARIADB_ED25519} {
		rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, plugin)
		if err != nil {
			t.Fatalf("%s: %v", plugin, err)
		}
		if rows := rc.query("SELECT CURRENT_USER()"); !strings.HasPrefix(rows[0][0], h.c.AppUser+"@") {
			t.Fatalf("%s: current user %v", plugin, rows)
		}
		rc.Close()
	}
}

// COM_CHANGE_USER to a user configured with only its mysql_native_password
// hash: verified by the proxy, backend re-logged as the new user.
func TestChangeUserAndHashOnlyUser(t *testing.T) {
	const pw2 = "second-secret"
	h := newHarness(t, func(c *config.Config) {
		c.Users = append(c.Users, config.User{Name: "app2",
			PasswordHash: mysqlproto.FormatNativeHash(mysqlproto.NativeStage2(mysqlproto.NativeStage1(pw2)))})
	})
	mustExec(t, h.direct(0), "CREATE USER 'app2'@'%' IDENTIFIED BY '"+pw2+"'")
	mustExec(t, h.direct(0), "GRANT SELECT ON *.* TO 'app2'@'%'")
	addr := h.srv.ListenerAddr("rw")

	rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rc.query("SET @mine = 1")
	cu := mysqlproto.ChangeUser{User: "app2", AuthResponse: mysqlproto.NativeToken(rc.scramble, mysqlproto.NativeStage1(pw2)),
		Database: "sbtest", Charset: 45, AuthPlugin: mysql.AUTH_NATIVE_PASSWORD}
	rc.write(0, mysqlproto.AppendChangeUser(nil, &cu, rc.caps))
	rc.expectOK()
	rows := rc.query("SELECT CURRENT_USER(), DATABASE(), @mine")
	if !strings.HasPrefix(rows[0][0], "app2@") || rows[0][1] != "sbtest" || rows[0][2] != "<nil>" {
		t.Fatalf("after COM_CHANGE_USER: %v", rows)
	}
	// The hash-only user now logs in directly as well (its SHA1(pw) was
	// recovered from the change-user scramble).
	rc2, err := dialRaw(t, addr, "app2", pw2, "", 0, "")
	if err != nil {
		t.Fatalf("hash-only user login: %v", err)
	}
	rc2.Close()
	// Wrong password on COM_CHANGE_USER: 1045, and the session stays open
	// as the previous user with its state reset (user variables gone); a
	// second COM_CHANGE_USER with the right password succeeds. The same sequence straight against the server
	// shows what MariaDB does.
	dc, err := dialRaw(t, h.c.Nodes[0].Address, h.c.AppUser, h.c.AppPassword, "", mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	// changeTo sends COM_CHANGE_USER for the app user with pw, answers an
	// AuthSwitchRequest (MariaDB restarts the exchange with a fresh
	// scramble), and returns the final OK or ERR.
	changeTo := func(rc *rawConn, pw string) []byte {
		cu := mysqlproto.ChangeUser{User: h.c.AppUser, AuthResponse: mysqlproto.NativeToken(rc.scramble, mysqlproto.NativeStage1(pw)),
			Charset: 45, AuthPlugin: mysql.AUTH_NATIVE_PASSWORD}
		rc.write(0, mysqlproto.AppendChangeUser(nil, &cu, rc.caps))
		p := rc.next()
		if p[0] == 0xfe && len(p) > 1 {
			i := 1 + strings.IndexByte(string(p[1:]), 0) + 1
			data := p[i:]
			if n := len(data); n > 0 && data[n-1] == 0 {
				data = data[:n-1]
			}
			rc.write(2, mysqlproto.NativeToken(data, mysqlproto.NativeStage1(pw)))
			p = rc.next()
		}
		return p
	}
	for _, c := range []struct {
		name string
		rc   *rawConn
		prev string // the user before the refused change
	}{{"server", dc, h.c.AppUser}, {"proxy", rc, "app2"}} {
		c.rc.query("SET @kept = 1")
		p := changeTo(c.rc, "wrong")
		if e := mysqlproto.ParseERR(p); p[0] != mysql.ERR_HEADER || e.Code != mysql.ER_ACCESS_DENIED_ERROR || e.State != "28000" {
			t.Fatalf("%s: bad change user: %s", c.name, describe(p))
		}
		if rows := c.rc.query("SELECT CURRENT_USER(), @kept"); !strings.HasPrefix(rows[0][0], c.prev+"@") || rows[0][1] != "<nil>" {
			t.Fatalf("%s: after the refused COM_CHANGE_USER: %v", c.name, rows)
		} else {
			t.Logf("%s: after the refused COM_CHANGE_USER: %v", c.name, rows)
		}
		if p := changeTo(c.rc, h.c.AppPassword); p[0] != mysql.OK_HEADER {
			t.Fatalf("%s: second COM_CHANGE_USER: %s", c.name, describe(p))
		}
		if rows := c.rc.query("SELECT CURRENT_USER()"); !strings.HasPrefix(rows[0][0], h.c.AppUser+"@") {
			t.Fatalf("%s: after the second COM_CHANGE_USER: %v", c.name, rows)
		}
	}
}

// A hash-only user logs in directly (first login recovers SHA1(pw)).
func TestHashOnlyUserDirectLogin(t *testing.T) {
	const pw = "hash-only-pw"
	h := newHarness(t, func(c *config.Config) {
		c.Users = []config.User{{Name: "hashed", PasswordHash: mysqlproto.FormatNativeHash(mysqlproto.NativeStage2(mysqlproto.NativeStage1(pw)))}}
	})
	mustExec(t, h.direct(0), "CREATE USER 'hashed'@'%' IDENTIFIED BY '"+pw+"'")
	mustExec(t, h.direct(0), "GRANT SELECT ON *.* TO 'hashed'@'%'")
	rc, err := dialRaw(t, h.srv.ListenerAddr("rw"), "hashed", pw, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if rows := rc.query("SELECT CURRENT_USER()"); !strings.HasPrefix(rows[0][0], "hashed@") {
		t.Fatalf("current user %v", rows)
	}
	_, err = dialRaw(t, h.srv.ListenerAddr("rw"), "hashed", pw+"x", "", 0, "")
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != mysql.ER_ACCESS_DENIED_ERROR {
		t.Fatalf("wrong password for hash-only user: %v", err)
	}
}
