package admin

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/proxy"
)

// TestHealthEndpoints: readiness per listener and per cluster, /primary
// and /replica, liveness unaffected, unknown names 404.
func TestHealthEndpoints(t *testing.T) {
	health := []proxy.ListenerHealth{
		{Listener: "rw", Cluster: "main", Role: "primary", Epoch: 3, Primary: "node1", PrimaryOK: true, Replicas: 2},
		{Listener: "ro", Cluster: "main", Role: "replica", Epoch: 3, Primary: "node1", PrimaryOK: true, Replicas: 2},
		{Listener: "rw2", Cluster: "other", Role: "primary", Epoch: 1, Primary: "db1",
			Problem: `listener "rw2" (cluster other) routes no reachable primary: this proxy cannot reach primary db1`},
	}
	var storeErr, notReady error
	srv, err := Start(Options{Address: "127.0.0.1:0", Listeners: func() []proxy.ListenerHealth { return health },
		Ready: func() error { return notReady }, Degraded: func() error { return storeErr }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+srv.Addr()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/readyz", 503, `routes no reachable primary`},
		{"GET", "/readyz?listener=rw", 200, "primary node1"},
		{"GET", "/readyz/listener/rw", 200, "primary node1"},
		{"GET", "/readyz?listener=rw&listener=ro", 200, "ready"},
		{"GET", "/readyz?listener=rw2", 503, "cannot reach primary db1"},
		{"GET", "/readyz/cluster/main", 200, "ready"},
		{"GET", "/readyz?cluster=other", 503, "rw2"},
		{"GET", "/readyz?listener=nope", 404, `no listener "nope"`},
		{"GET", "/readyz/cluster/nope", 404, `no listener of cluster "nope"`},
		{"GET", "/primary", 200, "primary node1"},
		{"OPTIONS", "/primary", 200, "primary node1"},
		{"HEAD", "/primary?cluster=other", 503, ""},
		{"GET", "/primary?cluster=other", 503, "routes no reachable primary"},
		{"GET", "/replica?cluster=main", 200, `listener "ro"`},
		{"GET", "/replica?cluster=other", 503, "no serving replica"},
		{"POST", "/primary", 405, "method not allowed"},
	} {
		code, body := get(c.method, c.path)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s %s: %d %q, want %d containing %q", c.method, c.path, code, body, c.code, c.body)
		}
	}
	health[0].PrimaryOK, health[0].Problem = false, `listener "rw" (cluster main) routes no reachable primary: x`
	if code, body := get("GET", "/primary?cluster=main"); code != 503 {
		t.Errorf("/primary with the primary lost: %d %q, want 503", code, body)
	}
	if code, _ := get("GET", "/readyz/listener/ro"); code != 200 {
		t.Errorf("/readyz/listener/ro with replicas serving: %d, want 200", code)
	}
	// The store down (failsafe): the process is not ready as a whole,
	// its listeners that can serve are (a load balancer keeps them).
	storeErr = errors.New("store: unreachable for 5s")
	if code, body := get("GET", "/readyz/listener/ro"); code != 200 || !strings.Contains(body, "degraded, serving from the last routing state: store: unreachable for 5s") {
		t.Errorf("/readyz/listener/ro with the store down: %d %q, want 200 saying it is degraded", code, body)
	}
	if code, body := get("GET", "/readyz/cluster/main"); code != 503 || !strings.Contains(body, "routes no reachable primary") {
		t.Errorf("/readyz/cluster/main with the store down and the primary lost: %d %q, want 503 for the primary", code, body)
	}
	if code, body := get("GET", "/readyz"); code != 503 || !strings.Contains(body, "store: unreachable") {
		t.Errorf("/readyz with the store down: %d %q, want 503 naming it", code, body)
	}
	notReady = errors.New(`no routing state for cluster "main" yet`)
	if code, body := get("GET", "/readyz/listener/ro"); code != 503 || !strings.Contains(body, "no routing state") {
		t.Errorf("/readyz/listener/ro without a routing state: %d %q, want 503", code, body)
	}
	if code, _ := get("GET", "/healthz"); code != 200 {
		t.Errorf("/healthz: %d, want 200 (liveness stays true)", code)
	}
}

// TestHealthWithoutProxy: a controller-only process is ready on Ready alone
// and routes no primary.
func TestHealthWithoutProxy(t *testing.T) {
	srv, err := Start(Options{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for path, want := range map[string]int{"/readyz": 200, "/primary": 503, "/replica": 503} {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
