package proxy

import (
	"bytes"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// lockedBuffer is a log sink shared by the proxy's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns what was logged since the last call.
func (l *lockedBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// A refused login logs why (wrong password, unknown user, no route), and
// a client retrying the same refusal in a loop writes one line, not one
// per attempt.
func TestLoginRefusedSaysWhy(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{})
	cfg := c.Config()
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	var logs lockedBuffer
	srv, err := New(Options{Config: cfg, ID: "test-proxy", Registry: prometheus.NewRegistry(),
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.SetClusterState(sandboxState(c, 1, 0, 1, 2))
	h := &harness{t: t, c: c, cfg: cfg, srv: srv}
	ping := func(mod func(*mysql.Config)) error {
		d, err := sql.Open("mysql", h.dsn("rw", "", mod))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		return d.Ping()
	}
	refusals := func(out string) []string {
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `msg="client login refused"`) {
				got = append(got, l)
			}
		}
		return got
	}
	for _, tc := range []struct {
		name, want string
		mod        func(*mysql.Config)
	}{
		{"wrong password", `reason="wrong password"`, func(c *mysql.Config) { c.Passwd = "not-the-password" }},
		{"unknown user", `reason="unknown user"`, func(c *mysql.Config) { c.User, c.Passwd = "nobody_here", "x" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.take()
			for range 20 {
				if code, _ := mysqlErr(ping(tc.mod)); code != 1045 {
					t.Fatalf("login answered %d, want 1045", code)
				}
			}
			got := refusals(logs.take())
			if len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], "listener=rw") {
				t.Fatalf("20 refused logins logged %d refusal lines, want 1 with %s:\n%s", len(got), tc.want, strings.Join(got, "\n"))
			}
		})
	}
	t.Run("no route", func(t *testing.T) {
		noPrimary := sandboxState(c, 2, 0)
		noPrimary.Primary = ""
		srv.SetClusterState(noPrimary)
		defer srv.SetClusterState(sandboxState(c, 3, 0, 1, 2))
		logs.take()
		for range 20 {
			if code, _ := mysqlErr(ping(nil)); code != 1105 {
				t.Fatalf("login without a primary answered %d, want 1105", code)
			}
		}
		got := refusals(logs.take())
		if len(got) != 1 || !strings.Contains(got[0], `reason="no route"`) || !strings.Contains(got[0], "no primary known") {
			t.Fatalf("20 logins without a route logged %d refusal lines, want 1 with the reason:\n%s", len(got), strings.Join(got, "\n"))
		}
	})
	// Close writes the summary of what was held back.
	_ = srv.Close()
	out := logs.take()
	if !strings.Contains(out, "suppressed=19") {
		t.Fatalf("no summary line with suppressed=19 on close:\n%s", out)
	}
}
