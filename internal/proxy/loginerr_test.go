package proxy

import (
	"context"
	"database/sql"
	"os/exec"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
)

// Errors known before login (no primary, no replica, backend unreachable)
// come after the greeting and the client's handshake response, so clients
// see the server error (1105) rather than a failed connection (the mariadb
// client reported 2002 "Received error packet before completion of TLS
// handshake"); a wrong password still gets 1045. The replica listener's
// message says whether fallback is off or there is no primary to fall back
// to.
func TestLoginErrorsAfterHandshake(t *testing.T) {
	h := newHarness(t, nil)
	noPrimary := sandboxState(h.c, 2, 0)
	noPrimary.Primary = ""
	h.srv.SetClusterState(noPrimary)

	ping := func(l string, mod func(*mysql.Config)) error {
		d, _ := sql.Open("mysql", h.dsn(l, "", mod))
		defer d.Close()
		return d.Ping()
	}
	if code, msg := mysqlErr(ping("rw", nil)); code != 1105 || !strings.Contains(msg, "no primary known") {
		t.Fatalf("rw without a primary: %d %q", code, msg)
	}
	code, msg := mysqlErr(ping("ro", nil))
	if code != 1105 || !strings.Contains(msg, "no primary known to fall back to") || strings.Contains(msg, "fallback to the primary is off") {
		t.Fatalf("ro without replicas or primary, fallback on: %d %q", code, msg)
	}
	if code, _ := mysqlErr(ping("rw", func(c *mysql.Config) { c.Passwd = "wrong" })); code != gomysql.ER_ACCESS_DENIED_ERROR {
		t.Fatalf("wrong password without a route: %d", code)
	}
	// The greeting comes first: a raw client gets a handshake, logs in
	// and then reads the ERR.
	_, err := dialRaw(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, "", 0, "")
	if me, ok := err.(*gomysql.MyError); !ok || me.Code != 1105 {
		t.Fatalf("raw login without a primary: %v", err)
	}

	bin := lookTool(t, "mariadb")
	cli := func(l string) string {
		host, port := hostPort(t, h.srv.ListenerAddr(l))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// No --skip-ssl: the client's defaults, as a user runs it.
		out, _ := exec.CommandContext(ctx, bin, "--no-defaults", "-h"+host, "-P"+port, "-u"+h.c.AppUser,
			"-p"+h.c.AppPassword, "-e", "SELECT 1").CombinedOutput()
		return string(out)
	}
	if out := cli("rw"); !strings.Contains(out, "ERROR 1105") || !strings.Contains(out, "no primary known") || strings.Contains(out, "2002") {
		t.Fatalf("mariadb client without a primary: %s", out)
	}
	// Unreachable backend, no greeting cached.
	st := sandboxState(h.c, 3, 0, 1, 2)
	for i := range st.Nodes {
		st.Nodes[i].Address = closedAddr(t)
	}
	h.srv.route("main").greeting.Store(nil)
	h.srv.SetClusterState(st)
	for _, l := range []string{"rw", "ro"} {
		if out := cli(l); !strings.Contains(out, "ERROR 1105") || !strings.Contains(out, "cannot reach") || strings.Contains(out, "2002") {
			t.Fatalf("mariadb client, %s, backends unreachable: %s", l, out)
		}
	}
}
