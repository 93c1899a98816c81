package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func minimalConfig(t *testing.T) *Config {
	t.Helper()
	c, err := Load("testdata/good/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStoreSecurityValidate: every etcd security mistake is an error naming
// its field (the TLS files from CheckSecrets, which reads local files).
func TestStoreSecurityValidate(t *testing.T) {
	dir := t.TempDir()
	badPEM := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(badPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ext := func(c *Config) { c.Etcd.Endpoints = []string{"etcd1:2379"} }
	tests := []struct {
		name   string
		mutate func(c *Config)
		field  string
		want   string
	}{
		{"missing CA", func(c *Config) { ext(c); c.Etcd.TLS.CAFile = filepath.Join(dir, "none.pem") }, "etcd.tls.ca_file", "no such file"},
		{"bad CA PEM", func(c *Config) { ext(c); c.Etcd.TLS.CAFile = badPEM }, "etcd.tls.ca_file", "holds no PEM certificate"},
		{"cert without key", func(c *Config) { ext(c); c.Etcd.TLS.CertFile = "testdata/tls/cert.pem" }, "etcd.tls.key_file", "required"},
		{"bad client cert", func(c *Config) { ext(c); c.Etcd.TLS.CertFile, c.Etcd.TLS.KeyFile = badPEM, "testdata/tls/key.pem" }, "etcd.tls.cert_file", badPEM},
		{"tls with http endpoint", func(c *Config) {
			c.Etcd.Endpoints = []string{"http://etcd1:2379"}
			c.Etcd.TLS.CAFile = "testdata/tls/ca.pem"
		}, "etcd.endpoints[0]", "plain http"},
		{"tls on embedded", func(c *Config) { c.Etcd.TLS.CAFile = "testdata/tls/ca.pem" }, "etcd.tls", "external etcd"},
		{"user without password", func(c *Config) { ext(c); c.Etcd.Username = "switchyard" }, "etcd.password_env", "needs a password"},
		{"password without user", func(c *Config) { ext(c); c.Etcd.PasswordEnv = "X" }, "etcd.username", "required"},
		{"both passwords", func(c *Config) { ext(c); c.Etcd.Username, c.Etcd.PasswordEnv, c.Etcd.PasswordFile = "u", "X", "/x" }, "etcd.password_file", "only one"},
		{"user on embedded", func(c *Config) { c.Etcd.Username, c.Etcd.PasswordEnv = "u", "X" }, "etcd.username", "embedded etcd has no authentication"},
		{"both integrity sources", func(c *Config) { c.Etcd.IntegrityKeyEnv, c.Etcd.IntegrityKeyFile = "K", "/k" }, "etcd.integrity_key_file", "only one"},
		{"embedded on all interfaces", func(c *Config) { c.Etcd.Embedded.ClientAddress = "0.0.0.0:2379" }, "etcd.embedded.client_address", "not a loopback address"},
		{"embedded peer on a LAN address", func(c *Config) { c.Etcd.Embedded.PeerAddress = "10.1.2.3:2380" }, "etcd.embedded.peer_address", "not a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalConfig(t)
			tt.mutate(c)
			err := errors.Join(c.Validate(), c.CheckSecrets())
			if err == nil || !strings.Contains(err.Error(), tt.field+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error on %s with %q", err, tt.field, tt.want)
			}
		})
	}
	c := minimalConfig(t)
	c.Etcd.Endpoints = []string{"https://etcd1:2379"}
	c.Etcd.TLS = EtcdTLS{CAFile: "testdata/tls/ca.pem", CertFile: "testdata/tls/cert.pem", KeyFile: "testdata/tls/key.pem", ServerName: "etcd"}
	c.Etcd.Username, c.Etcd.PasswordEnv = "switchyard", "SY_ETCD_PW"
	c.Etcd.Embedded.ClientAddress = "localhost:2379"
	if err := c.Validate(); err != nil {
		t.Fatalf("a complete secure etcd section: %v", err)
	}
	tc, err := c.EtcdTLSConfig()
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "etcd" {
		t.Fatalf("EtcdTLSConfig: %+v, %v", tc, err)
	}
	if ws := c.StoreWarnings(); len(ws) != 1 || !strings.Contains(ws[0], "integrity_key") {
		t.Fatalf("warnings %q: want only the missing integrity key", ws)
	}
	t.Setenv("SY_ETCD_PW", "")
	if _, err := c.EtcdPassword(); err == nil || !strings.Contains(err.Error(), "etcd.password_env") {
		t.Fatalf("empty etcd password: %v", err)
	}
}

func TestIntegrityKeys(t *testing.T) {
	c := minimalConfig(t)
	if ks, err := c.IntegrityKeys(); ks != nil || err != nil {
		t.Fatalf("none configured: %q %v", ks, err)
	}
	c.Etcd.IntegrityKeyEnv = "SY_TEST_INTEGRITY"
	if _, err := c.IntegrityKeys(); err == nil || !strings.Contains(err.Error(), "etcd.integrity_key_env: environment variable SY_TEST_INTEGRITY is not set") {
		t.Fatalf("unset variable: %v", err)
	}
	t.Setenv("SY_TEST_INTEGRITY", "short")
	if _, err := c.IntegrityKeys(); err == nil || !strings.Contains(err.Error(), "at least 16") || strings.Contains(err.Error(), "short") {
		t.Fatalf("short key: %v (the key must not appear)", err)
	}
	if err := c.CheckSecrets(); err == nil || !strings.Contains(err.Error(), "etcd.integrity_key_env") {
		t.Fatalf("CheckSecrets misses the bad integrity key: %v", err)
	}
	c.Etcd.IntegrityKeyEnv = ""
	c.Etcd.IntegrityKeyFile = filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(c.Etcd.IntegrityKeyFile, []byte("new-key-0123456789abcdef\nold-key-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := c.IntegrityKeys()
	if err != nil || len(ks) != 2 || string(ks[0]) != "new-key-0123456789abcdef" {
		t.Fatalf("key file: %q %v", ks, err)
	}
	if ws := c.StoreWarnings(); len(ws) != 0 {
		t.Fatalf("warnings with a key and the embedded etcd: %q", ws)
	}
}
