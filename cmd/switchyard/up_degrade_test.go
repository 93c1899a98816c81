package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUpKeepsServingWhenEmbeddedEtcdStops: the embedded etcd of `up`
// stops under it. The process does not exit; the listeners keep serving
// (an open session runs statements, new clients log in) from the last
// routing snapshot; /healthz stays 200 while /readyz is 503 naming the
// embedded etcd, and /readyz/listener/<rw> (what load balancers check)
// stays 200 saying it is degraded; the etcd is started again on the same data directory and
// the store takes writes; /readyz is 200 again.
func TestUpKeepsServingWhenEmbeddedEtcdStops(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
	dir := t.TempDir()
	cfg := sb.Config()
	cfg.Etcd.Embedded = config.EmbeddedEtcd{DataDir: filepath.Join(dir, "etcd"),
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t)}
	cfg.Admin.Address = sandboxtest.FreeAddr(t)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = sandboxtest.FreeAddr(t)
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	g := &globalFlags{configPath: cfgPath, logLevel: "warn", logFormat: "text"}
	owners := make(chan *embeddedEtcd, 1)
	rf := &roleFlags{embeddedStarted: func(e *embeddedEtcd) { owners <- e }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRoles(ctx, g, rf, true, true, true) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("up did not stop within 20s of its context")
		}
	}()
	admin := "http://" + cfg.Admin.Address
	waitReady := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body := get(admin + "/readyz")
			if code == 200 {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("up returned %v while waiting for %s", err, what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("not ready %s: %d %s", what, code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReady("after start")
	owner := <-owners

	var rw string
	for _, l := range cfg.Listeners {
		if l.Role == "primary" {
			rw = l.Address
		}
	}
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=2s&readTimeout=5s", sb.AppUser, sb.AppPassword, rw))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sess, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS degrade (id INT PRIMARY KEY AUTO_INCREMENT)"); err != nil {
		t.Fatal(err)
	}

	// Watch /readyz and /healthz from before the stop.
	var mu sync.Mutex
	var notReady, listenerNotReady []string
	var degradedSeen bool
	healthBad := 0
	var rwName string
	for _, l := range cfg.Listeners {
		if l.Role == "primary" {
			rwName = l.Name
		}
	}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			code, body := get(admin + "/readyz")
			lc, lbody := get(admin + "/readyz/listener/" + rwName)
			hc, _ := get(admin + "/healthz")
			mu.Lock()
			if code != 200 {
				notReady = append(notReady, fmt.Sprintf("%d %s", code, strings.TrimSpace(body)))
			}
			if lc != 200 {
				listenerNotReady = append(listenerNotReady, fmt.Sprintf("%d %s", lc, strings.TrimSpace(lbody)))
			}
			degradedSeen = degradedSeen || strings.Contains(lbody, "degraded, serving from the last routing state")
			if hc != 200 {
				healthBad++
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()

	stopped := time.Now()
	owner.Current().Close() // the embedded etcd stops under up
	// The listeners keep serving meanwhile.
	var stmtErrs, loginErrs int
	for i := 0; i < 20; i++ {
		if _, err := sess.ExecContext(ctx, "INSERT INTO degrade VALUES ()"); err != nil {
			stmtErrs++
			t.Logf("statement while etcd is down: %v", err)
		}
		c, err := db.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
			c.Close()
		}
		if err != nil {
			loginErrs++
			t.Logf("login while etcd is down: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitReady("after the embedded etcd stopped")
	recovered := time.Since(stopped)
	close(stopWatch)
	<-watched
	select {
	case err := <-done:
		t.Fatalf("up returned after its embedded etcd stopped: %v", err)
	default:
	}
	if stmtErrs > 0 || loginErrs > 0 {
		t.Fatalf("while the embedded etcd was down: %d statement errors, %d login errors", stmtErrs, loginErrs)
	}
	mu.Lock()
	defer mu.Unlock()
	named := false
	for _, r := range notReady {
		named = named || strings.Contains(r, "embedded_etcd")
	}
	if !named {
		t.Fatalf("/readyz never said the embedded etcd was down (%d answers not ready, the first: %q)", len(notReady), notReady[:min(len(notReady), 3)])
	}
	if healthBad > 0 {
		t.Fatalf("/healthz failed %d times while the listeners served", healthBad)
	}
	// What load balancers check stays ready: the listener serves from its
	// last routing state, and says it is degraded.
	if len(listenerNotReady) > 0 {
		t.Fatalf("/readyz/listener/%s was not ready %d times while the listener served, the first: %q", rwName, len(listenerNotReady), listenerNotReady[0])
	}
	if !degradedSeen {
		t.Fatalf("/readyz/listener/%s never said the process was degraded", rwName)
	}
	// The restarted store takes writes.
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: owner.Current().Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := st.Create(wctx, cfg.Etcd.Prefix+"/degrade-probe", []byte("x")); err != nil {
		t.Fatalf("write to the restarted etcd: %v", err)
	}
	t.Logf("etcd stopped: ready again after %s; /readyz said: %q (%d answers not ready)", recovered.Round(time.Millisecond), notReady[0], len(notReady))
}
