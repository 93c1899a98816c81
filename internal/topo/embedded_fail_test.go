package topo_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEmbeddedFatalDoesNotExit: a Fatal entry of the embedded etcd (what
// its WAL purge logs on "too many open files") ends only the goroutine that
// logged it, not the process: Failed is closed with the error, the server
// can be closed, and a new one starts on the same data directory with
// every key. Without the hook zap would call os.Exit(1) and this test
// binary would die.
func TestEmbeddedFatalDoesNotExit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etcd")
	opts := topo.EmbeddedOptions{DataDir: dir, ClientAddress: freeAddr(t), PeerAddress: freeAddr(t), UnsafeNoFsync: true}
	e, err := topo.StartEmbedded(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := st.Create(ctx, "/t/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Failed():
		t.Fatal("Failed closed before any fatal entry")
	default:
	}
	topo.LogFatalInEmbedded(e, "failed to purge wal file", errors.New("open /x/member/wal: too many open files"))
	select {
	case <-e.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("Failed not closed after a fatal entry")
	}
	if err := e.FailErr(); err == nil || !strings.Contains(err.Error(), "failed to purge wal file") || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("FailErr %v", err)
	}
	e.Close()
	<-e.Stopped()
	e2, err := topo.StartEmbedded(opts)
	if err != nil {
		t.Fatalf("restart on the same data directory: %v", err)
	}
	defer e2.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		kv, err := st.Get(ctx, "/t/k")
		if err == nil {
			if string(kv.Value) != "v" {
				t.Fatalf("key after restart: %q", kv.Value)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store client never reached the restarted etcd: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
