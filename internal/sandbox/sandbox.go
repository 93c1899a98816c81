package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// File names inside a sandbox directory.
const (
	// StateFile is the sandbox's state (JSON, mode 0600) under Cluster.Dir.
	StateFile = "sandbox.json"
	// ConfigFile is the generated switchyard.yaml under Cluster.Dir.
	ConfigFile = "switchyard.yaml"
)

// Account names created on every sandbox.
const (
	DefaultAppUser     = "app"
	DefaultMonitorUser = "switchyard_monitor"
	DefaultReplUser    = "repl"
	RootUser           = "root"
)

// Databases created on the primary (and replicated) by Up.
const (
	// SysbenchDatabase is the database sysbench uses by default.
	SysbenchDatabase = "sbtest"
	// OtherDatabase is a second, empty database (for tests of COM_INIT_DB
	// and per-database routing).
	OtherDatabase = "otherdb"
)

// Default addresses written into switchyard.yaml when Options leaves them
// empty and they are free; a busy default is replaced by a free loopback port.
const (
	DefaultListenerRW        = "127.0.0.1:6446"
	DefaultListenerRO        = "127.0.0.1:6447"
	DefaultAdminAddress      = "127.0.0.1:8080"
	DefaultEtcdClientAddress = "127.0.0.1:2379"
	DefaultEtcdPeerAddress   = "127.0.0.1:2380"
)

// ErrMariaDBNotFound is returned (wrapped) by Up and CheckBinaries when
// mariadbd or mariadb-install-db is neither on PATH nor in /usr/sbin or
// /usr/bin.
var ErrMariaDBNotFound = errors.New("mariadbd not found: install the Debian package mariadb-server (apt-get install -y mariadb-server)")

// Options configure Up. Zero values take the documented defaults.
type Options struct {
	// Dir is where everything lives; default "./.sandbox". Made absolute.
	Dir string
	// Nodes is the number of servers; default 3. Node 1 is the primary.
	Nodes int
	// BasePort: 0 picks free loopback ports; otherwise node i (1-based) gets
	// BasePort+i-1.
	BasePort int
	// SemiSync enables semi-synchronous replication: rpl_semi_sync_master_enabled
	// on the primary, rpl_semi_sync_slave_enabled on the replicas, wait point
	// AFTER_SYNC (MariaDB docs, "Semisynchronous Replication").
	SemiSync bool
	// Log receives progress messages; nil discards them.
	Log *slog.Logger
	// StopWithParent makes every mariadbd this process starts receive SIGKILL
	// when the starting process dies (Linux parent-death signal), so a test
	// binary that crashes leaves no server behind. The CLI leaves it false:
	// its nodes must outlive the command.
	StopWithParent bool
	// TemplateDir, when set, caches a pristine datadir made by
	// mariadb-install-db (one per server binary, shared by concurrent
	// processes); Up copies it for each node instead of running
	// mariadb-install-db per node. Tests set it to save CPU; "" installs each
	// node directly.
	TemplateDir string

	// ListenerRW is the rw listener address written to switchyard.yaml;
	// "" = 127.0.0.1:6446, or a free port if that is busy.
	ListenerRW string
	// ListenerRO is the ro listener address; "" = 127.0.0.1:6447 or a free port.
	ListenerRO string
	// AdminAddress is the admin HTTP address; "" = 127.0.0.1:8080 or a free port.
	AdminAddress string
	// EtcdClientAddress is the embedded etcd's client address; "" =
	// 127.0.0.1:2379 or a free port.
	EtcdClientAddress string
	// EtcdPeerAddress is the embedded etcd's peer address; "" = 127.0.0.1:2380
	// or a free port.
	EtcdPeerAddress string
	// IntegrityKey makes a new sandbox generate a random integrity key file
	// Dir/integrity.key (mode 0600, never stored in etcd) and name it as
	// etcd.integrity_key_file in switchyard.yaml, so config revisions,
	// cluster states and operator requests in etcd are signed and verified.
	// `switchyard sandbox up` sets it; false writes a config without a key.
	IntegrityKey bool
}

// Cluster is a sandbox as recorded in Dir/sandbox.json.
type Cluster struct {
	// Dir is the absolute sandbox directory.
	Dir string `json:"dir"`
	// ConfigPath is Dir/switchyard.yaml.
	ConfigPath string `json:"config_path"`
	// Nodes are the servers; Nodes[0] ("node1") was the primary at creation.
	Nodes []Node `json:"nodes"`

	// AppUser/AppPassword is the application account ("app"): DML, DDL and
	// PROCESS on *.*, but no SUPER, READ_ONLY ADMIN or ALL, so read_only=ON
	// fences it (error 1290).
	AppUser     string `json:"app_user"`
	AppPassword string `json:"app_password"`
	// MonitorUser/MonitorPassword is the controller's account
	// ("switchyard_monitor").
	MonitorUser     string `json:"monitor_user"`
	MonitorPassword string `json:"monitor_password"`
	// ReplUser/ReplPassword is the replication account ("repl").
	ReplUser     string `json:"repl_user"`
	ReplPassword string `json:"repl_password"`
	// RootPassword is the password of root@localhost and root@127.0.0.1 on
	// every node. The package connects as root over each node's unix socket.
	RootPassword string `json:"root_password"`

	// SemiSync records Options.SemiSync.
	SemiSync bool `json:"semi_sync"`
	// Addresses written into switchyard.yaml.
	ListenerRW        string `json:"listener_rw"`
	ListenerRO        string `json:"listener_ro"`
	AdminAddress      string `json:"admin_address"`
	EtcdClientAddress string `json:"etcd_client_address"`
	EtcdPeerAddress   string `json:"etcd_peer_address"`
	// SocketDir is a short temporary directory holding the sockets when Dir is
	// too long for a unix socket path; "" when sockets live under Dir. Down
	// removes it.
	SocketDir string `json:"socket_dir,omitempty"`
	// Ready is false while the first Up is still setting the sandbox up; an
	// unready sandbox can only be removed with Down.
	Ready bool `json:"ready"`

	log            *slog.Logger
	stopWithParent bool
}

// Node is one mariadbd of the sandbox.
type Node struct {
	// Name is "node1", "node2", ...
	Name string `json:"name"`
	// ServerID is the server_id: 1, 2, 3, ...
	ServerID uint32 `json:"server_id"`
	// Port is the TCP port on 127.0.0.1.
	Port int `json:"port"`
	// Address is "127.0.0.1:Port".
	Address string `json:"address"`
	// Paths of the node's datadir, unix socket, pid file, error log and
	// defaults file (the only option file mariadbd reads).
	DataDir      string `json:"data_dir"`
	Socket       string `json:"socket"`
	PIDFile      string `json:"pid_file"`
	ErrorLog     string `json:"error_log"`
	DefaultsFile string `json:"defaults_file"`
}

// Up brings up the sandbox in o.Dir and returns it.
//
// If Dir already holds a ready sandbox, Up is idempotent: it starts the nodes
// that are down (same datadirs) and returns the recorded cluster; running
// nodes keep their pids. Nodes must then be 0 or the existing count; the
// other options are ignored (the recorded ones apply). If Dir holds a sandbox whose first Up did not finish,
// Up fails and asks for Down with data removal. A fresh Up needs Dir to be
// absent or empty; on failure it stops what it started and removes Dir.
//
// Errors wrap ErrMariaDBNotFound when the server binaries are missing, and
// otherwise name the node and step that failed (with the tail of the node's
// error log when mariadbd exited or did not become ready within 30 s).
func Up(ctx context.Context, o Options) (*Cluster, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Dir == "" {
		o.Dir = ".sandbox"
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: directory %q: %w", o.Dir, err)
	}
	o.Dir = dir
	requestedNodes := o.Nodes
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 1 || o.Nodes > 64 {
		return nil, fmt.Errorf("sandbox: nodes must be between 1 and 64, got %d", o.Nodes)
	}
	if o.SemiSync && o.Nodes < 2 {
		return nil, fmt.Errorf("sandbox: semi-sync needs at least 2 nodes (a primary without replicas would wait rpl_semi_sync_master_timeout on every commit)")
	}
	if o.BasePort < 0 || o.BasePort+o.Nodes-1 > 65535 {
		return nil, fmt.Errorf("sandbox: base port %d with %d nodes is out of the port range (use 1..%d, or 0 for free ports)", o.BasePort, o.Nodes, 65536-o.Nodes)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
		c, err := Load(dir)
		if err != nil {
			return nil, err
		}
		c.log = log
		c.stopWithParent = o.StopWithParent
		if err := c.resume(ctx, requestedNodes, o.SemiSync, bins); err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := create(ctx, o, bins, log)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Load reads dir/sandbox.json. It does not check whether the nodes run; use
// Status for that.
func Load(dir string) (*Cluster, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: directory %q: %w", dir, err)
	}
	path := filepath.Join(abs, StateFile)
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sandbox: no sandbox in %s (%s missing); run `switchyard sandbox up --dir %s` first: %w", abs, StateFile, abs, err)
		}
		return nil, fmt.Errorf("sandbox: read state: %w", err)
	}
	var c Cluster
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("sandbox: %s is not valid sandbox state (remove the directory and run up again): %w", path, err)
	}
	if len(c.Nodes) == 0 {
		return nil, fmt.Errorf("sandbox: %s lists no nodes (remove the directory and run up again)", path)
	}
	c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	return &c, nil
}

// WithLogger returns c logging to log (nil discards) for subsequent calls.
func (c *Cluster) WithLogger(log *slog.Logger) *Cluster {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.log = log
	return c
}

func (c *Cluster) logger() *slog.Logger {
	if c.log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.log
}

// saveState writes sandbox.json atomically with mode 0600.
func (c *Cluster) saveState() error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("sandbox: encode state: %w", err)
	}
	return writeFileAtomic(filepath.Join(c.Dir, StateFile), append(data, '\n'), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("sandbox: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sandbox: write %s: %w", path, err)
	}
	return nil
}

// create sets up a fresh sandbox.
func create(ctx context.Context, o Options, bins binaries, log *slog.Logger) (c *Cluster, err error) {
	if entries, rerr := os.ReadDir(o.Dir); rerr == nil && len(entries) > 0 {
		return nil, fmt.Errorf("sandbox: %s exists, is not empty and holds no %s; remove it or choose another directory", o.Dir, StateFile)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: create %s: %w", o.Dir, err)
	}
	c = &Cluster{
		Dir:         o.Dir,
		ConfigPath:  filepath.Join(o.Dir, ConfigFile),
		AppUser:     DefaultAppUser,
		MonitorUser: DefaultMonitorUser,
		ReplUser:    DefaultReplUser,
		SemiSync:    o.SemiSync,

		log:            log,
		stopWithParent: o.StopWithParent,
	}
	defer func() {
		if err != nil {
			// The data is discarded: SIGKILL at once (a server still starting
			// may ignore SIGTERM for a while).
			cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := c.down(cleanupCtx, true, 0); derr != nil {
				log.Warn("sandbox cleanup after failed up", "dir", c.Dir, "err", derr)
			}
		}
	}()
	for _, p := range []*string{&c.AppPassword, &c.MonitorPassword, &c.ReplPassword, &c.RootPassword} {
		*p = randomPassword()
	}
	if err := c.assignAddresses(o); err != nil {
		return c, err
	}
	if err := c.layout(o); err != nil {
		return c, err
	}
	if err := WriteTLSFiles(c.TLS()); err != nil {
		return c, err
	}
	if o.IntegrityKey {
		if err := writeIntegrityKey(c.IntegrityKeyPath()); err != nil {
			return c, err
		}
	}
	if err := c.saveState(); err != nil {
		return c, err
	}
	log.Info("sandbox: installing and starting nodes", "dir", c.Dir, "nodes", len(c.Nodes))
	template := ""
	if o.TemplateDir != "" {
		if template, err = ensureTemplate(ctx, bins, o.TemplateDir); err != nil {
			return c, err
		}
	}
	var picker *portPicker
	if o.BasePort == 0 {
		picker = &portPicker{used: map[int]bool{}}
		for _, n := range c.Nodes {
			picker.used[n.Port] = true
		}
	}
	if err := c.parallel(func(i int) error { return c.bootstrapNode(ctx, bins, template, picker, i) }); err != nil {
		return c, err
	}
	if err := c.setupReplication(ctx); err != nil {
		return c, err
	}
	if err := c.writeConfig(); err != nil {
		return c, err
	}
	c.Ready = true
	if err := c.saveState(); err != nil {
		return c, err
	}
	log.Info("sandbox: up", "dir", c.Dir, "primary", c.Nodes[0].Address, "config", c.ConfigPath)
	return c, nil
}

// resume implements the idempotent Up on an existing sandbox.
// nodes is the requested node count (0 = any); semiSync the requested option.
func (c *Cluster) resume(ctx context.Context, nodes int, semiSync bool, bins binaries) error {
	if !c.Ready {
		return fmt.Errorf("sandbox: %s holds a sandbox whose first up did not finish; run `switchyard sandbox down --purge --dir %s` and up again", c.Dir, c.Dir)
	}
	if nodes != 0 && nodes != len(c.Nodes) {
		return fmt.Errorf("sandbox: %s already holds a %d-node sandbox, %d nodes requested; run `switchyard sandbox down --purge` first to change its size", c.Dir, len(c.Nodes), nodes)
	}
	if semiSync != c.SemiSync {
		c.logger().Warn("sandbox: semi-sync option differs from the existing sandbox; keeping the existing setting", "semi_sync", c.SemiSync)
	}
	restarted := make([]bool, len(c.Nodes))
	err := c.parallel(func(i int) error {
		if c.pid(i) > 0 {
			return c.waitReady(ctx, i, c.RootPassword, nil)
		}
		restarted[i] = true
		c.logger().Info("sandbox: starting stopped node", "node", c.Nodes[i].Name)
		return c.startNode(ctx, bins, i, c.RootPassword)
	})
	if err != nil {
		return err
	}
	if slices.Contains(restarted, true) {
		if err := c.restorePrimary(ctx, restarted); err != nil {
			return err
		}
	}
	if _, err := os.Stat(c.ConfigPath); err != nil {
		return c.writeConfig()
	}
	return nil
}

// restorePrimary gives back writes to the primary of a sandbox whose nodes
// were restarted. Every node starts read_only=ON (defaultsFile), so after
// all of them were stopped no node is writable, and a controller starting
// afresh has no primary to discover: every write is refused with 1290. The
// node that was primary when the nodes stopped is the one with no
// replication source, that every other node replicates from; when it is one
// of the restarted nodes and no node is writable it gets read_only=OFF again
// (and the semi-sync primary switch, with SemiSync). Anything else — a node
// unreachable, a writable node, no single such source — is left to the
// controller and the operator: the sandbox never chooses a primary.
func (c *Cluster) restorePrimary(ctx context.Context, restarted []bool) error {
	st := c.Status(ctx)
	source := -1
	for i, n := range st {
		if !n.Reachable || n.Error != "" || !n.ReadOnly {
			return nil
		}
		if n.ReplicatingFrom == "" {
			if source >= 0 {
				return nil
			}
			source = i
		}
	}
	if source < 0 || !restarted[source] {
		return nil
	}
	for i, n := range st {
		if i != source && n.SourceNode != c.Nodes[source].Name {
			return nil
		}
	}
	conn, done, err := c.rootConn(ctx, source, c.RootPassword)
	if err != nil {
		return err
	}
	defer done()
	stmts := []string{"SET GLOBAL read_only=0"}
	if c.SemiSync {
		stmts = append([]string{"SET GLOBAL rpl_semi_sync_master_enabled=ON"}, stmts...)
	}
	if err := execAll(ctx, conn, c.Nodes[source].Name, "restore the primary", stmts...); err != nil {
		return err
	}
	c.logger().Info("sandbox: primary restarted read-only; read_only=OFF again", "node", c.Nodes[source].Name)
	return nil
}

// parallel runs f for every node index at once and joins the errors.
func (c *Cluster) parallel(f func(i int) error) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// randomPassword returns 20 random characters from [a-zA-Z0-9], starting
// with a letter (so YAML never reads it as a number).
func randomPassword() string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	const alnum = letters + "0123456789"
	b := make([]byte, 20)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it aborts the program instead)
	out := make([]byte, len(b))
	out[0] = letters[int(b[0])%len(letters)]
	for i := 1; i < len(b); i++ {
		out[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(out)
}
