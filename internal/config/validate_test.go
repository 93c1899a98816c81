package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseHostPort(t *testing.T) {
	tests := []struct {
		addr    string
		kind    addrKind
		host    string
		port    int
		wantErr string
	}{
		{"127.0.0.1:3306", nodeAddr, "127.0.0.1", 3306, ""},
		{"db-1.example.internal:3306", nodeAddr, "db-1.example.internal", 3306, ""},
		{"db_1:3306", nodeAddr, "db_1", 3306, ""},
		{"[::1]:3306", nodeAddr, "::1", 3306, ""},
		{"[fe80::1%eth0]:3306", nodeAddr, "fe80::1%eth0", 3306, ""},
		{"localhost:65535", nodeAddr, "localhost", 65535, ""},
		{":6446", listenAddr, "", 6446, ""},
		{"127.0.0.1:0", listenAddr, "127.0.0.1", 0, ""},
		{"", nodeAddr, "", 0, "required (host:port)"},
		{":3306", nodeAddr, "", 0, "missing host"},
		{"127.0.0.1", nodeAddr, "", 0, "missing port number"},
		{"127.0.0.1:", nodeAddr, "", 0, "missing port number"},
		{"127.0.0.1:0", nodeAddr, "", 0, "port 0 is out of range (1..65535)"},
		{"127.0.0.1:65536", listenAddr, "", 0, "port 65536 is out of range (0..65535)"},
		{"127.0.0.1:99999999999999999999", nodeAddr, "", 0, "out of range"},
		{"127.0.0.1:+1", nodeAddr, "", 0, `port "+1" is not a number`},
		{"127.0.0.1:mysql", nodeAddr, "", 0, `port "mysql" is not a number`},
		{"::1:3306", nodeAddr, "", 0, "needs brackets"},
		{"[::1:3306", nodeAddr, "", 0, "missing ']'"},
		{"[::1]3306", nodeAddr, "", 0, "missing port number"},
		{"-db:3306", nodeAddr, "", 0, "neither an IP address nor a host name"},
		{"db..x:3306", nodeAddr, "", 0, "neither an IP address nor a host name"},
		{"http://db:3306", nodeAddr, "", 0, "a URL is not an address"},
		{strings.Repeat("a", 64) + ":1", nodeAddr, "", 0, "neither"},
	}
	for _, tt := range tests {
		host, port, msg := parseHostPort(tt.addr, tt.kind)
		if tt.wantErr == "" {
			if msg != "" || host != tt.host || port != tt.port {
				t.Errorf("parseHostPort(%q) = %q, %d, %q; want %q, %d", tt.addr, host, port, msg, tt.host, tt.port)
			}
			continue
		}
		if !strings.Contains(msg, tt.wantErr) {
			t.Errorf("parseHostPort(%q) message %q, want it to contain %q", tt.addr, msg, tt.wantErr)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	tests := []struct{ ep, key, wantErr string }{
		{"10.0.0.1:2379", "http://10.0.0.1:2379", ""},
		{"http://10.0.0.1:2379", "http://10.0.0.1:2379", ""},
		{"http://10.0.0.1:2379/", "http://10.0.0.1:2379", ""},
		{"https://ETCD.example:2379", "https://etcd.example:2379", ""},
		{"https://[::1]:2379", "https://::1:2379", ""},
		{"etcd", "", "missing port number"},
		{"http://etcd", "", "missing port number"},
		{"ftp://etcd:21", "", "scheme must be http or https"},
		{"http://user:pw@etcd:2379", "", "no user, path or query"},
		{"http://etcd:2379?x=1", "", "no user, path or query"},
		{"http://%zz:1", "", "is not a URL"},
		{"http://user:pw@%zz:1", "", `"http://xxxxx@%zz:1" is not a URL`},
	}
	for _, tt := range tests {
		key, msg := checkEndpoint(tt.ep)
		if tt.wantErr == "" {
			if msg != "" || key != tt.key {
				t.Errorf("checkEndpoint(%q) = %q, %q; want key %q", tt.ep, key, msg, tt.key)
			}
			continue
		}
		if !strings.Contains(msg, tt.wantErr) {
			t.Errorf("checkEndpoint(%q) = %q, want it to contain %q", tt.ep, msg, tt.wantErr)
		}
		if strings.Contains(msg, "pw@") {
			t.Errorf("checkEndpoint(%q) leaks user info: %q", tt.ep, msg)
		}
	}
}

// TestValidateCases covers rules on configs built in code (as the sandbox
// and the tests of other packages build them) rather than parsed.
func TestValidateCases(t *testing.T) {
	base := func() *Config {
		c := &Config{
			Credentials: Credentials{
				Monitor:     Credential{User: "monitor", Password: "m"},
				Replication: Credential{User: "repl", PasswordEnv: "REPL_PW"},
			},
			Users: []User{{Name: "app", PasswordHash: "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"}},
			Clusters: []Cluster{{Name: "main", Nodes: []Node{
				{Name: "db1", Address: "127.0.0.1:3306"},
				{Name: "db2", Address: "127.0.0.1:3307", Promotion: PromotionMustNot},
			}}},
			Listeners: []Listener{
				{Name: "rw", Address: "127.0.0.1:0", Cluster: "main", Role: RolePrimary},
				{Name: "ro", Address: "127.0.0.1:0", Cluster: "main", Role: RoleReplica},
			},
			Admin: AdminConfig{Address: AdminOff},
		}
		c.ApplyDefaults()
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("base config: %v", err)
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // "" means valid
	}{
		{"replica parallel threads", func(c *Config) { n := 4; c.Clusters[0].Failover.ReplicaParallelThreads = &n }, ""},
		{"replica parallel threads negative", func(c *Config) { n := -1; c.Clusters[0].Failover.ReplicaParallelThreads = &n },
			"clusters[0].failover.replica_parallel_threads: -1 must be between 0 (leave the servers' setting) and 256"},
		{"replica parallel threads too many", func(c *Config) { n := 257; c.Clusters[0].Failover.ReplicaParallelThreads = &n },
			"replica_parallel_threads: 257 must be between 0"},
		{"external etcd frees the embedded ports", func(c *Config) {
			c.Etcd.Endpoints = []string{"10.0.0.1:2379"}
			c.Etcd.Embedded.PeerAddress = c.Etcd.Embedded.ClientAddress
		}, ""},
		{"embedded etcd ports still checked without endpoints", func(c *Config) {
			c.Etcd.Embedded.PeerAddress = c.Etcd.Embedded.ClientAddress
		}, "etcd.embedded.peer_address: 127.0.0.1:2379 already used by etcd.embedded.client_address"},
		{"admin off does not conflict", func(c *Config) {
			c.Listeners[0].Address = "127.0.0.1:8080"
		}, ""},
		{"admin on conflicts", func(c *Config) {
			c.Listeners[0].Address = "127.0.0.1:8080"
			c.Admin.Address = ":8080"
		}, `admin.address: :8080 already used by listener "rw"`},
		{"different hosts same port are fine", func(c *Config) {
			c.Listeners[0].Address = "127.0.0.1:6446"
			c.Listeners[1].Address = "127.0.0.2:6446"
		}, ""},
		{"IPv4-mapped IPv6 is the same host", func(c *Config) {
			c.Listeners[0].Address = "127.0.0.1:6446"
			c.Listeners[1].Address = "[::ffff:127.0.0.1]:6446"
		}, `listeners[1].address: [::ffff:127.0.0.1]:6446 already used by listener "rw"`},
		{"explicit zero max_lag means default", func(c *Config) {
			c.Clusters[0].ReadRouting.MaxLag = 0
			c.ApplyDefaults()
		}, ""},
		{"zero max connections after defaults is impossible, negative is not", func(c *Config) {
			c.Proxy.MaxConnectionsPerBackend = -1
		}, "proxy.max_connections_per_backend: -1 must be at least 1"},
		{"unknown pooling mode", func(c *Config) {
			c.Listeners[1].Pooling = "statement"
		}, `listeners[1].pooling: "statement" is not a pooling mode (use session or transaction)`},
		{"transaction pooling", func(c *Config) {
			c.Listeners[0].Pooling = PoolingTransaction
		}, ""},
		{"negative pool wait", func(c *Config) {
			c.Proxy.Pool.WaitTimeout = -1
		}, "proxy.pool.wait_timeout: -1ns must be positive"},
		{"pool wait over a minute", func(c *Config) {
			c.Proxy.Pool.WaitTimeout = Duration(2 * time.Minute)
		}, "proxy.pool.wait_timeout: 2m0s is more than 1m0s"},
		{"negative pool idle timeout", func(c *Config) {
			c.Proxy.Pool.IdleTimeout = -1
		}, "proxy.pool.idle_timeout: -1ns must be positive"},
		{"negative max client connections", func(c *Config) {
			c.Proxy.MaxClientConnections = -5
		}, "proxy.max_client_connections: -5 must be 0 (derived from the descriptor budget) or positive"},
		{"explicit max client connections", func(c *Config) {
			c.Proxy.MaxClientConnections = 100
		}, ""},
		{"connect timeout of exactly 30s is allowed", func(c *Config) {
			c.Proxy.ConnectTimeout = Duration(MaxConnectTimeout)
		}, ""},
		{"probe timeout equal to interval", func(c *Config) {
			c.Probe.Timeout = c.Probe.Interval
		}, "probe.timeout: 1s must be less than probe.interval (1s)"},
		{"name of 64 characters", func(c *Config) {
			c.Clusters[0].Name = strings.Repeat("c", 64)
			c.Listeners[0].Cluster = c.Clusters[0].Name
			c.Listeners[1].Cluster = c.Clusters[0].Name
		}, ""},
		{"name of 65 characters", func(c *Config) {
			c.Clusters[0].Name = strings.Repeat("c", 65)
			c.Listeners[0].Cluster = c.Clusters[0].Name
			c.Listeners[1].Cluster = c.Clusters[0].Name
		}, "is longer than 64 characters"},
		{"dot names", func(c *Config) {
			c.Clusters[0].Nodes[0].Name = ".."
		}, `clusters[0].nodes[0].name: ".." is not a usable name`},
		{"env name with digit first", func(c *Config) {
			c.Credentials.Replication.PasswordEnv = "1PW"
		}, "credentials.replication.password_env: is not an environment variable name"},
		{"prefix with empty segment", func(c *Config) {
			c.Etcd.Prefix = "/a//b"
		}, `etcd.prefix: "/a//b" must not contain an empty segment`},
		{"prefix with space", func(c *Config) {
			c.Etcd.Prefix = "/a b"
		}, `etcd.prefix: "/a b" must not contain spaces`},
		{"empty data dir", func(c *Config) {
			c.Etcd.Embedded.DataDir = ""
		}, "etcd.embedded.data_dir: must not be empty"},
		{"single must_not node is fine, two are not", func(c *Config) {
			c.Clusters[0].Nodes[0].Promotion = PromotionMustNot
		}, "clusters[0].nodes: every node has promotion must_not"},
		{"bad promotion is not also reported as all must_not", func(c *Config) {
			c.Clusters[0].Nodes[0].Promotion = "sometimes"
		}, `clusters[0].nodes[0].promotion: "sometimes" is not a promotion rule`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("validated, want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("error %q, want %q", err, tt.wantErr)
			case tt.wantErr != "" && strings.Count(err.Error(), "\n") > 0:
				t.Errorf("one mistake gave several problems:\n%v", err)
			}
		})
	}
}

func TestNullDurationMeansDefault(t *testing.T) {
	c, err := Parse([]byte("probe:\n  interval:\n  timeout: 100ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Probe.Interval.D().String() != "1s" || c.Probe.Timeout.D().String() != "100ms" {
		t.Errorf("probe = %+v", c.Probe)
	}
}
