package main

import (
	"fmt"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// secureStoreOptions fills the TLS and authentication of o from the config's
// etcd section (etcd.tls, etcd.username, etcd.password_env/_file) and sets
// the process's integrity keyring from etcd.integrity_key_env/_file, so that
// every role and operator command signs and verifies the same way. A nil
// cfg (--etcd-endpoints without a config file) leaves o plain and no
// keyring. Errors name the config field.
func secureStoreOptions(cfg *config.Config, o *topo.EtcdOptions) error {
	if cfg == nil {
		topo.SetIntegrity(nil)
		return nil
	}
	tc, err := cfg.EtcdTLSConfig()
	if err != nil {
		return err
	}
	o.TLS = tc
	if cfg.Etcd.Username != "" {
		pw, err := cfg.EtcdPassword()
		if err != nil {
			return err
		}
		o.Username, o.Password = cfg.Etcd.Username, pw
	}
	keys, err := cfg.IntegrityKeys()
	if err != nil {
		return err
	}
	if keys == nil {
		topo.SetIntegrity(nil)
		return nil
	}
	kr, err := topo.NewKeyring(keys...)
	if err != nil {
		return fmt.Errorf("etcd.integrity_key: %w", err)
	}
	topo.SetIntegrity(kr)
	return nil
}
