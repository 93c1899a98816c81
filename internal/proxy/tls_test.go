package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// tlsClientConfig trusts the sandbox CA (ca) and verifies the proxy's
// certificate for 127.0.0.1; cert, when set, is presented to it.
func tlsClientConfig(t testing.TB, caFile string, cert *tls.Certificate) *tls.Config {
	t.Helper()
	pool, err := config.LoadCAPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return tc
}

// tlsDB opens a go-sql-driver pool through listener with tc and pings it;
// it returns the ping's error.
func (h *harness) tlsDB(listener string, tc *tls.Config) (*sql.DB, error) {
	h.t.Helper()
	cfg, err := mysql.ParseDSN(h.dsn(listener, "", nil))
	if err != nil {
		h.t.Fatal(err)
	}
	cfg.TLS = tc
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	d := sql.OpenDB(conn)
	h.t.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d, d.PingContext(ctx)
}

func mysqlCode(err error) uint16 {
	n, _ := mysqlErr(err)
	return n
}

// go-sql-driver with a custom TLS config (the sandbox CA, server name
// verified) through rw: queries and a transaction over TLS; a client that
// trusts another CA refuses the proxy's certificate.
func TestTLSGoDriverVerifiesProxy(t *testing.T) {
	h := newHarness(t, nil)
	ca := h.c.TLS().CA
	db, err := h.tlsDB("rw", tlsClientConfig(t, ca, nil))
	if err != nil {
		t.Fatalf("TLS connect through rw: %v", err)
	}
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS sbtest.tls_t (id INT PRIMARY KEY, v VARCHAR(64))")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO sbtest.tls_t VALUES (1, REPEAT('x', 64))"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM sbtest.tls_t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count over TLS: %d %v", n, err)
	}
	if got := counterValue(t, h, "switchyard_proxy_tls_sessions_total"); got < 1 {
		t.Fatalf("switchyard_proxy_tls_sessions_total = %v, want >= 1", got)
	}

	other, err := sandbox.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(otherFile, other.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tlsDB("rw", tlsClientConfig(t, otherFile, nil)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client trusting another CA: err = %v, want a certificate verification error", err)
	}
	// The proxy sees the client's alert after the client returned.
	for end := time.Now().Add(5 * time.Second); counterValue(t, h, "switchyard_proxy_tls_handshake_failures_total") < 1; {
		if time.Now().After(end) {
			t.Fatal("switchyard_proxy_tls_handshake_failures_total stayed 0 after a refused handshake")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The session that failed its handshake left the proxy serving.
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
}

// The mariadb command-line client with --ssl-verify-server-cert through rw
// reports the cipher; with another CA it refuses the proxy.
func TestTLSMariaDBClientVerifyServerCert(t *testing.T) {
	bin := lookTool(t, "mariadb")
	h := newHarness(t, nil)
	host, port := hostPort(t, h.srv.ListenerAddr("rw"))
	run := func(ca string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base := []string{"--no-defaults", "-h" + host, "-P" + port, "-u" + h.c.AppUser, "-p" + h.c.AppPassword,
			"--ssl", "--ssl-ca=" + ca, "--ssl-verify-server-cert"}
		out, err := exec.CommandContext(ctx, bin, append(base, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := run(h.c.TLS().CA, "-e", `\s`)
	if err != nil {
		t.Fatalf("mariadb --ssl-verify-server-cert: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Cipher in use is") {
		t.Fatalf("status shows no TLS cipher:\n%s", out)
	}
	other, err := sandbox.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(otherFile, other.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(otherFile, "-e", "SELECT 1")
	if err == nil {
		t.Fatalf("mariadb trusting another CA connected:\n%s", out)
	}
	if !strings.Contains(out, "2026") { // CR_SSL_CONNECTION_ERROR
		t.Fatalf("mariadb trusting another CA: want error 2026 (TLS/SSL error), got:\n%s", out)
	}
}

// writeCert issues a server certificate for 127.0.0.1 from ca, valid in
// [nb, na] (zero: the defaults), to cert.pem/key.pem in dir.
func writeCert(t testing.TB, ca *sandbox.CA, dir string, nb, na time.Time) (string, string) {
	t.Helper()
	c, k, err := ca.Issue(sandbox.CertSpec{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1"}, NotBefore: nb, NotAfter: na})
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	// Key first, then the certificate, each renamed into place: a reload
	// between the two sees a mismatched pair and keeps the old one.
	for _, w := range []struct {
		path string
		data []byte
	}{{kf, k}, {cf, c}} {
		if err := os.WriteFile(w.path+".tmp", w.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(w.path+".tmp", w.path); err != nil {
			t.Fatal(err)
		}
	}
	return cf, kf
}

// writeCAFile writes ca's certificate to dir/ca.pem.
func writeCAFile(t testing.TB, ca *sandbox.CA, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// certSerialVia returns the serial number of the certificate the proxy
// presents on listener (recorded by VerifyConnection of a go-sql-driver
// connection) and that connection's pool (one connection).
func certSerialVia(t testing.TB, h *harness, listener string, caFile string) (string, *sql.DB) {
	t.Helper()
	var serial string
	tc := tlsClientConfig(t, caFile, nil)
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		serial = cs.PeerCertificates[0].SerialNumber.String()
		return nil
	}
	db, err := h.tlsDB(listener, tc)
	if err != nil {
		t.Fatalf("TLS connect through %s: %v", listener, err)
	}
	db.SetMaxOpenConns(1)
	return serial, db
}

// A listener requiring client certificates accepts a client with one
// signed by its ca_file and refuses one without (1045, as MariaDB refuses
// an account with REQUIRE X509); a listener with tls.require refuses a
// plaintext client with 1045 (MariaDB's answer under
// require_secure_transport=ON) and accepts a TLS one.
func TestTLSClientCertAndRequire(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Listeners[0].TLS.ClientCert = config.ClientCertRequired
		c.Listeners[1].TLS.Require = true
	})
	tf := h.c.TLS()
	cert, err := tls.LoadX509KeyPair(tf.ClientCert, tf.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.tlsDB("rw", tlsClientConfig(t, tf.CA, &cert)); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	_, err = h.tlsDB("rw", tlsClientConfig(t, tf.CA, nil))
	if code := mysqlCode(err); code != 1045 || !strings.Contains(err.Error(), "Access denied for user '"+h.c.AppUser+"'") {
		t.Fatalf("client without a certificate: err = %v, want 1045 access denied", err)
	}
	// A certificate from another CA fails the handshake.
	other, err := sandbox.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	oc, ok, err := other.Issue(sandbox.CertSpec{CommonName: "intruder", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := tls.X509KeyPair(oc, ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.tlsDB("rw", tlsClientConfig(t, tf.CA, &bad)); err == nil {
		t.Fatal("client with a certificate from another CA connected")
	}

	_, err = h.tlsDB("ro", nil)
	if code := mysqlCode(err); code != 1045 {
		t.Fatalf("plaintext client on a listener with tls.require: err = %v, want 1045", err)
	}
	if _, err := h.tlsDB("ro", tlsClientConfig(t, tf.CA, nil)); err != nil {
		t.Fatalf("TLS client on a listener with tls.require: %v", err)
	}
}

// The listener's certificate is replaced on disk while a TLS session is
// open: new connections get the new certificate (files looked at once a
// second), the open session keeps working; a broken pair (key of another
// certificate) and an expired certificate are refused at reload, the
// previous certificate stays and the failure is counted. Server.ReloadTLS
// (SIGHUP) reloads at once.
func TestTLSCertificateReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := sandbox.NewCA("reload CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeCAFile(t, ca, dir)
	cf, kf := writeCert(t, ca, dir, time.Time{}, time.Time{})
	h := newHarness(t, func(c *config.Config) {
		c.Listeners[0].TLS = config.ListenerTLS{CertFile: cf, KeyFile: kf, ClientCert: config.ClientCertNone, MinVersion: "1.2"}
	})
	first, db := certSerialVia(t, h, "rw", caFile)
	var id int
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}

	writeCert(t, ca, dir, time.Time{}, time.Time{})
	var second string
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond)
		if second, _ = certSerialVia(t, h, "rw", caFile); second != first || time.Now().After(deadline) {
			break
		}
	}
	if second == first {
		t.Fatalf("certificate not reloaded after its files changed (serial %s)", first)
	}
	var id2 int
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id2); err != nil || id2 != id {
		t.Fatalf("session open across the reload: %v (connection id %d, then %d)", err, id, id2)
	}
	if got := counterValue(t, h, "switchyard_proxy_tls_reloads_total"); got < 1 {
		t.Fatalf("switchyard_proxy_tls_reloads_total = %v", got)
	}

	// An expired certificate on disk: refused, the second one stays.
	writeCert(t, ca, dir, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	h.srv.ReloadTLS()
	if got := counterValue(t, h, "switchyard_proxy_tls_reload_failures_total"); got != 1 {
		t.Fatalf("switchyard_proxy_tls_reload_failures_total = %v after an expired certificate, want 1", got)
	}
	if now, _ := certSerialVia(t, h, "rw", caFile); now != second {
		t.Fatalf("serving %s after a refused reload, want the previous %s", now, second)
	}
	// A certificate whose key is another one's.
	c3, _, err := ca.Issue(sandbox.CertSpec{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	writeCert(t, ca, dir, time.Time{}, time.Time{})
	if err := os.WriteFile(cf, c3, 0o600); err != nil {
		t.Fatal(err)
	}
	h.srv.ReloadTLS()
	if got := counterValue(t, h, "switchyard_proxy_tls_reload_failures_total"); got != 2 {
		t.Fatalf("switchyard_proxy_tls_reload_failures_total = %v after a mismatched key, want 2", got)
	}
	// SIGHUP with a good pair again.
	writeCert(t, ca, dir, time.Time{}, time.Time{})
	h.srv.ReloadTLS()
	if now, _ := certSerialVia(t, h, "rw", caFile); now == second {
		t.Fatal("ReloadTLS did not install the new certificate")
	}
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id2); err != nil || id2 != id {
		t.Fatalf("session open across the reloads: %v", err)
	}
}

// A certificate that expires while the proxy serves it (installed by a
// reload 3 s before its end) is refused by clients that verify it.
func TestTLSExpiredCertificateRefusedByClient(t *testing.T) {
	dir := t.TempDir()
	ca, err := sandbox.NewCA("expiry CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeCAFile(t, ca, dir)
	cf, kf := writeCert(t, ca, dir, time.Time{}, time.Time{})
	h := newHarness(t, func(c *config.Config) {
		c.Listeners[0].TLS = config.ListenerTLS{CertFile: cf, KeyFile: kf, ClientCert: config.ClientCertNone, MinVersion: "1.2"}
	})
	expiry := time.Now().Add(3 * time.Second)
	writeCert(t, ca, dir, time.Now().Add(-time.Hour), expiry)
	h.srv.ReloadTLS()
	if got := counterValue(t, h, "switchyard_proxy_tls_reload_failures_total"); got != 0 {
		t.Fatalf("reload of a certificate valid for 3 s more refused (%v failures)", got)
	}
	if got := listenerGauge(t, h, "switchyard_proxy_tls_certificate_not_after_seconds", "rw"); got != float64(expiry.Unix()) {
		t.Fatalf("switchyard_proxy_tls_certificate_not_after_seconds of rw = %v, want %d", got, expiry.Unix())
	}
	time.Sleep(time.Until(expiry) + 500*time.Millisecond)
	if counterValue(t, h, "switchyard_proxy_tls_reloads_total") < 1 {
		t.Fatal("the short-lived certificate was not installed")
	}
	_, err = h.tlsDB("rw", tlsClientConfig(t, caFile, nil))
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("after expiry: err = %v, want the client's certificate-expired error", err)
	}
	// A config naming the expired certificate is refused by validation.
	err = h.cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "listeners[0].tls.cert_file") || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Validate with an expired certificate: %v", err)
	}
}

// requireSecureTransport sets require_secure_transport on every node
// (plaintext TCP logins then fail with 1045; the unix socket stays open)
// and turns it off at cleanup.
func requireSecureTransport(t *testing.T, h *harness) {
	t.Helper()
	for i := range h.c.Nodes {
		mustExec(t, h.direct(i), "SET GLOBAL require_secure_transport = ON")
	}
	t.Cleanup(func() {
		for i := range h.c.Nodes {
			if d, err := sql.Open("mysql", h.c.RootDSN(i)); err == nil {
				_, _ = d.Exec("SET GLOBAL require_secure_transport = OFF")
				_ = d.Close()
			}
		}
	})
}

func sslCipher(t testing.TB, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) string {
	t.Helper()
	var name, cipher string
	if err := q.QueryRowContext(context.Background(), "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		t.Fatalf("SHOW SESSION STATUS LIKE 'Ssl_cipher': %v", err)
	}
	return cipher
}

// Nodes with require_secure_transport=ON refuse the proxy's plaintext
// backend logins (the client gets the server's 1045); with clusters[].tls
// (the sandbox CA, verify full) TLS clients are served over TLS backend
// connections, and after a reparent an idle session with a prepared
// statement moves to the new primary over TLS while TLS clients keep
// querying through a switchover (hold, drain, reparent, release): 0
// errors.
func TestTLSBackendRequireSecureTransportAndMove(t *testing.T) {
	h := newHarness(t, nil)
	requireSecureTransport(t, h)
	tf := h.c.TLS()
	if _, err := h.tlsDB("rw", tlsClientConfig(t, tf.CA, nil)); mysqlCode(err) != 1045 {
		t.Fatalf("plaintext backend to a node with require_secure_transport: err = %v, want 1045", err)
	}

	cfg := *h.cfg
	cfg.Clusters = append([]config.Cluster(nil), h.cfg.Clusters...)
	cfg.Clusters[0].TLS = config.ClusterTLS{Enabled: true, CAFile: tf.CA, Verify: config.VerifyFull}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.SetConfig(&cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := h.tlsDB("rw", tlsClientConfig(t, tf.CA, nil))
	if err != nil {
		t.Fatalf("TLS backend: %v", err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if c := sslCipher(t, conn); c == "" {
		t.Fatal("backend session is not on TLS (Ssl_cipher empty)")
	}
	mustExec(t, conn, "SET @tag = 'moved'")
	st, err := conn.PrepareContext(ctx, "SELECT CONCAT(@tag, ?), @@server_id")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// TLS clients querying through the move.
	load, err := h.tlsDB("rw", tlsClientConfig(t, tf.CA, nil))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errs := make(chan error, 64)
	var queries [4]int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for w := range queries {
			go func() {
				for {
					select {
					case <-stop:
						errs <- nil
						return
					default:
					}
					var one int
					if err := load.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
						errs <- err
						return
					}
					queries[w]++
				}
			}()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	// The switchover as the controller runs it: hold, drain, reparent,
	// publish the new primary.
	startHold(h, "sw-tls", topo.SwitchStepHold)
	waitAck(t, h, "holding, drained", func(a topo.SwitchoverAck) bool { return a.ID == "sw-tls" && a.Holding && a.Busy == 0 })
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	for range queries {
		if err := <-errs; err != nil {
			t.Fatalf("TLS client query during the move: %v", err)
		}
	}
	var tag string
	var sid int
	if err := st.QueryRowContext(ctx, "!").Scan(&tag, &sid); err != nil || tag != "moved!" || sid != 2 {
		t.Fatalf("prepared statement after the move: %q server_id %d, %v", tag, sid, err)
	}
	if c := sslCipher(t, conn); c == "" {
		t.Fatal("moved session's backend is not on TLS")
	}
	if got := counterValue(t, h, "switchyard_proxy_session_migrations_total"); got < 1 {
		t.Fatalf("migrations counted: %v", got)
	}
	t.Logf("queries by the TLS clients during the move: %v", queries)
}

// sysbench --mysql-ssl=on through an rw listener that requires TLS, with
// TLS backends too: a short read/write run with 0 errors.
func TestTLSSysbench(t *testing.T) {
	bin := lookTool(t, "sysbench")
	h := newHarness(t, func(c *config.Config) {
		c.Listeners[0].TLS.Require = true
	})
	tf := h.c.TLS()
	cfg := *h.cfg
	cfg.Clusters = append([]config.Cluster(nil), h.cfg.Clusters...)
	cfg.Clusters[0].TLS = config.ClusterTLS{Enabled: true, CAFile: tf.CA, Verify: config.VerifyFull}
	if err := h.srv.SetConfig(&cfg); err != nil {
		t.Fatal(err)
	}
	common := func(addr string) []string {
		host, port := hostPort(t, addr)
		return []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
			"--mysql-user=" + h.c.AppUser, "--mysql-password=" + h.c.AppPassword, "--mysql-db=sbtest",
			"--tables=1", "--table-size=2000"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, append(common(h.c.Nodes[0].Address), "prepare")...).CombinedOutput(); err != nil {
		t.Fatalf("sysbench prepare on the primary: %v\n%s", err, out)
	}
	// Without --mysql-ssl the listener refuses sysbench.
	if out, err := exec.CommandContext(ctx, bin, append(common(h.srv.ListenerAddr("rw")), "--time=1", "run")...).CombinedOutput(); err == nil {
		t.Fatalf("plaintext sysbench on a listener with tls.require ran:\n%s", out)
	}
	// sysbench 1.0 with --mysql-ssl=on loads client-key.pem,
	// client-cert.pem and cacert.pem from its working directory.
	wd := t.TempDir()
	for src, dst := range map[string]string{tf.ClientKey: "client-key.pem", tf.ClientCert: "client-cert.pem", tf.CA: "cacert.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wd, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := exec.CommandContext(ctx, bin, append(common(h.srv.ListenerAddr("rw")), "--mysql-ssl=on", "--threads=4", "--time=3",
		"--rand-type=uniform", "--mysql-ignore-errors=none", "--report-interval=0", "run")...)
	run.Dir = wd
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("sysbench --mysql-ssl=on through the proxy: %v\n%s", err, out)
	}
	num := func(re *regexp.Regexp) int {
		m := re.FindSubmatch(out)
		if m == nil {
			t.Fatalf("sysbench output lacks %s:\n%s", re, out)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	tx, errs, rec := num(reTransactions), num(reErrors), num(reReconnects)
	t.Logf("sysbench oltp_read_write --mysql-ssl=on, TLS backends, 4 threads, 3 s: %d transactions, %d errors, %d reconnects", tx, errs, rec)
	if errs != 0 || rec != 0 || tx < 10 {
		t.Fatalf("sysbench over TLS: %d transactions, %d errors, %d reconnects:\n%s", tx, errs, rec, out)
	}
	if got := counterValue(t, h, "switchyard_proxy_tls_sessions_total"); got < 4 {
		t.Fatalf("switchyard_proxy_tls_sessions_total = %v, want >= 4 (one per sysbench thread)", got)
	}
}

// A listener without tls.cert_file does not offer CLIENT_SSL, and a
// client that sends an SSLRequest anyway gets an error saying so.
func TestTLSPlainListenerRefusesSSLRequest(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Listeners[0].TLS = config.ListenerTLS{} })
	for _, l := range []struct {
		name string
		tls  bool
	}{{"ro", true}, {"rw", false}} {
		c, err := net.DialTimeout("tcp", h.srv.ListenerAddr(l.name), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		p, _, err := mysqlproto.ReadPacket(br, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		g, err := mysqlproto.ParseHandshake(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Capabilities&gomysql.CLIENT_SSL != 0; got != l.tls {
			t.Fatalf("listener %s offers CLIENT_SSL: %v, want %v", l.name, got, l.tls)
		}
		if l.tls {
			continue
		}
		req := mysqlproto.HandshakeResponse{Capabilities: gomysql.CLIENT_PROTOCOL_41 | gomysql.CLIENT_SSL | gomysql.CLIENT_SECURE_CONNECTION,
			MaxPacketSize: 1 << 24, Charset: 45, SSLRequest: true}
		if _, err := mysqlproto.WritePacket(c, 1, mysqlproto.AppendHandshakeResponse(nil, &req)); err != nil {
			t.Fatal(err)
		}
		p, _, err = mysqlproto.ReadPacket(br, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		perr := mysqlproto.ParseERR(p)
		var me *gomysql.MyError
		if !errors.As(perr, &me) || me.Code != gomysql.ER_UNKNOWN_ERROR || !strings.Contains(me.Message, "has no TLS") {
			t.Fatalf("SSLRequest on a listener without TLS: %v", perr)
		}
	}
}

// listenerGauge returns the value of gauge name for listener.
func listenerGauge(t *testing.T, h *harness, name, listener string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" && l.GetValue() == listener && m.Gauge != nil {
					return m.Gauge.GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{listener=%q}", name, listener)
	return 0
}
