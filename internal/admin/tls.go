package admin

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
)

// certCheckEvery bounds how often a TLS handshake looks at the certificate
// files' modification times.
const certCheckEvery = time.Second

// certReloader serves the admin endpoint's certificate (tls.Config
// GetCertificate) and reads its files again when they change, or when
// Reload is called (SIGHUP). A pair that fails to load keeps the previous
// one and is logged.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	lastCheck time.Time
}

func newCertReloader(t config.AdminTLS, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: t.CertFile, keyFile: t.KeyFile, log: log}
	if err := r.load(); err != nil {
		return nil, fmt.Errorf("admin.tls: %w", err)
	}
	return r, nil
}

func modTime(path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// load reads the pair; on error the previous certificate stays.
func (r *certReloader) load() error {
	cm, km := modTime(r.certFile), modTime(r.keyFile)
	cert, err := config.LoadKeyPair(r.certFile, r.keyFile, time.Now())
	if err != nil {
		// The same broken files are not tried again at every handshake.
		r.mu.Lock()
		r.certMod, r.keyMod = cm, km
		r.mu.Unlock()
		return err
	}
	r.mu.Lock()
	r.cert, r.certMod, r.keyMod = &cert, cm, km
	r.mu.Unlock()
	return nil
}

// Reload reads the certificate files again now.
func (r *certReloader) Reload() error {
	err := r.load()
	if err != nil && r.log != nil {
		r.log.Warn("admin certificate not reloaded; serving the previous one", "cert_file", r.certFile, "err", err)
	} else if r.log != nil {
		r.log.Info("admin certificate reloaded", "cert_file", r.certFile)
	}
	return err
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	check := time.Since(r.lastCheck) >= certCheckEvery
	if check {
		r.lastCheck = time.Now()
	}
	certMod, keyMod := r.certMod, r.keyMod
	r.mu.Unlock()
	if check {
		if cm, km := modTime(r.certFile), modTime(r.keyFile); !cm.Equal(certMod) || !km.Equal(keyMod) {
			_ = r.Reload()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}
