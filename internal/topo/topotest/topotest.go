package topotest

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// StartEtcd starts a single-node embedded etcd on two free loopback ports
// with its data in a fresh t.TempDir(), and stops it when the test ends.
// It returns the client endpoints ("http://127.0.0.1:port"). etcd's
// warnings and errors go to the test log. Startup takes about a second;
// share one server between the subtests of a test where possible.
func StartEtcd(t testing.TB) (endpoints []string) {
	t.Helper()
	e := startEmbedded(t, t.TempDir())
	return e.Endpoints()
}

// NewStore starts a fresh embedded etcd (StartEtcd) and returns a store
// connected to it with a 1s leader session TTL, so that leadership loss
// is quick to observe. Both are closed when the test ends.
func NewStore(t testing.TB) topo.Store {
	t.Helper()
	return Connect(t, StartEtcd(t))
}

// Connect returns a store connected to endpoints (e.g. from StartEtcd),
// closed when the test ends. Use it for a second client of the same etcd,
// as a second controller or proxy would be.
func Connect(t testing.TB, endpoints []string) topo.Store {
	t.Helper()
	s, err := topo.NewEtcd(topo.EtcdOptions{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		SessionTTL:  time.Second,
		Log:         Logger(t),
	})
	if err != nil {
		t.Fatalf("topotest: connect to etcd %v: %v", endpoints, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("topotest: close store: %v", err)
		}
	})
	return s
}

// StartEmbedded starts an embedded etcd with its data in dir (which may
// hold the data of an earlier run) on free loopback ports, stopped when the
// test ends. Use it to test restarts; most tests want StartEtcd.
func StartEmbedded(t testing.TB, dir string) *topo.Embedded {
	t.Helper()
	return startEmbedded(t, dir)
}

func startEmbedded(t testing.TB, dir string) *topo.Embedded {
	t.Helper()
	var lastErr error
	// Free ports are found by binding to port 0 and releasing them; another
	// process may take one in between, so retry a few times.
	for range 5 {
		client, peer, err := freePorts()
		if err != nil {
			t.Fatalf("topotest: pick free ports: %v", err)
		}
		e, err := topo.StartEmbedded(topo.EmbeddedOptions{
			DataDir:       filepath.Join(dir, "etcd"),
			ClientAddress: client,
			PeerAddress:   peer,
			Log:           Logger(t),
			UnsafeNoFsync: true,
		})
		if err != nil {
			lastErr = err
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			t.Fatalf("topotest: start embedded etcd: %v", err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	t.Fatalf("topotest: start embedded etcd: %v", lastErr)
	return nil
}

func freePorts() (client, peer string, err error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		lns = append(lns, ln)
	}
	return lns[0].Addr().String(), lns[1].Addr().String(), nil
}

// Logger returns a logger writing warnings and errors to the test log. It
// stops writing when the test ends, so goroutines that outlive the test
// cannot make it panic.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{w: t.Output()}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu      sync.Mutex
	w       io.Writer
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return len(p), nil
	}
	return w.w.Write(p)
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}
