package topo_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// startSecureEtcdCluster runs a 3-member cluster of the etcd server binary
// on free loopback ports: TLS with client certificates required on the
// client and the peer ports, and authentication enabled (user root, and
// user "sy", password "sy-secret", with read-write on /sy/). It returns
// each member's client URL; the members are stopped by pid when the test
// ends.
func startSecureEtcdCluster(t *testing.T, pki testPKI) []string {
	t.Helper()
	if _, err := os.Stat(etcdBinary); err != nil {
		t.Skipf("%s not installed: %v", etcdBinary, err)
	}
	const n = 3
	var clients, peers, initial []string
	for i := range n {
		clients = append(clients, freeLoopback(t))
		peers = append(peers, freeLoopback(t))
		initial = append(initial, fmt.Sprintf("m%d=https://%s", i, peers[i]))
	}
	dir := t.TempDir()
	for i := range n {
		cmd := exec.Command(etcdBinary,
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", "https://"+clients[i], "--advertise-client-urls", "https://"+clients[i],
			"--listen-peer-urls", "https://"+peers[i], "--initial-advertise-peer-urls", "https://"+peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "sy-secure-test",
			"--cert-file", pki.serverCert, "--key-file", pki.serverKey, "--trusted-ca-file", pki.ca, "--client-cert-auth",
			"--peer-cert-file", pki.serverCert, "--peer-key-file", pki.serverKey, "--peer-trusted-ca-file", pki.ca, "--peer-client-cert-auth",
			// Generous timings: the members share a loaded machine.
			"--heartbeat-interval", "250", "--election-timeout", "2500")
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("m%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				if len(b) > 2000 {
					b = b[len(b)-2000:]
				}
				t.Logf("etcd member m%d log (tail):\n%s", i, b)
			}
		})
	}
	var urls []string
	for _, c := range clients {
		urls = append(urls, "https://"+c)
	}
	tc := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Every member answers a linearizable read (the cluster has a leader).
	for _, u := range urls {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u}, TLS: tc, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for {
			c, cc := context.WithTimeout(ctx, 3*time.Second)
			_, err := cli.Get(c, "x")
			cc()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				cli.Close()
				t.Fatalf("etcd member %s did not answer within 90s: %v", u, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		cli.Close()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: urls, TLS: tc, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if m, err := cli.MemberList(ctx); err != nil || len(m.Members) != n {
		t.Fatalf("member list: %v (%v), want %d members", m, err, n)
	}
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "sy", "sy-secret"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "sy"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "sy", "/sy/", clientv3.GetPrefixRangeEnd("/sy/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserGrantRole(ctx, "sy", "sy"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup step %d: %v", i+1, err)
		}
	}
	return urls
}

// lockedBuffer is a log sink safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestSecureClusterRefusesForgedRevision: a 3-member etcd cluster with TLS
// (client certificates on the client and peer ports) and authentication,
// and an integrity key. A signed config revision is applied; then a
// revision is written directly into etcd, with the user's credentials,
// claiming the guard was overridden and dropping a listener, with the MAC
// of the good revision. Every consumer, each connected to another member,
// refuses it with an alarm: the proxy's and the controller's followers keep
// the signed revision, raise switchyard_config_alarm, count
// switchyard_config_integrity_failures_total and log one ERROR line, and
// the reading of `config show` / `status` reports the current revision as
// failing its integrity check and serves the last signed one.
func TestSecureClusterRefusesForgedRevision(t *testing.T) {
	pki := newTestPKI(t, t.TempDir(), "")
	urls := startSecureEtcdCluster(t, pki)
	kr, err := topo.NewKeyring([]byte("cluster-test-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })

	connect := func(member string) topo.Store {
		t.Helper()
		st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{member}, DialTimeout: 10 * time.Second,
			TLS: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}, Username: "sy", Password: "sy-secret"})
		if err != nil {
			t.Fatalf("connect to %s with TLS and the user: %v", member, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	keys := topo.Keys{Prefix: "/sy/"}
	cfg, err := config.Parse([]byte(`credentials:
  monitor: {user: monitor, password: m-secret}
  replication: {user: repl, password: r-secret}
users:
  - {name: app, password: app-secret}
clusters:
  - name: main
    nodes:
      - {name: db1, address: 127.0.0.1:3306}
      - {name: db2, address: 127.0.0.1:3307}
listeners:
  - {name: rw, address: 127.0.0.1:6446, cluster: main, role: primary}
  - {name: ro, address: 127.0.0.1:6447, cluster: main, role: replica}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writer := connect(urls[0])
	res, err := configstore.Bootstrap(ctx, writer, keys, cfg, "boot@host")
	if err != nil {
		t.Fatal(err)
	}

	type consumer struct {
		name string
		f    *configstore.Follower
		reg  *prometheus.Registry
		logs *lockedBuffer
	}
	var consumers []consumer
	for i, name := range []string{"proxy", "controller"} {
		c := consumer{name: name, reg: prometheus.NewRegistry(), logs: &lockedBuffer{}}
		fctx, fcancel := context.WithCancel(context.Background())
		c.f, err = configstore.Follow(fctx, connect(urls[i+1]), keys, configstore.FollowOptions{
			Name: name, ID: name + "-1", Registry: c.reg, Log: slog.New(slog.NewTextHandler(c.logs, nil)),
			OnApply: func(*config.Config, int64) error { return nil },
			Initial: cfg, InitialRev: res.Revision.Rev,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fcancel(); <-c.f.Done() })
		consumers = append(consumers, c)
	}

	// The forgery: the current revision's document, one listener fewer and
	// the guard claimed overridden, its old MAC kept.
	kv, err := writer.Get(ctx, keys.Config())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(kv.Value, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["mac"]; !ok {
		t.Fatalf("the bootstrap revision carries no MAC: %s", kv.Value)
	}
	y, _ := doc["yaml"].(string)
	forgedYAML := strings.Replace(y, "ro", "rx", 1)
	if forgedYAML == y {
		t.Fatalf("revision document has no yaml to tamper with: %s", kv.Value)
	}
	doc["yaml"], doc["guard_overridden"], doc["rev"] = forgedYAML, true, res.Revision.Rev+1
	forged, _ := json.Marshal(doc)
	if _, err := writer.Update(ctx, keys.Config(), forged, kv.Version); err != nil {
		t.Fatalf("write the forged revision into etcd: %v", err)
	}

	for _, c := range consumers {
		deadline := time.Now().Add(60 * time.Second)
		for c.f.Alarm() == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		a := c.f.Alarm()
		if a == nil || !strings.Contains(a.Reason, "integrity check failed") {
			t.Errorf("%s: alarm %+v, want the integrity check failure", c.name, a)
			continue
		}
		if c.f.AppliedRev() != res.Revision.Rev {
			t.Errorf("%s applies revision %d, want the signed %d", c.name, c.f.AppliedRev(), res.Revision.Rev)
		}
		if n := counter(t, c.reg, "switchyard_config_integrity_failures_total"); n != 1 {
			t.Errorf("%s: switchyard_config_integrity_failures_total = %v, want 1", c.name, n)
		}
		if n := counter(t, c.reg, "switchyard_config_alarm"); n != 1 {
			t.Errorf("%s: switchyard_config_alarm = %v, want 1", c.name, n)
		}
		if n := strings.Count(c.logs.String(), "level=ERROR msg=\"config revision in the store fails its integrity check"); n != 1 {
			t.Errorf("%s: %d ERROR lines for the forged revision, want 1:\n%s", c.name, n, c.logs.String())
		}
		t.Logf("%s refused the forged revision: %s", c.name, a.Reason)
	}
	s, err := configstore.Load(ctx, connect(urls[2]), keys)
	if err != nil {
		t.Fatal(err)
	}
	if s.CurrentErr == nil || !strings.Contains(s.CurrentErr.Error(), "integrity") || s.Base == nil || s.Base.Rev != res.Revision.Rev {
		t.Errorf("Load (config show, status): current err %v, base %+v: want the forged current refused and revision %d served", s.CurrentErr, s.Base, res.Revision.Rev)
	}
}
