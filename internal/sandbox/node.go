package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

const (
	// readyTimeout bounds waiting for a started mariadbd to accept connections.
	readyTimeout = 30 * time.Second
	// downGrace is how long Down waits after SIGTERM before SIGKILL.
	downGrace = 10 * time.Second
	// stopGrace is how long StopNode waits after SIGTERM before SIGKILL.
	stopGrace = 30 * time.Second
	// maxSocketPath keeps socket paths under the 107-byte sun_path limit.
	maxSocketPath = 100
)

type binaries struct {
	mariadbd  string
	installDB string
}

// CheckBinaries reports whether mariadbd and mariadb-install-db can be found
// (PATH, then /usr/sbin and /usr/bin). The error wraps ErrMariaDBNotFound.
func CheckBinaries() error {
	_, err := findBinaries()
	return err
}

// findBinaries looks on PATH, then in the directories Debian and source
// installs use (mariadbd is in /usr/sbin, not on every user's PATH).
func findBinaries() (binaries, error) {
	return findBinariesIn([]string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"})
}

func findBinariesIn(dirs []string) (binaries, error) {
	var b binaries
	for _, x := range []struct {
		name string
		dst  *string
	}{{"mariadbd", &b.mariadbd}, {"mariadb-install-db", &b.installDB}} {
		p, err := exec.LookPath(x.name)
		if err != nil {
			for _, d := range dirs {
				cand := filepath.Join(d, x.name)
				if st, serr := os.Stat(cand); serr == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
					p, err = cand, nil
					break
				}
			}
		}
		if err != nil {
			if x.name == "mariadbd" {
				return b, ErrMariaDBNotFound
			}
			return b, fmt.Errorf("mariadb-install-db not found: %w", ErrMariaDBNotFound)
		}
		*x.dst = p
	}
	return b, nil
}

// assignAddresses picks node ports and the addresses for switchyard.yaml.
func (c *Cluster) assignAddresses(o Options) error {
	defaults := []struct {
		opt, def string
		dst      *string
	}{
		{o.ListenerRW, DefaultListenerRW, &c.ListenerRW},
		{o.ListenerRO, DefaultListenerRO, &c.ListenerRO},
		{o.AdminAddress, DefaultAdminAddress, &c.AdminAddress},
		{o.EtcdClientAddress, DefaultEtcdClientAddress, &c.EtcdClientAddress},
		{o.EtcdPeerAddress, DefaultEtcdPeerAddress, &c.EtcdPeerAddress},
	}
	need := 0
	if o.BasePort == 0 {
		need = o.Nodes
	}
	for _, d := range defaults {
		if d.opt == "" && !addrFree(d.def) {
			need++
		}
	}
	free, err := freeLoopbackPorts(need)
	if err != nil {
		return err
	}
	next := func() int { p := free[0]; free = free[1:]; return p }
	ports := make([]int, o.Nodes)
	for i := range ports {
		if o.BasePort == 0 {
			ports[i] = next()
		} else {
			ports[i] = o.BasePort + i
			if !addrFree(loopback(ports[i])) {
				return fmt.Errorf("sandbox: port %d for node%d is already in use; choose another base port or 0 for free ports", ports[i], i+1)
			}
		}
	}
	seen := map[string]string{}
	for i, p := range ports {
		seen[loopback(p)] = fmt.Sprintf("node%d", i+1)
	}
	for _, d := range defaults {
		switch {
		case d.opt != "":
			*d.dst = d.opt
		case addrFree(d.def):
			*d.dst = d.def
		default:
			*d.dst = loopback(next())
		}
		if other, dup := seen[*d.dst]; dup {
			return fmt.Errorf("sandbox: address %s is used twice (also by %s); choose distinct addresses", *d.dst, other)
		}
		seen[*d.dst] = "a listener"
	}
	c.Nodes = make([]Node, o.Nodes)
	for i := range c.Nodes {
		c.Nodes[i] = Node{
			Name:     fmt.Sprintf("node%d", i+1),
			ServerID: uint32(i + 1),
			Port:     ports[i],
			Address:  loopback(ports[i]),
		}
	}
	return nil
}

// layout fills in every node's paths.
func (c *Cluster) layout(o Options) error {
	if len(filepath.Join(c.Dir, fmt.Sprintf("node%d", o.Nodes), "mariadbd.sock")) > maxSocketPath {
		d, err := os.MkdirTemp("", "sy")
		if err != nil {
			return fmt.Errorf("sandbox: create socket directory: %w", err)
		}
		c.SocketDir = d
	}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		nd := filepath.Join(c.Dir, n.Name)
		n.DataDir = filepath.Join(nd, "data")
		n.DefaultsFile = filepath.Join(nd, "my.cnf")
		n.ErrorLog = filepath.Join(nd, "error.log")
		n.PIDFile = filepath.Join(nd, "mariadbd.pid")
		n.Socket = filepath.Join(nd, "mariadbd.sock")
		if c.SocketDir != "" {
			n.Socket = filepath.Join(c.SocketDir, n.Name+".sock")
		}
	}
	return nil
}

// defaultsFile renders node i's option file. Every node starts with
// read_only=ON — the safe setting for a restart, since which node is primary
// changes with switchovers; Up makes node1 writable at creation, and after a
// restart the controller makes the published primary writable again. With
// semi-sync every node is a semi-sync replica (so any of them can be promoted
// into a semi-sync primary); the primary switch is turned on at run time.
func (c *Cluster) defaultsFile(i int, osUser string) []byte {
	n := c.Nodes[i]
	readOnly := "ON"
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated by switchyard sandbox; mariadbd reads only this file.\n[mariadbd]\n")
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	kv("user", osUser)
	kv("datadir", n.DataDir)
	kv("socket", n.Socket)
	kv("pid-file", n.PIDFile)
	kv("log-error", n.ErrorLog)
	kv("tmpdir", filepath.Join(filepath.Dir(n.DefaultsFile), "tmp"))
	kv("bind-address", "127.0.0.1")
	kv("port", n.Port)
	kv("report-host", "127.0.0.1")
	kv("report-port", n.Port)
	kv("server-id", n.ServerID)
	kv("log-bin", "mariadb-bin")
	kv("log-bin-index", "mariadb-bin.index")
	kv("relay-log", "relay-bin")
	kv("relay-log-index", "relay-bin.index")
	kv("log-slave-updates", "ON")
	kv("binlog-format", "ROW")
	kv("gtid-strict-mode", "ON")
	kv("gtid-domain-id", 0)
	kv("read-only", readOnly)
	// The controller's slave_net_timeout for the default
	// failover.silence_bound (config.FailoverConfig.NetTimeout).
	kv("slave-net-timeout", config.FailoverConfig{}.NetTimeout())
	// The parallel apply the controller gives a replica with one SQL
	// thread (config.ReplicaParallelThreads), so it has nothing to align.
	kv("slave-parallel-threads", config.ReplicaParallelThreads)
	kv("slave-parallel-mode", "optimistic")
	kv("skip-name-resolve", "ON")
	kv("max-connections", 1000)
	kv("max-allowed-packet", "64M")
	kv("innodb-buffer-pool-size", "64M")
	kv("innodb-log-file-size", "16M")
	kv("character-set-server", "utf8mb4")
	kv("collation-server", "utf8mb4_general_ci")
	// information_schema.METADATA_LOCK_INFO names the holder of a global
	// read lock (FLUSH TABLES WITH READ LOCK) when writes are blocked; the
	// plugin ships with mariadb-server. A server without the library
	// starts anyway (it logs the failed plugin load).
	kv("plugin-load-add", "metadata_lock_info")
	// TLS offered (not required) with the sandbox's own CA (tlscerts.go):
	// clients may use it, require_secure_transport stays OFF.
	tf := c.TLS()
	kv("ssl-ca", tf.CA)
	kv("ssl-cert", tf.ServerCert)
	kv("ssl-key", tf.ServerKey)
	if c.SemiSync {
		kv("rpl-semi-sync-master-wait-point", "AFTER_SYNC")
		kv("rpl-semi-sync-slave-enabled", "ON")
		// STOP SLAVE on a semi-sync replica first connects to its source
		// to kill the binlog dump thread, bounded by this (5 s by
		// default): with a frozen or vanished source every failover would
		// wait for it.
		kv("rpl-semi-sync-slave-kill-conn-timeout", 1)
	}
	return b.Bytes()
}

func currentUser() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("sandbox: find the current OS user (mariadbd runs as it): %w", err)
	}
	return u.Username, nil
}

// startNode starts node i's mariadbd as a detached process in its own process
// group and waits until it accepts connections.
func (c *Cluster) startNode(ctx context.Context, bins binaries, i int, rootPassword string) error {
	n := c.Nodes[i]
	if pid := c.pid(i); pid > 0 {
		return fmt.Errorf("sandbox: %s is already running (pid %d)", n.Name, pid)
	}
	out, err := os.OpenFile(filepath.Join(filepath.Dir(n.DefaultsFile), "mariadbd.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox: %s: open output file: %w", n.Name, err)
	}
	defer out.Close()
	cmd := exec.Command(bins.mariadbd, "--defaults-file="+n.DefaultsFile)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = filepath.Dir(n.DefaultsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.stopWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sandbox: %s: start mariadbd: %w", n.Name, err)
	}
	// mariadbd rewrites the pid file with the same pid once it runs; writing
	// it now lets Down find a node that is killed while still starting.
	_ = os.WriteFile(n.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reap the child whenever it exits
		close(exited)
	}()
	c.logger().Debug("sandbox: mariadbd started", "node", n.Name, "pid", cmd.Process.Pid, "port", n.Port)
	return c.waitReady(ctx, i, rootPassword, exited)
}

// waitReady polls node i until it answers the MySQL protocol (an
// authentication error counts as ready), the process exits, or 30 s pass.
func (c *Cluster) waitReady(ctx context.Context, i int, rootPassword string, exited <-chan struct{}) error {
	n := c.Nodes[i]
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	conn, err := mysql.NewConnector(c.rootConfig(i, rootPassword))
	if err != nil {
		return fmt.Errorf("sandbox: %s: %w", n.Name, err)
	}
	var lastErr error
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		dc, err := conn.Connect(actx)
		acancel()
		if err == nil {
			_ = dc.Close()
			return nil
		}
		var me *mysql.MySQLError
		if errors.As(err, &me) {
			return nil // the server answers: it is up
		}
		lastErr = err
		if exited == nil && c.pid(i) == 0 {
			return fmt.Errorf("sandbox: %s: mariadbd is not running; error log %s ends with:\n%s", n.Name, n.ErrorLog, c.errorLogTail(i))
		}
		select {
		case <-exited:
			return fmt.Errorf("sandbox: %s: mariadbd exited during start-up; error log %s ends with:\n%s", n.Name, n.ErrorLog, c.errorLogTail(i))
		case <-ctx.Done():
			return fmt.Errorf("sandbox: %s: mariadbd did not accept connections on %s (last error: %v): %w; error log %s ends with:\n%s",
				n.Name, n.Socket, lastErr, ctx.Err(), n.ErrorLog, c.errorLogTail(i))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) errorLogTail(i int) string {
	data, err := os.ReadFile(c.Nodes[i].ErrorLog)
	if err != nil {
		return fmt.Sprintf("(cannot read error log: %v)", err)
	}
	return tail(data, 3000)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
		if k := bytes.IndexByte(b, '\n'); k >= 0 {
			b = b[k+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// pid returns the pid of node i's running mariadbd, or 0. A pid counts only
// if /proc/PID/cmdline shows mariadbd started with this node's defaults file.
func (c *Cluster) pid(i int) int {
	n := c.Nodes[i]
	if data, err := os.ReadFile(n.PIDFile); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && p > 0 && isOurMariadbd(p, n.DefaultsFile) {
			return p
		}
	}
	// The pid file may be missing (removed, or a start that never wrote it):
	// look for our command line among all processes.
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if isOurMariadbd(p, n.DefaultsFile) {
			return p
		}
	}
	return 0
}

// isOurMariadbd reports whether pid is a live (not zombie) mariadbd whose
// command line carries --defaults-file=defaultsFile.
func isOurMariadbd(pid int, defaultsFile string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(cmdline) == 0 {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if base := filepath.Base(args[0]); base != "mariadbd" && base != "mysqld" {
		return false
	}
	want := "--defaults-file=" + defaultsFile
	found := false
	for _, a := range args[1:] {
		if a == want {
			found = true
		}
	}
	return found && processRunning(pid)
}

// processRunning reports whether pid exists and has not exited (a zombie, or
// a process in the middle of exiting, counts as exited only once its state
// is Z or X).
func processRunning(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Format: pid (comm) state ...; comm may contain spaces or parentheses.
	k := bytes.LastIndexByte(stat, ')')
	if k < 0 || k+2 >= len(stat) {
		return true
	}
	return stat[k+2] != 'Z' && stat[k+2] != 'X'
}

// stop sends SIGTERM to node i's mariadbd, repeating it every second (a
// server still starting up may not act on the first one) for up to grace,
// then sends SIGKILL and waits up to 10 s more. grace 0 means SIGKILL at once
// (for data about to be removed). A node that is not running is not an error.
func (c *Cluster) stop(ctx context.Context, i int, grace time.Duration) error {
	n := c.Nodes[i]
	pid := c.pid(i)
	if pid == 0 {
		return nil
	}
	c.logger().Debug("sandbox: stopping node", "node", n.Name, "pid", pid, "grace", grace)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("sandbox: %s: signal pid %d: %w", n.Name, pid, err)
		}
		if waitExit(ctx, pid, min(time.Second, time.Until(deadline))) {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	if grace > 0 {
		c.logger().Warn("sandbox: node did not stop after SIGTERM; sending SIGKILL", "node", n.Name, "pid", pid, "grace", grace)
	}
	if isOurMariadbd(pid, n.DefaultsFile) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("sandbox: %s: kill pid %d: %w", n.Name, pid, err)
		}
	}
	if !waitExit(context.WithoutCancel(ctx), pid, 10*time.Second) {
		return fmt.Errorf("sandbox: %s: pid %d still running after SIGKILL", n.Name, pid)
	}
	return nil
}

// waitExit polls until pid (verified as ours before it was signalled) has
// exited; false on timeout or context end. An exiting process loses its
// command line before it finishes exiting, so this watches the process state.
func waitExit(ctx context.Context, pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !processRunning(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freeLoopbackPorts returns n distinct free ports on 127.0.0.1, holding all
// listeners open until every port is chosen.
func freeLoopbackPorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("sandbox: find a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func addrFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
