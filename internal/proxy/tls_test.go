package proxy

import (
	"context"
	"crypto/tls"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
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
	if got := counterValue(t, h, "switchyard_proxy_tls_handshake_failures_total"); got < 1 {
		t.Fatalf("switchyard_proxy_tls_handshake_failures_total = %v, want >= 1", got)
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

