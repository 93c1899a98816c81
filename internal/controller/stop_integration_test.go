package controller

import (
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestControllerStopsWithStoreGone: a leading controller whose etcd has
// stopped returns from Run within stopBound of its context ending: nothing
// on its way out waits for the store without a bound.
func TestControllerStopsWithStoreGone(t *testing.T) {
	const stopBound = 8 * time.Second
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	emb := topotest.StartEmbedded(t, t.TempDir())
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: emb.Endpoints(), DialTimeout: 2 * time.Second, SessionTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		closed := make(chan struct{})
		go func() { _ = st.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("the store did not close within 10 s of its etcd stopping")
		}
	}()
	cfg := testConfig(sb)
	c, err := New(Options{Config: cfg, Store: st, Keys: testKeys, ID: "ctl-stop", Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitState(t, st, 60*time.Second, "a published state with primary node1", func(s topo.ClusterState) bool { return s.Primary == "node1" })

	emb.Close()
	// The controller notices: its rounds fail, its leadership lapses.
	time.Sleep(3 * time.Second)
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		t.Logf("controller stopped %s after its context ended, with etcd gone", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(stopBound):
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("controller did not stop within %s of its context ending with etcd gone; goroutines:\n%s", stopBound, b.String())
	}
}
