package sandbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLS material of a sandbox, under Dir/tls (TLSDir): a CA made for the
// sandbox, a server certificate for 127.0.0.1 and localhost used by every
// mariadbd and by the proxy's listeners, and a client certificate (CN
// "switchyard-client") for tests of listeners and accounts that require
// one. Made with crypto/x509 (ECDSA P-256), no openssl needed.
const (
	TLSDir         = "tls"
	CAFile         = "ca.pem"
	ServerCertFile = "server-cert.pem"
	ServerKeyFile  = "server-key.pem"
	ClientCertFile = "client-cert.pem"
	ClientKeyFile  = "client-key.pem"
)

// TLSFiles are the absolute paths of a sandbox's TLS material.
type TLSFiles struct {
	Dir, CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// TLSFilesIn returns the TLS file paths under dir (the sandbox Dir).
func TLSFilesIn(dir string) TLSFiles {
	d := filepath.Join(dir, TLSDir)
	return TLSFiles{
		Dir: d, CA: filepath.Join(d, CAFile),
		ServerCert: filepath.Join(d, ServerCertFile), ServerKey: filepath.Join(d, ServerKeyFile),
		ClientCert: filepath.Join(d, ClientCertFile), ClientKey: filepath.Join(d, ClientKeyFile),
	}
}

// TLS returns the sandbox's TLS file paths.
func (c *Cluster) TLS() TLSFiles { return TLSFilesIn(c.Dir) }

// CA is a certificate authority that issues certificates (sandbox and
// tests).
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// NewCA makes a self-signed CA named cn, valid from an hour ago for ten
// years.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sandbox: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"switchyard sandbox"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sandbox: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// CertSpec describes a certificate to issue.
type CertSpec struct {
	// CommonName is the subject CN.
	CommonName string
	// Hosts are DNS names or IP addresses for the subject alternative
	// names (server certificates).
	Hosts []string
	// Client makes a client certificate (ExtKeyUsageClientAuth) instead of
	// a server one.
	Client bool
	// NotBefore and NotAfter bound validity; zero means an hour ago and
	// ten years from now.
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for spec with a new P-256 key and returns the
// certificate and key, PEM-encoded.
func (ca *CA) Issue(spec CertSpec) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: key: %w", err)
	}
	now := time.Now()
	nb, na := spec.NotBefore, spec.NotAfter
	if nb.IsZero() {
		nb = now.Add(-time.Hour)
	}
	if na.IsZero() {
		na = now.AddDate(10, 0, 0)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: []string{"switchyard sandbox"}},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if spec.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range spec.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: certificate %s: %w", spec.CommonName, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// WriteTLSFiles makes a CA, a server certificate for 127.0.0.1, ::1 and
// localhost and a client certificate, and writes them to f (keys mode
// 0600). Existing files are replaced.
func WriteTLSFiles(f TLSFiles) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	ca, err := NewCA("switchyard sandbox CA")
	if err != nil {
		return err
	}
	sc, sk, err := ca.Issue(CertSpec{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1", "::1", "localhost"}})
	if err != nil {
		return err
	}
	cc, ck, err := ca.Issue(CertSpec{CommonName: "switchyard-client", Client: true})
	if err != nil {
		return err
	}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.PEM, 0o644}, {f.ServerCert, sc, 0o644}, {f.ServerKey, sk, 0o600}, {f.ClientCert, cc, 0o644}, {f.ClientKey, ck, 0o600}} {
		if err := writeFileAtomic(w.path, w.data, w.mode); err != nil {
			return fmt.Errorf("sandbox: write %s: %w", w.path, err)
		}
	}
	return nil
}
