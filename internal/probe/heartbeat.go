package probe

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// HeartbeatSchema is the schema of HeartbeatTable: Switchyard's own, which
// applications do not use. The monitor account needs SELECT, INSERT,
// UPDATE and CREATE on it (GRANT SELECT, INSERT, UPDATE, CREATE ON
// switchyard.* TO monitor). The table is created the first time a write
// finds it missing (CREATE DATABASE IF NOT EXISTS is binlogged even when the
// schema exists on MariaDB 10.11, so it is not run every round). One row
// per cluster: the controller's per-round heartbeat and VerifyWritable's
// post-promotion write share it. The schema also holds CommitMarkerTable,
// whose old rows the controller deletes (DELETE on it too; without it they
// stay, and nothing else fails).
const HeartbeatSchema = "switchyard"

// blockerTimeout is the least time given to reading write blockers after
// a failed heartbeat (connect included).
const blockerTimeout = 500 * time.Millisecond

// Heartbeat kinds (topo.Heartbeat.Kind).
const (
	HeartbeatLockWait = "lock_wait"
	HeartbeatTimeout  = "timeout"
	HeartbeatPending  = "pending"
	HeartbeatDiskFull = "disk_full"
	HeartbeatReadOnly = "read_only"
	HeartbeatDenied   = "denied"
	HeartbeatError    = "error"
)

// Server error numbers the heartbeat tells apart (MariaDB 10.11 "MariaDB
// Error Codes").
const (
	erDiskFull         = 1021 // ER_DISK_FULL
	erNoSuchTable      = 1146 // ER_NO_SUCH_TABLE
	erBadDB            = 1049 // ER_BAD_DB_ERROR
	erRecordFileFull   = 1114 // ER_RECORD_FILE_FULL (table is full)
	erOptionPreventsRO = 1290 // ER_OPTION_PREVENTS_STATEMENT (read_only)
	erStatementTimeout = 1969 // ER_STATEMENT_TIMEOUT (max_statement_time)
)

// heartbeatCreate is the table VerifyWritable creates too (same columns).
const heartbeatCreate = "CREATE TABLE IF NOT EXISTS " + HeartbeatTable + " (cluster VARCHAR(64) NOT NULL PRIMARY KEY, " +
	"node VARCHAR(64) NOT NULL, epoch BIGINT NOT NULL, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"

// Heartbeat writes cluster's row of switchyard.heartbeat on the node (the
// published primary) and reports how it went. The write is bounded so it
// can never pile up: max_statement_time and the context end it after the
// probe timeout, lock_wait_timeout=1 and innodb_lock_wait_timeout=1 bound
// its lock waits, and when the previous heartbeat failed, the server's
// processlist is checked first: a heartbeat still in the server (a commit
// waiting for a semi-sync acknowledgement is not interrupted by
// max_statement_time, KILL QUERY or the client going away — checked on
// MariaDB 10.11.19) makes this one report "pending" instead of writing.
//
// The row is written only while @@global.read_only=0 (the condition is in
// the statement itself): the monitor account holds READ_ONLY ADMIN, so
// without it a heartbeat on a node fenced a moment earlier would create an
// errant transaction. A write skipped that way reports kind read_only and
// writes nothing to the binlog (checked on MariaDB 10.11.19). node and
// epoch are stored with the row; it replicates, so replicas see the
// primary's heartbeat too.
//
// After a failure Blockers names what holds writes up (see
// topo.Heartbeat); reading them is bounded by max(probe timeout, 500ms).
func (p *Prober) Heartbeat(ctx context.Context, row Heartbeat) topo.Heartbeat {
	start := time.Now()
	hb := p.heartbeat(ctx, row)
	hb.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	p.hbFailed.Store(!hb.OK)
	if !hb.OK && hb.Kind != HeartbeatDenied {
		ectx, cancel := context.WithTimeout(ctx, max(p.timeout, blockerTimeout))
		defer cancel()
		hb.Blockers = append(hb.Blockers, p.writeBlockers(ectx)...)
	}
	return hb
}

func (p *Prober) heartbeat(ctx context.Context, row Heartbeat) topo.Heartbeat {
	if p.flavorErr != nil {
		return topo.Heartbeat{Kind: HeartbeatError, Error: p.flavorErr.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout+p.timeout/2)
	defer cancel()
	conn, err := p.probeDB.Conn(ctx)
	if err != nil {
		return heartbeatFailure("connect", err)
	}
	defer conn.Close()
	if p.hbFailed.Load() {
		if pending := p.pendingHeartbeat(ctx, conn); pending != "" {
			return topo.Heartbeat{Kind: HeartbeatPending, Error: pending}
		}
	}
	for attempt := 0; ; attempt++ {
		n, err := p.writeHeartbeat(ctx, conn, row)
		switch no := mysqlErrNo(err); {
		case err == nil && n == 0:
			return topo.Heartbeat{Kind: HeartbeatReadOnly, Error: "not written: the node has read_only=ON"}
		case err == nil:
			// The commit marker table's upkeep rides on the heartbeat;
			// its failure does not make the heartbeat fail (a proxy
			// whose marker cannot be written answers COMMITs in flight
			// with the outcome-unknown error).
			_ = p.commitMarkerUpkeep(ctx, conn)
			return topo.Heartbeat{OK: true}
		case (no == erNoSuchTable || no == erBadDB) && attempt == 0:
			if cerr := p.createHeartbeatTable(ctx, conn); cerr != nil {
				return heartbeatFailure("create "+HeartbeatTable, cerr)
			}
		default:
			return heartbeatFailure("write "+HeartbeatTable, err)
		}
	}
}

func (p *Prober) writeHeartbeat(ctx context.Context, conn *sql.Conn, row Heartbeat) (int64, error) {
	bound := max(p.timeout.Seconds(), 0.001)
	var q string
	if p.d.name() == FlavorMySQL {
		if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1, innodb_lock_wait_timeout = 1"); err != nil {
			return 0, err
		}
		q = "INSERT INTO " + HeartbeatTable + " (cluster, node, epoch, at) SELECT ?, ?, ?, NOW(6) FROM DUAL " +
			"WHERE @@global.read_only = 0 AND @@global.super_read_only = 0 " + heartbeatUpdate
	} else {
		q = fmt.Sprintf("SET STATEMENT max_statement_time = %.3f, lock_wait_timeout = 1, innodb_lock_wait_timeout = 1 FOR "+
			"INSERT INTO "+HeartbeatTable+" (cluster, node, epoch, at) SELECT ?, ?, ?, NOW(6) FROM DUAL "+
			"WHERE @@global.read_only = 0 "+heartbeatUpdate, bound)
	}
	res, err := conn.ExecContext(ctx, q, row.Cluster, row.Node, row.Epoch)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

const heartbeatUpdate = "ON DUPLICATE KEY UPDATE node = VALUES(node), epoch = VALUES(epoch), at = VALUES(at)"

func (p *Prober) createHeartbeatTable(ctx context.Context, conn *sql.Conn) error {
	var ro int64
	if err := conn.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&ro); err != nil {
		return err
	}
	if ro != 0 {
		return errors.New("the node has read_only=ON; the table is created on a writable primary")
	}
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS " + HeartbeatSchema, heartbeatCreate, CommitMarkerCreate} {
		if _, err := conn.ExecContext(ctx, "SET STATEMENT lock_wait_timeout = 1 FOR "+q); err != nil {
			return err
		}
	}
	return nil
}

// pendingHeartbeat returns a description of a heartbeat of this account
// still running in the server, or "".
func (p *Prober) pendingHeartbeat(ctx context.Context, conn *sql.Conn) string {
	const q = "SELECT ID, TIME_MS, COALESCE(STATE, '') FROM information_schema.PROCESSLIST " +
		"WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) " +
		"AND (INFO LIKE '%INTO " + HeartbeatTable + "%' OR INFO LIKE '%IF NOT EXISTS " + HeartbeatSchema + "%') ORDER BY TIME_MS DESC LIMIT 1"
	var (
		id    int64
		ms    float64
		state string
	)
	if err := conn.QueryRowContext(ctx, q).Scan(&id, &ms, &state); err != nil {
		return ""
	}
	return fmt.Sprintf("the previous heartbeat (thread %d) is still in the server after %s (state %q); not writing another",
		id, (time.Duration(ms) * time.Millisecond).Round(100*time.Millisecond), state)
}

func heartbeatFailure(what string, err error) topo.Heartbeat {
	hb := topo.Heartbeat{Error: describe(what, err), Kind: HeartbeatError}
	switch no := mysqlErrNo(err); {
	case no == erLockWaitTimeout:
		hb.Kind = HeartbeatLockWait
	case no == erStatementTimeout, errors.Is(err, context.DeadlineExceeded), Classify(err) == KindTimeout:
		hb.Kind = HeartbeatTimeout
	case no == erDiskFull, no == erRecordFileFull:
		hb.Kind = HeartbeatDiskFull
	case no == erOptionPreventsRO:
		hb.Kind = HeartbeatReadOnly
	case no == erTableAccessDenied, no == erDBAccessDenied, no == erSpecificAccess, no == erAccessDenied:
		hb.Kind = HeartbeatDenied
		hb.Error += fmt.Sprintf("; grant the monitor account SELECT, INSERT, UPDATE, CREATE ON %s.*", HeartbeatSchema)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && strings.Contains(strings.ToLower(me.Message), "no space left") {
		hb.Kind = HeartbeatDiskFull
	}
	return hb
}

// writeBlockers names what holds writes up on the node: global read lock
// and backup lock holders (information_schema.METADATA_LOCK_INFO, from the
// metadata_lock_info plugin; skipped when it is not installed), sessions
// waiting for a semi-sync acknowledgement, sessions waiting for a lock, and
// read_only=ON. Best effort: a failed query adds nothing.
func (p *Prober) writeBlockers(ctx context.Context) []string {
	conn, err := p.probeDB.Conn(ctx)
	if err != nil {
		return []string{"(could not read the blockers: " + describe("connect", err) + ")"}
	}
	defer conn.Close()
	var out []string
	const holders = "SELECT m.THREAD_ID, m.LOCK_MODE, COALESCE(m.LOCK_TIME_MS, 0), COALESCE(pl.USER, ''), COALESCE(pl.HOST, ''), " +
		"COALESCE(pl.COMMAND, ''), COALESCE(LEFT(pl.INFO, 80), '') " +
		"FROM information_schema.METADATA_LOCK_INFO m LEFT JOIN information_schema.PROCESSLIST pl ON pl.ID = m.THREAD_ID " +
		"WHERE m.LOCK_TYPE IN ('Backup lock', 'Global read lock') AND m.LOCK_MODE IN " +
		"('MDL_BACKUP_FTWRL1', 'MDL_BACKUP_FTWRL2', 'MDL_BACKUP_BLOCK_DDL', 'MDL_BACKUP_WAIT_COMMIT', 'MDL_SHARED') " +
		"ORDER BY m.LOCK_TIME_MS DESC LIMIT 5"
	if rows, err := conn.QueryContext(ctx, holders); err == nil {
		for rows.Next() {
			var (
				id                        int64
				mode, user, host, cmd, in string
				ms                        float64
			)
			if rows.Scan(&id, &mode, &ms, &user, &host, &cmd, &in) != nil {
				break
			}
			out = append(out, describeHolder(id, mode, ms, user, host, cmd, in))
		}
		rows.Close()
	}
	const waiters = "SELECT COALESCE(STATE, ''), COUNT(*), MAX(TIME_MS) FROM information_schema.PROCESSLIST " +
		"WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND (STATE LIKE 'Waiting for semi-sync%' " +
		"OR STATE LIKE 'Waiting for backup lock%' OR STATE LIKE 'Waiting for global read lock%' " +
		"OR STATE LIKE 'Waiting for table metadata lock%' OR STATE LIKE 'Waiting for commit lock%') GROUP BY STATE"
	rows, err := conn.QueryContext(ctx, waiters)
	if err != nil {
		out = append(out, "(could not read the processlist: "+describe("processlist", err)+")")
	} else {
		for rows.Next() {
			var (
				state string
				n     int64
				ms    float64
			)
			if rows.Scan(&state, &n, &ms) != nil {
				break
			}
			w := fmt.Sprintf("%d session(s) %q, longest %s", n, state, (time.Duration(ms) * time.Millisecond).Round(100*time.Millisecond))
			if strings.HasPrefix(state, "Waiting for semi-sync") {
				w += " (semi-sync: no replica acknowledges)"
			}
			out = append(out, w)
		}
		rows.Close()
	}
	var ro int64
	if conn.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&ro) == nil && ro != 0 {
		out = append(out, "read_only=ON")
	}
	return out
}

// describeHolder formats one lock holder, e.g. "FLUSH TABLES WITH READ
// LOCK held by root@localhost thread 42 for 12s".
func describeHolder(id int64, mode string, ms float64, user, host, cmd, info string) string {
	what := mode
	switch mode {
	case "MDL_BACKUP_FTWRL1", "MDL_BACKUP_FTWRL2", "MDL_SHARED":
		what = "FLUSH TABLES WITH READ LOCK"
	case "MDL_BACKUP_BLOCK_DDL", "MDL_BACKUP_WAIT_COMMIT":
		what = "BACKUP STAGE lock (" + mode + ")"
	}
	who := "thread"
	if user != "" {
		h, _, _ := strings.Cut(host, ":")
		who = user + "@" + h + " thread"
	}
	s := fmt.Sprintf("%s held by %s %d for %s", what, who, id, (time.Duration(ms) * time.Millisecond).Round(100*time.Millisecond))
	if cmd != "" {
		s += " (" + cmd
		if info != "" {
			s += ": " + info
		}
		s += ")"
	}
	return s
}

// LoginCheck logs in to the node as user with password and disconnects at
// once (no statement), within the probe timeout. It reports the server's
// refusal: 1040 too many connections, 1203 max_user_connections, 1226 a
// resource limit, 1045 access denied, 1129 host blocked.
func (p *Prober) LoginCheck(ctx context.Context, user, password string) topo.LoginCheck {
	lc := topo.LoginCheck{User: user}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = user, password, "tcp", p.address
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = p.timeout, p.timeout, p.timeout
	cfg.TLS = p.cred.tlsFor()
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		lc.Error = err.Error()
		return lc
	}
	c, err := connector.Connect(ctx)
	if err != nil {
		lc.Code = mysqlErrNo(err)
		lc.Error = loginError(err)
		return lc
	}
	_ = c.Close()
	lc.OK = true
	return lc
}

func loginError(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return fmt.Sprintf("MySQL error %d: %s", me.Number, me.Message)
	}
	if Classify(err) == KindTimeout {
		return "login timed out"
	}
	return err.Error()
}
