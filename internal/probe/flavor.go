package probe

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Flavor names accepted by NewProber (the cluster flavor in switchyard.yaml).
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// GTID modes for ChangeSource on MariaDB (MASTER_USE_GTID). MySQL always uses
// SOURCE_AUTO_POSITION=1 and ignores the mode.
const (
	// GTIDSlavePos replicates from @@gtid_slave_pos (MariaDB's recommended
	// mode; for a former primary set the position from its binlog first,
	// see SetReplicaPosFromBinlog).
	GTIDSlavePos = "slave_pos"
	// GTIDCurrentPos replicates from @@gtid_current_pos.
	GTIDCurrentPos = "current_pos"
)

// dialect is the flavor-specific SQL. Statements are built with '?'
// placeholders that the driver interpolates with proper escaping.
type dialect interface {
	name() string
	// variablesQuery returns one row: server_id, version, read_only,
	// three GTID positions (MariaDB current/slave/binlog; MySQL executed in
	// the first, the others empty), slave_net_timeout, slave_parallel_threads
	// and slave_parallel_mode (MySQL: 0, 0, "").
	variablesQuery() string
	replicaStatusQuery() string
	stopReplica() string
	startReplica() string
	resetReplicaAll() string
	setReadOnly(on bool) []string
	// changeSource points a stopped replica at host:port; heartbeat is
	// the heartbeat period (0: 1s).
	changeSource(host string, port int, user, password, gtidMode string, heartbeat time.Duration) (string, []any, error)
	// setHeartbeat changes only the heartbeat period of a stopped replica
	// (its source and position are kept).
	setHeartbeat(heartbeat time.Duration) string
	// setNetTimeout sets the global replica network timeout (seconds); ""
	// when the flavor leaves it alone.
	setNetTimeout(seconds int) string
	// setParallel gives a stopped replica n optimistic parallel appliers
	// (nil where not managed).
	setParallel(n int) []string
	// writtenGTIDQuery selects every GTID this node has written to its binlog.
	writtenGTIDQuery() string
	// setReplicaPosFromBinlog makes the node, about to become a replica,
	// resume after what its own binlog holds ("" = nothing to do).
	setReplicaPosFromBinlog() string
	// waitForGTID returns a query selecting one integer: 0 when pos was
	// applied within timeout, anything else on timeout (see normalizeWait).
	waitForGTID(pos string, timeout time.Duration) (string, []any)
	// waitTimedOut reports whether the integer returned by waitForGTID
	// means a timeout.
	waitTimedOut(v int64) bool
	// requiredPrivileges lists what the controller needs; each entry is
	// satisfied by any one of its alternatives.
	requiredPrivileges() []privilege
	// systemThread reports whether a processlist row (user, command) is a
	// server or replication thread that must never be killed.
	systemThread(user, command string) bool
}

// privilege is one requirement: Name is reported when missing; any of
// AnyOf satisfies it.
type privilege struct {
	Name  string
	AnyOf []string
}

func newDialect(flavor string) (dialect, error) {
	switch strings.ToLower(flavor) {
	case "", FlavorMariaDB:
		return mariadbDialect{}, nil
	case FlavorMySQL:
		return mysqlDialect{}, nil
	}
	return nil, fmt.Errorf("probe: unknown flavor %q (use %q or %q)", flavor, FlavorMariaDB, FlavorMySQL)
}

// mariadbDialect follows the MariaDB 10.11 Knowledge Base ("SHOW SLAVE
// STATUS", "CHANGE MASTER TO", "MASTER_GTID_WAIT", "GRANT").
type mariadbDialect struct{}

func (mariadbDialect) name() string { return FlavorMariaDB }

func (mariadbDialect) variablesQuery() string {
	return "SELECT @@server_id, @@version, @@read_only, @@gtid_current_pos, @@gtid_slave_pos, @@gtid_binlog_pos, @@global.slave_net_timeout, " +
		"@@global.slave_parallel_threads, @@global.slave_parallel_mode"
}

func (mariadbDialect) replicaStatusQuery() string { return "SHOW ALL SLAVES STATUS" }
func (mariadbDialect) stopReplica() string        { return "STOP SLAVE" }
func (mariadbDialect) startReplica() string       { return "START SLAVE" }

// RESET SLAVE ALL needs RELOAD on MariaDB 10.11 (checked: error 1227 without it).
func (mariadbDialect) resetReplicaAll() string { return "RESET SLAVE ALL" }

func (mariadbDialect) setReadOnly(on bool) []string {
	if on {
		return []string{"SET GLOBAL read_only = ON"}
	}
	return []string{"SET GLOBAL read_only = OFF"}
}

func (mariadbDialect) changeSource(host string, port int, user, password, gtidMode string, heartbeat time.Duration) (string, []any, error) {
	switch gtidMode {
	case GTIDSlavePos, GTIDCurrentPos:
	default:
		return "", nil, fmt.Errorf("probe: MASTER_USE_GTID must be %q or %q, not %q", GTIDSlavePos, GTIDCurrentPos, gtidMode)
	}
	q := "CHANGE MASTER TO MASTER_HOST = ?, MASTER_PORT = ?, MASTER_USER = ?, MASTER_PASSWORD = ?, " +
		"MASTER_USE_GTID = " + gtidMode + ", MASTER_CONNECT_RETRY = 1, MASTER_HEARTBEAT_PERIOD = " + heartbeatSeconds(heartbeat)
	return q, []any{host, port, user, password}, nil
}

// CHANGE MASTER with only MASTER_HEARTBEAT_PERIOD keeps the source, the
// GTID mode and the position (checked on 10.11: the threads must be
// stopped first, error 1198 otherwise).
func (mariadbDialect) setHeartbeat(heartbeat time.Duration) string {
	return "CHANGE MASTER TO MASTER_HEARTBEAT_PERIOD = " + heartbeatSeconds(heartbeat)
}

func (mariadbDialect) setParallel(n int) []string {
	return []string{fmt.Sprintf("SET GLOBAL slave_parallel_threads = %d", n), "SET GLOBAL slave_parallel_mode = 'optimistic'"}
}

func (mariadbDialect) setNetTimeout(seconds int) string {
	return fmt.Sprintf("SET GLOBAL slave_net_timeout = %d", seconds)
}

func (mariadbDialect) parallelThreadsQuery() string { return "SELECT @@global.slave_parallel_threads" }

// Both are refused while a replication thread runs (MariaDB KB
// "slave_parallel_threads", "slave_parallel_mode"); optimistic mode applies
// transactions of one GTID domain in parallel and commits them in order.
func (mariadbDialect) setParallelApply(threads int) []string {
	return []string{"SET GLOBAL slave_parallel_mode = 'optimistic'", fmt.Sprintf("SET GLOBAL slave_parallel_threads = %d", threads)}
}

// heartbeatSeconds formats a heartbeat period for CHANGE MASTER (seconds
// with millisecond resolution, as the server keeps it); 0 means 1s.
func heartbeatSeconds(d time.Duration) string {
	if d <= 0 {
		d = time.Second
	}
	return strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', 3, 64)
}

func (mariadbDialect) writtenGTIDQuery() string { return "SELECT @@gtid_binlog_pos" }

func (mariadbDialect) setReplicaPosFromBinlog() string {
	return "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos"
}

// MASTER_GTID_WAIT(pos, timeout_s) returns 0 on success, -1 on timeout.
func (mariadbDialect) waitForGTID(pos string, timeout time.Duration) (string, []any) {
	return "SELECT MASTER_GTID_WAIT(?, ?)", []any{pos, timeout.Seconds()}
}

func (mariadbDialect) waitTimedOut(v int64) bool { return v != 0 }

// On MariaDB 10.11 SUPER no longer implies these (MariaDB KB "GRANT",
// 10.5.2+ privilege split); ALL PRIVILEGES covers all of them.
func (mariadbDialect) requiredPrivileges() []privilege {
	return []privilege{
		{Name: "READ_ONLY ADMIN", AnyOf: []string{"READ_ONLY ADMIN"}},
		{Name: "REPLICATION SLAVE ADMIN", AnyOf: []string{"REPLICATION SLAVE ADMIN"}},
		{Name: "SLAVE MONITOR", AnyOf: []string{"SLAVE MONITOR", "REPLICA MONITOR"}},
		{Name: "BINLOG MONITOR", AnyOf: []string{"BINLOG MONITOR", "REPLICATION CLIENT"}},
		{Name: "REPLICATION MASTER ADMIN", AnyOf: []string{"REPLICATION MASTER ADMIN"}},
		{Name: "CONNECTION ADMIN", AnyOf: []string{"CONNECTION ADMIN"}},
		{Name: "PROCESS", AnyOf: []string{"PROCESS"}},
		{Name: "RELOAD", AnyOf: []string{"RELOAD"}},
	}
}

func (mariadbDialect) systemThread(user, command string) bool {
	switch user {
	case "system user", "event_scheduler", "":
		return true
	}
	switch command {
	case "Binlog Dump", "Slave_IO", "Slave_SQL", "Slave_worker", "Daemon":
		return true
	}
	return false
}

// mysqlDialect follows the MySQL 8.0.23+ reference manual ("SHOW REPLICA
// STATUS", "CHANGE REPLICATION SOURCE TO", "WAIT_FOR_EXECUTED_GTID_SET").
// It is not tested against a real server.
type mysqlDialect struct{}

func (mysqlDialect) name() string { return FlavorMySQL }

func (mysqlDialect) variablesQuery() string {
	// The net timeout is not read (0): its name changed in 8.0.26
	// (replica_net_timeout) and the controller manages it on MariaDB only.
	return "SELECT @@server_id, @@version, @@read_only, @@global.gtid_executed, '', '', 0, 0, ''"
}

func (mysqlDialect) replicaStatusQuery() string { return "SHOW REPLICA STATUS" }
func (mysqlDialect) stopReplica() string        { return "STOP REPLICA" }
func (mysqlDialect) startReplica() string       { return "START REPLICA" }
func (mysqlDialect) resetReplicaAll() string    { return "RESET REPLICA ALL" }

// super_read_only also fences accounts with SUPER / CONNECTION_ADMIN;
// turning it on implies read_only, turning read_only off clears it.
func (mysqlDialect) setReadOnly(on bool) []string {
	if on {
		return []string{"SET GLOBAL super_read_only = ON"}
	}
	return []string{"SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF"}
}

func (mysqlDialect) changeSource(host string, port int, user, password, _ string, heartbeat time.Duration) (string, []any, error) {
	q := "CHANGE REPLICATION SOURCE TO SOURCE_HOST = ?, SOURCE_PORT = ?, SOURCE_USER = ?, SOURCE_PASSWORD = ?, " +
		"SOURCE_AUTO_POSITION = 1, SOURCE_CONNECT_RETRY = 1, SOURCE_HEARTBEAT_PERIOD = " + heartbeatSeconds(heartbeat)
	return q, []any{host, port, user, password}, nil
}

func (mysqlDialect) setParallel(int) []string { return nil }

func (mysqlDialect) setHeartbeat(heartbeat time.Duration) string {
	return "CHANGE REPLICATION SOURCE TO SOURCE_HEARTBEAT_PERIOD = " + heartbeatSeconds(heartbeat)
}

// The replica net timeout is left as the server has it on MySQL (its name
// changed in 8.0.26).
func (mysqlDialect) setNetTimeout(int) string { return "" }

// Parallel apply (replica_parallel_workers) is left as the server has it
// on MySQL.
func (mysqlDialect) parallelThreadsQuery() string  { return "" }
func (mysqlDialect) setParallelApply(int) []string { return nil }

func (mysqlDialect) writtenGTIDQuery() string { return "SELECT @@global.gtid_executed" }

func (mysqlDialect) setReplicaPosFromBinlog() string { return "" }

// WAIT_FOR_EXECUTED_GTID_SET(set, timeout_s) returns 0 on success, 1 on
// timeout.
func (mysqlDialect) waitForGTID(pos string, timeout time.Duration) (string, []any) {
	return "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", []any{pos, timeout.Seconds()}
}

func (mysqlDialect) waitTimedOut(v int64) bool { return v != 0 }

func (mysqlDialect) requiredPrivileges() []privilege {
	return []privilege{
		{Name: "SYSTEM_VARIABLES_ADMIN", AnyOf: []string{"SYSTEM_VARIABLES_ADMIN", "SUPER"}},
		{Name: "REPLICATION_SLAVE_ADMIN", AnyOf: []string{"REPLICATION_SLAVE_ADMIN", "SUPER"}},
		{Name: "REPLICATION CLIENT", AnyOf: []string{"REPLICATION CLIENT"}},
		{Name: "CONNECTION_ADMIN", AnyOf: []string{"CONNECTION_ADMIN", "SUPER"}},
		{Name: "PROCESS", AnyOf: []string{"PROCESS"}},
		{Name: "RELOAD", AnyOf: []string{"RELOAD"}},
	}
}

func (mysqlDialect) systemThread(user, command string) bool {
	switch user {
	case "system user", "event_scheduler", "":
		return true
	}
	switch command {
	case "Binlog Dump", "Binlog Dump GTID", "Daemon":
		return true
	}
	return false
}
