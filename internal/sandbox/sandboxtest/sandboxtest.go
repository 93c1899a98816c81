package sandboxtest

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// RequireEnv is the environment variable that turns a missing mariadbd from
// a skip into a test failure (CI sets it to "1").
const RequireEnv = "SWITCHYARD_REQUIRE_MARIADB"

// Start brings up a fresh sandbox in t.TempDir() on free loopback ports and
// registers a cleanup that stops its processes and removes its data. Options
// are used as given except: Dir is always a new temporary directory, BasePort
// is forced to 0 (free ports), TemplateDir defaults to TemplateDir(), every address left empty gets a free port
// (never the well-known defaults, so parallel test binaries do not collide),
// Log defaults to the test log, and StopWithParent is set so a crashed test
// binary leaves no server behind.
//
// Start skips the test when mariadbd is missing, or fails it when
// SWITCHYARD_REQUIRE_MARIADB=1. Any other start-up error fails the test.
func Start(t testing.TB, o sandbox.Options) *sandbox.Cluster {
	t.Helper()
	if err := sandbox.CheckBinaries(); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("sandboxtest: %v (%s=1 requires it)", err, RequireEnv)
		}
		t.Skipf("sandboxtest: skipping: %v (set %s=1 to fail instead)", err, RequireEnv)
	}
	o.Dir = t.TempDir()
	o.BasePort = 0
	o.StopWithParent = true
	if o.TemplateDir == "" {
		o.TemplateDir = TemplateDir()
	}
	// Hold the listeners for the configured addresses open while Up picks
	// the node ports, so the two sets cannot overlap.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for _, a := range []*string{&o.ListenerRW, &o.ListenerRO, &o.AdminAddress, &o.EtcdClientAddress, &o.EtcdPeerAddress} {
		if *a == "" {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("sandboxtest: find a free port: %v", err)
			}
			held = append(held, l)
			*a = l.Addr().String()
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := sandbox.Up(ctx, o)
	if err != nil {
		if errors.Is(err, sandbox.ErrMariaDBNotFound) && os.Getenv(RequireEnv) != "1" {
			t.Skipf("sandboxtest: skipping: %v", err)
		}
		t.Fatalf("sandboxtest: start sandbox: %v", err)
	}
	dir := c.Dir
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := sandbox.Down(ctx, dir, true); err != nil {
			t.Errorf("sandboxtest: stop sandbox: %v", err)
		}
	})
	return c
}

// TemplateDir is where Start caches the pristine datadir made by
// mariadb-install-db, shared by all test processes of this OS user:
// $TMPDIR/switchyard-sandbox-template-UID. It holds about 30 MB per server
// version and is safe to delete at any time.
func TemplateDir() string {
	return filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid()))
}

// DB opens a *sql.DB (go-sql-driver) to node i (0-based) as user/password
// with default database db ("" for none), pings it, and closes it at test
// cleanup. It fails the test if the ping fails.
func DB(t testing.TB, c *sandbox.Cluster, i int, user, password, db string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(c.DSN(i, user, password, db))
	if err != nil {
		t.Fatalf("sandboxtest: DSN for node %d: %v", i, err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("sandboxtest: connector for node %d: %v", i, err)
	}
	sdb := sql.OpenDB(conn)
	t.Cleanup(func() { _ = sdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sdb.PingContext(ctx); err != nil {
		t.Fatalf("sandboxtest: connect to %s as %s: %v", c.Nodes[i].Name, user, err)
	}
	return sdb
}

// FreeAddr returns a free loopback address ("127.0.0.1:N"): the kernel picks
// the port for a listener that is closed at once, so another process may
// take it before the caller binds it (rare; ports are not reused quickly).
func FreeAddr(t testing.TB) string {
	t.Helper()
	freeMu.Lock()
	defer freeMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("sandboxtest: find a free port: %v", err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		// The kernel may hand out a port again once it is closed: never
		// give one twice in a process, so two addresses of one config
		// never collide.
		if !freeGiven[addr] {
			freeGiven[addr] = true
			return addr
		}
	}
	t.Fatal("sandboxtest: no free port not given before")
	return ""
}

var (
	freeMu    sync.Mutex
	freeGiven = map[string]bool{}
)

// testWriter sends log output to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
