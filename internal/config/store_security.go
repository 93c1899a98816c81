package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Security of the topology store: client TLS and authentication towards an
// external etcd (etcd.tls, etcd.username, etcd.password_env/_file), the
// integrity keys that sign config revisions and cluster states
// (etcd.integrity_key_env/_file), and the loopback-only rule of the
// embedded etcd (which has neither TLS nor authentication).

// MinIntegrityKeyBytes is the shortest integrity key accepted.
const MinIntegrityKeyBytes = 16

func (c *Config) validateStoreSecurity(v *validator) {
	e := &c.Etcd
	t := e.TLS
	external := len(e.Endpoints) > 0
	tlsSet := t != (EtcdTLS{})
	if tlsSet && !external {
		v.add("etcd.tls", "applies to an external etcd (etcd.endpoints); the embedded etcd serves plain HTTP on loopback")
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.add("etcd.tls.key_file", "required with etcd.tls.cert_file")
	case t.KeyFile != "" && t.CertFile == "":
		v.add("etcd.tls.cert_file", "required with etcd.tls.key_file")
	}
	// The files are read by CheckSecrets, not here: the etcd section is
	// each process's own (a revision applied from one machine is validated
	// by consumers on others, whose files may live elsewhere).
	if tlsSet {
		for i, ep := range e.Endpoints {
			if strings.HasPrefix(ep, "http://") {
				v.add(fmt.Sprintf("etcd.endpoints[%d]", i), "%q is plain http while etcd.tls is set; use host:port or https://host:port", ep)
			}
		}
	}
	switch {
	case e.Username == "" && (e.PasswordEnv != "" || e.PasswordFile != ""):
		v.add("etcd.username", "required with etcd.password_env or etcd.password_file")
	case e.Username != "" && e.PasswordEnv == "" && e.PasswordFile == "":
		v.add("etcd.password_env", "etcd.username %q needs a password: set etcd.password_env or etcd.password_file", e.Username)
	case e.PasswordEnv != "" && e.PasswordFile != "":
		v.add("etcd.password_file", "set only one of etcd.password_env and etcd.password_file")
	}
	if e.Username != "" && !external {
		v.add("etcd.username", "applies to an external etcd (etcd.endpoints); the embedded etcd has no authentication")
	}
	if strings.ContainsAny(e.Username, ": \t\r\n") {
		v.add("etcd.username", "%q must not contain ':' or white space", e.Username)
	}
	if e.IntegrityKeyEnv != "" && e.IntegrityKeyFile != "" {
		v.add("etcd.integrity_key_file", "set only one of etcd.integrity_key_env and etcd.integrity_key_file")
	}
	if !external {
		for _, a := range []struct{ field, addr string }{
			{"etcd.embedded.client_address", e.Embedded.ClientAddress},
			{"etcd.embedded.peer_address", e.Embedded.PeerAddress},
		} {
			if host, _, err := net.SplitHostPort(a.addr); err == nil && !isLoopbackHost(host) {
				v.add(a.field, "%q is not a loopback address: the embedded etcd has no TLS and no authentication, so whoever reaches it "+
					"can rewrite the config and the cluster state; keep it on 127.0.0.1 (or localhost), or run an external etcd "+
					"(etcd.endpoints) with etcd.tls and etcd.username for proxies on other machines", a.addr)
			}
		}
	}
}

// isLoopbackHost reports whether host is "localhost" or a loopback IP.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// StoreWarnings lists what is valid but weakens the store's security, one
// line each naming the field: no integrity key, an external etcd without
// TLS or without authentication.
func (c *Config) StoreWarnings() []string {
	e := &c.Etcd
	var out []string
	if e.IntegrityKeyEnv == "" && e.IntegrityKeyFile == "" {
		out = append(out, "etcd.integrity_key_env/etcd.integrity_key_file: not set: config revisions and cluster states are not signed, "+
			"so whoever can write to etcd can forge them (guard overrides, a primary)")
	}
	if len(e.Endpoints) > 0 {
		if e.TLS == (EtcdTLS{}) && !allHTTPS(e.Endpoints) {
			out = append(out, "etcd.tls: not set: the connection to etcd is plain text")
		}
		if e.Username == "" {
			out = append(out, "etcd.username: not set: switchyard does not authenticate to etcd")
		}
	}
	return out
}

func allHTTPS(eps []string) bool {
	for _, ep := range eps {
		if !strings.HasPrefix(ep, "https://") {
			return false
		}
	}
	return true
}

// EtcdTLSConfig returns the client TLS config for etcd.tls, or nil when
// etcd.tls is not set. Errors name the field at fault.
func (c *Config) EtcdTLSConfig() (*tls.Config, error) {
	t := c.Etcd.TLS
	if t == (EtcdTLS{}) {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := LoadCAPool(t.CAFile)
		if err != nil {
			return nil, &FieldError{Field: "etcd.tls.ca_file", Msg: err.Error()}
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, &FieldError{Field: "etcd.tls.cert_file", Msg: "etcd.tls.cert_file and etcd.tls.key_file go together"}
		}
		cert, err := LoadKeyPair(t.CertFile, t.KeyFile, time.Now())
		if err != nil {
			return nil, &FieldError{Field: "etcd.tls.cert_file", Msg: err.Error()}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// EtcdPassword resolves the etcd user's password (etcd.password_env or
// etcd.password_file); "" when etcd.username is not set. The error names
// the field and never holds the secret.
func (c *Config) EtcdPassword() (string, error) {
	e := &c.Etcd
	if e.Username == "" {
		return "", nil
	}
	field := "etcd.password_env"
	if e.PasswordEnv == "" {
		field = "etcd.password_file"
	}
	v, err := resolveSecret("", e.PasswordEnv, e.PasswordFile)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe
		}
		return "", &FieldError{Field: field, Msg: err.Error()}
	}
	if v == "" {
		return "", &FieldError{Field: field, Msg: "the etcd password is empty"}
	}
	return v, nil
}

// IntegrityKeys resolves etcd.integrity_key_env or etcd.integrity_key_file
// into its keys (first signs), nil when neither is set. Keys are separated
// by white space (one per line in a file); each must be at least
// MinIntegrityKeyBytes long. The error names the field and never holds a
// key.
func (c *Config) IntegrityKeys() ([][]byte, error) {
	e := &c.Etcd
	var raw, field string
	switch {
	case e.IntegrityKeyEnv != "":
		field = "etcd.integrity_key_env"
		v, ok := os.LookupEnv(e.IntegrityKeyEnv)
		if !ok {
			return nil, &FieldError{Field: field, Msg: fmt.Sprintf("environment variable %s is not set", e.IntegrityKeyEnv)}
		}
		raw = v
	case e.IntegrityKeyFile != "":
		field = "etcd.integrity_key_file"
		b, err := os.ReadFile(e.IntegrityKeyFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe
			}
			return nil, &FieldError{Field: field, Msg: err.Error()}
		}
		raw = string(b)
	default:
		return nil, nil
	}
	var keys [][]byte
	for i, k := range strings.Fields(raw) {
		if len(k) < MinIntegrityKeyBytes {
			return nil, &FieldError{Field: field, Msg: fmt.Sprintf("key %d is %d bytes; at least %d are required (e.g. `openssl rand -hex 32`)", i+1, len(k), MinIntegrityKeyBytes)}
		}
		keys = append(keys, []byte(k))
	}
	if len(keys) == 0 {
		return nil, &FieldError{Field: field, Msg: "holds no key"}
	}
	return keys, nil
}
