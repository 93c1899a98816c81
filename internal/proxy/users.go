package proxy

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// userEntry is one application account. The proxy never keeps a plaintext
// password: it keeps stage2 = SHA1(SHA1(pw)) to check clients, and stage1 =
// SHA1(pw) to log into backends as the user. With a configured plaintext
// secret both are computed at load; with only a password_hash, stage1 is
// recovered from the first successful client login and kept in memory (never
// written anywhere) for the life of the process or until the hash changes.
type userEntry struct {
	name   string
	empty  bool // the account has an empty password
	stage2 [mysqlproto.HashLen]byte
	stage1 atomic.Pointer[[mysqlproto.HashLen]byte]
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
		e := &userEntry{name: u.Name}
		pw, ok, err := u.Secret()
		switch {
		case err != nil:
			return nil, fmt.Errorf("proxy: users[%d] (%s) password: %w", i, u.Name, err)
		case ok:
			s1 := mysqlproto.NativeStage1(pw)
			e.empty = pw == ""
			e.stage2 = mysqlproto.NativeStage2(s1)
			e.stage1.Store(&s1)
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
				}
			}
		}
		rc.users[u.Name] = e
	}
	return rc, nil
}

// authenticate checks a client's mysql_native_password token for user name
// against scramble. It returns the user's stage1 (SHA1(pw), or zero for an
// empty password) on success. Unknown users and wrong passwords are
// indistinguishable to the caller and take the same work.
func (rc *runtimeConfig) authenticate(name string, scramble, token []byte) (*userEntry, [mysqlproto.HashLen]byte, bool) {
	var zero [mysqlproto.HashLen]byte
	u := rc.users[name]
	if u == nil {
		// Same SHA1 work as a real check, so timing does not reveal users.
		_, _ = mysqlproto.VerifyNative(scramble, token, zero)
		return nil, zero, false
	}
	if u.empty {
		return u, zero, len(token) == 0
	}
	s1, ok := mysqlproto.VerifyNative(scramble, token, u.stage2)
	if !ok {
		return nil, zero, false
	}
	if u.stage1.Load() == nil {
		u.stage1.Store(&s1)
	}
	return u, s1, true
}
