package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/spf13/pflag"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// storeFlags are the etcd TLS, user and integrity key given on the command
// line or in the environment: with --etcd-endpoints alone there is no
// config file to read them from. Each one set overrides the config's etcd
// field of the same name.
type storeFlags struct {
	integrityKeyFile string
	caFile           string
	certFile         string
	keyFile          string
	serverName       string
	username         string
	passwordFile     string
}

// Environment variables read as the flags' defaults.
const (
	envIntegrityKeyFile = "SWITCHYARD_INTEGRITY_KEY_FILE"
	envEtcdCAFile       = "SWITCHYARD_ETCD_CA_FILE"
	envEtcdCertFile     = "SWITCHYARD_ETCD_CERT_FILE"
	envEtcdKeyFile      = "SWITCHYARD_ETCD_KEY_FILE"
	envEtcdServerName   = "SWITCHYARD_ETCD_SERVER_NAME"
	envEtcdUsername     = "SWITCHYARD_ETCD_USERNAME"
	envEtcdPasswordFile = "SWITCHYARD_ETCD_PASSWORD_FILE"
)

func (f *storeFlags) register(pf *pflag.FlagSet) {
	pf.StringVar(&f.integrityKeyFile, "integrity-key-file", os.Getenv(envIntegrityKeyFile),
		"file of the store integrity keys, one per line (as etcd.integrity_key_file; default $"+envIntegrityKeyFile+")")
	pf.StringVar(&f.caFile, "etcd-ca-file", os.Getenv(envEtcdCAFile), "CA file of etcd's server certificates (as etcd.tls.ca_file; default $"+envEtcdCAFile+")")
	pf.StringVar(&f.certFile, "etcd-cert-file", os.Getenv(envEtcdCertFile), "client certificate for etcd (as etcd.tls.cert_file; default $"+envEtcdCertFile+")")
	pf.StringVar(&f.keyFile, "etcd-key-file", os.Getenv(envEtcdKeyFile), "key of the client certificate (as etcd.tls.key_file; default $"+envEtcdKeyFile+")")
	pf.StringVar(&f.serverName, "etcd-server-name", os.Getenv(envEtcdServerName), "name in etcd's certificate (as etcd.tls.server_name; default $"+envEtcdServerName+")")
	pf.StringVar(&f.username, "etcd-username", os.Getenv(envEtcdUsername), "etcd user (as etcd.username; default $"+envEtcdUsername+")")
	pf.StringVar(&f.passwordFile, "etcd-password-file", os.Getenv(envEtcdPasswordFile), "file of the etcd user's password (as etcd.password_file; default $"+envEtcdPasswordFile+")")
}

// apply returns cfg with the flags that are set overriding its etcd
// fields (a copy; cfg is not changed), or a config holding only them when
// cfg is nil. Nil when cfg is nil and no flag is set.
func (f *storeFlags) apply(cfg *config.Config) *config.Config {
	if *f == (storeFlags{}) {
		return cfg
	}
	var c config.Config
	if cfg != nil {
		c = *cfg
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Etcd.TLS.CAFile, f.caFile)
	set(&c.Etcd.TLS.CertFile, f.certFile)
	set(&c.Etcd.TLS.KeyFile, f.keyFile)
	set(&c.Etcd.TLS.ServerName, f.serverName)
	set(&c.Etcd.Username, f.username)
	if f.passwordFile != "" {
		c.Etcd.PasswordFile, c.Etcd.PasswordEnv = f.passwordFile, ""
	}
	if f.integrityKeyFile != "" {
		c.Etcd.IntegrityKeyFile, c.Etcd.IntegrityKeyEnv = f.integrityKeyFile, ""
	}
	return &c
}

// unsignedNotice is printed once on stderr by an operator command without
// an integrity key that reads a signed document.
const unsignedNotice = "documents are signed but no integrity key was given: not verified " +
	"(pass --integrity-key-file or $" + envIntegrityKeyFile + ", or --config with etcd.integrity_key_file)"

// noticeOut is where unsignedNotice goes (stderr; tests replace it).
var noticeOut io.Writer = os.Stderr

// noteUnverifiedSigned makes the first signed document the command reads
// without a keyring print unsignedNotice on stderr.
func noteUnverifiedSigned() {
	var once sync.Once
	w := noticeOut
	topo.OnUnverifiedSigned(func() {
		once.Do(func() { fmt.Fprintln(w, unsignedNotice) })
	})
}
