package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// validateAdmin checks admin.tokens and admin.tls: every token has a
// unique name, a role and exactly one secret source; a certificate has its
// key and both load.
func (c *Config) validateAdmin(v *validator) {
	seen := map[string]int{}
	for i, t := range c.Admin.Tokens {
		f := fmt.Sprintf("admin.tokens[%d]", i)
		switch {
		case t.Name == "":
			v.add(f+".name", "required (it is recorded as the actor of the changes the token makes)")
		case strings.ContainsAny(t.Name, " \t\r\n"):
			v.add(f+".name", "%q must not contain spaces", t.Name)
		default:
			if j, dup := seen[t.Name]; dup {
				v.add(f+".name", "token %q is already defined at admin.tokens[%d]", t.Name, j)
			}
			seen[t.Name] = i
		}
		switch t.Role {
		case RoleViewer, RoleOperator:
		case "":
			v.add(f+".role", "required: %s (every GET) or %s (everything)", RoleViewer, RoleOperator)
		default:
			v.add(f+".role", "%q is not a role (use %s or %s)", t.Role, RoleViewer, RoleOperator)
		}
		var set []string
		for _, s := range []struct{ name, val string }{{"token_env", t.TokenEnv}, {"token_file", t.TokenFile}, {"token_sha256", t.TokenSHA256}} {
			if s.val != "" {
				set = append(set, s.name)
			}
		}
		switch len(set) {
		case 0:
			v.add(f, "no secret: set exactly one of token_env, token_file or token_sha256")
		case 1:
		default:
			v.add(f, "%s: set exactly one of token_env, token_file or token_sha256", bothSet(set))
		}
		if t.TokenEnv != "" && !isEnvName(t.TokenEnv) {
			v.add(f+".token_env", "is not an environment variable name (letters, digits and '_', not starting with a digit); it names the variable that holds the token, not the token itself")
		}
		if _, err := t.ExpiresAt(); err != nil {
			v.add(f+".expires", "%s", err)
		}
		if t.TokenSHA256 != "" {
			if b, err := hex.DecodeString(t.TokenSHA256); err != nil || len(b) != sha256.Size {
				v.add(f+".token_sha256", "is not a SHA-256 in hex (64 hex digits, e.g. from `printf %%s \"$TOKEN\" | sha256sum`)")
			}
		}
	}
	t := c.Admin.TLS
	switch {
	case t.CertFile == "" && t.KeyFile != "":
		v.add("admin.tls.cert_file", "required with key_file")
	case t.CertFile != "" && t.KeyFile == "":
		v.add("admin.tls.key_file", "required with cert_file")
	case t.CertFile != "":
		if _, err := LoadKeyPair(t.CertFile, t.KeyFile, time.Now()); err != nil {
			v.add("admin.tls.cert_file", "%s", err)
		}
	}
	if c.Admin.Address == AdminOff && (len(c.Admin.Tokens) > 0 || t.CertFile != "" || c.Admin.MetricsAuth) {
		v.add("admin.address", "is %q but admin.tokens, admin.tls or admin.metrics_auth is set: they apply to the admin endpoint only", AdminOff)
	}
}

// SHA256 resolves the token's secret (token_env, token_file) and returns
// its SHA-256, or decodes token_sha256. Errors name the field; an empty
// secret is an error.
func (t AdminToken) SHA256(field string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	switch {
	case t.TokenSHA256 != "":
		b, err := hex.DecodeString(t.TokenSHA256)
		if err != nil || len(b) != sha256.Size {
			return sum, &FieldError{Field: field + ".token_sha256", Msg: "is not a SHA-256 in hex (64 hex digits)"}
		}
		copy(sum[:], b)
		return sum, nil
	case t.TokenEnv != "":
		v, ok := os.LookupEnv(t.TokenEnv)
		if !ok {
			return sum, &FieldError{Field: field + ".token_env", Msg: fmt.Sprintf("environment variable %s is not set", t.TokenEnv)}
		}
		if v == "" {
			return sum, &FieldError{Field: field + ".token_env", Msg: fmt.Sprintf("environment variable %s is set but empty", t.TokenEnv)}
		}
		return sha256.Sum256([]byte(v)), nil
	case t.TokenFile != "":
		b, err := os.ReadFile(t.TokenFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe
			}
			return sum, &FieldError{Field: field + ".token_file", Msg: err.Error()}
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return sum, &FieldError{Field: field + ".token_file", Msg: fmt.Sprintf("file %s is empty", t.TokenFile)}
		}
		return sha256.Sum256([]byte(v)), nil
	}
	return sum, &FieldError{Field: field, Msg: "no secret: set exactly one of token_env, token_file or token_sha256"}
}

// IsLoopback reports whether a listen address (host:port) only accepts
// connections from this machine: 127.0.0.0/8, ::1 or localhost. An empty
// host (all interfaces) is not loopback.
func IsLoopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AdminWarnings lists what is unsafe about the admin endpoint's settings
// without being invalid, naming the fields: an address other interfaces
// reach served without TLS or without tokens (the API then refuses every
// call), and a loopback address without tokens (the API then needs no
// token: anyone on the machine may switch over).
func (c *Config) AdminWarnings() []string {
	a := c.Admin
	if a.Address == AdminOff || a.Address == "" {
		return nil
	}
	var out []string
	for i, t := range a.Tokens {
		if at, err := t.ExpiresAt(); err == nil && !at.IsZero() && !at.After(time.Now()) {
			out = append(out, fmt.Sprintf("admin.tokens[%d].expires: token %q expired at %s: every call with it is refused (401)", i, t.Name, at.Format(time.RFC3339)))
		}
	}
	if IsLoopback(a.Address) {
		if len(a.Tokens) == 0 {
			out = append(out, fmt.Sprintf("admin.tokens: none configured: the admin API on %s answers every call, changes included, without a token (anyone on this machine may switch over); add tokens with role viewer or operator", a.Address))
		}
		return out
	}
	if len(a.Tokens) == 0 {
		out = append(out, fmt.Sprintf("admin.tokens: NONE configured while admin.address %s is reachable from other machines: every /api/v1 call is refused (401); add tokens or listen on 127.0.0.1", a.Address))
	}
	if !a.TLS.Enabled() {
		out = append(out, fmt.Sprintf("admin.tls: not set while admin.address %s is reachable from other machines: tokens and config travel in clear text; set admin.tls.cert_file and key_file", a.Address))
	}
	return out
}
