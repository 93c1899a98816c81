package sandbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// NodeStatus is one node as seen by Status: process state from /proc and
// server state from a root connection over the unix socket.
type NodeStatus struct {
	// Name, Address and Port repeat the node's identity.
	Name    string `json:"name"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	// Running is true when a mariadbd started with this node's defaults file
	// is alive; PID is its pid (0 when not running).
	Running bool `json:"running"`
	PID     int  `json:"pid"`
	// Reachable is true when a root connection and the status queries
	// succeeded; Error says why not otherwise.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// ServerID is @@server_id; Version is @@version.
	ServerID uint32 `json:"server_id,omitempty"`
	Version  string `json:"version,omitempty"`
	// ReadOnly is @@read_only.
	ReadOnly bool `json:"read_only"`
	// ReplicatingFrom is "host:port" of the configured replication source
	// (SHOW SLAVE STATUS Master_Host:Master_Port), "" when none;
	// SourceNode names it when it is a node of this sandbox.
	ReplicatingFrom string `json:"replicating_from,omitempty"`
	SourceNode      string `json:"source_node,omitempty"`
	// IORunning and SQLRunning are Slave_IO_Running ("Yes", "No",
	// "Connecting") and Slave_SQL_Running ("Yes", "No"); "" without a source.
	IORunning  string `json:"io_running,omitempty"`
	SQLRunning string `json:"sql_running,omitempty"`
	// SecondsBehind is Seconds_Behind_Master; -1 when NULL or not a replica.
	SecondsBehind int64 `json:"seconds_behind"`
	// LastIOError and LastSQLError are the replication threads' last errors.
	LastIOError  string `json:"last_io_error,omitempty"`
	LastSQLError string `json:"last_sql_error,omitempty"`
	// GTIDCurrentPos, GTIDBinlogPos and GTIDSlavePos are @@gtid_current_pos,
	// @@gtid_binlog_pos and @@gtid_slave_pos (MariaDB domain-server-seqno
	// lists).
	GTIDCurrentPos string `json:"gtid_current_pos"`
	GTIDBinlogPos  string `json:"gtid_binlog_pos"`
	GTIDSlavePos   string `json:"gtid_slave_pos"`
	// SemiSyncMaster and SemiSyncSlave are Rpl_semi_sync_master_status and
	// Rpl_semi_sync_slave_status.
	SemiSyncMaster bool `json:"semi_sync_master"`
	SemiSyncSlave  bool `json:"semi_sync_slave"`
}

// Status inspects every node concurrently, each within 3 s. It never fails as
// a whole: per-node problems are in NodeStatus.Error.
func (c *Cluster) Status(ctx context.Context) []NodeStatus {
	out := make([]NodeStatus, len(c.Nodes))
	_ = c.parallel(func(i int) error {
		out[i] = c.nodeStatus(ctx, i)
		return nil
	})
	return out
}

func (c *Cluster) nodeStatus(ctx context.Context, i int) NodeStatus {
	n := c.Nodes[i]
	st := NodeStatus{Name: n.Name, Address: n.Address, Port: n.Port, SecondsBehind: -1}
	st.PID = c.pid(i)
	st.Running = st.PID > 0
	if !st.Running {
		st.Error = "not running"
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, done, err := c.rootConn(ctx, i, c.RootPassword)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	defer done()
	var ro int
	err = conn.QueryRowContext(ctx, "SELECT @@server_id, @@version, @@read_only, @@gtid_current_pos, @@gtid_binlog_pos, @@gtid_slave_pos").
		Scan(&st.ServerID, &st.Version, &ro, &st.GTIDCurrentPos, &st.GTIDBinlogPos, &st.GTIDSlavePos)
	if err != nil {
		st.Error = fmt.Sprintf("read server variables: %v", err)
		return st
	}
	st.ReadOnly = ro != 0
	rs, err := replicaStatus(ctx, conn)
	if err != nil {
		st.Error = fmt.Sprintf("SHOW SLAVE STATUS: %v", err)
		return st
	}
	if rs.configured {
		st.ReplicatingFrom = net.JoinHostPort(rs.masterHost, strconv.Itoa(rs.masterPort))
		for _, o := range c.Nodes {
			if o.Port == rs.masterPort && (rs.masterHost == "127.0.0.1" || rs.masterHost == "localhost") {
				st.SourceNode = o.Name
			}
		}
		st.IORunning, st.SQLRunning = rs.ioRunning, rs.sqlRunning
		st.LastIOError, st.LastSQLError = rs.lastIOError, rs.lastSQLError
		if rs.secondsBehind.Valid {
			st.SecondsBehind = rs.secondsBehind.Int64
		}
	}
	rows, err := conn.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Rpl_semi_sync_master_status','Rpl_semi_sync_slave_status')")
	if err != nil {
		st.Error = fmt.Sprintf("SHOW GLOBAL STATUS: %v", err)
		return st
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			st.Error = fmt.Sprintf("SHOW GLOBAL STATUS: %v", err)
			return st
		}
		switch k {
		case "Rpl_semi_sync_master_status":
			st.SemiSyncMaster = v == "ON"
		case "Rpl_semi_sync_slave_status":
			st.SemiSyncSlave = v == "ON"
		}
	}
	if err := rows.Err(); err != nil {
		st.Error = fmt.Sprintf("SHOW GLOBAL STATUS: %v", err)
		return st
	}
	st.Reachable = true
	return st
}

// slaveStatus holds the SHOW SLAVE STATUS columns the sandbox uses.
type slaveStatus struct {
	configured                bool
	masterHost                string
	masterPort                int
	ioRunning, sqlRunning     string
	lastIOError, lastSQLError string
	secondsBehind             sql.NullInt64
	gtidIOPos, usingGTID      string
}

// replicaStatus reads SHOW SLAVE STATUS by column name (its column set varies
// across versions); configured is false when the node has no source.
func replicaStatus(ctx context.Context, conn *sql.Conn) (slaveStatus, error) {
	var st slaveStatus
	rows, err := conn.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return st, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return st, err
	}
	if !rows.Next() {
		return st, rows.Err()
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for k := range vals {
		ptrs[k] = &vals[k]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return st, err
	}
	st.configured = true
	for k, col := range cols {
		v := string(vals[k])
		switch col {
		case "Master_Host":
			st.masterHost = v
		case "Master_Port":
			st.masterPort, _ = strconv.Atoi(v)
		case "Slave_IO_Running":
			st.ioRunning = v
		case "Slave_SQL_Running":
			st.sqlRunning = v
		case "Last_IO_Error":
			st.lastIOError = v
		case "Last_SQL_Error":
			st.lastSQLError = v
		case "Seconds_Behind_Master":
			if vals[k] != nil {
				if x, err := strconv.ParseInt(v, 10, 64); err == nil {
					st.secondsBehind = sql.NullInt64{Int64: x, Valid: true}
				}
			}
		case "Gtid_IO_Pos":
			st.gtidIOPos = v
		case "Using_Gtid":
			st.usingGTID = v
		}
	}
	return st, rows.Err()
}

// DSN returns a go-sql-driver DSN for node (0-based index) over TCP as
// user/password, with database db ("" for none): connect timeout 2 s, read
// and write timeouts 60 s, multi-statements off.
func (c *Cluster) DSN(node int, user, password, db string) string {
	cfg := mysql.NewConfig()
	cfg.User = user
	cfg.Passwd = password
	cfg.Net = "tcp"
	cfg.Addr = c.Nodes[node].Address
	cfg.DBName = db
	cfg.Timeout = 2 * time.Second
	cfg.ReadTimeout = 60 * time.Second
	cfg.WriteTimeout = 60 * time.Second
	return cfg.FormatDSN()
}

// PID returns the pid of node i's running mariadbd (0-based index), or 0 when
// it is not running.
func (c *Cluster) PID(i int) int { return c.pid(i) }

// StopNode shuts node i (0-based index) down cleanly: SIGTERM, then waits for
// the process to exit (SIGKILL after 30 s). Stopping a stopped node is not an
// error.
func (c *Cluster) StopNode(ctx context.Context, i int) error {
	if err := c.checkIndex(i); err != nil {
		return err
	}
	return c.stop(ctx, i, stopGrace)
}

// KillNode sends SIGKILL to node i's mariadbd (0-based index), as a crash
// would, and waits up to 10 s for the process to disappear. Killing a stopped
// node is not an error.
func (c *Cluster) KillNode(i int) error {
	if err := c.checkIndex(i); err != nil {
		return err
	}
	n := c.Nodes[i]
	pid := c.pid(i)
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sandbox: %s: kill pid %d: %w", n.Name, pid, err)
	}
	if !waitExit(context.Background(), pid, 10*time.Second) {
		return fmt.Errorf("sandbox: %s: pid %d still running 10s after SIGKILL", n.Name, pid)
	}
	return nil
}

// StartNode starts node i (0-based index) again with its datadir and defaults
// file and waits until it accepts connections (up to 30 s). A running node is
// left alone. The node comes back with read_only=ON (its defaults file) and,
// if it had a replication source, replicates from it again; making a
// restarted primary writable is left to the controller (Up, which restarts
// stopped nodes, does it itself when the roles are unambiguous).
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	if err := c.checkIndex(i); err != nil {
		return err
	}
	if c.pid(i) > 0 {
		return c.waitReady(ctx, i, c.RootPassword, nil)
	}
	bins, err := findBinaries()
	if err != nil {
		return err
	}
	return c.startNode(ctx, bins, i, c.RootPassword)
}

func (c *Cluster) checkIndex(i int) error {
	if i < 0 || i >= len(c.Nodes) {
		return fmt.Errorf("sandbox: node index %d out of range (0..%d)", i, len(c.Nodes)-1)
	}
	return nil
}

// Down stops every node of the sandbox in dir that this package started
// (verified by /proc/PID/cmdline naming mariadbd and the node's defaults
// file): SIGTERM, SIGKILL after 10 s. With removeData it then removes dir
// (and the socket directory, if any). A missing sandbox is an error unless
// removeData is set and dir does not exist.
func Down(ctx context.Context, dir string, removeData bool) error {
	c, err := Load(dir)
	if err != nil {
		if removeData {
			if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
				return nil
			}
		}
		return err
	}
	return c.down(ctx, removeData, downGrace)
}

// down stops every node (SIGTERM, SIGKILL after grace; grace 0 kills at
// once) and with removeData removes the sandbox's directories.
func (c *Cluster) down(ctx context.Context, removeData bool, grace time.Duration) error {
	err := c.parallel(func(i int) error { return c.stop(ctx, i, grace) })
	if err != nil {
		return err
	}
	if !removeData {
		return nil
	}
	if c.SocketDir != "" {
		if err := os.RemoveAll(c.SocketDir); err != nil {
			return fmt.Errorf("sandbox: remove socket directory: %w", err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("sandbox: remove %s: %w", c.Dir, err)
	}
	return nil
}
