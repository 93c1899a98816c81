package probe

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// CommitMarkerTable is the table proxies write a commit marker to inside
// every transaction that wrote, when clusters[].failover.transaction_replay
// is on with failover.commit_outcome "marker": one row per proxy process
// and session (owner, session), whose seq is the session's last committed
// sequence number. After a failover a proxy reads its row on the new
// primary to learn whether a COMMIT in flight at the loss survived
// (internal/proxy/outcome.go). The controller creates it next to
// HeartbeatTable (the monitor account needs CREATE on switchyard.*) and
// deletes rows older than CommitMarkerMaxAge (DELETE on switchyard.*); the
// application account needs SELECT, INSERT and DELETE on it.
const CommitMarkerTable = HeartbeatSchema + ".commit_marker"

// CommitMarkerCreate creates CommitMarkerTable. No AUTO_INCREMENT column:
// the marker must leave LAST_INSERT_ID() alone.
const CommitMarkerCreate = "CREATE TABLE IF NOT EXISTS " + CommitMarkerTable + " (owner VARBINARY(96) NOT NULL, " +
	"session BIGINT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), " +
	"PRIMARY KEY (owner, session), KEY (at)) ENGINE=InnoDB"

// CommitMarkerMaxAge is the age after which a commit marker is deleted: a
// marker is read at most failover.max_hold plus a replay after it was
// written, and a live session rewrites its row at every COMMIT.
const CommitMarkerMaxAge = 10 * time.Minute

// commitMarkerSweep is how often the primary's old commit markers are
// deleted.
const commitMarkerSweep = time.Minute

// commitMarkerUpkeep runs after a successful heartbeat on the primary: it
// creates CommitMarkerTable once when it is missing (checked in
// information_schema, so nothing reaches the binlog when it exists) and,
// once a minute, deletes markers older than CommitMarkerMaxAge (at most
// 10,000 a round, READ COMMITTED so that only the deleted rows are locked,
// never a live session's), unless the previous deletion is still in the
// server. Errors are returned for the caller to report; nothing is
// retried within the round.
func (p *Prober) commitMarkerUpkeep(ctx context.Context, conn *sql.Conn) error {
	if !p.markerReady.Load() {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'commit_marker'",
			HeartbeatSchema).Scan(&n); err != nil {
			return fmt.Errorf("look for %s: %w", CommitMarkerTable, err)
		}
		if n == 0 {
			if _, err := conn.ExecContext(ctx, "SET STATEMENT lock_wait_timeout = 1 FOR "+CommitMarkerCreate); err != nil {
				return fmt.Errorf("create %s: %w", CommitMarkerTable, err)
			}
		}
		p.markerReady.Store(true)
	}
	now := time.Now()
	if last := p.markerSwept.Load(); last != 0 && now.Sub(time.Unix(0, last)) < commitMarkerSweep {
		return nil
	}
	p.markerSwept.Store(now.UnixNano())
	// A sweep still in the server (a commit waiting for a semi-sync
	// acknowledgement outlives max_statement_time) is never joined by
	// another.
	var pending int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "+
		"AND USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) AND INFO LIKE '%DELETE FROM "+CommitMarkerTable+" %'").Scan(&pending); err != nil {
		return err
	}
	if pending > 0 {
		return fmt.Errorf("the previous deletion of old rows of %s is still in the server", CommitMarkerTable)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		return err
	}
	bound := max(p.timeout.Seconds(), 0.001)
	q := fmt.Sprintf("SET STATEMENT max_statement_time = %.3f, lock_wait_timeout = 1, innodb_lock_wait_timeout = 1 FOR "+
		"DELETE FROM "+CommitMarkerTable+" WHERE at < NOW(6) - INTERVAL %d SECOND AND @@global.read_only = 0 LIMIT 10000",
		bound, int(CommitMarkerMaxAge/time.Second))
	if p.d.name() == FlavorMySQL {
		q = fmt.Sprintf("DELETE FROM "+CommitMarkerTable+" WHERE at < NOW(6) - INTERVAL %d SECOND AND @@global.read_only = 0 AND @@global.super_read_only = 0 LIMIT 10000",
			int(CommitMarkerMaxAge/time.Second))
	}
	if _, err := conn.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("delete old rows of %s: %w", CommitMarkerTable, err)
	}
	return nil
}
