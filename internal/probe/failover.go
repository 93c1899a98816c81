package probe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// StopReplicaIO stops only the replication IO thread (STOP SLAVE
// IO_THREAD / STOP REPLICA IO_THREAD): the node stops receiving from its
// source but keeps applying what its relay log holds — the first step of an
// emergency promotion (as Vitess EmergencyReparentShard does). Stopping a
// stopped thread is not an error.
func (p *Prober) StopReplicaIO(ctx context.Context) error {
	q := "STOP SLAVE IO_THREAD"
	if p.d.name() == FlavorMySQL {
		q = "STOP REPLICA IO_THREAD"
	}
	return p.exec(ctx, q, q)
}

// StartReplicaIO starts only the replication IO thread (undoes
// StopReplicaIO).
func (p *Prober) StartReplicaIO(ctx context.Context) error {
	q := "START SLAVE IO_THREAD"
	if p.d.name() == FlavorMySQL {
		q = "START REPLICA IO_THREAD"
	}
	return p.exec(ctx, q, q)
}

// ErrNotWritable is returned (wrapped) by VerifyWritable when the node
// refuses the application user's write (read_only, MySQL error 1290) or
// reports read_only=ON.
var ErrNotWritable = errors.New("node is not writable by the application user")

// erOptionPreventsStatement is ER_OPTION_PREVENTS_STATEMENT (1290), what
// read_only returns to a writer without READ_ONLY ADMIN.
const erOptionPreventsStatement = 1290

// Heartbeat is the row VerifyWritable writes.
type Heartbeat struct {
	Cluster string
	Node    string
	Epoch   int64
}

// HeartbeatTable is where VerifyWritable writes; the database and table are
// created when missing.
const HeartbeatTable = "switchyard.heartbeat"

// VerifyWritable proves that the node at address takes writes from an
// application account: it logs in as cred (a fresh connection, bounded by
// timeout), reads @@read_only, and writes hb into HeartbeatTable
// (creating it if needed). The monitor account cannot prove this: it holds
// READ_ONLY ADMIN and writes through read_only. It returns an error wrapping
// ErrNotWritable when read_only is ON or the write fails with error 1290;
// skipped is non-empty (and err nil) when read_only is OFF but the account
// may not write the heartbeat table (missing privileges), saying so.
func VerifyWritable(ctx context.Context, address string, cred Credentials, timeout time.Duration, hb Heartbeat) (skipped string, err error) {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db := openDB(address, cred, timeout, timeout, timeout)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: log in as %s: %w", address, cred.User, err)
	}
	defer conn.Close()
	var ro int64
	if err := conn.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&ro); err != nil {
		return "", fmt.Errorf("%s: read @@read_only as %s: %w", address, cred.User, err)
	}
	if ro != 0 {
		return "", fmt.Errorf("%s: read_only=ON: %w", address, ErrNotWritable)
	}
	stmts := []struct {
		q    string
		args []any
	}{
		{"CREATE DATABASE IF NOT EXISTS switchyard", nil},
		{"CREATE TABLE IF NOT EXISTS " + HeartbeatTable + " (cluster VARCHAR(64) NOT NULL PRIMARY KEY, " +
			"node VARCHAR(64) NOT NULL, epoch BIGINT NOT NULL, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB", nil},
		{"REPLACE INTO " + HeartbeatTable + " (cluster, node, epoch, at) VALUES (?, ?, ?, CURRENT_TIMESTAMP(6))",
			[]any{hb.Cluster, hb.Node, hb.Epoch}},
	}
	for _, st := range stmts {
		if _, err := conn.ExecContext(ctx, st.q, st.args...); err != nil {
			switch {
			case mysqlErrNo(err) == erOptionPreventsStatement:
				return "", fmt.Errorf("%s: write as %s refused: %w (%v)", address, cred.User, ErrNotWritable, err)
			case Classify(err) == KindPrivilege:
				return fmt.Sprintf("read_only=OFF, but %s may not write %s (%v); grant it CREATE, INSERT, DELETE on switchyard.* to test writes",
					cred.User, HeartbeatTable, err), nil
			}
			return "", fmt.Errorf("%s: test write as %s: %w", address, cred.User, err)
		}
	}
	return "", nil
}

// BinlogState returns MariaDB's @@gtid_binlog_state: the last GTID of every
// (domain, server_id) pair in the node's binlog. Unlike a position it shows
// whether a particular server's transaction ever reached this node, which is
// how a returning old primary's unreplicated transactions are told apart
// from ones the node has. MySQL has no equivalent (use gtid_executed).
func (p *Prober) BinlogState(ctx context.Context) (string, error) {
	if p.d.name() == FlavorMySQL {
		return "", fmt.Errorf("%s: gtid_binlog_state is MariaDB only", p.address)
	}
	db, err := p.admin()
	if err != nil {
		return "", err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state").Scan(&v); err != nil {
		return "", p.wrap("read @@gtid_binlog_state", err)
	}
	return v, nil
}

// SemiSyncReplica reports whether rpl_semi_sync_slave_enabled is ON (MariaDB
// 10.3+, where semi-sync is built in); false on MySQL or when the variable
// is unknown.
func (p *Prober) SemiSyncReplica(ctx context.Context) bool {
	if p.d.name() == FlavorMySQL {
		return false
	}
	db, err := p.admin()
	if err != nil {
		return false
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	var v int64
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.rpl_semi_sync_slave_enabled").Scan(&v); err != nil {
		return false
	}
	return v != 0
}

// EnableSemiSyncPrimary turns on rpl_semi_sync_master_enabled, so a
// promoted node that was a semi-sync replica keeps acknowledged writes
// lossless as the new primary (MariaDB KB "Semisynchronous Replication").
func (p *Prober) EnableSemiSyncPrimary(ctx context.Context) error {
	if p.d.name() == FlavorMySQL {
		return fmt.Errorf("%s: enabling semi-sync is not implemented for MySQL", p.address)
	}
	return p.exec(ctx, "enable semi-sync on the new primary", "SET GLOBAL rpl_semi_sync_master_enabled = ON")
}

// DisableSemiSyncPrimary turns off rpl_semi_sync_master_enabled on a node
// that is (or is becoming) a replica: a replica left with it on makes its
// own replication applier wait for acknowledgements from replicas it does
// not have (rpl_semi_sync_master_timeout per stall), and turning it off
// releases commits already waiting. A no-op on MySQL.
func (p *Prober) DisableSemiSyncPrimary(ctx context.Context) error {
	if p.d.name() == FlavorMySQL {
		return nil
	}
	return p.exec(ctx, "disable semi-sync primary on a replica", "SET GLOBAL rpl_semi_sync_master_enabled = OFF")
}

// ErrCutUnsupported is returned (wrapped) by CutReplicaIO where an IO
// thread cannot be cut by KILL (MySQL, several replication connections):
// use StopReplicaIO.
var ErrCutUnsupported = errors.New("cutting the IO thread by KILL is not supported here")

// CutReplicaIO ends the replication IO thread's reading at once by KILLing
// it (KILL of the thread whose information_schema.PROCESSLIST COMMAND is
// Slave_IO; needs CONNECTION ADMIN on MariaDB 10.11), where StopReplicaIO
// would wait for the thread to finish exiting. A MariaDB semi-sync replica's
// IO thread, once out of its read loop, connects to its source to KILL its
// binlog dump thread there (Repl_semi_sync_slave::kill_connection,
// sql/semisync_slave.cc), and for a source whose packets are dropped that
// connect waits rpl_semi_sync_slave_kill_conn_timeout; STOP SLAVE waits
// with it and holds the replication locks meanwhile (STOP SLAVE
// SQL_THREAD queues behind it; measured on 10.11.19 with the source cut
// off: both 1.0 s at a timeout of 1). After KILL returns the thread is
// marked killed: its read loop (handle_slave_io, sql/slave.cc) ends before
// it reads another event from the source; at most the event it was
// queueing when the KILL landed still reaches the relay log. The exit then
// goes on in the background without any replication lock held: the SQL
// thread keeps applying and STOP SLAVE SQL_THREAD returns at once;
// Slave_IO_Running stays Yes until the exit ends (WaitReplicaIOGone).
// cut is false when no IO thread runs. MariaDB only, with one replication
// connection; elsewhere the error wraps ErrCutUnsupported.
func (p *Prober) CutReplicaIO(ctx context.Context) (cut bool, err error) {
	if p.d.name() != FlavorMariaDB {
		return false, fmt.Errorf("%s: %w (MariaDB only)", p.address, ErrCutUnsupported)
	}
	db, err := p.admin()
	if err != nil {
		return false, err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Slave_IO'")
	if err != nil {
		return false, p.wrap("find the replication IO thread", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return false, p.wrap("find the replication IO thread", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, p.wrap("find the replication IO thread", err)
	}
	switch len(ids) {
	case 0:
		return false, nil
	case 1:
	default:
		return false, fmt.Errorf("%s: %d replication IO threads (multi-source): %w", p.address, len(ids), ErrCutUnsupported)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", ids[0])); err != nil {
		if mysqlErrNo(err) == erNoSuchThread {
			return false, nil // it exited meanwhile
		}
		return false, p.wrap("KILL the replication IO thread", err)
	}
	return true, nil
}

// WaitReplicaIOGone waits until the replica's IO thread has exited
// (Slave_IO_Running No, or replication reset), reading SHOW ALL SLAVES
// STATUS every 20ms, bounded by timeout. It returns the last read (see
// ReplicationProgress): once the thread is gone its Gtid_IO_Pos (GTIDIO)
// is final. An error says the thread still runs after timeout, or the
// last read failed.
func (p *Prober) WaitReplicaIOGone(ctx context.Context, timeout time.Duration) (topo.Probe, error) {
	deadline := time.Now().Add(timeout)
	for {
		pr := p.ReplicationProgress(ctx, 0)
		if pr.Reachable && pr.Error == "" && (!pr.Replicating || pr.IORunning == "No") {
			return pr, nil
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			why := "IO thread " + pr.IORunning
			if pr.Error != "" {
				why = pr.Error
			}
			return pr, fmt.Errorf("%s: replication IO thread not gone after %s (%s)", p.address, timeout, why)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StopReplicaSQL stops only the replication SQL thread (STOP SLAVE
// SQL_THREAD / STOP REPLICA SQL_THREAD): nothing more is applied from the
// relay log. Stopping a stopped thread is not an error.
func (p *Prober) StopReplicaSQL(ctx context.Context) error {
	q := "STOP SLAVE SQL_THREAD"
	if p.d.name() == FlavorMySQL {
		q = "STOP REPLICA SQL_THREAD"
	}
	return p.exec(ctx, q, q)
}
