package config

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// handshake runs a TLS handshake between a server presenting
// testdata/tls/cert.pem (issued for 127.0.0.1, signed by testdata/tls/ca.pem)
// and a client with cfg; it returns the client's error.
func handshake(t *testing.T, cfg *tls.Config) error {
	t.Helper()
	cert, err := LoadKeyPair("testdata/tls/cert.pem", "testdata/tls/key.pem", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
	}()
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(10 * time.Second))
	return tls.Client(c2, cfg).Handshake()
}

// clusters[].tls.verify: full checks the chain and the host of the node's
// address, ca the chain only, none nothing.
func TestBackendTLSVerifyModes(t *testing.T) {
	for _, tc := range []struct {
		verify, addr, ca string
		ok               bool
		want             string
	}{
		{VerifyFull, "127.0.0.1:3306", "testdata/tls/ca.pem", true, ""},
		{VerifyFull, "127.0.0.2:3306", "testdata/tls/ca.pem", false, "127.0.0.2"},
		{VerifyCA, "127.0.0.2:3306", "testdata/tls/ca.pem", true, ""},
		{VerifyCA, "127.0.0.1:3306", "", false, "unknown authority"}, // system roots do not hold the fixtures' CA
		{VerifyFull, "127.0.0.1:3306", "", false, "unknown authority"},
		{VerifyNone, "127.0.0.2:3306", "", true, ""},
	} {
		cfg, err := BackendTLS(ClusterTLS{Enabled: true, CAFile: tc.ca, Verify: tc.verify}, tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		err = handshake(t, cfg)
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("verify %s to %s (CA %q): %v, want ok=%v %q", tc.verify, tc.addr, tc.ca, err, tc.ok, tc.want)
		}
	}
	if c, err := BackendTLS(ClusterTLS{}, "127.0.0.1:1"); c != nil || err != nil {
		t.Fatalf("disabled: %v %v", c, err)
	}
}
