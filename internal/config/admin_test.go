package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminTokensValidation: a bad role, a missing or double secret, a bad
// hash, a duplicate name and a half TLS pair are errors naming the field.
func TestAdminTokensValidation(t *testing.T) {
	base := func() *Config {
		c := &Config{}
		c.ApplyDefaults()
		return c
	}
	for _, tc := range []struct {
		tokens []AdminToken
		tls    AdminTLS
		field  string
		msg    string
	}{
		{[]AdminToken{{Name: "a", Role: "admin", TokenEnv: "T"}}, AdminTLS{}, "admin.tokens[0].role", `"admin" is not a role`},
		{[]AdminToken{{Name: "a", TokenEnv: "T"}}, AdminTLS{}, "admin.tokens[0].role", "required"},
		{[]AdminToken{{Name: "a", Role: "viewer"}}, AdminTLS{}, "admin.tokens[0]", "no secret"},
		{[]AdminToken{{Name: "a", Role: "viewer", TokenEnv: "T", TokenFile: "/x"}}, AdminTLS{}, "admin.tokens[0]", "token_env and token_file are both set"},
		{[]AdminToken{{Name: "a", Role: "viewer", TokenSHA256: "abc"}}, AdminTLS{}, "admin.tokens[0].token_sha256", "64 hex digits"},
		{[]AdminToken{{Name: "a", Role: "viewer", TokenEnv: "1X"}}, AdminTLS{}, "admin.tokens[0].token_env", "not an environment variable name"},
		{[]AdminToken{{Role: "viewer", TokenEnv: "T"}}, AdminTLS{}, "admin.tokens[0].name", "required"},
		{[]AdminToken{{Name: "a", Role: "viewer", TokenEnv: "T", Expires: "2027-01-31"}}, AdminTLS{}, "admin.tokens[0].expires", "not an RFC 3339 time"},
		{[]AdminToken{{Name: "a", Role: "viewer", TokenEnv: "T"}, {Name: "a", Role: "operator", TokenEnv: "U"}}, AdminTLS{}, "admin.tokens[1].name", "already defined"},
		{nil, AdminTLS{CertFile: "/nonexistent.crt"}, "admin.tls.key_file", "required with cert_file"},
		{nil, AdminTLS{CertFile: "/nonexistent.crt", KeyFile: "/nonexistent.key"}, "admin.tls.cert_file", "cannot read certificate"},
	} {
		c := base()
		c.Admin.Tokens, c.Admin.TLS = tc.tokens, tc.tls
		v := &validator{}
		c.validateAdmin(v)
		found := false
		for _, e := range v.errs {
			var fe *FieldError
			if errors.As(e, &fe) && fe.Field == tc.field && strings.Contains(fe.Msg, tc.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("tokens %+v tls %+v: errors %v, want %s: ...%s...", tc.tokens, tc.tls, v.errs, tc.field, tc.msg)
		}
	}
	c := base()
	c.Admin.Tokens = []AdminToken{{Name: "a", Role: "operator", TokenSHA256: strings.Repeat("ab", 32)}}
	v := &validator{}
	c.validateAdmin(v)
	if len(v.errs) > 0 {
		t.Errorf("a valid token: %v", v.errs)
	}
}

// TestAdminTokenSecrets: the secret is read from the variable or the file
// (trailing newline dropped) and only its hash returned; CheckSecrets
// names an unresolvable one.
func TestAdminTokenSecrets(t *testing.T) {
	t.Setenv("SY_ADMIN_TOK", "s3cret")
	f := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := AdminToken{TokenEnv: "SY_ADMIN_TOK"}.SHA256("x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := AdminToken{TokenFile: f}.SHA256("x")
	if err != nil || a != b {
		t.Fatalf("file and env hashes differ: %x %x %v", a, b, err)
	}
	c := &Config{}
	c.ApplyDefaults()
	c.Admin.Tokens = []AdminToken{{Name: "a", Role: "viewer", TokenEnv: "SY_ADMIN_UNSET"}}
	if err := c.CheckSecrets(); err == nil || !strings.Contains(err.Error(), "admin.tokens[0].token_env: environment variable SY_ADMIN_UNSET is not set") {
		t.Errorf("CheckSecrets: %v", err)
	}
}

// TestAdminWarnings: loopback without tokens warns that the API is open;
// another address warns about missing tokens and TLS; tokens and TLS on
// another address, or tokens on loopback, are quiet.
func TestAdminWarnings(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		tokens int
		tls    bool
		want   []string
	}{
		{"127.0.0.1:8080", 0, false, []string{"without a token"}},
		{"127.0.0.1:8080", 1, false, nil},
		{"0.0.0.0:8080", 0, false, []string{"NONE configured", "admin.tls: not set"}},
		{"10.0.0.5:8080", 1, false, []string{"admin.tls: not set"}},
		{"10.0.0.5:8080", 1, true, nil},
		{"off", 0, false, nil},
	} {
		c := &Config{}
		c.ApplyDefaults()
		c.Admin.Address = tc.addr
		for range tc.tokens {
			c.Admin.Tokens = append(c.Admin.Tokens, AdminToken{Name: "a", Role: "viewer", TokenEnv: "T"})
		}
		if tc.tls {
			c.Admin.TLS = AdminTLS{CertFile: "c", KeyFile: "k"}
		}
		got := c.AdminWarnings()
		if len(got) != len(tc.want) {
			t.Errorf("%s tokens=%d tls=%v: %q, want %d warnings", tc.addr, tc.tokens, tc.tls, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: warning %q, want %q", tc.addr, got[i], w)
			}
		}
	}
	c := &Config{}
	c.ApplyDefaults()
	c.Admin.Address = "127.0.0.1:8080"
	c.Admin.Tokens = []AdminToken{{Name: "old", Role: "viewer", TokenEnv: "T", Expires: "2020-01-31T00:00:00Z"},
		{Name: "new", Role: "viewer", TokenEnv: "U", Expires: time.Now().Add(time.Hour).Format(time.RFC3339)}}
	if got := c.AdminWarnings(); len(got) != 1 || !strings.Contains(got[0], `admin.tokens[0].expires: token "old" expired at 2020-01-31T00:00:00Z`) {
		t.Errorf("expired token: warnings %q", got)
	}
}
