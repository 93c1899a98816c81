package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestMissingBinariesError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBinariesIn([]string{t.TempDir()})
	if !errors.Is(err, ErrMariaDBNotFound) {
		t.Fatalf("err %v, want ErrMariaDBNotFound", err)
	}
	want := "mariadbd not found: install the Debian package mariadb-server (apt-get install -y mariadb-server)"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestRandomPassword(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		p := randomPassword()
		if len(p) != 20 || !strings.ContainsAny(p[:1], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("bad password shape %q", p)
		}
		if seen[p] {
			t.Fatalf("password repeated")
		}
		seen[p] = true
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{`abc`: `'abc'`, `a'b`: `'a\'b'`, `a\b`: `'a\\b'`} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultsFileIsolation(t *testing.T) {
	c := &Cluster{Dir: "/x", SemiSync: true, Nodes: []Node{{Name: "node1", ServerID: 1, Port: 3307}, {Name: "node2", ServerID: 2, Port: 3308}}}
	p := string(c.defaultsFile(0, "root"))
	r := string(c.defaultsFile(1, "root"))
	for _, want := range []string{"server-id=1\n", "port=3307\n", "read-only=ON\n", "gtid-strict-mode=ON\n", "log-slave-updates=ON\n", "binlog-format=ROW\n", "rpl-semi-sync-slave-enabled=ON\n", "bind-address=127.0.0.1\n"} {
		if !strings.Contains(p, want) {
			t.Errorf("primary defaults file lacks %q", want)
		}
	}
	for _, want := range []string{"server-id=2\n", "read-only=ON\n", "rpl-semi-sync-slave-enabled=ON\n"} {
		if !strings.Contains(r, want) {
			t.Errorf("replica defaults file lacks %q", want)
		}
	}
	if strings.Contains(p, "!include") || strings.Contains(p, "/etc/mysql") {
		t.Error("defaults file includes system option files")
	}
}
