package admin

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

var apiKeys = topo.Keys{Prefix: "/switchyard-admin-test"}

// call makes one request and returns the status and the body.
func call(t *testing.T, c *http.Client, method, url, token, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func sum(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// TestOpenAPICoversRoutes: every route the server registers is in
// api/openapi.yaml and every operation of the file is a route.
func TestOpenAPICoversRoutes(t *testing.T) {
	srv, err := Start(Options{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	b, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("api/openapi.yaml: openapi %q, want 3.x", doc.OpenAPI)
	}
	inFile := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "post", "put", "delete", "patch":
				inFile[strings.ToUpper(m)+" "+p] = true
			}
		}
	}
	registered := map[string]bool{}
	for _, r := range srv.api.routes {
		registered[r.Method+" "+r.Path] = true
	}
	var missing, extra []string
	for r := range registered {
		if !inFile[r] {
			missing = append(missing, r)
		}
	}
	for r := range inFile {
		if !registered[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes not described in api/openapi.yaml: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("api/openapi.yaml describes routes the server does not register: %v", extra)
	}
	if len(registered) < 20 {
		t.Errorf("only %d routes registered", len(registered))
	}
}

// TestAPIAuth: the auth matrix over a real etcd. No token 401, a bad token
// 401, viewer GET 200, viewer plan POST allowed (404 or 503 for an
// unknown cluster, not 403), viewer change POST 403, operator POST accepted, a change
// without reason 400; health and metrics without a token unless
// metrics_auth; without tokens a loopback endpoint is open and any other
// refuses.
func TestAPIAuth(t *testing.T) {
	st := topotest.NewStore(t)
	t.Setenv("SY_TEST_OPERATOR_TOKEN", "op-secret")
	tokFile := filepath.Join(t.TempDir(), "viewer.token")
	if err := os.WriteFile(tokFile, []byte("view-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_test_total", Help: "test"}))
	start := func(metricsAuth bool) *Server {
		srv, err := Start(Options{Address: "127.0.0.1:0", Store: st, Keys: apiKeys, Gatherer: reg, MetricsAuth: metricsAuth,
			Status: func(context.Context) (any, error) { return map[string]any{"leader": "x"}, nil },
			Tokens: []config.AdminToken{
				{Name: "alice", Role: config.RoleOperator, TokenEnv: "SY_TEST_OPERATOR_TOKEN"},
				{Name: "victor", Role: config.RoleViewer, TokenFile: tokFile},
				{Name: "hash", Role: config.RoleViewer, TokenSHA256: sum("hashed-secret")},
				{Name: "old", Role: config.RoleOperator, TokenSHA256: sum("old-secret"), Expires: "2020-01-31T00:00:00Z"},
				{Name: "later", Role: config.RoleViewer, TokenSHA256: sum("later-secret"), Expires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	srv := start(false)
	base := "http://" + srv.Addr()
	c := http.DefaultClient
	for _, tc := range []struct {
		method, path, token, body string
		code                      int
		want                      string
	}{
		{"GET", "/api/v1/whoami", "", "", 401, `"code": "unauthorized"`},
		{"GET", "/api/v1/whoami", "wrong", "", 401, "invalid token"},
		{"GET", "/api/v1/whoami", "view-secret", "", 200, `"name": "victor"`},
		{"GET", "/api/v1/whoami", "hashed-secret", "", 200, `"name": "hash"`},
		{"GET", "/api/v1/whoami", "op-secret", "", 200, `"role": "operator"`},
		{"GET", "/api/v1/whoami", "old-secret", "", 401, `token \"old\" expired at 2020-01-31T00:00:00Z`},
		{"POST", "/api/v1/clusters/main/nodes/node1/drain", "old-secret", `{"reason": "x"}`, 401, "expired"},
		{"GET", "/api/v1/whoami", "later-secret", "", 200, `"name": "later"`},
		{"GET", "/api/v1/status", "view-secret", "", 200, `"store_reachable": true`},
		{"GET", "/api/status", "", "", 401, "missing token"},
		{"GET", "/api/status", "view-secret", "", 200, `"leader": "x"`},
		{"GET", "/api/v1/events", "view-secret", "", 200, `"events": []`},
		{"GET", "/api/v1/events?limit=0", "view-secret", "", 400, "limit"},
		{"GET", "/api/v1/sessions", "view-secret", "", 200, `"proxy": false`},
		{"POST", "/api/v1/config/validate", "view-secret", `{"yaml": "x: 1"}`, 403, "needs role operator"},
		{"POST", "/api/v1/clusters/nope/switchover/plan", "view-secret", `{}`, 404, "nope"},
		{"POST", "/api/v1/clusters/nope/failover/plan", "view-secret", `{}`, 503, "no controller leader"},
		{"POST", "/api/v1/clusters/nope/switchover", "view-secret", `{"reason": "test"}`, 403, "needs role operator"},
		{"POST", "/api/v1/clusters/nope/failover", "view-secret", `{"reason": "test"}`, 403, "needs role operator"},
		{"POST", "/api/v1/config/validate", "op-secret", `{"yaml": "x: 1"}`, 200, `"valid": false`},
		{"POST", "/api/v1/clusters/main/nodes/node1/drain", "op-secret", `{}`, 400, "reason: required"},
		{"POST", "/api/v1/clusters/main/nodes/node1/drain", "op-secret", `{"reason": "x", "bogus": 1}`, 400, "bogus"},
		{"POST", "/api/v1/clusters/nope/switchover", "op-secret", `{"reason": "test"}`, 404, "nope"},
		{"POST", "/api/v1/clusters/main/maintenance", "op-secret", `{"reason": "x"}`, 400, "on: required"},
		{"GET", "/api/v1/nothing", "op-secret", "", 404, "no API endpoint"},
		{"GET", "/healthz", "", "", 200, "ok"},
		{"GET", "/readyz", "", "", 200, "ready"},
		{"GET", "/metrics", "", "", 200, "switchyard_test_total"},
	} {
		code, body := call(t, c, tc.method, base+tc.path, tc.token, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s (token %q): %d %s\nwant %d containing %q", tc.method, tc.path, tc.token, code, body, tc.code, tc.want)
		}
	}

	// metrics_auth: /metrics needs a token of any role.
	srv2 := start(true)
	if code, _ := call(t, c, "GET", "http://"+srv2.Addr()+"/metrics", "", ""); code != 401 {
		t.Errorf("/metrics with metrics_auth and no token: %d, want 401", code)
	}
	if code, body := call(t, c, "GET", "http://"+srv2.Addr()+"/metrics", "view-secret", ""); code != 200 || !strings.Contains(body, "switchyard_test_total") {
		t.Errorf("/metrics with metrics_auth and a viewer token: %d", code)
	}

	// No tokens: open on loopback (actor anonymous), closed elsewhere.
	open, err := Start(Options{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if code, body := call(t, c, "GET", "http://"+open.Addr()+"/api/v1/whoami", "", ""); code != 200 || !strings.Contains(body, `"auth": false`) || !strings.Contains(body, anonymous) {
		t.Errorf("whoami without tokens on loopback: %d %s", code, body)
	}
	closed, err := newAuthenticator(nil, "10.1.2.3:8080")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "/api/v1/whoami", nil)
	if _, e := closed.identify(req); e == nil || e.status != 401 || !strings.Contains(e.msg, "not a loopback") {
		t.Errorf("no tokens on a non-loopback address: %v", e)
	}

	// A token expiring while the server runs is refused from then on.
	exp, err := newAuthenticator([]config.AdminToken{{Name: "soon", Role: "viewer", TokenSHA256: sum("soon-secret"), Expires: "2030-06-01T12:00:00Z"}}, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest("GET", "/api/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer soon-secret")
	exp.now = func() time.Time { return time.Date(2030, 6, 1, 11, 59, 59, 0, time.UTC) }
	if p, e := exp.identify(req); e != nil || p.Name != "soon" {
		t.Errorf("a second before the expiry: %+v %v", p, e)
	}
	exp.now = func() time.Time { return time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC) }
	if _, e := exp.identify(req); e == nil || e.status != 401 || !strings.Contains(e.msg, "expired at 2030-06-01T12:00:00Z") {
		t.Errorf("at the expiry: %v", e)
	}
	_, err = Start(Options{Address: "127.0.0.1:0", Tokens: []config.AdminToken{{Name: "x", Role: "viewer", TokenSHA256: sum("x"), Expires: "tomorrow"}}})
	if err == nil || !strings.Contains(err.Error(), "admin.tokens[0].expires") {
		t.Errorf("a bad expiry: %v", err)
	}

	// A token whose secret cannot be read names its field.
	_, err = Start(Options{Address: "127.0.0.1:0", Tokens: []config.AdminToken{{Name: "x", Role: "viewer", TokenEnv: "SY_TEST_UNSET_TOKEN"}}})
	if err == nil || !strings.Contains(err.Error(), "admin.tokens[0].token_env") {
		t.Errorf("unset token variable: %v", err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 with serial
// into dir and returns its files.
func writeCert(t *testing.T, dir string, serial int64) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "switchyard-admin-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	// Written aside and renamed, as a certificate manager does.
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, {keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}} {
		if err := os.WriteFile(f.path+".tmp", f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".tmp", f.path); err != nil {
			t.Fatal(err)
		}
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// TestAPIHTTPS: admin.tls serves HTTPS; replacing the files changes the
// certificate served without a restart, as does ReloadTLS; a broken pair
// keeps the previous certificate.
func TestAPIHTTPS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, c1 := writeCert(t, dir, 1)
	srv, err := Start(Options{Address: "127.0.0.1:0", TLS: config.AdminTLS{CertFile: certFile, KeyFile: keyFile},
		Tokens: []config.AdminToken{{Name: "alice", Role: "operator", TokenSHA256: sum("s")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	served := func(trust *x509.Certificate) (*big.Int, error) {
		pool := x509.NewCertPool()
		pool.AddCert(trust)
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + srv.Addr() + "/api/v1/whoami")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("whoami over HTTPS without a token: %d, want 401", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber, nil
	}
	if s, err := served(c1); err != nil || s.Int64() != 1 {
		t.Fatalf("first certificate: serial %v, %v", s, err)
	}
	if resp, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP answered 200 on an HTTPS endpoint")
		}
	}

	// New files: picked up at a handshake after certCheckEvery.
	time.Sleep(10 * time.Millisecond)
	_, _, c2 := writeCert(t, dir, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := served(c2)
		if err == nil && s.Int64() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("certificate not reloaded within 10 s: serial %v, %v", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A broken pair keeps the certificate in use; ReloadTLS says why.
	if err := os.WriteFile(keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadTLS(); err == nil {
		t.Error("ReloadTLS with a broken key: no error")
	}
	if s, err := served(c2); err != nil || s.Int64() != 2 {
		t.Errorf("after a broken reload: serial %v, %v; want the previous certificate", s, err)
	}
	_, _, c3 := writeCert(t, dir, 3)
	if err := srv.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS: %v", err)
	}
	if s, err := served(c3); err != nil || s.Int64() != 3 {
		t.Errorf("after ReloadTLS: serial %v, %v", s, err)
	}
}

// TestAPIEventStream: an event written to the log reaches a client of the
// stream, with its actor; the listing shows it newest first.
func TestAPIEventStream(t *testing.T) {
	st := topotest.NewStore(t)
	srv, err := Start(Options{Address: "127.0.0.1:0", Store: st, Keys: apiKeys,
		Tokens: []config.AdminToken{{Name: "victor", Role: "viewer", TokenSHA256: sum("v")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+srv.Addr()+"/api/v1/events/stream?cluster=main", nil)
	req.Header.Set("Authorization", "Bearer v")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("stream start: %q %v", line, err)
	}
	for i, msg := range []string{"first", "second"} {
		if err := controller.RecordEvent(ctx, st, apiKeys, "test", topo.Event{Cluster: "main", Code: "test", Message: msg, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		var ev topo.Event
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if strings.HasPrefix(line, "data: ") {
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
					t.Fatal(err)
				}
				break
			}
			if strings.TrimSpace(line) != "" && line != "event: event\n" {
				t.Fatalf("unexpected line %q", line)
			}
		}
		if ev.Message != msg || ev.Actor != "alice" || ev.Cluster != "main" {
			t.Errorf("event %d: %+v", i, ev)
		}
	}
	code, body := call(t, http.DefaultClient, "GET", "http://"+srv.Addr()+"/api/v1/events?cluster=main&limit=1", "v", "")
	var page struct {
		Events []topo.Event `json:"events"`
		Next   string       `json:"next"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	if len(page.Events) != 1 || page.Events[0].Message != "second" || page.Next == "" {
		t.Fatalf("first page: %+v", page)
	}
	_, body = call(t, http.DefaultClient, "GET", "http://"+srv.Addr()+"/api/v1/events?cluster=main&before="+page.Next, "v", "")
	page.Events, page.Next = nil, ""
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Events) != 1 || page.Events[0].Message != "first" || page.Next != "" {
		t.Fatalf("second page: %s", body)
	}
}

// TestAPISwitchoverOnSandbox: on a 3-node sandbox with a controller and a
// proxy in this process, an operator token plans a switchover, starts it
// (202), follows the operation until done; the switchover's events carry
// the token's name as actor; the session list shows a client of the
// proxy, and a kill through the API ends it and is recorded in the events.
func TestAPISwitchoverOnSandbox(t *testing.T) {
	const opTok, viewTok = "sy-operator-7d41c9e2f0a8", "sy-viewer-3b8e6f15ac92"
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	cfg := c.Config()
	cfg.Probe.Interval = config.Duration(500 * time.Millisecond)
	cfg.Probe.Timeout = config.Duration(400 * time.Millisecond)
	cfg.Switchover.CatchupTimeout = config.Duration(10 * time.Second)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := configstore.Bootstrap(ctx, st, apiKeys, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	// Every log line of the controller, the proxy and the API, searched
	// for the tokens at the end.
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctl, err := controller.New(controller.Options{Config: cfg, Store: st, Keys: apiKeys, ID: "ctl-api", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Run(ctx) }()
	px, err := proxy.New(proxy.Options{Config: cfg, ID: "proxy-api", Log: log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- proxy.Follow(ctx, st, apiKeys, px) }()
	defer func() {
		cancel()
		<-followDone
		_ = px.Close()
		select {
		case <-ctlDone:
		case <-time.After(15 * time.Second):
			t.Error("controller did not stop within 15 s")
		}
	}()
	srv, err := Start(Options{Address: "127.0.0.1:0", Store: st, Keys: apiKeys, Sessions: px, Log: log,
		Tokens: []config.AdminToken{{Name: "alice", Role: "operator", TokenSHA256: sum(opTok)}, {Name: "victor", Role: "viewer", TokenSHA256: sum(viewTok)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := "http://" + srv.Addr() + "/api/v1"
	hc := &http.Client{Timeout: 90 * time.Second}

	// Wait until the controller published a stable state with serving
	// replicas and the plan is OK.
	var plan struct {
		OK       bool                      `json:"ok"`
		Plan     controller.SwitchoverPlan `json:"plan"`
		Refusals []string                  `json:"refusals"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := call(t, hc, "POST", base+"/clusters/"+cfg.Clusters[0].Name+"/switchover/plan", opTok, `{"target": "node2"}`)
		if code == 200 {
			if err := json.Unmarshal([]byte(body), &plan); err != nil {
				t.Fatal(err)
			}
			if plan.OK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("switchover plan not OK within 60 s: %d %s", code, body)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if plan.Plan.From != "node1" || plan.Plan.To != "node2" || len(plan.Plan.Steps) < 5 {
		t.Fatalf("plan: %+v", plan.Plan)
	}
	cluster := cfg.Clusters[0].Name

	// A client of the proxy shows in the session list; kill it.
	app, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/", c.AppUser, c.AppPassword, px.ListenerAddr("rw")))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Sessions []proxy.SessionInfo `json:"sessions"`
		Proxy    bool                `json:"proxy"`
	}
	_, body := call(t, hc, "GET", base+"/sessions", viewTok, "")
	if err := json.Unmarshal([]byte(body), &list); err != nil || !list.Proxy || len(list.Sessions) != 1 {
		t.Fatalf("sessions: %s", body)
	}
	s0 := list.Sessions[0]
	if s0.User != c.AppUser || s0.Listener != "rw" || s0.Cluster != cluster {
		t.Errorf("session: %+v", s0)
	}
	if code, body := call(t, hc, "POST", base+"/sessions/"+s0.ID+"/kill", viewTok, `{"reason": "test"}`); code != 403 {
		t.Errorf("kill with a viewer token: %d %s", code, body)
	}
	if code, body := call(t, hc, "POST", base+"/sessions/"+s0.ID+"/kill", opTok, `{"reason": "stuck client"}`); code != 200 {
		t.Fatalf("kill: %d %s", code, body)
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Error("the killed session still answers")
	}
	// The client saw its connection end; the proxy's session may take a
	// moment longer to leave the list.
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, _ := call(t, hc, "POST", base+"/sessions/"+s0.ID+"/kill", opTok, `{"reason": "again"}`)
		if code == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("kill of an ended session: %d, want 404", code)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Switch over to node2 through the API and follow the operation.
	code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/switchover", opTok, `{"target": "node2", "reason": "api test"}`)
	if code != 202 {
		t.Fatalf("switchover: %d %s", code, body)
	}
	var op struct {
		ID        string `json:"id"`
		StatusURL string `json:"status_url"`
	}
	if err := json.Unmarshal([]byte(body), &op); err != nil || op.ID == "" || op.StatusURL != "/api/v1/clusters/"+cluster+"/operations/"+op.ID {
		t.Fatalf("switchover answer: %s", body)
	}
	start := time.Now()
	var req topo.Request
	for {
		code, body := call(t, hc, "GET", "http://"+srv.Addr()+op.StatusURL, viewTok, "")
		if code != 200 {
			t.Fatalf("operation: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		if req.State == topo.RequestDone || req.State == topo.RequestFailed {
			break
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("switchover still %s after 90 s: %s", req.State, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if req.State != topo.RequestDone || req.Target != "node2" || req.By != "alice" {
		t.Fatalf("switchover: %s %s (target %s, by %s)", req.State, req.Message, req.Target, req.By)
	}
	t.Logf("switchover through the API done in %s (polled): %s", time.Since(start).Round(time.Millisecond), req.Message)

	// Drain and undrain a replica; an unknown node is 404.
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/nodes/node9/drain", opTok, `{"reason": "typo"}`); code != 404 || !strings.Contains(body, "node9 is not a node") {
		t.Errorf("drain of an unknown node: %d %s", code, body)
	}
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/nodes/node3/drain", opTok, `{"reason": "disk swap"}`); code != 200 || !strings.Contains(body, `"ok": true`) {
		t.Errorf("drain: %d %s", code, body)
	}
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/nodes/node3/undrain", opTok, `{"reason": "disk swapped"}`); code != 200 || !strings.Contains(body, `"was_drained": true`) {
		t.Errorf("undrain: %d %s", code, body)
	}

	// The events: the switchover's with actor alice, the kill's too.
	code, body = call(t, hc, "GET", base+"/events?cluster="+cluster+"&limit=1000", viewTok, "")
	var page struct {
		Events []topo.Event `json:"events"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	var switched, killed, drained, undrained bool
	for _, ev := range page.Events {
		if ev.Code == "drain" && ev.Actor == "alice" && ev.Node == "node3" && strings.Contains(ev.Message, "disk swap") {
			drained = true
		}
		if ev.Code == "undrain" && ev.Actor == "alice" && ev.Node == "node3" {
			undrained = true
		}
		if ev.Code == "switchover_done" && ev.Actor == "alice" {
			switched = true
		}
		if ev.Code == "session_kill" && ev.Actor == "alice" && strings.Contains(ev.Message, "stuck client") {
			killed = true
		}
	}
	if !switched || !killed || !drained || !undrained {
		t.Errorf("events with actor alice: switchover_done %v, session_kill %v, drain %v, undrain %v; events: %s", switched, killed, drained, undrained, body)
	}
	// A second switchover to the current primary is refused by the plan.
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/switchover", opTok, `{"target": "node2", "reason": "again"}`); code != 409 ||
		!strings.Contains(body, "already the primary") || !strings.Contains(body, `"override": "force"`) {
		t.Errorf("switchover to the primary: %d %s", code, body)
	}

	// A failover while the primary is healthy is accepted as a request
	// and refused by the leader, naming the override.
	code, body = call(t, hc, "POST", base+"/clusters/"+cluster+"/failover", opTok, `{"reason": "api test"}`)
	if code != 202 {
		t.Fatalf("failover: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &op); err != nil || op.ID == "" {
		t.Fatalf("failover answer: %s", body)
	}
	req = followOperation(t, hc, "http://"+srv.Addr()+op.StatusURL, viewTok, 90*time.Second)
	if req.State != topo.RequestFailed || !strings.Contains(req.Message, "force") || req.By != "alice" {
		t.Errorf("failover of a healthy primary: %s %q (by %s), want failed naming the force override", req.State, req.Message, req.By)
	}

	// Maintenance of the cluster and of a node: on, refused when on with
	// another reason (override replace), replaced, off.
	for _, path := range []string{"/clusters/" + cluster + "/maintenance", "/clusters/" + cluster + "/nodes/node3/maintenance"} {
		if code, body := call(t, hc, "POST", base+path, opTok, `{"on": true, "reason": "kernel update"}`); code != 200 || !strings.Contains(body, `"ok": true`) {
			t.Errorf("%s on: %d %s", path, code, body)
		}
		if code, body := call(t, hc, "POST", base+path, opTok, `{"on": true, "reason": "another reason"}`); code != 409 ||
			!strings.Contains(body, `"code": "refused"`) || !strings.Contains(body, `"override": "replace"`) {
			t.Errorf("%s on again with another reason: %d %s, want 409 with override replace", path, code, body)
		}
		if code, body := call(t, hc, "POST", base+path, opTok, `{"on": true, "reason": "another reason", "replace": true}`); code != 200 {
			t.Errorf("%s on with replace: %d %s", path, code, body)
		}
		if code, body := call(t, hc, "POST", base+path, opTok, `{"on": false, "reason": "done", "for": "1h"}`); code != 400 || !strings.Contains(body, "apply to on only") {
			t.Errorf("%s off with for: %d %s", path, code, body)
		}
		if code, body := call(t, hc, "POST", base+path, opTok, `{"on": false, "reason": "done"}`); code != 200 {
			t.Errorf("%s off: %d %s", path, code, body)
		}
	}
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/nodes/node9/maintenance", opTok, `{"on": true, "reason": "typo"}`); code < 400 || code == 403 {
		t.Errorf("maintenance of an unknown node: %d %s", code, body)
	}

	// Ack: accepted with a reason, 400 without, 404 for an unknown cluster.
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/ack", opTok, `{"reason": "checked the failover"}`); code != 200 || !strings.Contains(body, `"ok": true`) {
		t.Errorf("ack: %d %s", code, body)
	}
	if code, body := call(t, hc, "POST", base+"/clusters/"+cluster+"/ack", opTok, `{}`); code != 400 || !strings.Contains(body, "reason") {
		t.Errorf("ack without a reason: %d %s", code, body)
	}
	if code, body := call(t, hc, "POST", base+"/clusters/nope/ack", opTok, `{"reason": "x"}`); code != 404 {
		t.Errorf("ack of an unknown cluster: %d %s", code, body)
	}

	// Every change is 403 for the viewer, 401 without a token or with an
	// unknown one, and changes nothing.
	for _, m := range []string{"/clusters/" + cluster + "/switchover", "/clusters/" + cluster + "/failover",
		"/clusters/" + cluster + "/nodes/node3/drain", "/clusters/" + cluster + "/nodes/node3/undrain",
		"/clusters/" + cluster + "/maintenance", "/clusters/" + cluster + "/nodes/node3/maintenance", "/clusters/" + cluster + "/ack",
		"/config/apply", "/config/rollback", "/sessions/1/kill"} {
		b := `{"reason": "viewer try", "on": true, "target": "node3", "revision": 1, "yaml": "x: 1"}`
		if code, body := call(t, hc, "POST", base+m, viewTok, b); code != 403 || !strings.Contains(body, `"code": "forbidden"`) {
			t.Errorf("viewer POST %s: %d %s, want 403", m, code, body)
		}
		if code, body := call(t, hc, "POST", base+m, "", b); code != 401 {
			t.Errorf("POST %s without a token: %d %s, want 401", m, code, body)
		}
		if code, body := call(t, hc, "POST", base+m, "sy-unknown-0000", b); code != 401 || !strings.Contains(body, "invalid token") {
			t.Errorf("POST %s with an unknown token: %d %s, want 401", m, code, body)
		}
	}
	var cs topo.ClusterState
	if _, err := topo.GetJSON(ctx, st, apiKeys.ClusterState(cluster), &cs); err != nil || cs.Primary != "node2" {
		t.Errorf("primary after the refused viewer calls: %q (%v), want node2", cs.Primary, err)
	}

	// The tokens (and their SHA-256) appear in no log line, no event and
	// no key or value in etcd.
	code, body = call(t, hc, "GET", base+"/events?cluster="+cluster+"&limit=1000", viewTok, "")
	if code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	kvs, err := st.List(ctx, apiKeys.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var dump strings.Builder
	for _, kv := range kvs {
		dump.WriteString(kv.Key + "=" + string(kv.Value) + "\n")
	}
	if len(kvs) < 5 || !strings.Contains(dump.String(), "alice") {
		t.Fatalf("etcd holds %d keys under %s and no actor alice: the dump is not what the test means to search", len(kvs), apiKeys.Prefix)
	}
	for _, tok := range []string{opTok, viewTok, sum(opTok), sum(viewTok)} {
		for where, text := range map[string]string{"the logs": logs.String(), "the events": body, "etcd": dump.String()} {
			if strings.Contains(text, tok) {
				t.Errorf("%s contain the token %s", where, tok)
			}
		}
	}
	t.Logf("searched %d bytes of logs, %d events bytes and %d etcd keys for the tokens", len(logs.String()), len(body), len(kvs))
}

// followOperation polls an operation's status URL until it is done or
// failed, or timeout passes.
func followOperation(t *testing.T, hc *http.Client, url, token string, timeout time.Duration) topo.Request {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var req topo.Request
	for {
		code, body := call(t, hc, "GET", url, token, "")
		if code != 200 {
			t.Fatalf("operation: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		if req.State == topo.RequestDone || req.State == topo.RequestFailed {
			return req
		}
		if time.Now().After(deadline) {
			t.Fatalf("operation still %s after %s: %s", req.State, timeout, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAPIConfig: validate, diff, apply (with the token's name as the
// author, base_revision compare-and-swap), history, one revision with
// passwords redacted, and rollback, over a real etcd.
func TestAPIConfig(t *testing.T) {
	st := topotest.NewStore(t)
	srv, err := Start(Options{Address: "127.0.0.1:0", Store: st, Keys: apiKeys,
		Tokens: []config.AdminToken{{Name: "alice", Role: "operator", TokenSHA256: sum("op")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := "http://" + srv.Addr() + "/api/v1/config"
	hc := http.DefaultClient
	y1 := `credentials:
  monitor: {user: monitor, password: monitor-secret}
  replication: {user: repl, password: repl-secret}
users:
  - {name: app, password: app-secret}
clusters:
  - name: main
    nodes:
      - {name: db1, address: 127.0.0.1:3306}
listeners:
  - {name: rw, address: 127.0.0.1:6446, cluster: main, role: primary}
`
	y2 := strings.Replace(y1, "{name: app, password: app-secret}", "{name: app, password: app-secret}\n  - {name: report, password: report-secret}", 1)
	body := func(v any) string { return string(mustJSON(v)) }
	decodeInto := func(s string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
	}
	code, out := call(t, hc, "POST", base+"/validate", "op", body(map[string]string{"yaml": "clusters: []\nbogus: 1\n"}))
	var v struct {
		Valid    bool     `json:"valid"`
		Errors   []string `json:"errors"`
		Warnings []string `json:"warnings"`
	}
	decodeInto(out, &v)
	if code != 200 || v.Valid || len(v.Errors) == 0 || !strings.Contains(strings.Join(v.Errors, "\n"), "bogus") {
		t.Errorf("validate bad: %d %s", code, out)
	}
	_, out = call(t, hc, "POST", base+"/validate", "op", body(map[string]string{"yaml": y1}))
	v = struct {
		Valid    bool     `json:"valid"`
		Errors   []string `json:"errors"`
		Warnings []string `json:"warnings"`
	}{}
	decodeInto(out, &v)
	if !v.Valid || len(v.Errors) != 0 || !strings.Contains(strings.Join(v.Warnings, "\n"), "admin.tokens") {
		t.Errorf("validate good: %s", out)
	}
	if code, out := call(t, hc, "POST", base+"/apply", "op", body(map[string]any{"yaml": y1})); code != 400 || !strings.Contains(out, "reason") {
		t.Errorf("apply without reason: %d %s", code, out)
	}
	code, out = call(t, hc, "POST", base+"/apply", "op", body(map[string]any{"yaml": y1, "reason": "first"}))
	var res struct {
		Revision int64 `json:"revision"`
	}
	decodeInto(out, &res)
	if code != 200 || res.Revision != 1 {
		t.Fatalf("apply: %d %s", code, out)
	}
	code, out = call(t, hc, "POST", base+"/diff", "op", body(map[string]any{"yaml": y2}))
	if code != 200 || !strings.Contains(out, "report") || !strings.Contains(out, `"destructive": false`) {
		t.Errorf("diff: %d %s", code, out)
	}
	// base_revision: the reviewed revision must still be current.
	if code, out := call(t, hc, "POST", base+"/apply", "op", body(map[string]any{"yaml": y2, "reason": "stale", "base_revision": 7})); code != 409 || !strings.Contains(out, `"code": "conflict"`) {
		t.Errorf("apply on a stale base: %d %s", code, out)
	}
	code, out = call(t, hc, "POST", base+"/apply", "op", body(map[string]any{"yaml": y2, "reason": "add report", "base_revision": 1}))
	decodeInto(out, &res)
	if code != 200 || res.Revision != 2 {
		t.Fatalf("apply 2: %d %s", code, out)
	}
	code, out = call(t, hc, "GET", base, "op", "")
	if code != 200 || !strings.Contains(out, `"revision": 2`) || !strings.Contains(out, `"applied_by": "alice"`) || strings.Contains(out, "report-secret") {
		t.Errorf("current: %d %s", code, out)
	}
	code, out = call(t, hc, "GET", base+"/history?limit=1", "op", "")
	if code != 200 || !strings.Contains(out, `"revision": 2`) || strings.Contains(out, `"revision": 1`) || !strings.Contains(out, `"actor": "alice"`) {
		t.Errorf("history: %d %s", code, out)
	}
	if code, out := call(t, hc, "GET", base+"/revisions/1", "op", ""); code != 200 || strings.Contains(out, "app-secret") || !strings.Contains(out, `"revision": 1`) {
		t.Errorf("revision 1: %d %s", code, out)
	}
	if code, _ := call(t, hc, "GET", base+"/revisions/99", "op", ""); code != 404 {
		t.Errorf("revision 99: %d, want 404", code)
	}
	code, out = call(t, hc, "POST", base+"/rollback", "op", body(map[string]any{"revision": 1, "reason": "undo"}))
	decodeInto(out, &res)
	if code != 200 || res.Revision != 3 {
		t.Errorf("rollback: %d %s", code, out)
	}
}

// TestAPIStatusStale: with the store unreachable the last status document
// is served with stale true and store_reachable false; before any was
// read it is 503.
func TestAPIStatusStale(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	srv, err := Start(Options{Address: "127.0.0.1:0", Status: func(context.Context) (any, error) {
		if down.Load() {
			return nil, errors.New("etcd at 127.0.0.1:1 does not answer")
		}
		return map[string]any{"leader": "ctl-1"}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url := "http://" + srv.Addr() + "/api/v1/status"
	if code, body := call(t, http.DefaultClient, "GET", url, "", ""); code != 503 || !strings.Contains(body, `"code": "unavailable"`) {
		t.Errorf("status before any read, store down: %d %s", code, body)
	}
	down.Store(false)
	if code, body := call(t, http.DefaultClient, "GET", url, "", ""); code != 200 || !strings.Contains(body, `"stale": false`) {
		t.Errorf("status: %d %s", code, body)
	}
	down.Store(true)
	code, body := call(t, http.DefaultClient, "GET", url, "", "")
	if code != 200 || !strings.Contains(body, `"stale": true`) || !strings.Contains(body, `"store_reachable": false`) || !strings.Contains(body, `"leader": "ctl-1"`) {
		t.Errorf("status with the store down after a read: %d %s", code, body)
	}
}
