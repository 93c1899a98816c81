package proxy

import (
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// userEntry is one application account: a configured user, or (host set)
// an account of the servers themselves (accounts.go). The proxy never keeps
// a plaintext password: it keeps stage2 = SHA1(SHA1(pw)) to check clients,
// and stage1 = SHA1(pw) to log into backends as the user. With a configured
// plaintext secret both are computed at load; with only a password_hash,
// stage1 is recovered from the first successful client login and kept in
// memory (never written anywhere) for the life of the process or until the
// hash changes. ed25519 users also keep SHA-512(pw) (to sign backends'
// client_ed25519 challenges) and their public key; caching_sha2_password
// users the fast-path verifier SHA256(SHA256(pw)), known from the plaintext
// or from the first full authentication.
type userEntry struct {
	name   string
	empty  bool // the account has an empty password
	stage2 [mysqlproto.HashLen]byte
	stage1 atomic.Pointer[[mysqlproto.HashLen]byte]
	// plugin is the plugin clients are asked for (config.AuthNative,
	// AuthEd25519, AuthSHA2).
	plugin string
	edPub  ed25519.PublicKey
	edKey  *[64]byte // SHA-512(pw); nil unless a plaintext source
	sha2   atomic.Pointer[[mysqlproto.SHA2Len]byte]
	// Pass-through accounts (accounts.go): the account's host pattern and,
	// for an account whose plugin the proxy cannot serve, its name.
	host        string
	unsupported string
}

// runtimeConfig is the part of the config the proxy applies at run time
// (SetConfig swaps it atomically).
type runtimeConfig struct {
	users          map[string]*userEntry
	connectTimeout time.Duration
	// checkConnect is probe.connect_timeout: the first bound of a backend
	// check's TCP connect (reachability.go).
	checkConnect  time.Duration
	tcp           backendTCP // keepalive and TCP_USER_TIMEOUT of backend sockets (tcp.go)
	maxPerBackend int
	poolWait      time.Duration // proxy.pool.wait_timeout
	poolIdle      time.Duration // proxy.pool.idle_timeout
	serverReserve int           // proxy.pool.server_reserve_percent
	clusters      map[string]*config.Cluster
	probeInterval time.Duration // probe.interval
	// backendTLS is the client TLS configuration of backend connections
	// by cluster (clusters[].tls, tls.go); absent: plaintext.
	backendTLS map[string]*tls.Config
}

func (rc *runtimeConfig) nodeAddr(cluster, node string) string {
	cl := rc.clusters[cluster]
	if cl == nil {
		return ""
	}
	if n := cl.Node(node); n != nil {
		return n.Address
	}
	return ""
}

// maxHold is the cluster's failover.max_hold (config EffectiveMaxHold; 5s
// for a cluster the config does not have).
func (rc *runtimeConfig) maxHold(cluster string) time.Duration {
	if cl := rc.clusters[cluster]; cl != nil {
		return cl.Failover.EffectiveMaxHold(rc.probeInterval)
	}
	return 5 * time.Second
}

func (rc *runtimeConfig) fallback(cluster string) bool {
	cl := rc.clusters[cluster]
	if cl == nil || cl.ReadRouting.FallbackToPrimary == nil {
		return true
	}
	return *cl.ReadRouting.FallbackToPrimary
}

// newRuntimeConfig builds the user table and limits from c. Recovered stage1
// values of prev are kept for users whose stored hash did not change.
func newRuntimeConfig(c *config.Config, prev *runtimeConfig) (*runtimeConfig, error) {
	rc := &runtimeConfig{
		users:          make(map[string]*userEntry, len(c.Users)),
		connectTimeout: c.Proxy.ConnectTimeout.D(),
		checkConnect:   c.Probe.ConnectTimeout.D(),
		maxPerBackend:  c.Proxy.MaxConnectionsPerBackend,
		poolWait:       c.Proxy.Pool.WaitTimeout.D(),
		poolIdle:       c.Proxy.Pool.IdleTimeout.D(),
		serverReserve:  c.Proxy.Pool.ServerReservePercent,
		clusters:       make(map[string]*config.Cluster, len(c.Clusters)),
		probeInterval:  c.Probe.Interval.D(),
	}
	if rc.connectTimeout <= 0 {
		rc.connectTimeout = time.Second
	}
	if rc.poolWait <= 0 {
		rc.poolWait = 3 * time.Second // proxy.pool.wait_timeout's default
	}
	if rc.poolIdle <= 0 {
		rc.poolIdle = time.Minute // proxy.pool.idle_timeout's default
	}
	if rc.serverReserve <= 0 {
		rc.serverReserve = 10 // proxy.pool.server_reserve_percent's default
	}
	if rc.checkConnect <= 0 {
		rc.checkConnect = 100 * time.Millisecond // probe.connect_timeout's default
	}
	interval := c.Probe.Interval.D()
	if interval <= 0 {
		interval = time.Second
	}
	rc.tcp = newBackendTCP(rc.connectTimeout, interval)
	bt, err := backendTLSBase(c)
	if err != nil {
		return nil, err
	}
	rc.backendTLS = bt
	for i := range c.Clusters {
		cl := c.Clusters[i]
		rc.clusters[cl.Name] = &cl
	}
	for i, u := range c.Users {
		if u.Name == "" {
			return nil, fmt.Errorf("proxy: users[%d].name is empty", i)
		}
		e := &userEntry{name: u.Name, plugin: u.AuthPlugin}
		if e.plugin == "" {
			e.plugin = config.AuthNative
		}
		pw, ok, err := u.Secret()
		switch {
		case err != nil:
			return nil, fmt.Errorf("proxy: users[%d] (%s) password: %w", i, u.Name, err)
		case ok:
			s1 := mysqlproto.NativeStage1(pw)
			e.empty = pw == ""
			e.stage2 = mysqlproto.NativeStage2(s1)
			e.stage1.Store(&s1)
			v := mysqlproto.SHA2Verifier(pw)
			e.sha2.Store(&v)
			k := mysqlproto.Ed25519Secret(pw)
			e.edKey, e.edPub = &k, mysqlproto.Ed25519PublicKey(pw)
		case e.plugin == config.AuthEd25519:
			return nil, fmt.Errorf("proxy: users[%d] (%s): an ed25519 user needs password, password_env or password_file", i, u.Name)
		case u.PasswordHash == "":
			e.empty = true
		default:
			s2, err := mysqlproto.ParseNativeHash(u.PasswordHash)
			if err != nil {
				return nil, fmt.Errorf("proxy: users[%d] (%s).password_hash: %w", i, u.Name, err)
			}
			e.stage2 = s2
			if prev != nil {
				if old := prev.users[u.Name]; old != nil && old.stage2 == s2 && !old.empty {
					e.stage1.Store(old.stage1.Load())
					e.sha2.Store(old.sha2.Load())
				}
			}
		}
		rc.users[u.Name] = e
	}
	return rc, nil
}
