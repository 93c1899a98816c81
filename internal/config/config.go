package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole switchyard.yaml: what every role (proxy, controller, up,
// operator commands) reads. Zero values are replaced by defaults in
// ApplyDefaults; Validate checks cross-field rules and names the field in every
// error.
//
// Each field's doc comment gives its meaning and ends with its YAML type and
// default ("Type: duration. Default: 1s."), or "Required" when there is no
// default and it must be set, or "Optional" when empty is meaningful. The README's config reference is
// generated from these comments; TestDocumentedDefaults keeps them honest.
type Config struct {
	// Etcd says where the topology store is.
	// Type: mapping (etcd).
	Etcd EtcdConfig `yaml:"etcd"`
	// Admin is the HTTP admin endpoint (/healthz, /metrics, /api/...).
	// Type: mapping (admin).
	Admin AdminConfig `yaml:"admin"`
	// Credentials are the controller's own accounts on every node.
	// Type: mapping (credentials). Required.
	Credentials Credentials `yaml:"credentials"`
	// Users are the application accounts clients log in with through the
	// proxy; names are unique.
	// Type: list of user. Required (at least one).
	Users []User `yaml:"users,omitempty"`
	// Clusters are the replication clusters Switchyard manages; names are
	// unique.
	// Type: list of cluster. Required (at least one).
	Clusters []Cluster `yaml:"clusters"`
	// Listeners are the proxy's client-facing endpoints; names and addresses
	// are unique.
	// Type: list of listener. Required (at least one).
	Listeners []Listener `yaml:"listeners"`
	// Probe controls how the controller probes nodes.
	// Type: mapping (probe).
	Probe ProbeConfig `yaml:"probe"`
	// Proxy controls backend connections of the proxy.
	// Type: mapping (proxy).
	Proxy ProxyConfig `yaml:"proxy"`
	// Switchover controls planned switchovers.
	// Type: mapping (switchover).
	Switchover SwitchoverConfig `yaml:"switchover"`
	// Versioning is the `config:` section: how many applied revisions the
	// topology store keeps and which pushes `switchyard config apply`,
	// `rollback`, `up` and every proxy and controller refuse as destructive.
	// Type: mapping (config).
	Versioning VersioningConfig `yaml:"config"`
	// Hooks are commands to run and URLs to POST to when the controller
	// fails over, switches over, finds a dead primary it will not fail over
	// on its own, raises or clears an alarm, or quarantines a node; see the
	// README's "Hooks and notifications". Names are unique.
	// Type: list of hook. Optional.
	Hooks []Hook `yaml:"hooks,omitempty"`
}

// Hook events (Hook.Events). The payload of each is described in package
// hooks.
const (
	HookFailoverStart   = "failover_start"
	HookFailoverEnd     = "failover_end"
	HookSwitchoverStart = "switchover_start"
	HookSwitchoverEnd   = "switchover_end"
	HookDeadPrimary     = "dead_primary"
	HookAlarmRaised     = "alarm_raised"
	HookAlarmCleared    = "alarm_cleared"
	HookNodeQuarantined = "node_quarantined"
)

// HookEvents lists every hook event, in documentation order.
var HookEvents = []string{HookFailoverStart, HookFailoverEnd, HookSwitchoverStart, HookSwitchoverEnd,
	HookDeadPrimary, HookAlarmRaised, HookAlarmCleared, HookNodeQuarantined}

// HookVetoEvents are the events a veto hook may fire on: the controller
// waits for it before acting.
var HookVetoEvents = []string{HookFailoverStart, HookSwitchoverStart}

// Hook is one notification target: a command (argv, run without a shell,
// the JSON payload on stdin and as SWITCHYARD_* environment variables) or
// a URL (HTTP POST of the JSON payload). Only the leader controller runs
// hooks, each from its own bounded queue, so a slow or failing hook never
// delays a recovery or the probe loop — except a veto hook, which the
// controller waits for (at most Timeout per attempt) before it acts. The
// peers: orchestrator's PreFailoverProcesses/PostFailoverProcesses, Patroni
// callbacks, MaxScale's monitor script and events.
type Hook struct {
	// Name identifies the hook in events, logs and the
	// switchyard_hook_runs_total metric.
	// Type: string. Required.
	Name string `yaml:"name"`
	// Events are the events the hook fires on: failover_start,
	// failover_end, switchover_start, switchover_end, dead_primary,
	// alarm_raised, alarm_cleared, node_quarantined.
	// Type: list of string. Required (at least one).
	Events []string `yaml:"events"`
	// Clusters limits the hook to these clusters; empty means every
	// cluster.
	// Type: list of string. Optional.
	Clusters []string `yaml:"clusters,omitempty"`
	// Command is the program and its arguments, run without a shell, with
	// the payload on stdin and SWITCHYARD_EVENT, SWITCHYARD_CLUSTER,
	// SWITCHYARD_NODE, SWITCHYARD_EPOCH, SWITCHYARD_REASON, SWITCHYARD_TIME,
	// SWITCHYARD_HOOK in its environment. A non-zero exit is a failure.
	// Type: list of string. Optional (one of command, url).
	Command []string `yaml:"command,omitempty"`
	// URL receives the payload as an HTTP POST (Content-Type
	// application/json); a status other than 2xx is a failure.
	// Type: string (http or https URL). Optional (one of command, url).
	URL string `yaml:"url,omitempty"`
	// Headers are added to each POST to URL (e.g. Authorization).
	// Type: list of hook_header. Optional.
	Headers []HookHeader `yaml:"headers,omitempty"`
	// Timeout bounds each attempt; the command is killed, the request
	// cancelled when it passes.
	// Type: duration. Default: 10s.
	Timeout Duration `yaml:"timeout"`
	// Retries is how many times a failed attempt is tried again (0: once
	// only). A veto hook is never retried.
	// Type: integer. Default: 2.
	Retries *int `yaml:"retries,omitempty"`
	// Backoff is the wait before the first retry, doubled before each next
	// one.
	// Type: duration. Default: 1s.
	Backoff Duration `yaml:"backoff"`
	// Queue is how many deliveries may wait for the hook; beyond it new
	// ones are dropped (counted with result "dropped").
	// Type: integer. Default: 64.
	Queue int `yaml:"queue"`
	// Veto makes the hook a gate: it may only fire on failover_start and
	// switchover_start, runs before the failover or switchover changes
	// anything, and a failure (non-zero exit, non-2xx status, timeout)
	// refuses the action with the hook's output in the refusal. Without
	// veto a hook never blocks anything.
	// Type: boolean. Default: false.
	Veto bool `yaml:"veto,omitempty"`
}

// HookHeader is one HTTP header of a URL hook; its value comes from the
// file itself, an environment variable or a file (exactly one of Value,
// ValueEnv, ValueFile), like the credentials' passwords.
type HookHeader struct {
	// Name is the header name (e.g. Authorization).
	// Type: string. Required.
	Name string `yaml:"name"`
	// Value is the header value, written in the config file.
	// Type: string. Optional (one of value, value_env, value_file).
	Value string `yaml:"value,omitempty"`
	// ValueEnv names an environment variable holding the value, read when
	// the hook runs.
	// Type: string (variable name). Optional (one of value, value_env,
	// value_file).
	ValueEnv string `yaml:"value_env,omitempty"`
	// ValueFile is a file holding the value (trailing newlines dropped),
	// read when the hook runs; relative to the config file's directory.
	// Type: string (path). Optional (one of value, value_env, value_file).
	ValueFile string `yaml:"value_file,omitempty"`
}

// Resolve returns the header's value from whichever source is set. Errors
// name the source that failed; the value never appears.
func (h HookHeader) Resolve() (string, error) {
	return resolveSecret(h.Value, h.ValueEnv, h.ValueFile)
}

// HookRetries returns h.Retries, or its default when unset.
func (h Hook) HookRetries() int {
	if h.Retries == nil {
		return DefaultHookRetries
	}
	return *h.Retries
}

// Hook defaults.
const (
	DefaultHookTimeout = 10 * time.Second
	DefaultHookRetries = 2
	DefaultHookBackoff = time.Second
	DefaultHookQueue   = 64
)

// EtcdConfig locates the topology store.
type EtcdConfig struct {
	// Endpoints of an external etcd cluster, each "host:port",
	// "http://host:port" or "https://host:port". Empty means `switchyard up`
	// embeds a single-node etcd (see Embedded).
	// Type: list of strings. Optional.
	Endpoints []string `yaml:"endpoints,omitempty"`
	// Prefix is the key prefix for all of Switchyard's keys, so several
	// deployments can share one etcd. It starts with "/" and has no trailing
	// "/".
	// Type: string. Default: "/switchyard".
	Prefix string `yaml:"prefix"`
	// DialTimeout bounds connecting to etcd.
	// Type: duration. Default: 2s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// Embedded configures the embedded etcd (used only when Endpoints is empty).
	// Type: mapping (etcd.embedded).
	Embedded EmbeddedEtcd `yaml:"embedded"`
	// TLS secures the connection to an external etcd (client TLS, optionally
	// with a client certificate). With it, every endpoint is reached over
	// https. Every role and operator command uses it.
	// Type: mapping (etcd.tls).
	TLS EtcdTLS `yaml:"tls"`
	// Username is the etcd user (etcd authentication) every role and
	// operator command logs in as; its password comes from PasswordEnv or
	// PasswordFile.
	// Type: string. Optional.
	Username string `yaml:"username,omitempty"`
	// PasswordEnv names the environment variable holding the etcd user's
	// password.
	// Type: string. Optional.
	PasswordEnv string `yaml:"password_env,omitempty"`
	// PasswordFile is a file holding the etcd user's password (trailing
	// newlines are ignored).
	// Type: string (path). Optional.
	PasswordFile string `yaml:"password_file,omitempty"`
	// IntegrityKeyEnv names the environment variable holding the integrity
	// keys: the writers sign every config revision, cluster state and
	// operator request with the first, consumers refuse one that no key
	// verifies. One or more keys
	// (at least 16 bytes each) separated by white space; the keys themselves
	// are never stored in etcd. See the README's "Securing the store".
	// Type: string. Optional.
	IntegrityKeyEnv string `yaml:"integrity_key_env,omitempty"`
	// IntegrityKeyFile is a file holding the integrity keys, one per line
	// (first signs). Alternative to IntegrityKeyEnv.
	// Type: string (path). Optional.
	IntegrityKeyFile string `yaml:"integrity_key_file,omitempty"`
}

// EtcdTLS is the client TLS of the connection to an external etcd.
type EtcdTLS struct {
	// CAFile is a PEM file of the CAs that sign etcd's server certificates.
	// Empty: the system's roots.
	// Type: string (path). Optional.
	CAFile string `yaml:"ca_file,omitempty"`
	// CertFile is the PEM client certificate presented to etcd (with
	// KeyFile), for etcd's --client-cert-auth.
	// Type: string (path). Optional.
	CertFile string `yaml:"cert_file,omitempty"`
	// KeyFile is the PEM private key of CertFile.
	// Type: string (path). Optional.
	KeyFile string `yaml:"key_file,omitempty"`
	// ServerName is the name checked against etcd's certificate. Empty:
	// each endpoint's host.
	// Type: string. Optional.
	ServerName string `yaml:"server_name,omitempty"`
}

// EmbeddedEtcd configures the single-node etcd that `switchyard up` embeds.
type EmbeddedEtcd struct {
	// DataDir holds etcd's data. A relative path is relative to the config
	// file's directory.
	// Type: string (path). Default: ".switchyard-etcd".
	DataDir string `yaml:"data_dir"`
	// ClientAddress is the host:port etcd serves clients on; it must be on
	// loopback (the embedded etcd has no TLS and no authentication).
	// Type: string (host:port). Default: "127.0.0.1:2379".
	ClientAddress string `yaml:"client_address"`
	// PeerAddress is the host:port for etcd's peer traffic; it must differ
	// from ClientAddress.
	// Type: string (host:port). Default: "127.0.0.1:2380".
	PeerAddress string `yaml:"peer_address"`
}

// AdminConfig is the admin HTTP endpoint.
type AdminConfig struct {
	// Address is host:port for /healthz, /metrics and the API, or "off" to
	// disable the endpoint.
	// Type: string (host:port or "off"). Default: "127.0.0.1:8080".
	Address string `yaml:"address"`
	// Pprof serves Go's runtime profiles under /debug/pprof/ on the admin
	// address (CPU: /debug/pprof/profile?seconds=N; allocations:
	// /debug/pprof/allocs), for measuring the proxy. Anyone who reaches the
	// admin address can then profile the process, which costs CPU while a
	// profile runs: keep it off in production. Read at start only.
	// Type: bool. Default: false.
	Pprof bool `yaml:"pprof"`
	// Tokens are the bearer tokens the admin API (/api/v1) accepts, each
	// with a name (recorded as the actor of every change it makes) and a
	// role. Without tokens the API answers without authentication on a
	// loopback address and refuses every call (401) on any other address.
	// Type: list of mappings (admin token). Optional.
	Tokens []AdminToken `yaml:"tokens,omitempty"`
	// TLS serves the admin endpoint over HTTPS with this certificate,
	// read again when its files change (or on SIGHUP) without a restart.
	// Type: mapping (admin TLS). Optional.
	TLS AdminTLS `yaml:"tls,omitempty"`
	// MetricsAuth makes /metrics require a token (any role) like the API.
	// Health endpoints never need one.
	// Type: bool. Default: false.
	MetricsAuth bool `yaml:"metrics_auth,omitempty"`
}

// Admin API roles (AdminToken.Role).
const (
	// RoleViewer may call every GET of the admin API and the plan POSTs,
	// which change nothing.
	RoleViewer = "viewer"
	// RoleOperator may call every endpoint, the changes included.
	RoleOperator = "operator"
)

// AdminToken is one bearer token of the admin API. The secret comes from
// an environment variable or a file, or is given as its SHA-256 (the
// process keeps only the hash in memory either way): exactly one of
// TokenEnv, TokenFile and TokenSHA256 is set.
type AdminToken struct {
	// Name identifies the token; it is the actor recorded in the events
	// and the config history. Unique.
	// Type: string. Required.
	Name string `yaml:"name"`
	// Role is viewer (every GET and the plans) or operator (everything).
	// Type: string (viewer or operator). Required.
	Role string `yaml:"role"`
	// TokenEnv names an environment variable holding the token.
	// Type: string (variable name). Optional (exactly one of token_env,
	// token_file, token_sha256).
	TokenEnv string `yaml:"token_env,omitempty"`
	// TokenFile is a file holding the token (trailing newlines are
	// dropped). Load and ValidateFile make a relative path relative to the
	// config file's directory.
	// Type: string (path). Optional (exactly one of token_env, token_file,
	// token_sha256).
	TokenFile string `yaml:"token_file,omitempty"`
	// TokenSHA256 is the hex SHA-256 of the token (sha256sum of the token
	// without a trailing newline).
	// Type: string (64 hex digits). Optional (exactly one of token_env,
	// token_file, token_sha256).
	TokenSHA256 string `yaml:"token_sha256,omitempty"`
	// Expires is when the token stops being accepted, as an RFC 3339
	// time (2027-01-31T00:00:00Z): from then on a call with it is 401
	// "token NAME expired at ...", as an unknown token is. The admin
	// section is read at start, so a new expiry takes a restart.
	// Type: string (RFC 3339 time). Optional (default: never expires).
	Expires string `yaml:"expires,omitempty"`
}

// ExpiresAt parses Expires; the zero time when it is empty.
func (t AdminToken) ExpiresAt() (time.Time, error) {
	if t.Expires == "" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339, t.Expires)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (e.g. 2027-01-31T00:00:00Z)", t.Expires)
	}
	return at, nil
}

// AdminTLS is the certificate of the admin endpoint.
type AdminTLS struct {
	// CertFile is the PEM certificate chain.
	// Type: string (path). Optional (with key_file: HTTPS).
	CertFile string `yaml:"cert_file,omitempty"`
	// KeyFile is the PEM private key of cert_file.
	// Type: string (path). Optional (required with cert_file).
	KeyFile string `yaml:"key_file,omitempty"`
}

// Enabled reports whether the admin endpoint serves HTTPS.
func (t AdminTLS) Enabled() bool { return t.CertFile != "" }

// Credentials are the accounts the controller uses on the database nodes.
type Credentials struct {
	// Monitor is used for probes and for reparent operations (read_only,
	// CHANGE MASTER, KILL). It needs the privileges listed in README.
	// Type: mapping (credential). Required.
	Monitor Credential `yaml:"monitor"`
	// Replication is the account replicas use to connect to the primary
	// (CHANGE MASTER TO MASTER_USER=...); it needs REPLICATION SLAVE.
	// Type: mapping (credential). Required.
	Replication Credential `yaml:"replication"`
}

// Credential is a user and a secret that comes from the file itself, an
// environment variable or a file: exactly one of Password, PasswordEnv and
// PasswordFile is set.
type Credential struct {
	// User is the MySQL/MariaDB account name.
	// Type: string. Required.
	User string `yaml:"user"`
	// Password is the secret, written in the config file.
	// Type: string. Optional (one of password, password_env, password_file).
	Password string `yaml:"password,omitempty"`
	// PasswordEnv names an environment variable holding the secret, read
	// when the secret is used.
	// Type: string (variable name). Optional (one of password, password_env,
	// password_file).
	PasswordEnv string `yaml:"password_env,omitempty"`
	// PasswordFile is a file holding the secret (trailing newlines are
	// dropped), read when the secret is used. Load and ValidateFile make a
	// relative path relative to the config file's directory.
	// Type: string (path). Optional (one of password, password_env,
	// password_file).
	PasswordFile string `yaml:"password_file,omitempty"`
}

// User is an application account accepted by the proxy.
//
// The proxy authenticates clients with AuthPlugin (mysql_native_password by
// default). It needs either the plaintext password
// (Password/PasswordEnv/PasswordFile) or the mysql_native_password hash ("*"
// + 40 hex digits, as in mysql.user, i.e. SHA1(SHA1(password))). With only
// the hash, the proxy recovers SHA1(password) from the client's own login
// (the mysql_native_password scramble, or the password itself in a
// caching_sha2_password full authentication) and uses it to authenticate to
// backends as that user; until a client of that user has logged in once,
// the proxy cannot open backend connections for it. A plaintext source and
// the hash are never combined. An ed25519 user needs a plaintext source.
type User struct {
	// Name is the account name, the same on the proxy and every node. Unique.
	// Type: string. Required.
	Name string `yaml:"name"`
	// Password is the plaintext password, written in the config file.
	// Type: string. Optional (exactly one of password, password_env,
	// password_file, password_hash).
	Password string `yaml:"password,omitempty"`
	// PasswordEnv names an environment variable holding the password.
	// Type: string (variable name). Optional (exactly one of password,
	// password_env, password_file, password_hash).
	PasswordEnv string `yaml:"password_env,omitempty"`
	// PasswordFile is a file holding the password (trailing newlines are
	// dropped). Load and ValidateFile make a relative path relative to the
	// config file's directory.
	// Type: string (path). Optional (exactly one of password, password_env,
	// password_file, password_hash).
	PasswordFile string `yaml:"password_file,omitempty"`
	// PasswordHash is the mysql_native_password hash: "*" followed by 40 hex
	// digits, as SELECT PASSWORD('...') or mysql.user show it.
	// Type: string. Optional (exactly one of password, password_env,
	// password_file, password_hash).
	PasswordHash string `yaml:"password_hash,omitempty"`
	// AuthPlugin is the plugin the proxy asks clients of this user to
	// authenticate with: "mysql_native_password"; "ed25519" (MariaDB's
	// auth_ed25519, client plugin client_ed25519: the proxy sends a 32-byte
	// nonce and checks the client's signature; needs a plaintext source,
	// which the proxy also signs backends' client_ed25519 challenges with);
	// or "caching_sha2_password" (MySQL 8's default: the fast path against
	// SHA256(SHA256(password)), known from a plaintext source or cached
	// after the first full authentication, which sends the password in
	// clear over TLS or RSA-encrypted with proxy.rsa_key_file's key). A
	// client that answers the greeting with caching_sha2_password logs into
	// a mysql_native_password user by its fast path when the proxy knows
	// the verifier, and is switched to mysql_native_password otherwise.
	// Backend logins use whatever plugin the
	// backend asks for (mysql_native_password or client_ed25519).
	// Type: string (mysql_native_password|ed25519|caching_sha2_password). Default: "mysql_native_password".
	AuthPlugin string `yaml:"auth_plugin"`
}

// Authentication plugins of users[].auth_plugin.
const (
	AuthNative  = "mysql_native_password"
	AuthEd25519 = "ed25519"
	AuthSHA2    = "caching_sha2_password"
)

// Cluster is one replication cluster (one primary, N replicas).
type Cluster struct {
	// Name identifies the cluster in listeners, CLI flags and the store.
	// Unique; letters, digits, '_', '.' and '-' only (it is part of etcd
	// keys).
	// Type: string. Required.
	Name string `yaml:"name"`
	// Flavor is the server family: "mariadb" or "mysql". It decides how GTIDs
	// are read and compared.
	// Type: string. Default: "mariadb".
	Flavor string `yaml:"flavor"`
	// Nodes are every server of the cluster; which one is primary is
	// discovered, not configured.
	// Type: list of node. Required (at least one).
	Nodes []Node `yaml:"nodes"`
	// ReadRouting limits which replicas the replica (ro) listeners use.
	// Type: mapping (read_routing).
	ReadRouting ReadRouting `yaml:"read_routing"`
	// Failover is the cluster's failure detection and failover policy.
	// Type: mapping (failover).
	Failover FailoverConfig `yaml:"failover"`
	// Durability is what the controller enforces about acknowledged
	// commits: "async" (it leaves the servers' semi-sync settings alone; an
	// acknowledged write not yet shipped to a replica is lost at failover),
	// "semi_sync" (it turns semi-sync on, AFTER_SYNC, on the primary and
	// every replica, keeping the server's rpl_semi_sync_master_timeout: a
	// primary that waits longer than that for an acknowledgement falls back
	// to asynchronous replication, and writes committed then can be lost)
	// or "semi_sync_durable" (as semi_sync, plus
	// rpl_semi_sync_master_timeout=4294967295 ms and wait_no_slave=ON: a
	// commit returns only once a replica has it; without a replica, writes
	// wait — availability is traded for durability). The settings are
	// applied at start and after every promotion, checked every probe
	// round, and re-applied with an alarm when they drift.
	// Type: string. Default: "async".
	Durability string `yaml:"durability"`
	// TLS is how the proxy and the controller connect to the cluster's
	// nodes: plaintext unless tls.enabled.
	// Type: mapping (clusters[].tls).
	TLS ClusterTLS `yaml:"tls"`
}

// ClusterTLS is TLS towards a cluster's nodes: the proxy's backend
// connections (the proxy sends the SSLRequest after the server's greeting,
// runs the TLS handshake, then logs in, as a MySQL client does; MySQL
// "Protocol::SSLRequest") and the controller's probes (go-sql-driver with
// the same settings). A node with require_secure_transport=ON needs it.
type ClusterTLS struct {
	// Enabled turns TLS on for every connection to the cluster's nodes; a
	// node that does not offer TLS (no CLIENT_SSL in its greeting) is then
	// refused.
	// Type: bool. Default: false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the certificate authorities that sign the
	// nodes' certificates; empty uses the system roots.
	// Type: string (path). Optional.
	CAFile string `yaml:"ca_file"`
	// CertFile is a PEM client certificate presented to the nodes (for
	// accounts created with REQUIRE X509 / SUBJECT); set with key_file.
	// Type: string (path). Optional.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of cert_file.
	// Type: string (path). Optional.
	KeyFile string `yaml:"key_file"`
	// Verify is how a node's certificate is checked: "full" (signed by
	// ca_file and issued for the host of the node's address: a DNS name
	// or IP address in its subject alternative names, as
	// --ssl-verify-server-cert does), "ca" (signed by ca_file, any name)
	// or "none" (not checked: encryption without authentication).
	// Type: string (full|ca|none). Default: "full".
	Verify string `yaml:"verify"`
}

// TLS verification modes (clusters[].tls.verify).
const (
	VerifyFull = "full"
	VerifyCA   = "ca"
	VerifyNone = "none"
)

// Durability modes (clusters[].durability).
const (
	// DurabilityAsync: Switchyard does not manage semi-sync.
	DurabilityAsync = "async"
	// DurabilitySemiSync: semi-sync on, AFTER_SYNC, the server's timeout
	// (fallback to async after it).
	DurabilitySemiSync = "semi_sync"
	// DurabilitySemiSyncDurable: semi-sync that never falls back: a commit
	// waits until a replica acknowledges it.
	DurabilitySemiSyncDurable = "semi_sync_durable"
)

// Failover modes (clusters[].failover.mode).
const (
	// FailoverManual: a dead primary is reported (events, status) and an
	// operator runs `switchyard failover`.
	FailoverManual = "manual"
	// FailoverAuto: a dead primary confirmed over confirm_rounds probe
	// rounds is failed over by the controller, then automatic failover is
	// blocked for block_period or until `switchyard ack`.
	FailoverAuto = "auto"
)

// FailoverConfig is a cluster's failover policy. Planned switchovers,
// operator failovers, replica repair and maintenance mode are not affected
// by Mode.
type FailoverConfig struct {
	// Mode is "manual" (report a dead primary, never act alone) or "auto"
	// (fail over a dead primary after confirmation).
	// Type: string. Default: "manual".
	Mode string `yaml:"mode"`
	// ConfirmRounds is how many consecutive probe rounds must find the
	// primary dead before an automatic failover; the first sign of trouble
	// starts an extra round at once, and while the primary cannot be
	// reached and no replica has heard from it for a quarter of
	// silence_bound, rounds start every min(probe.interval, 100ms) instead
	// of waiting for the next tick.
	// When the verdict rests on a replica's silence (failover.silence_bound)
	// the rounds that confirm it start at least 150ms apart.
	// Type: integer (>= 1). Default: 2.
	ConfirmRounds int `yaml:"confirm_rounds"`
	// SilenceBound is how long a replica's IO thread may receive nothing
	// from the primary (no event, no heartbeat: Read_Master_Log_Pos,
	// Gtid_IO_Pos and Slave_received_heartbeats of SHOW ALL SLAVES STATUS
	// unchanged between two of the controller's reads of it: its probe
	// rounds and, between them, SHOW ALL SLAVES STATUS alone every
	// SilenceBound/12) before it counts as having lost the primary, the
	// sign of a partitioned or frozen primary whose TCP connections stay
	// open. The controller sets
	// MASTER_HEARTBEAT_PERIOD = SilenceBound/12 and slave_net_timeout =
	// 2 × SilenceBound (whole seconds, rounded up) on every replica it
	// points at a primary and aligns replicas it finds with other values
	// (MariaDB KB "CHANGE MASTER TO", "slave_net_timeout"). A primary
	// frozen for less than SilenceBound − SilenceBound/12 + the
	// confirmation spacing (150ms), 1.25s with the defaults, is never
	// failed over; for one isolated from everything the failover is
	// decided about SilenceBound + SilenceBound/12 + 0.15s +
	// probe.connect_timeout after (1.55s with the defaults), whatever
	// probe.interval is.
	// At least 1.2s, so that a 1s freeze never counts; at most 1m.
	// Type: duration. Default: 1.2s.
	SilenceBound Duration `yaml:"silence_bound"`
	// BlockPeriod is how long automatic failover stays blocked after any
	// failover (automatic or manual), unless `switchyard ack` lifts it.
	// Type: duration. Default: 1h0m0s.
	BlockPeriod Duration `yaml:"block_period"`
	// MaxLag excludes from promotion a replica whose last known
	// replication lag (Seconds_Behind_Master) exceeds it while the old
	// primary is reachable, unless forced. Once the primary is dead a
	// replica's lag is what it received but has not applied, which the
	// failover applies before promotion.
	// Type: duration. Default: 10s.
	MaxLag Duration `yaml:"max_lag"`
	// ReplicaParallelThreads, above 0, is the slave_parallel_threads the
	// controller keeps on the replicas it manages, with
	// slave_parallel_mode=optimistic (MariaDB): that many workers apply
	// what a replica receives, committing in the primary's order, so that
	// its relay log not yet applied stays short under write load — a
	// failover applies the candidate's before promoting it while clients
	// are held (max_hold). Set with every CHANGE MASTER the controller
	// issues and aligned on replicas found otherwise as the heartbeat
	// period is (STOP SLAVE, SET GLOBAL, START SLAVE: one replica per round
	// while the primary is healthy). 0 leaves the servers' settings alone.
	// At most 256.
	// Type: int. Default: 4.
	ReplicaParallelThreads *int `yaml:"replica_parallel_threads"`
	// RecoveryTimeout bounds one failover from decision to verified
	// primary; a failover that fails or exceeds it disables automatic
	// failover for the cluster and raises an alarm.
	// Type: duration. Default: 30s.
	RecoveryTimeout Duration `yaml:"recovery_timeout"`
	// RejoinOldPrimary makes a returning old primary whose GTID set the new
	// primary contains replicate from the new primary (read-only). One with
	// errant transactions is quarantined either way.
	// Type: bool. Default: true.
	RejoinOldPrimary *bool `yaml:"rejoin_old_primary"`
	// Hold makes primary listeners hold statements, instead of failing
	// them, while the primary is lost and an automatic failover can come
	// (mode auto, no maintenance, block or disable, a promotable replica):
	// statements not yet sent, new logins and idle sessions wait for the
	// new primary, at most max_hold. Where no automatic failover can come
	// (manual mode, blocked) statements fail at once with the reason.
	// (Peers: MaxScale's delayed_retry, Vitess's buffering during
	// reparents.)
	// Type: bool. Default: true.
	Hold *bool `yaml:"hold"`
	// MaxHold bounds how long one statement or login waits for a new
	// primary after the primary is lost; the client then gets error 1105
	// saying no primary came. When set it must exceed the detection time,
	// confirm_rounds × probe.interval. Unset, it is the largest of 5s,
	// (confirm_rounds + 3) × probe.interval and silence_bound + 3s (a
	// silent primary is detected only after silence_bound)
	// (EffectiveMaxHold), so it follows a change of probe.interval.
	// Type: duration. Optional.
	MaxHold Duration `yaml:"max_hold"`
	// TransactionReplay makes the primary (rw) listeners re-execute a
	// transaction interrupted by the loss of its primary on the new primary,
	// statement by statement, checking that every statement returns what it
	// returned the first time (a checksum of the rows and column count of a
	// result set, the affected rows and last insert id of an OK, the code of
	// an ERR), as MaxScale's readwritesplit transaction_replay does. A
	// transaction that cannot be replayed gets one error saying it was rolled
	// back. A COMMIT in flight when the primary was lost is resolved by its
	// commit marker (commit_outcome): an OK when it committed, a replay when
	// it did not; one that cannot be resolved (and any other statement
	// ending a transaction, or an autocommit write, in flight) is never
	// replayed: its client gets error 1105 saying its outcome is unknown.
	// Applies to sessions opened after the change.
	// Type: bool. Default: false.
	TransactionReplay bool `yaml:"transaction_replay"`
	// ReplayMaxBytes bounds the statements one session records for
	// transaction replay (COM_QUERY texts and COM_STMT_EXECUTE packets, in
	// bytes); a transaction that sends more is not replayable.
	// Type: integer (bytes, 1024..67108864). Default: 1048576.
	ReplayMaxBytes int `yaml:"replay_max_bytes"`
	// ReplayMaxStatements bounds how many statements one session records
	// for transaction replay; a transaction with more is not replayable.
	// Type: integer (1..100000). Default: 256.
	ReplayMaxStatements int `yaml:"replay_max_statements"`
	// CommitOutcome says how a COMMIT in flight when the primary was lost
	// is answered, with transaction_replay on. "marker": the proxy writes
	// one row of switchyard.commit_marker (keyed by proxy and session,
	// value a per-session sequence) inside every transaction that wrote,
	// pipelined with its COMMIT, and after the failover reads it on the
	// new primary: present, the client gets the COMMIT's OK; absent, the
	// transaction is replayed and committed there (Oracle's Transaction
	// Guard resolves a commit the same way, by a logical transaction id).
	// The application account needs SELECT, INSERT and DELETE on
	// switchyard.commit_marker; where the marker cannot be written, the
	// COMMIT gets the outcome-unknown error. "unknown": no marker, a
	// COMMIT in flight always gets error 1105 saying its outcome is
	// unknown. Ignored while transaction_replay is off.
	// Type: string ("marker" or "unknown"). Default: "marker".
	CommitOutcome string `yaml:"commit_outcome"`
	// ReplayChecksum says which replayed statements must return what they
	// returned the first time, with transaction_replay on. "full": every
	// one (MaxScale's transaction_replay_checksum=full). "no_consistent_reads":
	// every one except a plain consistent read — a SELECT with no locking
	// clause (FOR UPDATE, LOCK IN SHARE MODE, FOR SHARE), no INTO, no
	// variable assignment, no sequence, calling only built-in functions without side
	// effects — in a transaction that is not SERIALIZABLE, and whose replay
	// wrote no rows (session Handler_write/update/delete). Such a read
	// changes nothing and locks nothing: its result reaches only the
	// client, which already has it, while every write and locking read is
	// still compared, so the replayed transaction commits what the
	// original would have. The cost: under REPEATABLE READ the
	// transaction's reads after the failover may see rows committed by
	// others after its earlier reads (as under READ COMMITTED), instead of
	// the transaction being rolled back; under READ COMMITTED and READ
	// UNCOMMITTED nothing changes. Ignored while transaction_replay is off.
	// Type: string ("full" or "no_consistent_reads"). Default: "full".
	ReplayChecksum string `yaml:"replay_checksum"`
}

// Replay checksum modes (failover.replay_checksum).
const (
	ReplayChecksumFull              = "full"
	ReplayChecksumNoConsistentReads = "no_consistent_reads"
)

// Commit outcome modes (failover.commit_outcome).
const (
	CommitOutcomeMarker  = "marker"
	CommitOutcomeUnknown = "unknown"
)

// HoldOn reports failover.hold (true when unset).
func (f FailoverConfig) HoldOn() bool { return f.Hold == nil || *f.Hold }

// EffectiveMaxHold is failover.max_hold, or when unset the largest of 5s,
// (confirm_rounds + 3) × interval (probe.interval; 1s when unset) and
// silence_bound + 3s.
func (f FailoverConfig) EffectiveMaxHold(interval time.Duration) time.Duration {
	if f.MaxHold > 0 {
		return f.MaxHold.D()
	}
	if interval <= 0 {
		interval = time.Second
	}
	return max(5*time.Second, time.Duration(max(f.ConfirmRounds, 1)+3)*interval, f.SilenceBound.D()+3*time.Second)
}

// Silence bounds (failover.silence_bound).
const (
	// MaxReplicaParallelThreads is the largest
	// failover.replica_parallel_threads accepted.
	MaxReplicaParallelThreads = 256
	// DefaultSilenceBound is failover.silence_bound when unset.
	DefaultSilenceBound = 1200 * time.Millisecond
	// MinSilenceBound is the least failover.silence_bound accepted: with
	// heartbeats every bound/12 a 1s freeze never reaches it.
	MinSilenceBound = 1200 * time.Millisecond
	// MaxSilenceBound is the largest failover.silence_bound accepted.
	MaxSilenceBound = time.Minute
)

// HeartbeatPeriod is the MASTER_HEARTBEAT_PERIOD the controller sets on
// the replicas: SilenceBound/12 rounded to the millisecond (100ms with the
// default bound), so that a live primary that writes nothing is heard from
// that often, and a freeze leaves its replicas silent for at most the
// freeze plus that period.
func (f FailoverConfig) HeartbeatPeriod() time.Duration {
	b := f.SilenceBound.D()
	if b <= 0 {
		b = DefaultSilenceBound
	}
	return (b / 12).Round(time.Millisecond)
}

// ParallelThreads is replica_parallel_threads: its default before
// ApplyDefaults, 0 (leave the servers alone) for an explicit 0.
func (f FailoverConfig) ParallelThreads() int {
	if f.ReplicaParallelThreads == nil {
		return ReplicaParallelThreads
	}
	return *f.ReplicaParallelThreads
}

// ReplicaParallelThreads is the slave_parallel_threads (slave_parallel_mode
// optimistic) the controller gives a MariaDB replica that applies with one
// SQL thread: under a write load a single SQL thread falls behind its
// primary, and a switchover's catch-up or a failover's apply, while
// statements are held, waits for that backlog. It is the default of
// failover.replica_parallel_threads.
const ReplicaParallelThreads = 4

// NetTimeout is the slave_net_timeout the controller sets on the replicas,
// in whole seconds: 2 × SilenceBound rounded up (3 with the default
// bound). A replica whose source stays silent that long reconnects (its IO
// thread shows Connecting); it is above the silence bound so that the
// reconnect never turns a freeze the bound tolerates into a lost primary.
func (f FailoverConfig) NetTimeout() int {
	b := f.SilenceBound.D()
	if b <= 0 {
		b = DefaultSilenceBound
	}
	return int((2*b + time.Second - 1) / time.Second)
}

// Rejoin reports failover.rejoin_old_primary (true when unset).
func (f FailoverConfig) Rejoin() bool { return f.RejoinOldPrimary == nil || *f.RejoinOldPrimary }

// Node is one database server.
type Node struct {
	// Name identifies the node (CLI, status, events). Unique within a
	// cluster; letters, digits, '_', '.' and '-' only.
	// Type: string. Required.
	Name string `yaml:"name"`
	// Address is host:port of the MySQL protocol endpoint. Unique across all
	// clusters.
	// Type: string (host:port). Required.
	Address string `yaml:"address"`
	// Promotion is the promotion rule: "prefer" (chosen first among equally
	// up-to-date candidates), "neutral" or "must_not" (never promoted). A
	// cluster of several nodes needs at least one node that is not must_not.
	// Type: string. Default: "neutral".
	Promotion string `yaml:"promotion"`
}

// ReadRouting limits the replicas used for reads.
type ReadRouting struct {
	// MaxLag is the largest replication lag (Seconds_Behind_Master, whole
	// seconds) a replica may have and still serve reads. 0 means the default.
	// Type: duration. Default: 10s.
	MaxLag Duration `yaml:"max_lag"`
	// FallbackToPrimary sends reads to the primary when no replica is healthy.
	// Type: bool. Default: true.
	FallbackToPrimary *bool `yaml:"fallback_to_primary"`
}

// Listener is a client-facing endpoint of the proxy.
type Listener struct {
	// Name identifies the listener in logs and metrics. Unique; letters,
	// digits, '_', '.' and '-' only.
	// Type: string. Required.
	Name string `yaml:"name"`
	// Address is host:port to listen on; an empty host, 0.0.0.0 or [::]
	// listen on every interface. Port 0 picks a free port (tests).
	// Type: string (host:port). Required.
	Address string `yaml:"address"`
	// Cluster is the name of the cluster the listener routes to.
	// Type: string. Required.
	Cluster string `yaml:"cluster"`
	// Role is "primary" (read/write, to the current primary) or "replica"
	// (read-only, to healthy replicas).
	// Type: string. Required.
	Role string `yaml:"role"`
	// Pooling is how the listener's sessions hold backend connections, which
	// come from the proxy's per-node pools (proxy.pool): "session" (a client
	// holds one backend connection from its login to its logout; at logout
	// the connection is reset with COM_RESET_CONNECTION and goes back to the
	// pool instead of being closed) or "transaction" (a client holds one only
	// while a transaction is open, a command is in flight or its session
	// state cannot be re-created on another connection — temporary tables,
	// GET_LOCK, LOCK TABLES, user variables set from expressions, cursors,
	// SQL PREPARE, pending warnings or SQL_CALC_FOUND_ROWS; in between the
	// connection goes back to the pool and the next statement takes one,
	// re-creating the session's variables, schema and prepared statements
	// there, as ProxySQL's multiplexing and PgBouncer's transaction mode do).
	// Type: string (session|transaction). Default: "session".
	Pooling string `yaml:"pooling"`
	// TLS is the listener's client-side TLS: with tls.cert_file set the
	// listener offers CLIENT_SSL in its greeting and clients may switch to
	// TLS before they send their credentials.
	// Type: mapping (listeners[].tls).
	TLS ListenerTLS `yaml:"tls"`
}

// ListenerTLS is TLS between clients and a listener. The certificate and
// key are read again when either file changes (checked at most once a
// second, at a client's TLS handshake) and on SIGHUP; a pair that fails to
// load keeps the previous one (logged, and counted in
// switchyard_proxy_tls_reload_failures_total). Sessions already open keep
// their connection.
type ListenerTLS struct {
	// CertFile is the PEM certificate chain the listener presents (leaf
	// first). Setting it turns TLS on for the listener.
	// Type: string (path). Optional.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of cert_file (set both).
	// Type: string (path). Optional.
	KeyFile string `yaml:"key_file"`
	// CAFile is a PEM file of the certificate authorities that sign client
	// certificates; required unless client_cert is none.
	// Type: string (path). Optional.
	CAFile string `yaml:"ca_file"`
	// ClientCert is whether clients present a certificate: "none" (not
	// asked), "optional" (asked; one given must verify against ca_file) or
	// "required" (a client without a verified certificate is refused with
	// error 1045, as MariaDB refuses an account created with REQUIRE X509).
	// Type: string (none|optional|required). Default: "none".
	ClientCert string `yaml:"client_cert"`
	// Require refuses clients that do not switch to TLS, as MariaDB's
	// require_secure_transport=ON does, with the error MariaDB 10.11 sends
	// then: 1045 (28000) "Access denied for user 'u'@'host' (using
	// password: YES)", after the client's handshake response.
	// Type: bool. Default: false.
	Require bool `yaml:"require"`
	// MinVersion is the lowest TLS version accepted: "1.2" or "1.3".
	// Type: string. Default: "1.2".
	MinVersion string `yaml:"min_version"`
}

// Enabled reports whether the listener offers TLS (tls.cert_file is set).
func (t ListenerTLS) Enabled() bool { return t.CertFile != "" }

// Client certificate modes (listeners[].tls.client_cert).
const (
	ClientCertNone     = "none"
	ClientCertOptional = "optional"
	ClientCertRequired = "required"
)

// Listener pooling modes (listeners[].pooling).
const (
	// PoolingSession: a client holds one backend connection for its session.
	PoolingSession = "session"
	// PoolingTransaction: a client holds a backend connection per transaction.
	PoolingTransaction = "transaction"
)

// ProbeConfig controls the controller's probes.
type ProbeConfig struct {
	// Interval between probe rounds.
	// Type: duration. Default: 1s.
	Interval Duration `yaml:"interval"`
	// Timeout bounds one probe of one node, connect included. Must be less
	// than Interval.
	// Type: duration. Default: 500ms.
	Timeout Duration `yaml:"timeout"`
	// ConnectTimeout bounds the TCP connect of a probe (the SYN answered),
	// so that a node whose packets are dropped (partitioned, blackholed)
	// fails its probe that fast and the rounds that confirm a silent
	// primary follow each other quickly; the handshake and the statements
	// stay bounded by Timeout (a frozen or busy server accepts in the
	// kernel). Raise it for nodes with a network round trip above ~30ms.
	// At most Timeout; when Timeout is shorter than the default, unset means
	// Timeout.
	//
	// Proxies bound the TCP connect of their own backend checks by it too:
	// a node that answers neither that connect nor a second one sent at
	// once is reported unreachable in the proxy's registration (evidence
	// for the controller's quorum); commands in flight there are cut only
	// when a connect got no answer within proxy.connect_timeout.
	// Type: duration. Default: 100ms.
	ConnectTimeout Duration `yaml:"connect_timeout"`
}

// ProxyConfig controls the proxy's backend side.
type ProxyConfig struct {
	// ConnectTimeout bounds opening a backend connection: the TCP connect
	// within it, then the server's greeting, the login and the session
	// setup within it again, counted from the connect (a server in a
	// connection storm can be slow at both); at most 30s. A refused
	// connection fails at once regardless.
	// Type: duration. Default: 1s.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// MaxConnectionsPerBackend caps the proxy's connections to each node. The
	// server's own max_connections (151 by default in MariaDB) still applies:
	// past it the server refuses with error 1040.
	// Type: integer. Default: 2000.
	MaxConnectionsPerBackend int `yaml:"max_connections_per_backend"`
	// Pool controls the per-node pools of backend connections that
	// listeners take their connections from (listeners[].pooling).
	// Type: mapping (proxy.pool).
	Pool PoolConfig `yaml:"pool"`
	// MaxClientConnections caps the client sessions one proxy process holds
	// at once, over all its listeners. A client past it is answered like a
	// MariaDB server at max_connections: it gets the greeting, and after its
	// handshake response MySQL error 1040 (SQLSTATE 08004) "Too many
	// connections", and the connection is closed; sessions already open are
	// not affected. 0 derives it from the process's descriptor budget (the
	// RLIMIT_NOFILE soft limit, raised to the hard limit at start) and the
	// pools' caps: max((budget - reserve) / 2, budget - reserve - backend),
	// at least 1, where backend is proxy.max_connections_per_backend times
	// the configured nodes and the reserve is 256 descriptors (admin HTTP,
	// probes, the proxy's checks, the etcd client, logs) plus 256 when the
	// embedded etcd runs in the same process. Each client holds one
	// descriptor and at most one backend connection (session pooling: for
	// its session; transaction pooling: within a transaction), so the first
	// term is the bound when every client holds one and the second when the
	// caps bound the backend side. A value above the budget lets exhaustion
	// reach accept(2) and every other part of the process.
	// Type: integer. Default: 0.
	MaxClientConnections int `yaml:"max_client_connections"`
	// Failsafe lets a proxy that lost its registration in the topology store
	// keep routing writes to a cluster's primary while its direct checks of
	// every node confirm that primary (writable, every other node read-only
	// and replicating from it with recent progress); see
	// internal/topo/FAILSAFE.md, after Patroni's failsafe_mode. While it is
	// on, a failover that could not fence the old primary waits up to 1 s
	// more (the failsafe window) before promoting, unless the replicas'
	// silence already rules out any proxy's confirmation (a partitioned or
	// frozen primary: no wait). Off: a proxy without its registration
	// refuses writes.
	// Change it while the store is healthy (proxies and controller must
	// agree).
	// Type: bool. Default: true.
	Failsafe *bool `yaml:"failsafe"`
	// RSAKeyFile is a PEM RSA private key (PKCS #1 or PKCS #8) the proxy
	// uses for caching_sha2_password full authentication without TLS (the
	// client asks for the public key and sends the password encrypted with
	// it). Empty: a 2048-bit key is generated at start (clients that pin
	// the server's public key then need it again after every restart). A
	// relative path is relative to the config file's directory.
	// Type: string (path). Optional.
	RSAKeyFile string `yaml:"rsa_key_file,omitempty"`
	// BackendAccounts lets clients log in with the accounts of the
	// cluster's own servers, besides users.
	// Type: mapping (proxy.backend_accounts).
	BackendAccounts BackendAccounts `yaml:"backend_accounts"`
	// GOMAXPROCS is how many threads of the process running the proxy
	// (`switchyard proxy`, or `switchyard up` with its controller and
	// embedded etcd) execute Go code at once. 0 chooses: for `switchyard
	// proxy` (the proxy alone in its process), half the CPUs Go would use
	// (the machine's, or the cgroup's CPU limit), at least 1; for
	// `switchyard up` and any process that also runs the controller or the
	// embedded etcd, Go's default (every CPU), so probes, elections and the
	// store never queue behind sessions for a processor. A GOMAXPROCS
	// environment variable is kept. Fewer than the CPUs costs less CPU per query: each session
	// waits twice per query (for the command, for the response) and every
	// wake of a session with a processor idle starts a second thread
	// looking for work; with one processor on 2 cores shared with the
	// servers and the clients a point select cost about a third less
	// proxy CPU (README "Proxy throughput"; measured on 2 cores only). A
	// positive value is used as it is. Applied at start and live.
	// Type: integer. Default: 0.
	GOMAXPROCS int `yaml:"gomaxprocs"`
}

// BackendAccounts is the `proxy.backend_accounts:` section: pass-through
// of the servers' own accounts. The proxy reads every account's plugin and
// authentication_string from mysql.global_priv (MariaDB) or mysql.user
// (MySQL) of the cluster's primary (a replica when the primary does not
// answer) and authenticates clients against them, as MaxScale does from
// mysql.user; users listed in users take precedence. Accounts using
// mysql_native_password pass through (the proxy learns SHA1(password) from
// each login, as with users[].password_hash); ed25519 accounts and other
// plugins (unix_socket, gssapi, pam, caching_sha2_password) are refused
// with error 1251 naming the plugin; roles and anonymous accounts are
// ignored (a locked account gets the server's own error 4151 from the
// backend login). Host patterns are matched against the client's
// address (see README, Authentication).
type BackendAccounts struct {
	// Enabled turns pass-through on.
	// Type: bool. Default: false.
	Enabled bool `yaml:"enabled"`
	// Refresh is how often the accounts are read again; a login of an
	// account the proxy does not know also reads them again first, at most
	// once per second per cluster.
	// Type: duration. Default: 30s.
	Refresh Duration `yaml:"refresh"`
	// User is the account the proxy reads the accounts with; it needs
	// SELECT on mysql.global_priv (MariaDB) or mysql.user (MySQL). Empty:
	// credentials.monitor.
	// Type: string. Optional.
	User string `yaml:"user,omitempty"`
	// Password is User's password, written in the config file.
	// Type: string. Optional (with user: exactly one of password,
	// password_env, password_file).
	Password string `yaml:"password,omitempty"`
	// PasswordEnv names an environment variable holding User's password.
	// Type: string (variable name). Optional (with user: exactly one of
	// password, password_env, password_file).
	PasswordEnv string `yaml:"password_env,omitempty"`
	// PasswordFile is a file holding User's password (trailing newlines are
	// dropped); relative to the config file's directory.
	// Type: string (path). Optional (with user: exactly one of password,
	// password_env, password_file).
	PasswordFile string `yaml:"password_file,omitempty"`
}

// BackendAccountsCredential returns the account backend accounts are read with: User and
// its password sources, or credentials.monitor when User is empty.
func (c *Config) BackendAccountsCredential() Credential {
	b := c.Proxy.BackendAccounts
	if b.User == "" {
		return c.Credentials.Monitor
	}
	return Credential{User: b.User, Password: b.Password, PasswordEnv: b.PasswordEnv, PasswordFile: b.PasswordFile}
}

// PoolConfig is the `proxy.pool:` section: the proxy's pools of idle backend
// connections, one per node, user and negotiated capabilities.
type PoolConfig struct {
	// WaitTimeout bounds how long a session waits for a backend connection
	// when its node has proxy.max_connections_per_backend connections open
	// or being opened; past it the client gets error 1040 naming the limit.
	// At most 1m.
	// Type: duration. Default: 3s.
	WaitTimeout Duration `yaml:"wait_timeout"`
	// IdleTimeout closes a pooled backend connection that nobody used for
	// that long. Keep it below the servers' wait_timeout (28800s by default
	// in MariaDB), which would close it first.
	// Type: duration. Default: 1m0s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// ServerReservePercent is the share of each server's max_connections
	// the proxy leaves to other clients (admins, replication, monitoring,
	// other proxies): it reads the server's max_connections and
	// Threads_connected on its first connection to the node and again at
	// most every 2s while it opens connections, and keeps its own
	// connections there below max_connections less this reserve (rounded
	// up, at least 1) less what others hold, when that is lower than
	// proxy.max_connections_per_backend. At that ceiling a session closes
	// the least recently used idle connection of another user, capabilities
	// or charset, else waits up to wait_timeout; while the server is within
	// the reserve, idle connections above 4 per node that have been idle
	// for a second are closed at the next once-a-second sweep instead of
	// after idle_timeout. 1 to 90.
	// Type: integer. Default: 10.
	ServerReservePercent int `yaml:"server_reserve_percent"`
}

// FailsafeOn reports whether proxy failsafe is on (Failsafe unset or true).
func (p ProxyConfig) FailsafeOn() bool { return p.Failsafe == nil || *p.Failsafe }

// SwitchoverConfig controls planned switchovers.
type SwitchoverConfig struct {
	// CatchupTimeout bounds waiting for the candidate to apply every GTID of the
	// old primary; on timeout the switchover aborts and the old primary is made
	// writable again.
	// Type: duration. Default: 10s.
	CatchupTimeout Duration `yaml:"catchup_timeout"`
	// DrainTimeout bounds how long a switchover lets transactions already
	// open on the old primary finish once every proxy holds new statements;
	// what happens to those still open then is DrainMode. Must be less than
	// MaxHold (held statements wait through the drain).
	// Type: duration. Default: 5s.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// DrainMode is what a switchover does with transactions still open at
	// DrainTimeout: "abort" cancels the switchover and resumes on the old
	// primary (it was never fenced); "fail" ends those transactions (the
	// client gets an error saying the switchover rolled its transaction
	// back; the session itself continues on the new primary) and goes on.
	// Type: string (abort|fail). Default: "abort".
	DrainMode string `yaml:"drain_mode"`
	// MaxHold bounds how long a proxy holds one statement during a
	// switchover. Past it the statement is not run and the client gets MySQL
	// error 1105 saying a switchover is in progress. At most MaxDuration.
	// Type: duration. Default: 10s.
	MaxHold Duration `yaml:"max_hold"`
	// MaxHeld caps the statements one proxy holds at once during a
	// switchover; a statement beyond it gets the switchover-in-progress error
	// at once instead of being held.
	// Type: integer. Default: 10000.
	MaxHeld int `yaml:"max_held"`
	// MaxDuration bounds a switchover from the moment proxies start holding
	// statements to the publication of the new primary: the controller rolls
	// back past it, and a proxy stops holding (held statements get the
	// error) if the switchover is still not finished then. Must be at least
	// MaxHold and more than DrainTimeout plus CatchupTimeout.
	// Type: duration. Default: 20s.
	MaxDuration Duration `yaml:"max_duration"`
	// WarmThreshold is the buffer-pool warmth at which a candidate counts as
	// warm: its InnoDB data pages as a fraction of the primary's
	// (0 < x <= 1). `switchover --warm` replays the proxies' hot read set
	// until it is reached; `--require-warm` refuses a colder candidate.
	// Type: number. Default: 0.8.
	WarmThreshold float64 `yaml:"warm_threshold"`
	// WarmTimeout bounds the replay of `switchover --warm`; the switchover
	// goes on (reporting the warmth reached) unless --require-warm is set.
	// Type: duration. Default: 30s.
	WarmTimeout Duration `yaml:"warm_timeout"`
	// WarmConcurrency is how many connections replay the hot read set
	// against the candidate at once (1..64).
	// Type: integer. Default: 4.
	WarmConcurrency int `yaml:"warm_concurrency"`
}

// Drain modes (switchover.drain_mode).
const (
	// DrainAbort cancels a switchover whose drain did not finish.
	DrainAbort = "abort"
	// DrainFail ends the transactions still open at the drain bound.
	DrainFail = "fail"
)

// VersioningConfig is the `config:` section: the revision history kept in
// the topology store and the destructive-change guard.
type VersioningConfig struct {
	// HistoryLimit is how many revisions the store keeps (the newest; older
	// ones are deleted when a new one is applied). `switchyard config
	// rollback --to N` needs revision N among them.
	// Type: integer (1..10000). Default: 100.
	HistoryLimit int `yaml:"history_limit"`
	// Guard is the destructive-change guard.
	// Type: mapping (config.guard).
	Guard GuardConfig `yaml:"guard"`
}

// GuardConfig tunes the destructive-change guard (see Guard). The limits of
// the revision being replaced apply, so a config cannot loosen its own guard
// and use the looser limit in the same push.
type GuardConfig struct {
	// MaxRemovedFraction is the largest fraction of routes (listener →
	// cluster → node paths, see Config.Routes) one revision may remove
	// without --allow-destructive. 0 refuses any removal; 1 allows any short
	// of an empty config.
	// Type: number (0..1). Default: 0.2.
	MaxRemovedFraction *float64 `yaml:"max_removed_fraction"`
}

// DefaultHistoryLimit is the default of config.history_limit.
const DefaultHistoryLimit = 100

// DefaultMaxRemovedFraction is the default of config.guard.max_removed_fraction.
const DefaultMaxRemovedFraction = 0.2

// MaxRemovedFraction returns config.guard.max_removed_fraction, or its
// default when unset.
func (c *Config) MaxRemovedFraction() float64 {
	if c.Versioning.Guard.MaxRemovedFraction == nil {
		return DefaultMaxRemovedFraction
	}
	return *c.Versioning.Guard.MaxRemovedFraction
}

// Duration is a time.Duration written in YAML as a Go duration string ("1s",
// "500ms").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a Go duration string ("1s", "500ms", "1m30s"). An
// empty value (null) leaves the duration unset, so the default applies.
// Errors are *yaml.TypeError, so the decoder reports them with every other
// type error of the document.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into config.Duration", n.Line, n.ShortTag())}}
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid duration %q (use a number with a unit: 500ms, 1s, 2m)", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Parse decodes YAML strictly (unknown keys are errors) and applies defaults.
// It does not call Validate. Errors start with "config: " and carry the line
// and, where it can be told, the field path (`config: line 7:
// clusters[0].nodes[1].adress: unknown field (known: name, address,
// promotion)`); several problems are joined, one per line. An empty document
// (nothing, only comments, or null) and a file of several documents are
// errors.
func Parse(data []byte) (*Config, error) {
	c, err := decodeStrict(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.ApplyDefaults()
	return c, nil
}

// Load reads, parses and validates the file at path; it is ValidateFile.
func Load(path string) (*Config, error) {
	return ValidateFile(path)
}

// Marshal encodes the config as YAML.
func (c *Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }

// ApplyDefaults fills every unset field with its default.
func (c *Config) ApplyDefaults() {
	if c.Etcd.Prefix == "" {
		c.Etcd.Prefix = "/switchyard"
	}
	if c.Etcd.DialTimeout == 0 {
		c.Etcd.DialTimeout = Duration(2 * time.Second)
	}
	if c.Etcd.Embedded.DataDir == "" {
		c.Etcd.Embedded.DataDir = ".switchyard-etcd"
	}
	if c.Etcd.Embedded.ClientAddress == "" {
		c.Etcd.Embedded.ClientAddress = "127.0.0.1:2379"
	}
	if c.Etcd.Embedded.PeerAddress == "" {
		c.Etcd.Embedded.PeerAddress = "127.0.0.1:2380"
	}
	if c.Admin.Address == "" {
		c.Admin.Address = "127.0.0.1:8080"
	}
	for i := range c.Listeners {
		if c.Listeners[i].Pooling == "" {
			c.Listeners[i].Pooling = PoolingSession
		}
		if c.Listeners[i].TLS.ClientCert == "" {
			c.Listeners[i].TLS.ClientCert = ClientCertNone
		}
		if c.Listeners[i].TLS.MinVersion == "" {
			c.Listeners[i].TLS.MinVersion = "1.2"
		}
	}
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		if cl.Flavor == "" {
			cl.Flavor = "mariadb"
		}
		if cl.TLS.Verify == "" {
			cl.TLS.Verify = VerifyFull
		}
		for j := range cl.Nodes {
			if cl.Nodes[j].Promotion == "" {
				cl.Nodes[j].Promotion = "neutral"
			}
		}
		if cl.ReadRouting.MaxLag == 0 {
			cl.ReadRouting.MaxLag = Duration(10 * time.Second)
		}
		if cl.ReadRouting.FallbackToPrimary == nil {
			t := true
			cl.ReadRouting.FallbackToPrimary = &t
		}
		if cl.Durability == "" {
			cl.Durability = DurabilityAsync
		}
		f := &cl.Failover
		if f.Mode == "" {
			f.Mode = FailoverManual
		}
		if f.ConfirmRounds == 0 {
			f.ConfirmRounds = 2
		}
		if f.SilenceBound == 0 {
			f.SilenceBound = Duration(DefaultSilenceBound)
		}
		if f.BlockPeriod == 0 {
			f.BlockPeriod = Duration(time.Hour)
		}
		if f.MaxLag == 0 {
			f.MaxLag = Duration(10 * time.Second)
		}
		if f.ReplicaParallelThreads == nil {
			n := ReplicaParallelThreads
			f.ReplicaParallelThreads = &n
		}
		if f.RecoveryTimeout == 0 {
			f.RecoveryTimeout = Duration(30 * time.Second)
		}
		if f.RejoinOldPrimary == nil {
			t := true
			f.RejoinOldPrimary = &t
		}
		if f.ReplayMaxBytes == 0 {
			f.ReplayMaxBytes = 1 << 20
		}
		if f.ReplayMaxStatements == 0 {
			f.ReplayMaxStatements = 256
		}
		if f.CommitOutcome == "" {
			f.CommitOutcome = CommitOutcomeMarker
		}
		if f.ReplayChecksum == "" {
			f.ReplayChecksum = ReplayChecksumFull
		}
	}
	if c.Probe.Interval == 0 {
		c.Probe.Interval = Duration(time.Second)
	}
	if c.Probe.Timeout == 0 {
		c.Probe.Timeout = Duration(500 * time.Millisecond)
	}
	if c.Probe.ConnectTimeout == 0 {
		c.Probe.ConnectTimeout = min(Duration(100*time.Millisecond), c.Probe.Timeout)
	}
	if c.Proxy.ConnectTimeout == 0 {
		c.Proxy.ConnectTimeout = Duration(time.Second)
	}
	if c.Proxy.MaxConnectionsPerBackend == 0 {
		c.Proxy.MaxConnectionsPerBackend = 2000
	}
	if c.Proxy.Pool.WaitTimeout == 0 {
		c.Proxy.Pool.WaitTimeout = Duration(3 * time.Second)
	}
	if c.Proxy.Pool.IdleTimeout == 0 {
		c.Proxy.Pool.IdleTimeout = Duration(time.Minute)
	}
	if c.Proxy.Pool.ServerReservePercent == 0 {
		c.Proxy.Pool.ServerReservePercent = 10
	}
	if c.Proxy.Failsafe == nil {
		t := true
		c.Proxy.Failsafe = &t
	}
	if c.Proxy.BackendAccounts.Refresh == 0 {
		c.Proxy.BackendAccounts.Refresh = Duration(30 * time.Second)
	}
	for i := range c.Users {
		if c.Users[i].AuthPlugin == "" {
			c.Users[i].AuthPlugin = AuthNative
		}
	}
	if c.Switchover.CatchupTimeout == 0 {
		c.Switchover.CatchupTimeout = Duration(10 * time.Second)
	}
	sw := &c.Switchover
	if sw.DrainTimeout == 0 {
		sw.DrainTimeout = Duration(5 * time.Second)
	}
	if sw.DrainMode == "" {
		sw.DrainMode = DrainAbort
	}
	if sw.MaxHold == 0 {
		sw.MaxHold = Duration(10 * time.Second)
	}
	if sw.MaxHeld == 0 {
		sw.MaxHeld = 10000
	}
	if sw.MaxDuration == 0 {
		sw.MaxDuration = Duration(20 * time.Second)
	}
	if sw.WarmThreshold == 0 {
		sw.WarmThreshold = 0.8
	}
	if sw.WarmTimeout == 0 {
		sw.WarmTimeout = Duration(30 * time.Second)
	}
	if sw.WarmConcurrency == 0 {
		sw.WarmConcurrency = 4
	}
	for i := range c.Clusters {
		f := &c.Clusters[i].Failover
		if f.Hold == nil {
			t := true
			f.Hold = &t
		}
	}
	if c.Versioning.HistoryLimit == 0 {
		c.Versioning.HistoryLimit = DefaultHistoryLimit
	}
	if c.Versioning.Guard.MaxRemovedFraction == nil {
		f := DefaultMaxRemovedFraction
		c.Versioning.Guard.MaxRemovedFraction = &f
	}
	for i := range c.Hooks {
		h := &c.Hooks[i]
		if h.Timeout == 0 {
			h.Timeout = Duration(DefaultHookTimeout)
		}
		if h.Retries == nil {
			r := DefaultHookRetries
			h.Retries = &r
		}
		if h.Backoff == 0 {
			h.Backoff = Duration(DefaultHookBackoff)
		}
		if h.Queue == 0 {
			h.Queue = DefaultHookQueue
		}
	}
}

// Cluster returns the cluster named name, or nil.
func (c *Config) Cluster(name string) *Cluster {
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			return &c.Clusters[i]
		}
	}
	return nil
}

// Node returns the node named name, or nil.
func (cl *Cluster) Node(name string) *Node {
	for i := range cl.Nodes {
		if cl.Nodes[i].Name == name {
			return &cl.Nodes[i]
		}
	}
	return nil
}

// Resolve returns the credential's secret from whichever source is set.
// Errors name the source that failed; the secret itself never appears.
func (c Credential) Resolve() (string, error) {
	return resolveSecret(c.Password, c.PasswordEnv, c.PasswordFile)
}

// Secret returns the user's plaintext password if one of Password,
// PasswordEnv or PasswordFile is set; ok is false when only PasswordHash is
// configured.
func (u User) Secret() (password string, ok bool, err error) {
	if u.Password == "" && u.PasswordEnv == "" && u.PasswordFile == "" {
		return "", false, nil
	}
	p, err := resolveSecret(u.Password, u.PasswordEnv, u.PasswordFile)
	return p, err == nil, err
}

func resolveSecret(plain, env, file string) (string, error) {
	switch {
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", env)
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("password file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	default:
		return plain, nil
	}
}
