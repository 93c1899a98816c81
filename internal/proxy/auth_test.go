package proxy

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	gmysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// installEd25519 loads MariaDB's auth_ed25519 plugin on every node, outside
// the binlog (plugins are per server).
func (h *harness) installEd25519() {
	h.t.Helper()
	ctx := context.Background()
	for i := range h.c.Nodes {
		conn, err := h.direct(i).Conn(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'ed25519'").Scan(&n); err != nil {
			h.t.Fatal(err)
		}
		if n == 0 {
			mustExec(h.t, conn, "SET sql_log_bin = 0")
			mustExec(h.t, conn, "INSTALL SONAME 'auth_ed25519'")
		}
		_ = conn.Close()
	}
}

// userDSN is a go-sql-driver DSN for user through listener.
func (h *harness) userDSN(listener, user, pw string) string {
	return h.dsn(listener, "", func(c *mysql.Config) { c.User, c.Passwd = user, pw })
}

// loginAs logs in through listener as user and returns CURRENT_USER() or
// the error.
func loginAs(dsn string) (string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var cu string
	err = db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&cu)
	return cu, err
}

// cli runs the mariadb command-line client against addr as user and
// returns its output.
func cli(t *testing.T, bin, addr, user, pw string, args ...string) (string, error) {
	t.Helper()
	host, port := hostPort(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []string{"--no-defaults", "-h" + host, "-P" + port, "-u" + user, "-p" + pw, "--skip-ssl", "-N", "-B"}
	out, err := exec.CommandContext(ctx, bin, append(base, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// accessDenied checks that err is MySQL error 1045 with exactly the
// server's text (want, as a direct login to the node answered).
func accessDenied(t *testing.T, what string, err error, want string) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1045 || me.Message != want {
		t.Fatalf("%s: got %v, want error 1045 %q", what, err, want)
	}
}

// Clients of an ed25519 user (MariaDB's auth_ed25519) log in through the
// proxy with go-sql-driver and the mariadb command-line client; the proxy
// verifies their signatures and logs into the backend's ed25519 account by
// answering its client_ed25519 challenge. A wrong password gets the
// server's own 1045 text. caching_sha2_password users log in with
// go-sql-driver by full authentication (RSA, no TLS) and then by the fast
// path, and with the mariadb client (both paths too).
func TestAuthPluginsRealClients(t *testing.T) {
	bin := lookTool(t, "mariadb")
	const edPW, shaPW, sha2PW = "ed-secret", "sha-secret", "sha-plain"
	h := newHarness(t, func(c *config.Config) {
		c.Users = append(c.Users,
			config.User{Name: "edu", Password: edPW, AuthPlugin: config.AuthEd25519},
			config.User{Name: "shau", AuthPlugin: config.AuthSHA2,
				PasswordHash: mysqlproto.FormatNativeHash(mysqlproto.NativeStage2(mysqlproto.NativeStage1(shaPW)))},
			config.User{Name: "shap", Password: sha2PW, AuthPlugin: config.AuthSHA2})
	})
	h.installEd25519()
	root := h.direct(0)
	mustExec(t, root, "CREATE USER edu@'%' IDENTIFIED VIA ed25519 USING PASSWORD('"+edPW+"')")
	mustExec(t, root, "GRANT SELECT ON *.* TO edu@'%'")
	mustExec(t, root, "CREATE USER shau@'%' IDENTIFIED BY '"+shaPW+"'")
	mustExec(t, root, "CREATE USER shap@'%' IDENTIFIED BY '"+sha2PW+"'")
	h.waitReplicated(1, 2)
	rw, ro := h.srv.ListenerAddr("rw"), h.srv.ListenerAddr("ro")

	// The server's own answer to a wrong ed25519 password.
	_, direct := loginAs(h.dsn("", "", func(c *mysql.Config) { c.User, c.Passwd, c.Addr = "edu", "wrong", h.c.Nodes[0].Address }))
	var me *mysql.MySQLError
	if !errors.As(direct, &me) || me.Number != 1045 {
		t.Fatalf("direct wrong-password login: %v", direct)
	}
	serverText := me.Message

	for _, l := range []string{"rw", "ro"} {
		if cu, err := loginAs(h.userDSN(l, "edu", edPW)); err != nil || cu != "edu@%" {
			t.Fatalf("ed25519 go-sql-driver login through %s: %q, %v", l, cu, err)
		}
	}
	_, err := loginAs(h.userDSN("rw", "edu", "wrong"))
	accessDenied(t, "ed25519 wrong password (go-sql-driver)", err, serverText)
	if out, err := cli(t, bin, rw, "edu", edPW, "-e", "SELECT CURRENT_USER()"); err != nil || out != "edu@%" {
		t.Fatalf("ed25519 mariadb client: %q, %v", out, err)
	}
	if out, err := cli(t, bin, ro, "edu", "wrong", "-e", "SELECT 1"); err == nil || !strings.Contains(out, "ERROR 1045 (28000): "+serverText) {
		t.Fatalf("ed25519 mariadb client, wrong password: %q, %v", out, err)
	}

	// COM_CHANGE_USER to the ed25519 user: switched to client_ed25519
	// with a fresh nonce, the signature checked, the backend logged in.
	raw, err := dialRaw(t, rw, h.c.AppUser, h.c.AppPassword, "", gmysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cu := mysqlproto.ChangeUser{User: "edu", AuthResponse: mysqlproto.NativeToken(raw.scramble, mysqlproto.NativeStage1(edPW)),
		Charset: 45, AuthPlugin: gmysql.AUTH_NATIVE_PASSWORD}
	raw.write(0, mysqlproto.AppendChangeUser(nil, &cu, raw.caps))
	sw := raw.next()
	prefix := append([]byte{0xfe}, mysqlproto.PluginEd25519+"\x00"...)
	if !bytes.HasPrefix(sw, prefix) || len(sw) != len(prefix)+mysqlproto.Ed25519NonceLen {
		t.Fatalf("COM_CHANGE_USER to an ed25519 user: %s, want a switch to client_ed25519 with a 32-byte nonce", describe(sw))
	}
	key := mysqlproto.Ed25519Secret(edPW)
	raw.write(2, mysqlproto.Ed25519Sign(&key, sw[len(prefix):]))
	raw.expectOK()
	if rows := raw.query("SELECT CURRENT_USER()"); rows[0][0] != "edu@%" {
		t.Fatalf("after COM_CHANGE_USER: %v", rows)
	}

	// caching_sha2_password, only the mysql_native_password hash known:
	// the first login is a full authentication (go-sql-driver asks for
	// the RSA key without TLS), the second takes the fast path.
	for i := range 2 {
		if cu, err := loginAs(h.userDSN("rw", "shau", shaPW)); err != nil || cu != "shau@%" {
			t.Fatalf("caching_sha2_password login %d: %q, %v", i+1, cu, err)
		}
	}
	if v := h.srv.rc.Load().users["shau"].sha2.Load(); v == nil || *v != mysqlproto.SHA2Verifier(shaPW) {
		t.Fatal("the full authentication did not leave the fast-path verifier")
	}
	_, err = loginAs(h.userDSN("rw", "shau", "wrong"))
	accessDenied(t, "caching_sha2_password wrong password (fast path)", err, strings.Replace(serverText, "'edu'", "'shau'", 1))
	if cu, err := loginAs(h.userDSN("ro", "shap", sha2PW)); err != nil || cu != "shap@%" {
		t.Fatalf("caching_sha2_password with a plaintext source: %q, %v", cu, err)
	}
	if out, err := cli(t, bin, rw, "shap", sha2PW, "-e", "SELECT CURRENT_USER()"); err != nil || out != "shap@%" {
		t.Fatalf("caching_sha2_password mariadb client: %q, %v", out, err)
	}
	if out, err := cli(t, bin, rw, "shau", shaPW, "-e", "SELECT CURRENT_USER()"); err != nil || out != "shau@%" {
		t.Fatalf("caching_sha2_password mariadb client, fast path: %q, %v", out, err)
	}
	h.srv.rc.Load().users["shau"].sha2.Store(nil) // as after a restart: full authentication again
	if out, err := cli(t, bin, rw, "shau", shaPW, "-e", "SELECT CURRENT_USER()"); err != nil || out != "shau@%" {
		t.Fatalf("caching_sha2_password mariadb client, full authentication (RSA): %q, %v", out, err)
	}
	sha2ClearWithoutTLS(t, rw, "shau", shaPW)
	if out, err := cli(t, bin, rw, "shap", "wrong", "-e", "SELECT 1"); err == nil || !strings.Contains(out, "ERROR 1045 (28000)") {
		t.Fatalf("caching_sha2_password mariadb client, wrong password: %q, %v", out, err)
	}
}

// Pass-through accounts: an account created on the primary (not in users)
// logs in once the proxy read the accounts again — a login of an account
// it does not know reads them first; host patterns choose the account; a
// dropped account is refused after the next read, an account in neither place gets the server's 1045 text, and
// accounts whose plugin cannot pass through get 1251 naming it. Both kinds
// of listener pooling.
func TestBackendAccountsPassThrough(t *testing.T) { poolings(t, testBackendAccountsPassThrough) }

func testBackendAccountsPassThrough(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, func(c *config.Config) {
		pooling(c)
		c.Proxy.BackendAccounts = config.BackendAccounts{Enabled: true, Refresh: config.Duration(time.Hour)}
	})
	h.installEd25519()
	root := h.direct(0)
	waitLoaded := func() {
		deadline := time.Now().Add(10 * time.Second)
		for h.srv.accounts.get("main").loaded().IsZero() {
			if time.Now().After(deadline) {
				t.Fatal("the accounts were never read")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLoaded()
	loads := func() int {
		n := 0
		if mf, err := h.reg.Gather(); err == nil {
			for _, f := range mf {
				if f.GetName() == "switchyard_proxy_backend_account_loads_total" {
					for _, m := range f.GetMetric() {
						n += int(m.GetCounter().GetValue())
					}
				}
			}
		}
		return n
	}

	// The server's text for a wrong password of a real account.
	mustExec(t, root, "CREATE USER pt@'%' IDENTIFIED BY 'pt-pw'")
	mustExec(t, root, "GRANT SELECT, INSERT, CREATE ON *.* TO pt@'%'")
	mustExec(t, root, "CREATE USER hp@'10.%' IDENTIFIED BY 'ten'")
	mustExec(t, root, "CREATE USER hp@'127.0.0.%' IDENTIFIED BY 'loop'")
	mustExec(t, root, "CREATE USER sock@'%' IDENTIFIED VIA unix_socket")
	mustExec(t, root, "CREATE USER edpt@'%' IDENTIFIED VIA ed25519 USING PASSWORD('x')")
	mustExec(t, root, "CREATE USER locked@'%' IDENTIFIED BY 'l' ACCOUNT LOCK")
	h.waitReplicated(1, 2)
	_, direct := loginAs(h.dsn("", "", func(c *mysql.Config) { c.User, c.Passwd, c.Addr = "pt", "wrong", h.c.Nodes[0].Address }))
	var me *mysql.MySQLError
	if !errors.As(direct, &me) || me.Number != 1045 {
		t.Fatalf("direct wrong-password login: %v", direct)
	}
	serverText := me.Message
	text := func(user string) string { return strings.Replace(serverText, "'pt'", "'"+user+"'", 1) }

	time.Sleep(accountsMinGap + 100*time.Millisecond)
	before := loads()
	for _, l := range []string{"rw", "ro"} {
		if cu, err := loginAs(h.userDSN(l, "pt", "pt-pw")); err != nil || cu != "pt@%" {
			t.Fatalf("pass-through login through %s: %q, %v", l, cu, err)
		}
	}
	if n := loads() - before; n != 1 {
		t.Fatalf("%d reads of the accounts for the first login of a new account, want 1", n)
	}
	_, err := loginAs(h.userDSN("rw", "pt", "wrong"))
	accessDenied(t, "pass-through, wrong password", err, serverText)
	if cu, err := loginAs(h.userDSN("rw", "hp", "loop")); err != nil || cu != "hp@127.0.0.%" {
		t.Fatalf("host pattern 127.0.0.%%: %q, %v", cu, err)
	}
	_, err = loginAs(h.userDSN("rw", "hp", "ten"))
	accessDenied(t, "the password of hp@'10.%' from 127.0.0.1", err, text("hp"))
	// A locked account: the server's own refusal, as for a direct login.
	_, err = loginAs(h.userDSN("rw", "locked", "l"))
	_, lockedDirect := loginAs(h.dsn("", "", func(c *mysql.Config) { c.User, c.Passwd, c.Addr = "locked", "l", h.c.Nodes[0].Address }))
	var le *mysql.MySQLError
	if !errors.As(err, &le) || le.Number != 4151 || lockedDirect == nil || err.Error() != lockedDirect.Error() {
		t.Fatalf("locked account: %v through the proxy, %v directly", err, lockedDirect)
	}
	time.Sleep(accountsMinGap + 100*time.Millisecond)
	_, err = loginAs(h.userDSN("rw", "ghost", "pt-pw"))
	accessDenied(t, "account in neither users nor the servers", err, text("ghost"))
	for user, plugin := range map[string]string{"sock": "unix_socket", "edpt": "ed25519"} {
		_, err = loginAs(h.userDSN("rw", user, "x"))
		if !errors.As(err, &me) || me.Number != 1251 || !strings.Contains(me.Message, "uses authentication plugin "+plugin) {
			t.Fatalf("%s (%s): %v, want error 1251 naming the plugin", user, plugin, err)
		}
	}

	// Dropped: refused once the proxy read the accounts again (the
	// periodic read; until then a pooled connection of the account can
	// still serve a login), and its idle pooled connections are closed.
	mustExec(t, root, "DROP USER pt@'%'")
	h.waitReplicated(1, 2)
	h.srv.loadAccounts(h.srv.accounts.get("main"), false)
	_, err = loginAs(h.userDSN("rw", "pt", "pt-pw"))
	accessDenied(t, "dropped account after the read", err, text("pt"))
	_, err = loginAs(h.userDSN("ro", "pt", "pt-pw"))
	accessDenied(t, "dropped account after the read (ro)", err, text("pt"))
}

func TestHostPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, ip string
		want        bool
	}{
		{"%", "10.1.2.3", true},
		{"", "10.1.2.3", true},
		{"10.%", "10.1.2.3", true},
		{"10.%", "110.1.2.3", false},
		{"10.1.2._", "10.1.2.3", true},
		{"10.1.2._", "10.1.2.33", false},
		{"10.1.2.3", "10.1.2.3", true},
		{"10.0.0.0/255.0.0.0", "10.9.9.9", true},
		{"10.0.0.0/255.0.0.0", "11.9.9.9", false},
		{"localhost", "127.0.0.1", false},
		{"db.example.com", "10.1.2.3", false},
		{"::1", "::1", true},
	} {
		if got := hostMatches(c.pattern, netipMust(t, c.ip)); got != c.want {
			t.Errorf("hostMatches(%q, %s) = %v, want %v", c.pattern, c.ip, got, c.want)
		}
	}
	order := []string{"%", "10.%", "10.1.%", "10.1.2.3"}
	for i := 1; i < len(order); i++ {
		if hostRank(order[i]) <= hostRank(order[i-1]) {
			t.Errorf("%q does not come before %q", order[i], order[i-1])
		}
	}
}

func netipMust(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sha2ClearWithoutTLS answers caching_sha2_password's full authentication
// with the password in clear on a connection without TLS, and expects the
// proxy to refuse it (1045), as a MySQL server does.
func sha2ClearWithoutTLS(t *testing.T, addr, user, pw string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	p, _, err := mysqlproto.ReadPacket(r, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := mysqlproto.ParseHandshake(p)
	if err != nil {
		t.Fatal(err)
	}
	caps := uint32(rawCaps) & g.Capabilities
	send := func(seq byte, payload []byte) {
		b, _ := mysqlproto.AppendPacket(nil, seq, payload)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	wrongToken := mysqlproto.SHA2Token(g.Scramble, pw+"-not") // forces full authentication
	send(1, mysqlproto.AppendHandshakeResponse(nil, &mysqlproto.HandshakeResponse{Capabilities: caps, MaxPacketSize: 1 << 24,
		Charset: 45, User: user, AuthResponse: wrongToken, AuthPlugin: mysqlproto.PluginCachingSHA2}))
	p, seq, err := mysqlproto.ReadPacket(r, nil, 0)
	if err != nil || !bytes.Equal(p, []byte{0x01, mysqlproto.SHA2FullAuth}) {
		t.Fatalf("caching_sha2_password: %x, %v; want a full-authentication request (01 04)", p, err)
	}
	send(seq+1, append([]byte(pw), 0))
	p, _, err = mysqlproto.ReadPacket(r, nil, 0)
	if err != nil || p[0] != gmysql.ERR_HEADER || mysqlproto.ParseERR(p).Code != gmysql.ER_ACCESS_DENIED_ERROR {
		t.Fatalf("password in clear without TLS: %x, %v; want error 1045", p, err)
	}
}
