package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FieldError is one problem Validate found: Field is the path in the YAML
// document (`clusters[0].nodes[1].address`, `listeners[2].cluster`,
// `credentials.monitor`), Msg says what is wrong and what to do. Messages
// never contain secrets.
type FieldError struct {
	Field string
	Msg   string
}

// Error formats as "field: msg".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// The allowed values of the enumerated fields.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"

	PromotionPrefer  = "prefer"
	PromotionNeutral = "neutral"
	PromotionMustNot = "must_not"

	RolePrimary = "primary"
	RoleReplica = "replica"

	// AdminOff as admin.address disables the admin endpoint.
	AdminOff = "off"

	// MaxConnectTimeout is the largest proxy.connect_timeout: past it clients
	// wait on a dead backend longer than any driver's own timeout.
	MaxConnectTimeout = 30 * time.Second
	// MaxPoolWait bounds proxy.pool.wait_timeout.
	MaxPoolWait = time.Minute
)

// Validate checks the whole config after ApplyDefaults and returns every
// problem found, joined with errors.Join (one per line), each a *FieldError
// naming the field, e.g.
//
//	clusters[0].nodes[1].address: "127.0.0.1" is not host:port: missing port
//	listeners[1].cluster: cluster "foo" is not defined (defined: main)
//	listeners[2].address: 127.0.0.1:6446 already used by listener "rw"
//
// It returns nil when the config is valid. It does not resolve secrets from
// the environment or files (CheckSecrets does) and does no I/O.
func (c *Config) Validate() error {
	v := &validator{}
	c.validateEtcd(v)
	c.validateStoreSecurity(v)
	c.validateCredentials(v)
	c.validateUsers(v)
	c.validateBackendAccounts(v)
	c.validateClusters(v)
	c.validateListeners(v)
	c.validateTimings(v)
	c.validateListenAddresses(v)
	c.validateTLS(v)
	c.validateVersioning(v)
	c.validateHooks(v)
	c.validateAdmin(v)
	return errors.Join(v.errs...)
}

type validator struct{ errs []error }

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validateEtcd(v *validator) {
	seen := map[string]int{}
	for i, ep := range c.Etcd.Endpoints {
		f := fmt.Sprintf("etcd.endpoints[%d]", i)
		key, msg := checkEndpoint(ep)
		if msg != "" {
			v.add(f, "%s", msg)
			continue
		}
		if j, dup := seen[key]; dup {
			v.add(f, "%q repeats etcd.endpoints[%d]", ep, j)
			continue
		}
		seen[key] = i
	}
	p := c.Etcd.Prefix
	switch {
	case !strings.HasPrefix(p, "/"):
		v.add("etcd.prefix", "%q must start with \"/\" (e.g. \"/switchyard\")", p)
	case len(p) > 1 && strings.HasSuffix(p, "/"), p == "/":
		v.add("etcd.prefix", "%q must not end with \"/\" (e.g. \"/switchyard\")", p)
	case strings.Contains(p, "//"):
		v.add("etcd.prefix", "%q must not contain an empty segment (\"//\")", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		v.add("etcd.prefix", "%q must not contain spaces or control characters", p)
	}
	if c.Etcd.Embedded.DataDir == "" {
		v.add("etcd.embedded.data_dir", "must not be empty")
	}
	if _, _, msg := parseHostPort(c.Etcd.Embedded.ClientAddress, listenAddr); msg != "" {
		v.add("etcd.embedded.client_address", "%s", msg)
	}
	if _, _, msg := parseHostPort(c.Etcd.Embedded.PeerAddress, listenAddr); msg != "" {
		v.add("etcd.embedded.peer_address", "%s", msg)
	}
	if c.Admin.Address != AdminOff {
		if _, _, msg := parseHostPort(c.Admin.Address, listenAddr); msg != "" {
			v.add("admin.address", "%s (or %q to disable the admin endpoint)", msg, AdminOff)
		}
	}
}

// checkEndpoint accepts "host:port" and "http(s)://host:port" and returns a
// normalized key for duplicate detection.
func checkEndpoint(ep string) (key, msg string) {
	hostport := ep
	scheme := "http"
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return "", fmt.Sprintf("%q is not a URL: %v", redactUserinfo(ep), errors.Unwrap(err))
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Sprintf("%q: scheme must be http or https", ep)
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return "", fmt.Sprintf("%q must be just %s://host:port (no user, path or query)", u.Redacted(), u.Scheme)
		}
		scheme, hostport = u.Scheme, u.Host
	}
	host, port, msg := parseHostPort(hostport, nodeAddr)
	if msg != "" {
		return "", fmt.Sprintf("%q is not host:port or http(s)://host:port: %s", ep, strings.TrimPrefix(msg, strconv.Quote(hostport)+" is not host:port: "))
	}
	return scheme + "://" + hostKey(host) + ":" + strconv.Itoa(port), ""
}

// redactUserinfo hides "user:password@" in a URL that url.Parse rejected.
func redactUserinfo(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return scheme + "://xxxxx@" + rest[at+1:]
	}
	return s
}

func (c *Config) validateCredentials(v *validator) {
	for _, cr := range []struct {
		field string
		c     Credential
		role  string
	}{
		{"credentials.monitor", c.Credentials.Monitor, "the account the controller probes and reparents with"},
		{"credentials.replication", c.Credentials.Replication, "the account replicas replicate with"},
	} {
		if cr.c.User == "" {
			v.add(cr.field+".user", "required (%s)", cr.role)
		}
		checkSources(v, cr.field, cr.c.Password, cr.c.PasswordEnv, cr.c.PasswordFile)
	}
}

// checkSources checks that exactly one plaintext secret source is set and
// that password_env is a variable name. It never quotes the values: a
// password pasted into the wrong field must not end up in an error.
func checkSources(v *validator, field, plain, env, file string) {
	set := setSources(plain, env, file)
	switch len(set) {
	case 0:
		v.add(field, "no password: set exactly one of password, password_env or password_file")
	case 1:
	default:
		v.add(field, "%s: set exactly one of password, password_env or password_file", bothSet(set))
	}
	if env != "" && !isEnvName(env) {
		v.add(field+".password_env", "is not an environment variable name (letters, digits and '_', not starting with a digit); it names the variable that holds the password, not the password itself")
	}
}

func setSources(plain, env, file string) []string {
	var set []string
	if plain != "" {
		set = append(set, "password")
	}
	if env != "" {
		set = append(set, "password_env")
	}
	if file != "" {
		set = append(set, "password_file")
	}
	return set
}

// bothSet says "a and b are both set" or "a, b and c are all set".
func bothSet(fields []string) string {
	if len(fields) == 2 {
		return fields[0] + " and " + fields[1] + " are both set"
	}
	return strings.Join(fields[:len(fields)-1], ", ") + " and " + fields[len(fields)-1] + " are all set"
}

func isEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func (c *Config) validateUsers(v *validator) {
	if len(c.Users) == 0 && !c.Proxy.BackendAccounts.Enabled {
		v.add("users", "at least one user is required: the proxy admits only the users listed here (or turn on proxy.backend_accounts)")
	}
	seen := map[string]int{}
	for i, u := range c.Users {
		f := fmt.Sprintf("users[%d]", i)
		switch j, dup := seen[u.Name]; {
		case u.Name == "":
			v.add(f+".name", "required")
		case dup:
			v.add(f+".name", "%q already defined at users[%d]", u.Name, j)
		default:
			seen[u.Name] = i
		}
		plain := setSources(u.Password, u.PasswordEnv, u.PasswordFile)
		switch {
		case u.PasswordHash != "" && len(plain) > 0:
			v.add(f, "%s: give either a plaintext source (the proxy derives the hash from it) or the hash alone", bothSet(append([]string{"password_hash"}, plain...)))
		case u.PasswordHash != "":
			if why := checkNativeHash(u.PasswordHash); why != "" {
				v.add(f+".password_hash", "must be \"*\" followed by 40 hex digits, the mysql_native_password hash as mysql.user shows it (%s)", why)
			}
		case len(plain) == 0:
			v.add(f, "no password: set exactly one of password, password_env, password_file or password_hash")
		case len(plain) > 1:
			v.add(f, "%s: set exactly one of password, password_env, password_file or password_hash", bothSet(plain))
		}
		if u.PasswordEnv != "" && !isEnvName(u.PasswordEnv) {
			v.add(f+".password_env", "is not an environment variable name (letters, digits and '_', not starting with a digit); it names the variable that holds the password, not the password itself")
		}
		switch u.AuthPlugin {
		case AuthNative, AuthSHA2, "":
		case AuthEd25519:
			if len(plain) == 0 && u.PasswordHash != "" {
				v.add(f+".password_hash", "an ed25519 user needs its password (password_env or password_file): the proxy signs the backends' client_ed25519 challenges with it, and neither the public key nor a mysql_native_password hash can do that")
			}
		default:
			v.add(f+".auth_plugin", "%q is not one of %s, %s, %s", u.AuthPlugin, AuthNative, AuthEd25519, AuthSHA2)
		}
	}
}

// validateBackendAccounts checks proxy.backend_accounts (proxy.rsa_key_file
// is read, and its errors named, when the proxy starts).
func (c *Config) validateBackendAccounts(v *validator) {
	b := c.Proxy.BackendAccounts
	if b.Refresh.D() < time.Second {
		v.add("proxy.backend_accounts.refresh", "%s is less than 1s: every proxy would read every account that often", b.Refresh)
	}
	if b.User != "" {
		checkSources(v, "proxy.backend_accounts", b.Password, b.PasswordEnv, b.PasswordFile)
	} else if len(setSources(b.Password, b.PasswordEnv, b.PasswordFile)) > 0 {
		v.add("proxy.backend_accounts.user", "required when a password is set (empty: credentials.monitor reads the accounts)")
	}
}

// checkNativeHash says what is wrong with a mysql_native_password hash, or
// "". It describes the shape only: the hash is a secret too.
func checkNativeHash(s string) string {
	switch {
	case len(s) != 41:
		return fmt.Sprintf("got %d characters, not 41", len(s))
	case s[0] != '*':
		return "it does not start with \"*\""
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return fmt.Sprintf("character %d is not a hex digit", i+1)
		}
	}
	return ""
}

// checkName reports a problem with a name used in etcd keys, metrics labels
// and CLI arguments, or "".
func checkName(name string) string {
	switch {
	case name == "":
		return "required"
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not a usable name", name)
	case len(name) > 64:
		return fmt.Sprintf("%q is longer than 64 characters", clip(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Sprintf("%q may contain only letters, digits, '_', '.' and '-'", name)
		}
	}
	return ""
}

func (c *Config) validateClusters(v *validator) {
	if len(c.Clusters) == 0 {
		v.add("clusters", "at least one cluster is required")
	}
	names := map[string]int{}
	type nodeRef struct{ cluster, node, field string }
	addrs := map[string]nodeRef{}
	for i, cl := range c.Clusters {
		f := fmt.Sprintf("clusters[%d]", i)
		if msg := checkName(cl.Name); msg != "" {
			v.add(f+".name", "%s", msg)
		} else if j, dup := names[cl.Name]; dup {
			v.add(f+".name", "%q already defined at clusters[%d]", cl.Name, j)
		} else {
			names[cl.Name] = i
		}
		if cl.Flavor != FlavorMariaDB && cl.Flavor != FlavorMySQL {
			v.add(f+".flavor", "%q is not a flavor (use %s or %s)", cl.Flavor, FlavorMariaDB, FlavorMySQL)
		}
		if len(cl.Nodes) == 0 {
			v.add(f+".nodes", "at least one node is required")
		}
		nodeNames := map[string]int{}
		promotable := 0
		for j, n := range cl.Nodes {
			nf := fmt.Sprintf("%s.nodes[%d]", f, j)
			if msg := checkName(n.Name); msg != "" {
				v.add(nf+".name", "%s", msg)
			} else if k, dup := nodeNames[n.Name]; dup {
				v.add(nf+".name", "%q already defined at %s.nodes[%d]", n.Name, f, k)
			} else {
				nodeNames[n.Name] = j
			}
			if host, port, msg := parseHostPort(n.Address, nodeAddr); msg != "" {
				v.add(nf+".address", "%s", msg)
			} else {
				key := hostKey(host) + ":" + strconv.Itoa(port)
				if prev, dup := addrs[key]; dup {
					v.add(nf+".address", "%s already used by node %q of cluster %q (%s)", n.Address, prev.node, prev.cluster, prev.field)
				} else {
					addrs[key] = nodeRef{cluster: cl.Name, node: n.Name, field: nf}
				}
			}
			switch n.Promotion {
			case PromotionPrefer, PromotionNeutral:
				promotable++
			case PromotionMustNot:
			default:
				v.add(nf+".promotion", "%q is not a promotion rule (use %s, %s or %s)", n.Promotion, PromotionPrefer, PromotionNeutral, PromotionMustNot)
				promotable++ // reported already; do not pile on
			}
		}
		if len(cl.Nodes) > 1 && promotable == 0 {
			v.add(f+".nodes", "every node has promotion %s, so no node could ever be promoted: set at least one to %s or %s", PromotionMustNot, PromotionNeutral, PromotionPrefer)
		}
		if cl.ReadRouting.MaxLag < 0 {
			v.add(f+".read_routing.max_lag", "%s must not be negative", cl.ReadRouting.MaxLag)
		}
		validateFailover(v, f+".failover", cl.Failover, c.Probe.Interval.D())
		validateDurability(v, f+".durability", cl)
	}
}

func (c *Config) validateListeners(v *validator) {
	if len(c.Listeners) == 0 {
		v.add("listeners", "at least one listener is required")
	}
	var defined []string
	for _, cl := range c.Clusters {
		if cl.Name != "" {
			defined = append(defined, cl.Name)
		}
	}
	definedList := strings.Join(defined, ", ")
	if definedList == "" {
		definedList = "none"
	}
	names := map[string]int{}
	for i, l := range c.Listeners {
		f := fmt.Sprintf("listeners[%d]", i)
		if msg := checkName(l.Name); msg != "" {
			v.add(f+".name", "%s", msg)
		} else if j, dup := names[l.Name]; dup {
			v.add(f+".name", "%q already defined at listeners[%d]", l.Name, j)
		} else {
			names[l.Name] = i
		}
		if _, _, msg := parseHostPort(l.Address, listenAddr); msg != "" {
			v.add(f+".address", "%s", msg)
		}
		switch {
		case l.Cluster == "":
			v.add(f+".cluster", "required (defined: %s)", definedList)
		case c.Cluster(l.Cluster) == nil:
			v.add(f+".cluster", "cluster %q is not defined (defined: %s)", l.Cluster, definedList)
		}
		switch l.Role {
		case RolePrimary, RoleReplica:
		case "":
			v.add(f+".role", "required (%s for read/write, %s for read-only)", RolePrimary, RoleReplica)
		default:
			v.add(f+".role", "%q is not a role (use %s for read/write or %s for read-only)", l.Role, RolePrimary, RoleReplica)
		}
		switch l.Pooling {
		case PoolingSession, PoolingTransaction, "":
		default:
			v.add(f+".pooling", "%q is not a pooling mode (use %s or %s)", l.Pooling, PoolingSession, PoolingTransaction)
		}
	}
}

func (c *Config) validateTimings(v *validator) {
	positive := func(field string, d Duration) bool {
		if d <= 0 {
			v.add(field, "%s must be positive", d)
			return false
		}
		return true
	}
	positive("etcd.dial_timeout", c.Etcd.DialTimeout)
	iv := positive("probe.interval", c.Probe.Interval)
	to := positive("probe.timeout", c.Probe.Timeout)
	if ct := c.Probe.ConnectTimeout; ct < Duration(time.Millisecond) || (to && ct > c.Probe.Timeout) {
		v.add("probe.connect_timeout", "%s must be at least 1ms and at most probe.timeout (%s)", ct, c.Probe.Timeout)
	}
	if iv && to && c.Probe.Timeout >= c.Probe.Interval {
		v.add("probe.timeout", "%s must be less than probe.interval (%s): a probe must finish before the next round starts", c.Probe.Timeout, c.Probe.Interval)
	}
	if positive("proxy.connect_timeout", c.Proxy.ConnectTimeout) && c.Proxy.ConnectTimeout.D() > MaxConnectTimeout {
		v.add("proxy.connect_timeout", "%s is more than %s: clients would wait that long on a dead backend", c.Proxy.ConnectTimeout, MaxConnectTimeout)
	}
	if c.Proxy.MaxConnectionsPerBackend < 1 {
		v.add("proxy.max_connections_per_backend", "%d must be at least 1", c.Proxy.MaxConnectionsPerBackend)
	}
	if positive("proxy.pool.wait_timeout", c.Proxy.Pool.WaitTimeout) && c.Proxy.Pool.WaitTimeout.D() > MaxPoolWait {
		v.add("proxy.pool.wait_timeout", "%s is more than %s: clients would wait that long for a backend connection", c.Proxy.Pool.WaitTimeout, MaxPoolWait)
	}
	positive("proxy.pool.idle_timeout", c.Proxy.Pool.IdleTimeout)
	if r := c.Proxy.Pool.ServerReservePercent; r < 1 || r > 90 {
		v.add("proxy.pool.server_reserve_percent", "%d is not between 1 and 90 (percent of each server's max_connections left to other clients)", r)
	}
	if c.Proxy.MaxClientConnections < 0 {
		v.add("proxy.max_client_connections", "%d must be 0 (derived from the descriptor budget) or positive", c.Proxy.MaxClientConnections)
	}
	if c.Proxy.GOMAXPROCS < 0 {
		v.add("proxy.gomaxprocs", "%d must be 0 (chosen from the CPUs) or positive", c.Proxy.GOMAXPROCS)
	}
	positive("switchover.catchup_timeout", c.Switchover.CatchupTimeout)
	c.validateSwitchover(v, positive)
}

// validateSwitchover checks the switchover limits against each other, the
// way Vitess checks its buffer flags: a statement must be able to wait
// through a whole drain, and the switchover as a whole must be able to
// drain and catch up within its own bound.
func (c *Config) validateSwitchover(v *validator, positive func(string, Duration) bool) {
	sw := c.Switchover
	drain := positive("switchover.drain_timeout", sw.DrainTimeout)
	hold := positive("switchover.max_hold", sw.MaxHold)
	dur := positive("switchover.max_duration", sw.MaxDuration)
	if sw.DrainMode != DrainAbort && sw.DrainMode != DrainFail {
		v.add("switchover.drain_mode", "%q must be %q or %q", sw.DrainMode, DrainAbort, DrainFail)
	}
	if sw.MaxHeld < 1 {
		v.add("switchover.max_held", "%d must be at least 1", sw.MaxHeld)
	}
	if drain && hold && sw.DrainTimeout >= sw.MaxHold {
		v.add("switchover.drain_timeout", "%s must be less than switchover.max_hold (%s): statements held at the start of a switchover must outlast the drain", sw.DrainTimeout, sw.MaxHold)
	}
	if hold && dur && sw.MaxHold > sw.MaxDuration {
		v.add("switchover.max_hold", "%s must be at most switchover.max_duration (%s): no statement can be held longer than the switchover may last", sw.MaxHold, sw.MaxDuration)
	}
	if drain && dur && c.Switchover.CatchupTimeout > 0 && sw.DrainTimeout+sw.CatchupTimeout >= sw.MaxDuration {
		v.add("switchover.max_duration", "%s must be more than switchover.drain_timeout + switchover.catchup_timeout (%s + %s): a switchover that drains and catches up fully would be cut off",
			sw.MaxDuration, sw.DrainTimeout, sw.CatchupTimeout)
	}
	if !(sw.WarmThreshold > 0 && sw.WarmThreshold <= 1) {
		v.add("switchover.warm_threshold", "%v must be more than 0 and at most 1 (a fraction of the primary's buffer-pool data pages)", sw.WarmThreshold)
	}
	positive("switchover.warm_timeout", sw.WarmTimeout)
	if sw.WarmConcurrency < 1 || sw.WarmConcurrency > 64 {
		v.add("switchover.warm_concurrency", "%d must be between 1 and 64", sw.WarmConcurrency)
	}
}

// listenUse is an address this process binds.
type listenUse struct {
	field, owner string // owner as shown to the user: `listener "rw"`, `admin.address`
	addr         string // as written
	host         string // normalized; "" for every interface
	port         int
}

// validateListenAddresses reports two binds of the same port (an
// every-interface bind conflicts with any host on the same port) and
// listeners on a node's own address. Port 0 (any free port) never conflicts.
func (c *Config) validateListenAddresses(v *validator) {
	var uses []listenUse
	add := func(field, owner, addr string) {
		if host, port, msg := parseHostPort(addr, listenAddr); msg == "" && port != 0 {
			uses = append(uses, listenUse{field: field, owner: owner, addr: addr, host: hostKey(host), port: port})
		}
	}
	for i, l := range c.Listeners {
		add(fmt.Sprintf("listeners[%d].address", i), fmt.Sprintf("listener %q", l.Name), l.Address)
	}
	if c.Admin.Address != AdminOff {
		add("admin.address", "admin.address", c.Admin.Address)
	}
	if len(c.Etcd.Endpoints) == 0 {
		add("etcd.embedded.client_address", "etcd.embedded.client_address", c.Etcd.Embedded.ClientAddress)
		add("etcd.embedded.peer_address", "etcd.embedded.peer_address", c.Etcd.Embedded.PeerAddress)
	}
	for i, u := range uses {
		for _, prev := range uses[:i] {
			if u.port == prev.port && (u.host == prev.host || u.host == "" || prev.host == "") {
				v.add(u.field, "%s already used by %s", u.addr, prev.owner)
				break
			}
		}
	}
	for i, l := range c.Listeners {
		lh, lp, msg := parseHostPort(l.Address, listenAddr)
		if msg != "" || lp == 0 {
			continue
		}
		lh = hostKey(lh)
	nodes:
		for _, cl := range c.Clusters {
			for _, n := range cl.Nodes {
				nh, np, msg := parseHostPort(n.Address, nodeAddr)
				if msg != "" || np != lp {
					continue
				}
				nh = hostKey(nh)
				switch {
				case nh == lh:
					v.add(fmt.Sprintf("listeners[%d].address", i), "%s is the address of node %q of cluster %q: the proxy would route to itself", l.Address, n.Name, cl.Name)
					break nodes
				case lh == "" && isLoopback(nh):
					v.add(fmt.Sprintf("listeners[%d].address", i), "%s listens on every interface, including the address of node %q of cluster %q (%s): the proxy would route to itself", l.Address, n.Name, cl.Name, n.Address)
					break nodes
				}
			}
		}
	}
}

type addrKind int

const (
	nodeAddr   addrKind = iota // host required, port 1..65535
	listenAddr                 // empty host = every interface, port 0 = any free port
)

// parseHostPort splits and checks "host:port". msg is "" when valid; it
// quotes the address, which is never secret.
func parseHostPort(addr string, kind addrKind) (host string, port int, msg string) {
	bad := func(why string) (string, int, string) {
		return "", 0, fmt.Sprintf("%q is not host:port: %s", addr, why)
	}
	if addr == "" {
		return "", 0, "required (host:port)"
	}
	h, p, err := splitHostPort(addr)
	if err != nil {
		return bad(err.Error())
	}
	if p == "" {
		return bad("missing port number")
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return bad(fmt.Sprintf("port %q is not a number", p))
		}
	}
	n, err := strconv.Atoi(p)
	min := 1
	if kind == listenAddr {
		min = 0
	}
	if err != nil || n < min || n > 65535 {
		return bad(fmt.Sprintf("port %s is out of range (%d..65535)", p, min))
	}
	if h == "" {
		if kind == nodeAddr {
			return bad("missing host")
		}
		return "", n, ""
	}
	if _, err := netip.ParseAddr(h); err != nil && !isHostname(h) {
		return bad(fmt.Sprintf("host %q is neither an IP address nor a host name", h))
	}
	return h, n, ""
}

// splitHostPort is net.SplitHostPort with messages that suit config errors.
func splitHostPort(addr string) (host, port string, err error) {
	if strings.HasPrefix(addr, "[") {
		end := strings.IndexByte(addr, ']')
		if end < 0 {
			return "", "", errors.New("missing ']' after an IPv6 address")
		}
		host, rest := addr[1:end], addr[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", errors.New("missing port number")
		}
		return host, rest[1:], nil
	}
	if strings.Contains(addr, "://") {
		return "", "", errors.New("a URL is not an address; give just host:port")
	}
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", errors.New("missing port number")
	}
	if strings.IndexByte(addr[:i], ':') >= 0 {
		return "", "", errors.New("an IPv6 address needs brackets, as in [::1]:3306")
	}
	return addr[:i], addr[i+1:], nil
}

// isHostname accepts RFC 1123 host names (letters, digits, '-', and '_' as
// some internal DNS uses it), dot-separated labels of 1..63 characters.
func isHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// hostKey normalizes a host for comparison: lower case, canonical IP text,
// and "" for every-interface addresses.
func hostKey(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		if a.IsUnspecified() {
			return ""
		}
		return a.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

func isLoopback(h string) bool {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.IsLoopback()
	}
	return h == "localhost"
}

// validateFailover checks a cluster's failover policy; interval is
// probe.interval (the detection time is confirm_rounds of it).
func validateFailover(v *validator, f string, fo FailoverConfig, interval time.Duration) {
	switch fo.Mode {
	case FailoverManual, FailoverAuto:
	default:
		v.add(f+".mode", "%q is not a failover mode (use %s or %s)", fo.Mode, FailoverManual, FailoverAuto)
	}
	if fo.ConfirmRounds < 1 {
		v.add(f+".confirm_rounds", "%d must be at least 1 (a dead primary must be seen in that many consecutive probe rounds)", fo.ConfirmRounds)
	}
	if n := fo.ReplicaParallelThreads; n != nil && (*n < 0 || *n > MaxReplicaParallelThreads) {
		v.add(f+".replica_parallel_threads", "%d must be between 0 (leave the servers' setting) and %d", *n, MaxReplicaParallelThreads)
	}
	if fo.SilenceBound < Duration(MinSilenceBound) || fo.SilenceBound > Duration(MaxSilenceBound) {
		v.add(f+".silence_bound", "%s must be between %s and %s (below %s a primary frozen for 1s could be failed over)",
			fo.SilenceBound, Duration(MinSilenceBound), Duration(MaxSilenceBound), Duration(MinSilenceBound))
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"block_period", fo.BlockPeriod}, {"max_lag", fo.MaxLag}, {"recovery_timeout", fo.RecoveryTimeout}, {"max_hold", fo.MaxHold}} {
		if d.v < 0 {
			v.add(f+"."+d.name, "%s must not be negative", d.v)
		}
	}
	if interval <= 0 {
		interval = time.Second
	}
	if detect := time.Duration(max(fo.ConfirmRounds, 1)) * interval; fo.MaxHold > 0 && fo.MaxHold.D() <= detect {
		v.add(f+".max_hold", "%s must exceed the failure detection time, confirm_rounds × probe.interval = %d × %s = %s: a held statement would give up before a failover could start",
			fo.MaxHold, max(fo.ConfirmRounds, 1), Duration(interval), Duration(detect))
	}
	if fo.ReplayMaxBytes < 1024 || fo.ReplayMaxBytes > 64<<20 {
		v.add(f+".replay_max_bytes", "%d is out of range (1024..67108864 bytes recorded per session for transaction replay)", fo.ReplayMaxBytes)
	}
	if fo.ReplayMaxStatements < 1 || fo.ReplayMaxStatements > 100000 {
		v.add(f+".replay_max_statements", "%d is out of range (1..100000 statements recorded per session for transaction replay)", fo.ReplayMaxStatements)
	}
	if fo.CommitOutcome != CommitOutcomeMarker && fo.CommitOutcome != CommitOutcomeUnknown {
		v.add(f+".commit_outcome", "%q is not one of marker, unknown", fo.CommitOutcome)
	}
	if fo.ReplayChecksum != ReplayChecksumFull && fo.ReplayChecksum != ReplayChecksumNoConsistentReads {
		v.add(f+".replay_checksum", "%q is not one of full, no_consistent_reads", fo.ReplayChecksum)
	}
}

// validateDurability checks a cluster's durability mode: a known name, and
// semi-sync only where a replica can acknowledge and the flavor is one the
// controller manages semi-sync on.
func validateDurability(v *validator, f string, cl Cluster) {
	switch cl.Durability {
	case DurabilityAsync:
		return
	case DurabilitySemiSync, DurabilitySemiSyncDurable:
	default:
		v.add(f, "%q is not a durability mode (use %s, %s or %s)", cl.Durability, DurabilityAsync, DurabilitySemiSync, DurabilitySemiSyncDurable)
		return
	}
	if cl.Flavor == "mysql" {
		v.add(f, "%s is managed on MariaDB only (flavor mysql: configure the semi-sync plugin yourself and use %s)", cl.Durability, DurabilityAsync)
	}
	if len(cl.Nodes) == 1 {
		if cl.Durability == DurabilitySemiSyncDurable {
			v.add(f, "%s needs at least one replica: with a single node every commit would wait forever for an acknowledgement", cl.Durability)
		} else {
			v.add(f, "%s needs at least one replica: with a single node every commit would wait rpl_semi_sync_master_timeout, then fall back to async", cl.Durability)
		}
	}
}

// validateHooks checks the hooks: unique names, known events, one of
// command and url, a well-formed URL, header sources, positive timings and
// veto only on the events the controller waits for.
func (c *Config) validateHooks(v *validator) {
	names := map[string]int{}
	for i, h := range c.Hooks {
		f := fmt.Sprintf("hooks[%d]", i)
		if msg := checkName(h.Name); msg != "" {
			v.add(f+".name", "%s", msg)
		} else if j, dup := names[h.Name]; dup {
			v.add(f+".name", "hook %q is already defined at hooks[%d]", h.Name, j)
		} else {
			names[h.Name] = i
		}
		if len(h.Events) == 0 {
			v.add(f+".events", "at least one event is required (known: %s)", strings.Join(HookEvents, ", "))
		}
		for j, e := range h.Events {
			switch {
			case !slices.Contains(HookEvents, e):
				v.add(fmt.Sprintf("%s.events[%d]", f, j), "unknown event %q (known: %s)", e, strings.Join(HookEvents, ", "))
			case h.Veto && !slices.Contains(HookVetoEvents, e):
				v.add(fmt.Sprintf("%s.events[%d]", f, j), "a veto hook fires only on %s, not on %q: make a separate hook without veto for it",
					strings.Join(HookVetoEvents, " and "), e)
			}
		}
		for j, cl := range h.Clusters {
			if c.Cluster(cl) == nil {
				v.add(fmt.Sprintf("%s.clusters[%d]", f, j), "cluster %q is not defined", cl)
			}
		}
		switch {
		case len(h.Command) == 0 && h.URL == "":
			v.add(f, "one of command and url is required")
		case len(h.Command) > 0 && h.URL != "":
			v.add(f, "command and url are both set: use one (two hooks for both)")
		case len(h.Command) > 0 && h.Command[0] == "":
			v.add(f+".command[0]", "the program is empty")
		case h.URL != "":
			u, err := url.Parse(h.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.add(f+".url", "%q is not an http:// or https:// URL", redactUserinfo(h.URL))
			}
		}
		if len(h.Headers) > 0 && h.URL == "" {
			v.add(f+".headers", "headers are only sent to a url")
		}
		for j, hd := range h.Headers {
			hf := fmt.Sprintf("%s.headers[%d]", f, j)
			if hd.Name == "" || strings.ContainsAny(hd.Name, " :\r\n") {
				v.add(hf+".name", "%q is not an HTTP header name", hd.Name)
			}
			switch n := len(setSources(hd.Value, hd.ValueEnv, hd.ValueFile)); {
			case n == 0:
				v.add(hf, "one of value, value_env and value_file is required")
			case n > 1:
				v.add(hf, "set only one of value, value_env and value_file")
			}
			if hd.ValueEnv != "" && !isEnvName(hd.ValueEnv) {
				v.add(hf+".value_env", "%q is not an environment variable name", hd.ValueEnv)
			}
		}
		if h.Timeout < 0 {
			v.add(f+".timeout", "must be positive, got %s", h.Timeout)
		}
		if h.Backoff < 0 {
			v.add(f+".backoff", "must be positive, got %s", h.Backoff)
		}
		if h.Retries != nil && (*h.Retries < 0 || *h.Retries > 10) {
			v.add(f+".retries", "must be between 0 and 10, got %d", *h.Retries)
		}
		if h.Queue < 0 || h.Queue > 10000 {
			v.add(f+".queue", "must be between 1 and 10000, got %d", h.Queue)
		}
	}
}
