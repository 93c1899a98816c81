package config

import (
	"errors"
	"fmt"
	"os"
)

// CheckSecrets resolves every secret the config refers to — the monitor and
// replication credentials, each user's plaintext password and the
// proxy.backend_accounts account's (when enabled with its own user) — and reports
// each one that cannot be used, naming its field — also the etcd client
// TLS files (etcd.tls) and the integrity keys (etcd.integrity_key_env/_file):
// an unset or empty
// environment variable (`credentials.monitor.password_env: environment
// variable MON_PW is not set`), an unreadable or empty file
// (`users[1].password_file: open /etc/switchyard/app.pw: permission denied`).
// Hash-only users have nothing to resolve. Problems are joined with
// errors.Join as *FieldError values. Secrets never appear in the messages.
// Call it after Validate, at start-up of the roles that use the secrets.
func (c *Config) CheckSecrets() error {
	var errs []error
	check := func(field, plain, env, file string) {
		if plain == "" && env == "" && file == "" {
			return
		}
		src := field + ".password"
		switch {
		case env != "":
			src = field + ".password_env"
		case file != "":
			src = field + ".password_file"
		}
		v, err := resolveSecret(plain, env, file)
		switch {
		case err != nil:
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe // "open PATH: reason" without our "password file:" prefix
			}
			errs = append(errs, &FieldError{Field: src, Msg: err.Error()})
		case v == "" && env != "":
			errs = append(errs, &FieldError{Field: src, Msg: fmt.Sprintf("environment variable %s is set but empty", env)})
		case v == "" && file != "":
			errs = append(errs, &FieldError{Field: src, Msg: fmt.Sprintf("file %s is empty", file)})
		}
	}
	check("credentials.monitor", c.Credentials.Monitor.Password, c.Credentials.Monitor.PasswordEnv, c.Credentials.Monitor.PasswordFile)
	check("credentials.replication", c.Credentials.Replication.Password, c.Credentials.Replication.PasswordEnv, c.Credentials.Replication.PasswordFile)
	for i, u := range c.Users {
		check(fmt.Sprintf("users[%d]", i), u.Password, u.PasswordEnv, u.PasswordFile)
	}
	for i, h := range c.Hooks {
		for j, hd := range h.Headers {
			f := fmt.Sprintf("hooks[%d].headers[%d]", i, j)
			switch {
			case hd.ValueEnv != "":
				if _, ok := os.LookupEnv(hd.ValueEnv); !ok {
					errs = append(errs, &FieldError{Field: f + ".value_env", Msg: fmt.Sprintf("environment variable %s is not set", hd.ValueEnv)})
				}
			case hd.ValueFile != "":
				if _, err := os.ReadFile(hd.ValueFile); err != nil {
					var pe *os.PathError
					if errors.As(err, &pe) {
						err = pe
					}
					errs = append(errs, &FieldError{Field: f + ".value_file", Msg: err.Error()})
				}
			}
		}
	}
	for i, t := range c.Admin.Tokens {
		if t.TokenSHA256 != "" {
			continue
		}
		if _, err := t.SHA256(fmt.Sprintf("admin.tokens[%d]", i)); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Etcd.Username != "" {
		check("etcd", "", c.Etcd.PasswordEnv, c.Etcd.PasswordFile)
	}
	if _, err := c.EtcdTLSConfig(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.IntegrityKeys(); err != nil {
		errs = append(errs, err)
	}
	if b := c.Proxy.BackendAccounts; b.Enabled && b.User != "" {
		check("proxy.backend_accounts", b.Password, b.PasswordEnv, b.PasswordFile)
	}
	return errors.Join(errs...)
}
