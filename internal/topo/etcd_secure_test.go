package topo_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard-db/switchyard/internal/topo"
)

const etcdBinary = "/usr/bin/etcd"

// testPKI is a CA with a server certificate for 127.0.0.1 (and the name
// etcd.test) and a client certificate, as PEM files in dir.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	pool                                             *x509.CertPool
	client                                           tls.Certificate
}

func newTestPKI(t *testing.T, dir, prefix string) testPKI {
	t.Helper()
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, prefix+name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: prefix + "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string, tls.Certificate) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"etcd.test"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		cp, kp := writePEM(name+".pem", "CERTIFICATE", der), writePEM(name+"-key.pem", "EC PRIVATE KEY", kder)
		pair, err := tls.LoadX509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return cp, kp, pair
	}
	p := testPKI{ca: writePEM("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.serverCert, p.serverKey, _ = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey, p.client = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startSecureEtcd runs the etcd server binary on free loopback ports with
// client TLS (client certificates required) and authentication enabled: user
// root, and user "sy" (password "sy-secret") with read-write on /sy/.
// It is stopped by pid when the test ends.
func startSecureEtcd(t *testing.T, pki testPKI) string {
	t.Helper()
	if _, err := os.Stat(etcdBinary); err != nil {
		t.Skipf("%s not installed: %v", etcdBinary, err)
	}
	client, peer := freeLoopback(t), freeLoopback(t)
	dir := t.TempDir()
	cmd := exec.Command(etcdBinary,
		"--name", "secure", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://"+client, "--advertise-client-urls", "https://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "secure=http://"+peer,
		"--cert-file", pki.serverCert, "--key-file", pki.serverKey,
		"--trusted-ca-file", pki.ca, "--client-cert-auth")
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
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
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("etcd log (tail):\n%s", b)
		}
	})
	tc := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + client}, TLS: tc, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c, cc := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(c, "x")
		cc()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("etcd did not answer within 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
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
	return "https://" + client
}

// TestEtcdTLSAndAuth: against an etcd with client TLS and authentication,
// the store connects with the CA, a client certificate and the user's
// password; a wrong password fails naming the user and the config field;
// a wrong CA or no TLS at all does not connect.
func TestEtcdTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir, "")
	ep := startSecureEtcd(t, pki)
	tc := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}

	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, TLS: tc, Username: "sy", Password: "sy-secret"})
	if err != nil {
		t.Fatalf("connect with TLS and the right password: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := st.Create(ctx, "/sy/k", []byte("v")); err != nil {
		t.Fatalf("create under the user's prefix: %v", err)
	}
	if kv, err := st.Get(ctx, "/sy/k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("get: %q %v", kv.Value, err)
	}
	if _, err := st.Create(ctx, "/other/k", []byte("v")); err == nil {
		t.Fatal("a write outside the user's prefix was accepted: etcd auth is not in force")
	}
	st.Close()

	// An endpoint given as host:port is reached over https when TLS is set.
	st, err = topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{strings.TrimPrefix(ep, "https://")}, DialTimeout: 10 * time.Second,
		TLS: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}, ServerName: "etcd.test"}, Username: "sy", Password: "sy-secret"})
	if err != nil {
		t.Fatalf("connect to host:port with TLS and server_name: %v", err)
	}
	st.Close()

	_, err = topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, TLS: tc, Username: "sy", Password: "wrong"})
	if !errors.Is(err, topo.ErrAuth) || !strings.Contains(err.Error(), "etcd authentication failed for user sy (config etcd.username") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("the password appears in the error: %v", err)
	}

	other := newTestPKI(t, dir, "other-")
	_, err = topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{ep}, DialTimeout: 3 * time.Second,
		TLS: &tls.Config{RootCAs: other.pool, Certificates: []tls.Certificate{pki.client}}, Username: "sy", Password: "sy-secret"})
	if err == nil || !strings.Contains(err.Error(), "etcd.tls") {
		t.Fatalf("a CA that did not sign etcd's certificate: %v", err)
	}
	_, err = topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{strings.Replace(ep, "https://", "http://", 1)}, DialTimeout: 3 * time.Second,
		Username: "sy", Password: "sy-secret"})
	if err == nil {
		t.Fatal("plain http to a TLS etcd connected")
	}
}
