package config

import (
	"bytes"
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
type Config struct {
	// Etcd says where the topology store is. With no endpoints, `switchyard up`
	// starts an embedded single-node etcd.
	Etcd EtcdConfig `yaml:"etcd"`
	// Admin is the HTTP admin endpoint (/healthz, /metrics, /api/...).
	Admin AdminConfig `yaml:"admin"`
	// Credentials are the controller's own accounts on every node.
	Credentials Credentials `yaml:"credentials"`
	// Users are the application accounts clients log in with through the proxy.
	Users []User `yaml:"users"`
	// Clusters are the replication clusters Switchyard manages.
	Clusters []Cluster `yaml:"clusters"`
	// Listeners are the proxy's client-facing endpoints.
	Listeners []Listener `yaml:"listeners"`
	// Probe controls how the controller probes nodes.
	Probe ProbeConfig `yaml:"probe"`
	// Proxy controls backend connections of the proxy.
	Proxy ProxyConfig `yaml:"proxy"`
	// Switchover controls planned switchovers.
	Switchover SwitchoverConfig `yaml:"switchover"`
}

// EtcdConfig locates the topology store.
type EtcdConfig struct {
	// Endpoints of an external etcd cluster ("host:port" or URLs). Empty means
	// `switchyard up` embeds a single-node etcd.
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the key prefix for all of Switchyard's keys. Default "/switchyard".
	Prefix string `yaml:"prefix"`
	// DialTimeout bounds connecting to etcd. Default 2s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// Embedded configures the embedded etcd (used only when Endpoints is empty).
	Embedded EmbeddedEtcd `yaml:"embedded"`
}

// EmbeddedEtcd configures the single-node etcd that `switchyard up` embeds.
type EmbeddedEtcd struct {
	// DataDir holds etcd's data. Default ".switchyard-etcd" (relative to the
	// config file's directory).
	DataDir string `yaml:"data_dir"`
	// ClientAddress is the loopback host:port etcd serves clients on. Default
	// "127.0.0.1:2379".
	ClientAddress string `yaml:"client_address"`
	// PeerAddress is the host:port for etcd's peer traffic. Default
	// "127.0.0.1:2380".
	PeerAddress string `yaml:"peer_address"`
}

// AdminConfig is the admin HTTP endpoint.
type AdminConfig struct {
	// Address is host:port for /healthz and /metrics. Default "127.0.0.1:8080";
	// "" after defaults is impossible, "off" disables it.
	Address string `yaml:"address"`
}

// Credentials are the accounts the controller uses on the database nodes.
type Credentials struct {
	// Monitor is used for probes and for reparent operations (read_only,
	// CHANGE MASTER, KILL). It needs the privileges listed in README.
	Monitor Credential `yaml:"monitor"`
	// Replication is the account replicas use to connect to the primary.
	Replication Credential `yaml:"replication"`
}

// Credential is a user and a secret that may come from the file itself, an
// environment variable or a file (exactly one of them).
type Credential struct {
	User         string `yaml:"user"`
	Password     string `yaml:"password"`
	PasswordEnv  string `yaml:"password_env"`
	PasswordFile string `yaml:"password_file"`
}

// User is an application account accepted by the proxy.
//
// The proxy authenticates clients with mysql_native_password. It needs either
// the plaintext password (Password/PasswordEnv/PasswordFile) or the
// mysql_native_password hash ("*" + 40 hex digits, as in mysql.user, i.e.
// SHA1(SHA1(password))). With only the hash, the proxy recovers SHA1(password)
// from the client's own login scramble and uses it to authenticate to backends
// as that user; until a client of that user has logged in once, the proxy cannot
// open backend connections for it.
type User struct {
	Name         string `yaml:"name"`
	Password     string `yaml:"password"`
	PasswordEnv  string `yaml:"password_env"`
	PasswordFile string `yaml:"password_file"`
	PasswordHash string `yaml:"password_hash"`
}

// Cluster is one replication cluster (one primary, N replicas).
type Cluster struct {
	// Name identifies the cluster in listeners, CLI flags and the store.
	Name string `yaml:"name"`
	// Flavor is "mariadb" (default) or "mysql".
	Flavor string `yaml:"flavor"`
	// Nodes are every server of the cluster; which one is primary is discovered.
	Nodes []Node `yaml:"nodes"`
	// ReadRouting limits which replicas the replica (ro) listeners use.
	ReadRouting ReadRouting `yaml:"read_routing"`
}

// Node is one database server.
type Node struct {
	// Name identifies the node (CLI, status, events). Unique within a cluster.
	Name string `yaml:"name"`
	// Address is host:port of the MySQL protocol endpoint.
	Address string `yaml:"address"`
	// Promotion is the promotion rule: "prefer", "neutral" (default) or "must_not".
	Promotion string `yaml:"promotion"`
}

// ReadRouting limits the replicas used for reads.
type ReadRouting struct {
	// MaxLag is the largest replication lag (Seconds_Behind_Master) a replica
	// may have and still serve reads. Default 10s.
	MaxLag Duration `yaml:"max_lag"`
	// FallbackToPrimary sends reads to the primary when no replica is healthy.
	// Default true.
	FallbackToPrimary *bool `yaml:"fallback_to_primary"`
}

// Listener is a client-facing endpoint of the proxy.
type Listener struct {
	// Name identifies the listener. Unique.
	Name string `yaml:"name"`
	// Address is host:port to listen on.
	Address string `yaml:"address"`
	// Cluster is the name of the cluster the listener routes to.
	Cluster string `yaml:"cluster"`
	// Role is "primary" (read/write, to the current primary) or "replica"
	// (read-only, to healthy replicas).
	Role string `yaml:"role"`
}

// ProbeConfig controls the controller's probes.
type ProbeConfig struct {
	// Interval between probe rounds. Default 1s.
	Interval Duration `yaml:"interval"`
	// Timeout bounds one probe of one node, connect included. Default 500ms.
	// Must be less than Interval.
	Timeout Duration `yaml:"timeout"`
}

// ProxyConfig controls the proxy's backend side.
type ProxyConfig struct {
	// ConnectTimeout bounds opening a backend connection (TCP + handshake).
	// Default 1s. A refused connection fails at once regardless.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// MaxConnectionsPerBackend caps backend connections per node. Default 2000.
	MaxConnectionsPerBackend int `yaml:"max_connections_per_backend"`
}

// SwitchoverConfig controls planned switchovers.
type SwitchoverConfig struct {
	// CatchupTimeout bounds waiting for the candidate to apply every GTID of the
	// old primary; on timeout the switchover aborts and the old primary is made
	// writable again. Default 10s.
	CatchupTimeout Duration `yaml:"catchup_timeout"`
}

// Duration is a time.Duration written in YAML as a Go duration string ("1s",
// "500ms").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like \"1s\" or \"500ms\"", n.Line)
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("line %d: invalid duration %q (use units like \"500ms\", \"1s\")", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Parse decodes YAML strictly (unknown keys are errors) and applies defaults.
// It does not call Validate.
func Parse(data []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if err.Error() == "EOF" {
			return nil, fmt.Errorf("config: empty document")
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	c.ApplyDefaults()
	return &c, nil
}

// Load reads, parses and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
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
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		if cl.Flavor == "" {
			cl.Flavor = "mariadb"
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
	}
	if c.Probe.Interval == 0 {
		c.Probe.Interval = Duration(time.Second)
	}
	if c.Probe.Timeout == 0 {
		c.Probe.Timeout = Duration(500 * time.Millisecond)
	}
	if c.Proxy.ConnectTimeout == 0 {
		c.Proxy.ConnectTimeout = Duration(time.Second)
	}
	if c.Proxy.MaxConnectionsPerBackend == 0 {
		c.Proxy.MaxConnectionsPerBackend = 2000
	}
	if c.Switchover.CatchupTimeout == 0 {
		c.Switchover.CatchupTimeout = Duration(10 * time.Second)
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
