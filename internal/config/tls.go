package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// TLS files are read by Validate: a listener or cluster whose certificate
// cannot be used is a config error naming the field, not a proxy that
// starts and then refuses every TLS client.

// LoadKeyPair reads a PEM certificate chain and its private key and checks
// that they match and that the leaf certificate is valid at now (not
// before NotBefore, not after NotAfter). Errors name the file at fault.
func LoadKeyPair(certFile, keyFile string, now time.Time) (tls.Certificate, error) {
	if _, err := os.Stat(certFile); err != nil {
		return tls.Certificate{}, fmt.Errorf("cannot read certificate %s: %w", certFile, err)
	}
	if _, err := os.Stat(keyFile); err != nil {
		return tls.Certificate{}, fmt.Errorf("cannot read key %s: %w", keyFile, err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s with key %s: %w", certFile, keyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("certificate %s: %w", certFile, err)
		}
		cert.Leaf = leaf
	}
	switch {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("certificate %s expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("certificate %s is not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// LoadCAPool reads a PEM file of CA certificates. A file without any
// certificate is an error.
func LoadCAPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("cannot read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	return pool, nil
}

// TLSVersion maps "1.2" / "1.3" to the crypto/tls constant.
func TLSVersion(v string) (uint16, error) {
	switch v {
	case "1.2", "":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%q is not a TLS version (use 1.2 or 1.3)", v)
}

// BackendTLS returns the client TLS configuration for connections to a
// node of cluster cl at address (host:port), or nil when cl.TLS is not
// enabled. verify full checks the host of address against the node's
// certificate (DNS or IP SAN); ca checks the chain only; none checks
// nothing.
func BackendTLS(ct ClusterTLS, address string) (*tls.Config, error) {
	if !ct.Enabled {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	var pool *x509.CertPool
	if ct.CAFile != "" {
		if pool, err = LoadCAPool(ct.CAFile); err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if ct.CertFile != "" {
		cert, err := LoadKeyPair(ct.CertFile, ct.KeyFile, time.Now())
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	switch ct.Verify {
	case VerifyFull, "":
	case VerifyNone:
		tc.InsecureSkipVerify = true
	case VerifyCA:
		// Chain only: crypto/tls checks the name unless verification is
		// skipped, so the chain is checked here instead.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	default:
		return nil, fmt.Errorf("verify %q is not a verification mode (use %s, %s or %s)", ct.Verify, VerifyFull, VerifyCA, VerifyNone)
	}
	return tc, nil
}

func (c *Config) validateTLS(v *validator) {
	now := time.Now()
	for i, l := range c.Listeners {
		f := fmt.Sprintf("listeners[%d].tls", i)
		t := l.TLS
		switch t.ClientCert {
		case ClientCertNone, ClientCertOptional, ClientCertRequired, "":
		default:
			v.add(f+".client_cert", "%q is not a client certificate mode (use %s, %s or %s)", t.ClientCert, ClientCertNone, ClientCertOptional, ClientCertRequired)
		}
		if _, err := TLSVersion(t.MinVersion); err != nil {
			v.add(f+".min_version", "%s", err)
		}
		if !t.Enabled() {
			switch {
			case t.KeyFile != "":
				v.add(f+".cert_file", "required with key_file")
			case t.Require:
				v.add(f+".require", "needs cert_file and key_file: a listener without a certificate cannot offer TLS")
			case t.CAFile != "" || (t.ClientCert != "" && t.ClientCert != ClientCertNone):
				v.add(f+".cert_file", "required with ca_file or client_cert")
			}
			continue
		}
		if t.KeyFile == "" {
			v.add(f+".key_file", "required with cert_file")
		} else if _, err := LoadKeyPair(t.CertFile, t.KeyFile, now); err != nil {
			v.add(f+".cert_file", "%s", err)
		}
		if t.CAFile != "" {
			if _, err := LoadCAPool(t.CAFile); err != nil {
				v.add(f+".ca_file", "%s", err)
			}
		} else if t.ClientCert == ClientCertOptional || t.ClientCert == ClientCertRequired {
			v.add(f+".ca_file", "required with client_cert %s (the CAs that sign client certificates)", t.ClientCert)
		}
	}
	for i, cl := range c.Clusters {
		f := fmt.Sprintf("clusters[%d].tls", i)
		t := cl.TLS
		switch t.Verify {
		case VerifyFull, VerifyCA, VerifyNone, "":
		default:
			v.add(f+".verify", "%q is not a verification mode (use %s, %s or %s)", t.Verify, VerifyFull, VerifyCA, VerifyNone)
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			if t.CertFile == "" {
				v.add(f+".cert_file", "required with key_file")
			} else {
				v.add(f+".key_file", "required with cert_file")
			}
		}
		if !t.Enabled {
			continue
		}
		if t.CAFile != "" {
			if _, err := LoadCAPool(t.CAFile); err != nil {
				v.add(f+".ca_file", "%s", err)
			}
		} else if t.Verify == VerifyCA {
			v.add(f+".ca_file", "required with verify %s", VerifyCA)
		}
		if t.CertFile != "" && t.KeyFile != "" {
			if _, err := LoadKeyPair(t.CertFile, t.KeyFile, now); err != nil {
				v.add(f+".cert_file", "%s", err)
			}
		}
	}
}
