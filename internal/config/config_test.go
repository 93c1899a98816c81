package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// goodEnv sets the environment variables the good fixtures refer to.
func goodEnv(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_MONITOR_PASSWORD", "monitor-from-env")
	t.Setenv("SWITCHYARD_TEST_APP_PASSWORD", "app-from-env")
}

func TestGoodConfigs(t *testing.T) {
	goodEnv(t)
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("good fixtures: %v, %d files", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := ValidateFile(f)
			if err != nil {
				t.Fatalf("ValidateFile: %v", err)
			}
			if err := c.CheckSecrets(); err != nil {
				t.Errorf("CheckSecrets: %v", err)
			}
			// Marshal → Parse gives the same config, which still validates.
			out, err := c.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			c2, err := Parse(out)
			if err != nil {
				t.Fatalf("Parse(Marshal()): %v\n%s", err, out)
			}
			if err := c2.Validate(); err != nil {
				t.Fatalf("re-parsed config does not validate: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(c, c2) {
				t.Errorf("round trip changed the config:\nbefore %+v\nafter  %+v", c, c2)
			}
		})
	}
}

func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) < 30 {
		t.Fatalf("bad fixtures: %v, %d files", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, line := range strings.Split(string(data), "\n") {
				if e, ok := strings.CutPrefix(line, "# error: "); ok {
					want = append(want, e)
				}
			}
			if len(want) == 0 {
				t.Fatalf("fixture has no \"# error: \" line")
			}
			c, err := ValidateFile(f)
			if err == nil {
				t.Fatalf("ValidateFile accepted it: %+v", c)
			}
			if c != nil {
				t.Error("ValidateFile returned a config along with an error")
			}
			msg := err.Error()
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q; got:\n%s", w, msg)
				}
			}
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, f+": ") {
					t.Errorf("error line %q does not start with the file path", line)
				}
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != f {
				t.Errorf("error is %T, not a *FileError for %s", err, f)
			}
		})
	}
}

// TestValidationErrorsAreFieldErrors checks that Validate's problems can be
// inspected with errors.As and that every one of them is reported.
func TestValidationErrorsAreFieldErrors(t *testing.T) {
	c, err := ValidateFile("testdata/bad/many-problems.yaml")
	if c != nil || err == nil {
		t.Fatal("many-problems.yaml validated")
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("no *FieldError in %v", err)
	}
	joined, ok := errors.Unwrap(err).(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate's error is not a joined error: %T", errors.Unwrap(err))
	}
	var fields []string
	for _, e := range joined.Unwrap() {
		if !errors.As(e, &fe) {
			t.Errorf("%v is not a *FieldError", e)
			continue
		}
		fields = append(fields, fe.Field)
	}
	want := []string{"users[0]", "listeners[0].cluster", "probe.timeout"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields = %q, want %q", fields, want)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(`
clusters:
  - name: main
    nodes: [{name: db1, address: "127.0.0.1:3306"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		field string
		got   any
		want  any
	}{
		{"etcd.endpoints", len(c.Etcd.Endpoints), 0},
		{"etcd.prefix", c.Etcd.Prefix, "/switchyard"},
		{"etcd.dial_timeout", c.Etcd.DialTimeout.D(), 2 * time.Second},
		{"etcd.embedded.data_dir", c.Etcd.Embedded.DataDir, ".switchyard-etcd"},
		{"etcd.embedded.client_address", c.Etcd.Embedded.ClientAddress, "127.0.0.1:2379"},
		{"etcd.embedded.peer_address", c.Etcd.Embedded.PeerAddress, "127.0.0.1:2380"},
		{"admin.address", c.Admin.Address, "127.0.0.1:8080"},
		{"clusters[0].flavor", c.Clusters[0].Flavor, "mariadb"},
		{"clusters[0].nodes[0].promotion", c.Clusters[0].Nodes[0].Promotion, "neutral"},
		{"clusters[0].read_routing.max_lag", c.Clusters[0].ReadRouting.MaxLag.D(), 10 * time.Second},
		{"clusters[0].read_routing.fallback_to_primary", *c.Clusters[0].ReadRouting.FallbackToPrimary, true},
		{"probe.interval", c.Probe.Interval.D(), time.Second},
		{"probe.timeout", c.Probe.Timeout.D(), 500 * time.Millisecond},
		{"proxy.connect_timeout", c.Proxy.ConnectTimeout.D(), time.Second},
		{"proxy.max_connections_per_backend", c.Proxy.MaxConnectionsPerBackend, 2000},
		{"proxy.pool.wait_timeout", c.Proxy.Pool.WaitTimeout, Duration(3 * time.Second)},
		{"proxy.pool.idle_timeout", c.Proxy.Pool.IdleTimeout, Duration(time.Minute)},
		{"switchover.catchup_timeout", c.Switchover.CatchupTimeout.D(), 10 * time.Second},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("default %s = %v, want %v", ch.field, ch.got, ch.want)
		}
	}

	// Set values are kept, an explicit false is not replaced by the default,
	// and ApplyDefaults is idempotent.
	c2, err := Parse([]byte(`
admin: {address: "off"}
probe: {interval: 3s}
clusters:
  - name: main
    flavor: mysql
    read_routing: {fallback_to_primary: false, max_lag: 2s}
    nodes: [{name: db1, address: "127.0.0.1:3306", promotion: prefer}]
`))
	if err != nil {
		t.Fatal(err)
	}
	cl := c2.Clusters[0]
	if c2.Admin.Address != "off" || c2.Probe.Interval.D() != 3*time.Second || cl.Flavor != "mysql" ||
		*cl.ReadRouting.FallbackToPrimary || cl.ReadRouting.MaxLag.D() != 2*time.Second || cl.Nodes[0].Promotion != "prefer" {
		t.Errorf("defaults overrode set values: %+v", c2)
	}
	before, _ := c2.Marshal()
	c2.ApplyDefaults()
	after, _ := c2.Marshal()
	if string(before) != string(after) {
		t.Errorf("ApplyDefaults is not idempotent:\n%s\n%s", before, after)
	}
}

func TestCheckSecrets(t *testing.T) {
	goodEnv(t)
	c, err := ValidateFile("testdata/good/secrets-env-file.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckSecrets(); err != nil {
		t.Fatalf("CheckSecrets: %v", err)
	}
	got := map[string]string{}
	for name, cr := range map[string]Credential{"monitor": c.Credentials.Monitor, "repl": c.Credentials.Replication} {
		got[name], _ = cr.Resolve()
	}
	for _, u := range c.Users {
		p, ok, err := u.Secret()
		if !ok || err != nil {
			t.Fatalf("user %s: %v %v", u.Name, ok, err)
		}
		got[u.Name] = p
	}
	want := map[string]string{"monitor": "monitor-from-env", "repl": "repl-from-file", "app": "app-from-env", "batch": "batch-from-file"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resolved secrets = %v, want %v", got, want)
	}
	// password_file is relative to the config file, not the working directory.
	if want, _ := filepath.Abs(filepath.Join("testdata", "good", "secrets", "repl.pw")); c.Credentials.Replication.PasswordFile != want {
		t.Errorf("password_file = %q, want %q", c.Credentials.Replication.PasswordFile, want)
	}

	// Now break each source and check every field is named, no secret shown.
	t.Setenv("SWITCHYARD_TEST_APP_PASSWORD", "")
	os.Unsetenv("SWITCHYARD_TEST_MONITOR_PASSWORD")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pw")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Credentials.Replication.PasswordFile = empty
	c.Users[1].PasswordFile = filepath.Join(dir, "missing.pw")
	err = c.CheckSecrets()
	if err == nil {
		t.Fatal("CheckSecrets passed with broken sources")
	}
	for _, w := range []string{
		"credentials.monitor.password_env: environment variable SWITCHYARD_TEST_MONITOR_PASSWORD is not set",
		"credentials.replication.password_file: file " + empty + " is empty",
		"users[0].password_env: environment variable SWITCHYARD_TEST_APP_PASSWORD is set but empty",
		"users[1].password_file: open " + filepath.Join(dir, "missing.pw") + ": no such file or directory",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("CheckSecrets error lacks %q:\n%v", w, err)
		}
	}

	// Hash-only users and plaintext passwords need nothing resolved.
	h, err := ValidateFile("testdata/good/hash-only-user.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CheckSecrets(); err != nil {
		t.Errorf("CheckSecrets on hash-only config: %v", err)
	}
}

// TestSecretsNeverInErrors feeds secrets into wrong places and checks that no
// error message repeats them.
func TestSecretsNeverInErrors(t *testing.T) {
	const secret = "Tr0ub4dor&3-secret"
	base := `
credentials:
  monitor: {user: monitor, password_env: "` + secret + `"}
  replication: {user: repl, password: "` + secret + `", password_env: REPL_PW}
users:
  - {name: app, password: "` + secret + `", password_hash: "*` + secret + `"}
  - {name: app2, password_hash: "` + secret + `"}
  - {name: app3, password_env: "` + secret + `"}
clusters: [{name: main, nodes: [{name: db1, address: "127.0.0.1:3306"}]}]
listeners: [{name: rw, address: "127.0.0.1:6446", cluster: main, role: primary}]
`
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil {
		t.Fatal("validated")
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Tr0ub") {
		t.Errorf("a secret leaked into the error:\n%v", err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n < 5 {
		t.Errorf("expected at least 5 problems, got %d:\n%v", n, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "config: empty document"},
		{"# only a comment\n", "config: empty document"},
		{"null", "config: empty document"},
		{"---\n", "config: empty document"},
		{"clusters: []\n---\n", ""}, // an empty trailing document is harmless
		{"a: 1\n---\nb: 2\n", "config: line 3: a second YAML document starts here"},
		{"clusters: [\n", "config: YAML syntax error: line"},
		{"42\n", "config: line 1: the config must be a mapping of keys (clusters, listeners, ...), not the scalar \"42\""},
		// Flow style puts several fields on one line; the path is still found.
		{"probe: {interval: 1s, timeout: soon}\n", `config: line 1: probe.timeout: invalid duration "soon"`},
		{"proxy: {connect_timeout: 1s, max_connections_per_backend: many}\n", "config: line 1: proxy.max_connections_per_backend: expected an integer, got `many`"},
		{"etcd: {prefix: /a, bogus: 1}\n", "config: line 1: etcd.bogus: unknown field (known: endpoints, prefix, dial_timeout, embedded, tls, username, password_env, password_file, integrity_key_env, integrity_key_file)"},
		// Several type errors are all reported.
		{"probe: {interval: 1s}\nproxy:\n  max_connections_per_backend: x\nclusters:\n  - name: [a]\n", "line 3: proxy.max_connections_per_backend: expected an integer, got `x`\nline 5: clusters[0].name: expected a string, got a list"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Parse(%q): %v", tt.in, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Parse(%q) = %v, want %q", tt.in, err, tt.want)
		}
	}
	if _, err := Parse(nil); !errors.Is(err, ErrEmpty) {
		t.Errorf("Parse(nil) = %v, want ErrEmpty", err)
	}
}

func TestValidateFileUnreadable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := ValidateFile(p)
	if err == nil || err.Error() != p+": cannot read config: no such file or directory" {
		t.Errorf("ValidateFile(missing) = %v", err)
	}
	if _, err := Load(p); err == nil {
		t.Error("Load(missing) succeeded")
	}
}

func TestValidateFileRelativePaths(t *testing.T) {
	dir := t.TempDir()
	cfg := `
etcd: {embedded: {data_dir: etcd-data}}
credentials:
  monitor: {user: monitor, password_file: mon.pw}
  replication: {user: repl, password_file: /abs/repl.pw}
users: [{name: app, password_file: sub/app.pw}]
clusters: [{name: main, nodes: [{name: db1, address: "127.0.0.1:3306"}]}]
listeners: [{name: rw, address: "127.0.0.1:6446", cluster: main, role: primary}]
`
	p := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		c.Etcd.Embedded.DataDir:                filepath.Join(dir, "etcd-data"),
		c.Credentials.Monitor.PasswordFile:     filepath.Join(dir, "mon.pw"),
		c.Credentials.Replication.PasswordFile: "/abs/repl.pw",
		c.Users[0].PasswordFile:                filepath.Join(dir, "sub", "app.pw"),
	} {
		if got != want {
			t.Errorf("path %q, want %q", got, want)
		}
	}
}

func TestSilenceBoundDerivedSettings(t *testing.T) {
	tests := []struct {
		bound time.Duration
		hb    time.Duration
		net   int
	}{
		{0, 100 * time.Millisecond, 3}, // the default 1.2s
		{1200 * time.Millisecond, 100 * time.Millisecond, 3},
		{1500 * time.Millisecond, 125 * time.Millisecond, 3},
		{3 * time.Second, 250 * time.Millisecond, 6},
		{1250 * time.Millisecond, 104 * time.Millisecond, 3},
	}
	for _, tc := range tests {
		f := FailoverConfig{SilenceBound: Duration(tc.bound)}
		if hb, net := f.HeartbeatPeriod(), f.NetTimeout(); hb != tc.hb || net != tc.net {
			t.Errorf("silence_bound %s: heartbeat %s, slave_net_timeout %d; want %s, %d", tc.bound, hb, net, tc.hb, tc.net)
		}
	}
}
