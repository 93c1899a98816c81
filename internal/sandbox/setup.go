package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// AppPrivileges are granted to the application account on *.*. They exclude
// SUPER, READ_ONLY ADMIN and ALL PRIVILEGES, so read_only=ON rejects the
// account's writes with error 1290 (MariaDB docs, "read_only" and
// "GRANT: READ_ONLY ADMIN").
const AppPrivileges = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, " +
	"CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, " +
	"ALTER ROUTINE, EVENT, TRIGGER, REFERENCES, PROCESS"

// MonitorPrivileges are granted to the monitor account on *.* (plus SELECT on
// mysql.*). On MariaDB 10.11 SUPER no longer implies READ_ONLY ADMIN (SET
// GLOBAL read_only), REPLICATION SLAVE ADMIN (CHANGE MASTER, START/STOP
// SLAVE), SLAVE MONITOR (SHOW SLAVE STATUS), BINLOG MONITOR (binlog
// positions), REPLICATION MASTER ADMIN (SHOW SLAVE HOSTS, semi-sync master
// settings) or CONNECTION ADMIN (KILL other users' sessions).
const MonitorPrivileges = "PROCESS, RELOAD, REPLICATION CLIENT, READ_ONLY ADMIN, REPLICATION SLAVE ADMIN, " +
	"SLAVE MONITOR, BINLOG MONITOR, REPLICATION MASTER ADMIN, CONNECTION ADMIN, SUPER"

// MonitorHeartbeatPrivileges are granted to the monitor account on the
// switchyard schema, where the controller writes its per-round heartbeat
// (probe.HeartbeatTable), creates the tables when missing and deletes old
// commit markers (probe.CommitMarkerTable).
const MonitorHeartbeatPrivileges = "SELECT, INSERT, UPDATE, DELETE, CREATE"

// catchupTimeout bounds waiting for a replica to apply the primary's GTIDs
// during Up.
const catchupTimeout = 30 * time.Second

// rootConfig is the go-sql-driver config for root over node i's socket.
func (c *Cluster) rootConfig(i int, password string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = RootUser
	cfg.Passwd = password
	cfg.Net = "unix"
	cfg.Addr = c.Nodes[i].Socket
	cfg.Timeout = 2 * time.Second
	cfg.ReadTimeout = 60 * time.Second
	cfg.WriteTimeout = 60 * time.Second
	return cfg
}

// RootDSN is a go-sql-driver DSN for root over node i's unix socket (0-based
// index). Root holds every privilege; tests use it for set-up and inspection.
func (c *Cluster) RootDSN(i int) string {
	return c.rootConfig(i, c.RootPassword).FormatDSN()
}

// rootConn opens a single root connection to node i.
func (c *Cluster) rootConn(ctx context.Context, i int, password string) (*sql.Conn, func(), error) {
	connector, err := mysql.NewConnector(c.rootConfig(i, password))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %s: %w", c.Nodes[i].Name, err)
	}
	db := sql.OpenDB(connector)
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("sandbox: %s: connect as root over %s: %w", c.Nodes[i].Name, c.Nodes[i].Socket, err)
	}
	return conn, func() { _ = conn.Close(); _ = db.Close() }, nil
}

// quote returns s as a single-quoted SQL string literal.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

// execAll runs statements in order; what names the step in errors. The
// statements may hold passwords, so errors never include them.
func execAll(ctx context.Context, conn *sql.Conn, node, what string, stmts ...string) error {
	for k, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("sandbox: %s: %s (statement %d of %d): %w", node, what, k+1, len(stmts), err)
		}
	}
	return nil
}

// secureNode removes the anonymous and host-specific root accounts that
// mariadb-install-db creates and gives root a password, without writing to
// the binlog (so no node gets GTIDs of its own).
func (c *Cluster) secureNode(ctx context.Context, i int) error {
	n := c.Nodes[i]
	conn, done, err := c.rootConn(ctx, i, "")
	if err != nil {
		return err
	}
	defer done()
	if err := execAll(ctx, conn, n.Name, "disable binlog for set-up", "SET SESSION sql_log_bin=0"); err != nil {
		return err
	}
	rows, err := conn.QueryContext(ctx, "SELECT user, host FROM mysql.user WHERE user='' OR (user='root' AND host NOT IN ('localhost','127.0.0.1'))")
	if err != nil {
		return fmt.Errorf("sandbox: %s: list default accounts: %w", n.Name, err)
	}
	var drop []string
	for rows.Next() {
		var u, h string
		if err := rows.Scan(&u, &h); err != nil {
			rows.Close()
			return fmt.Errorf("sandbox: %s: list default accounts: %w", n.Name, err)
		}
		drop = append(drop, "DROP USER "+quote(u)+"@"+quote(h))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sandbox: %s: list default accounts: %w", n.Name, err)
	}
	stmts := append(drop,
		"ALTER USER 'root'@'localhost' IDENTIFIED BY "+quote(c.RootPassword),
		"ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY "+quote(c.RootPassword),
	)
	return execAll(ctx, conn, n.Name, "secure root and remove anonymous accounts", stmts...)
}

// setupReplication creates accounts and databases on node1 (binlogged, so
// they replicate), attaches every other node as a GTID replica of node1 and
// waits until each has applied node1's whole binlog.
func (c *Cluster) setupReplication(ctx context.Context) error {
	p := c.Nodes[0]
	conn, done, err := c.rootConn(ctx, 0, c.RootPassword)
	if err != nil {
		return err
	}
	defer done()
	stmts := []string{
		"SET GLOBAL read_only=0",
		// With semi-sync on and no replica attached yet, every set-up
		// transaction would wait rpl_semi_sync_master_timeout; it is turned
		// on again once the replicas are attached.
		"SET GLOBAL rpl_semi_sync_master_enabled=OFF",
		fmt.Sprintf("CREATE USER %s@'%%' IDENTIFIED BY %s", quote(c.AppUser), quote(c.AppPassword)),
		fmt.Sprintf("GRANT %s ON *.* TO %s@'%%'", AppPrivileges, quote(c.AppUser)),
		fmt.Sprintf("CREATE USER %s@'%%' IDENTIFIED BY %s", quote(c.MonitorUser), quote(c.MonitorPassword)),
		fmt.Sprintf("GRANT %s ON *.* TO %s@'%%'", MonitorPrivileges, quote(c.MonitorUser)),
		fmt.Sprintf("GRANT SELECT ON mysql.* TO %s@'%%'", quote(c.MonitorUser)),
		// The controller's heartbeat table (probe.HeartbeatTable).
		fmt.Sprintf("GRANT %s ON `switchyard`.* TO %s@'%%'", MonitorHeartbeatPrivileges, quote(c.MonitorUser)),
		fmt.Sprintf("CREATE USER %s@'%%' IDENTIFIED BY %s", quote(c.ReplUser), quote(c.ReplPassword)),
		fmt.Sprintf("GRANT REPLICATION SLAVE ON *.* TO %s@'%%'", quote(c.ReplUser)),
	}
	for _, db := range []string{SysbenchDatabase, OtherDatabase} {
		stmts = append(stmts, "CREATE DATABASE IF NOT EXISTS `"+db+"`")
	}
	if err := execAll(ctx, conn, p.Name, "create accounts and databases on the primary", stmts...); err != nil {
		return err
	}
	var pos string
	if err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		return fmt.Errorf("sandbox: %s: read gtid_binlog_pos: %w", p.Name, err)
	}
	err = c.parallel(func(i int) error {
		if i == 0 {
			return nil
		}
		return c.attachReplica(ctx, i, pos)
	})
	if err != nil {
		return err
	}
	if c.SemiSync {
		if err := execAll(ctx, conn, p.Name, "enable semi-sync on the primary", "SET GLOBAL rpl_semi_sync_master_enabled=ON"); err != nil {
			return err
		}
		if len(c.Nodes) > 1 {
			return c.waitSemiSyncClients(ctx, conn, len(c.Nodes)-1)
		}
	}
	return nil
}

// attachReplica points node i at node1 and waits until it has applied pos.
func (c *Cluster) attachReplica(ctx context.Context, i int, pos string) error {
	n := c.Nodes[i]
	conn, done, err := c.rootConn(ctx, i, c.RootPassword)
	if err != nil {
		return err
	}
	defer done()
	p := c.Nodes[0]
	// The settings the controller keeps on replicas (see
	// config.FailoverConfig.HeartbeatPeriod), so it finds nothing to align.
	hb := config.FailoverConfig{}.HeartbeatPeriod()
	err = execAll(ctx, conn, n.Name, "attach replica to "+p.Name,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER=%s, MASTER_PASSWORD=%s, "+
			"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=%.3f",
			p.Port, quote(c.ReplUser), quote(c.ReplPassword), hb.Seconds()),
		"START SLAVE",
		"SET GLOBAL read_only=1",
	)
	if err != nil {
		return err
	}
	var res sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, int(catchupTimeout/time.Second)).Scan(&res); err != nil {
		return fmt.Errorf("sandbox: %s: wait for GTID %s: %w", n.Name, pos, err)
	}
	if !res.Valid || res.Int64 != 0 {
		st, _ := replicaStatus(ctx, conn)
		return fmt.Errorf("sandbox: %s: replica did not apply %s from %s within %s (IO %s, SQL %s, last IO error %q, last SQL error %q)",
			n.Name, pos, p.Name, catchupTimeout, st.ioRunning, st.sqlRunning, st.lastIOError, st.lastSQLError)
	}
	var cur string
	if err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_current_pos").Scan(&cur); err != nil {
		return fmt.Errorf("sandbox: %s: read gtid_current_pos: %w", n.Name, err)
	}
	if cur != pos {
		return fmt.Errorf("sandbox: %s: gtid_current_pos %q differs from the primary's %q after catch-up (errant GTIDs)", n.Name, cur, pos)
	}
	return nil
}

// waitSemiSyncClients waits up to 10 s until want semi-sync replicas are
// connected to the primary, so the first write does not wait out
// rpl_semi_sync_master_timeout.
func (c *Cluster) waitSemiSyncClients(ctx context.Context, conn *sql.Conn, want int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var name string
		var got int
		err := conn.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &got)
		if err != nil {
			return fmt.Errorf("sandbox: %s: read Rpl_semi_sync_master_clients: %w", c.Nodes[0].Name, err)
		}
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: %s: only %d of %d semi-sync replicas connected after 10s", c.Nodes[0].Name, got, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
