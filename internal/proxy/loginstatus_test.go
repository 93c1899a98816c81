package proxy

import (
	"testing"

	gmysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// TestLoginStatusFollowsGlobalAutocommit: the login OK's
// SERVER_STATUS_AUTOCOMMIT and the session's @@autocommit follow a SET
// GLOBAL autocommit relayed before the login, on both poolings, although
// the pool holds a clean connection logged in under the old global value
// (mariadb-client-test test_connect_autocommit).
func TestLoginStatusFollowsGlobalAutocommit(t *testing.T) {
	const admPW = "adm-pw-1"
	h := newHarness(t, func(c *config.Config) {
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Users = append(c.Users, config.User{Name: "adm", Password: admPW})
	})
	root := h.direct(0)
	mustExec(t, root, "CREATE USER adm@'%' IDENTIFIED BY '"+admPW+"'")
	mustExec(t, root, "GRANT ALL ON *.* TO adm@'%'")
	t.Cleanup(func() { _, _ = root.Exec("SET GLOBAL autocommit=1") })
	node := h.c.Nodes[0].Name
	for _, l := range []string{"rw", "rwtx"} {
		addr := h.srv.ListenerAddr(l)
		login := func() *rawConn {
			t.Helper()
			c, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
			if err != nil {
				t.Fatalf("%s: login: %v", l, err)
			}
			return c
		}
		// A clean idle connection of the app user, logged in while the
		// global value is 1 (on pooling: transaction it goes back after
		// each statement).
		want := h.poolGauge(node, "idle")
		if l == "rw" {
			want++
		}
		c := login()
		c.query("SELECT 1")
		c.Close()
		h.waitIdle(node, max(want, 1))
		adm, err := dialRaw(t, addr, "adm", admPW, "", 0, "")
		if err != nil {
			t.Fatalf("%s: adm login: %v", l, err)
		}
		for _, v := range []string{"0", "1"} {
			adm.cmd(gmysql.COM_QUERY, []byte("SET GLOBAL autocommit="+v)...)
			adm.expectOK()
			c := login()
			got := c.loginStatus&gmysql.SERVER_STATUS_AUTOCOMMIT != 0
			if got != (v == "1") {
				t.Errorf("%s: global autocommit=%s: login OK status %#x (SERVER_STATUS_AUTOCOMMIT %v)", l, v, c.loginStatus, got)
			}
			if rows := c.query("SELECT @@autocommit"); rows[0][0] != v {
				t.Errorf("%s: global autocommit=%s: session @@autocommit %s", l, v, rows[0][0])
			}
			c.Close()
			h.waitIdle(node, 1)
		}
		adm.Close()
	}
}

// TestChangeUserReleasesUserLock: after COM_CHANGE_USER the previous
// login's GET_LOCK is free at once, as on the server, where the change
// resets the session (mariadb-client-test test_bug31418); the previous
// connection goes back to the pool with its own schema.
func TestChangeUserReleasesUserLock(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	for i := range 5 {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if rows := rc.query("SELECT GET_LOCK('cu_lock', 1)"); rows[0][0] != "1" {
			t.Fatalf("round %d: GET_LOCK: %v", i, rows)
		}
		cu := mysqlproto.ChangeUser{User: h.c.AppUser, AuthResponse: mysqlproto.NativeToken(rc.scramble, mysqlproto.NativeStage1(h.c.AppPassword)),
			Charset: 45, AuthPlugin: gmysql.AUTH_NATIVE_PASSWORD}
		rc.write(0, mysqlproto.AppendChangeUser(nil, &cu, rc.caps))
		rc.expectOK()
		if rows := rc.query("SELECT IS_FREE_LOCK('cu_lock'), DATABASE()"); rows[0][0] != "1" || rows[0][1] != "<nil>" {
			t.Fatalf("round %d: after COM_CHANGE_USER: IS_FREE_LOCK, DATABASE() = %v, want 1, NULL", i, rows)
		}
		rc.Close()
		// The previous login's connection, pooled again, still has its
		// schema: a login with that schema gets it there.
		c2, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if rows := c2.query("SELECT DATABASE()"); rows[0][0] != "sbtest" {
			t.Fatalf("round %d: pooled login with schema sbtest: DATABASE() = %v", i, rows)
		}
		c2.Close()
	}
}

// TestPooledSessionValuesAfterDirectSetGlobal: a SET GLOBAL sent to the
// server without the proxy leaves the pooled connections with the old
// value as their session value (here max_allowed_packet, whose session
// value is read-only and taken at login or reset); the same SET GLOBAL sent
// again through a listener, with the value the server already has, makes
// the next session start from the server's globals, as a new direct
// connection does. The compat runner's reset between MariaDB tests relies
// on it (main.variables leaves max_allowed_packet at 1024).
func TestPooledSessionValuesAfterDirectSetGlobal(t *testing.T) {
	const admPW = "adm-pw-2"
	h := newHarness(t, func(c *config.Config) {
		c.Proxy.MaxConnectionsPerBackend = 2
		c.Listeners = append(c.Listeners, config.Listener{Name: "rwtx", Address: "127.0.0.1:0",
			Cluster: c.Listeners[0].Cluster, Role: config.RolePrimary, Pooling: config.PoolingTransaction})
		c.Users = append(c.Users, config.User{Name: "adm", Password: admPW})
	})
	root := h.direct(0)
	var orig string
	if err := root.QueryRow("SELECT @@global.max_allowed_packet").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	mustExec(t, root, "CREATE USER adm@'%' IDENTIFIED BY '"+admPW+"'")
	mustExec(t, root, "GRANT ALL ON *.* TO adm@'%'")
	t.Cleanup(func() { _, _ = root.Exec("SET GLOBAL max_allowed_packet=" + orig) })
	node := h.c.Nodes[0].Name
	for _, l := range []string{"rw", "rwtx"} {
		addr := h.srv.ListenerAddr(l)
		session := func() string {
			t.Helper()
			c, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
			if err != nil {
				t.Fatalf("%s: login: %v", l, err)
			}
			defer c.Close()
			return c.query("SELECT @@session.max_allowed_packet")[0][0]
		}
		adm, err := dialRaw(t, addr, "adm", admPW, "", 0, "")
		if err != nil {
			t.Fatalf("%s: adm login: %v", l, err)
		}
		// Through the proxy: pooled connections are reset for the new value.
		adm.cmd(gmysql.COM_QUERY, []byte("SET GLOBAL max_allowed_packet=1024")...)
		adm.expectOK()
		if got := session(); got != "1024" {
			t.Fatalf("%s: after SET GLOBAL max_allowed_packet=1024 through the proxy: session value %s", l, got)
		}
		h.waitIdle(node, 1)
		// Direct: the pooled connection keeps 1024 (the proxy cannot see it).
		mustExec(t, root, "SET GLOBAL max_allowed_packet="+orig)
		// The same value again through the proxy: the next session has it.
		adm.cmd(gmysql.COM_QUERY, []byte("SET GLOBAL max_allowed_packet="+orig)...)
		adm.expectOK()
		if got := session(); got != orig {
			t.Errorf("%s: after a direct SET GLOBAL max_allowed_packet=%s repeated through the proxy: session value %s", l, orig, got)
		}
		adm.Close()
		h.waitIdle(node, 1)
	}
}
