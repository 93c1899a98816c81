package proxy

import (
	"testing"

	gmysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
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
