package probe

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// adminDeadline is applied to administrative calls whose context has no
// deadline: ten probe timeouts, at least five seconds.
func (p *Prober) adminDeadline(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok && extra == 0 {
		return context.WithCancel(ctx)
	}
	d := 10 * p.timeout
	if d < 5*time.Second {
		d = 5 * time.Second
	}
	return context.WithTimeout(ctx, d+extra)
}

// wrap names the node and the step in an error; err never carries a
// password (server messages do not echo statements).
func (p *Prober) wrap(what string, err error) error {
	return fmt.Errorf("%s %s: %w", p.address, what, err)
}

// Exec runs one statement on the node with the monitor account. Errors name
// the node (not the statement, which may hold a secret) and wrap the driver's
// error (*mysql.MySQLError for server errors; classify with Classify).
func (p *Prober) Exec(ctx context.Context, query string, args ...any) error {
	return p.exec(ctx, "statement", query, args...)
}

func (p *Prober) exec(ctx context.Context, what, query string, args ...any) error {
	db, err := p.admin()
	if err != nil {
		return err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		return p.wrap(what, err)
	}
	return nil
}

// ReadOnly returns @@read_only.
func (p *Prober) ReadOnly(ctx context.Context) (bool, error) {
	db, err := p.admin()
	if err != nil {
		return false, err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	var v int64
	if err := db.QueryRowContext(ctx, "SELECT @@read_only").Scan(&v); err != nil {
		return false, p.wrap("read @@read_only", err)
	}
	return v != 0, nil
}

// SetReadOnly sets the global read_only (MariaDB; MySQL uses super_read_only
// to fence too). Needs READ_ONLY ADMIN on MariaDB 10.11 (SUPER alone gets
// error 1227). Open transactions do not block it, but a session holding
// LOCK TABLES ... WRITE (or FLUSH TABLES WITH READ LOCK) does: the statement
// then runs with the session's lock_wait_timeout set from ctx's deadline
// (one second less, at least one second), so the server itself gives up with
// error 1205 (KindLockWait) instead of leaving a waiting statement behind
// when ctx ends; kill the client sessions and retry.
func (p *Prober) SetReadOnly(ctx context.Context, on bool) error {
	what := fmt.Sprintf("set read_only=%v", on)
	db, err := p.admin()
	if err != nil {
		return err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		return p.wrap(what, err)
	}
	defer conn.Close()
	wait := 1
	if dl, ok := ctx.Deadline(); ok {
		wait = max(1, int(time.Until(dl)/time.Second)-1)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = ?", wait); err != nil {
		return p.wrap(what, err)
	}
	for _, q := range p.d.setReadOnly(on) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return p.wrap(what, err)
		}
	}
	return nil
}

// StopReplica stops both replication threads (STOP SLAVE / STOP REPLICA).
// Stopping a node that is not replicating is not an error.
func (p *Prober) StopReplica(ctx context.Context) error {
	return p.exec(ctx, p.d.stopReplica(), p.d.stopReplica())
}

// StartReplica starts both replication threads (START SLAVE / START REPLICA).
func (p *Prober) StartReplica(ctx context.Context) error {
	return p.exec(ctx, p.d.startReplica(), p.d.startReplica())
}

// ResetReplicaAll forgets the replication source entirely (RESET SLAVE ALL /
// RESET REPLICA ALL); the replica threads must be stopped. Needs RELOAD on
// MariaDB 10.11 as well as REPLICATION SLAVE ADMIN.
func (p *Prober) ResetReplicaAll(ctx context.Context) error {
	return p.exec(ctx, p.d.resetReplicaAll(), p.d.resetReplicaAll())
}

// ForgetReplication stops replication and forgets its source (STOP SLAVE,
// then RESET SLAVE ALL): what a promotion does to its candidate. STOP
// SLAVE waits for an IO thread still exiting.
func (p *Prober) ForgetReplication(ctx context.Context) error {
	if err := p.StopReplica(ctx); err != nil {
		return err
	}
	return p.ResetReplicaAll(ctx)
}

// ChangeSource points the (stopped) replica at host:port with the
// replication account. useGTID is GTIDSlavePos or GTIDCurrentPos
// (MASTER_USE_GTID on MariaDB; MySQL always uses SOURCE_AUTO_POSITION=1).
// Connect retry is 1 s and the heartbeat period, slave_net_timeout and
// the parallel appliers (when set) are the prober's ReplicaSettings (heartbeat 1 s and the server's timeout when
// none were set), so a silent source is noticed quickly (MariaDB KB "CHANGE
// MASTER TO", "slave_net_timeout"). The password never appears in errors.
func (p *Prober) ChangeSource(ctx context.Context, host string, port int, user, password, useGTID string) error {
	rs := p.replicaSettings()
	q, args, err := p.d.changeSource(host, port, user, password, useGTID, rs.HeartbeatPeriod)
	if err != nil {
		return p.wrap("change source", err)
	}
	if nt := p.d.setNetTimeout(rs.NetTimeout); rs.NetTimeout > 0 && nt != "" {
		if err := p.exec(ctx, "set replica net timeout", nt); err != nil {
			return err
		}
	}
	if err := p.setParallel(ctx, rs.ParallelThreads); err != nil {
		return err
	}
	return p.exec(ctx, fmt.Sprintf("change source to %s:%d", host, port), q, args...)
}

// AlignReplicaSettings gives a running replica the prober's
// ReplicaSettings without changing its source or position: it sets
// slave_net_timeout, then STOP SLAVE, the parallel appliers (when
// ReplicaSettings.ParallelThreads is set), CHANGE MASTER TO
// MASTER_HEARTBEAT_PERIOD = …, START SLAVE (MariaDB 10.11 refuses the
// CHANGE MASTER while a replication thread runs, error 1198; with GTID
// replication the IO thread resumes from gtid_slave_pos, so nothing is
// skipped or fetched twice). When the threads could not be started again
// the error says so; call it only on a replica whose both threads ran.
func (p *Prober) AlignReplicaSettings(ctx context.Context) error {
	rs := p.replicaSettings()
	if nt := p.d.setNetTimeout(rs.NetTimeout); rs.NetTimeout > 0 && nt != "" {
		if err := p.exec(ctx, "set replica net timeout", nt); err != nil {
			return err
		}
	}
	if err := p.StopReplica(ctx); err != nil {
		return err
	}
	herr := errors.Join(p.setParallel(ctx, rs.ParallelThreads), p.exec(ctx, "set heartbeat period", p.d.setHeartbeat(rs.HeartbeatPeriod)))
	if err := p.StartReplica(ctx); err != nil {
		return errors.Join(herr, fmt.Errorf("replication left stopped: %w", err))
	}
	return herr
}

// setParallel sets slave_parallel_threads to n and slave_parallel_mode to
// optimistic on a stopped replica (n 0: nothing).
func (p *Prober) setParallel(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	for _, q := range p.d.setParallel(n) {
		if err := p.exec(ctx, "set parallel replication", q); err != nil {
			return err
		}
	}
	return nil
}

// SetReplicaPosFromBinlog makes a node that was a primary resume replication
// after the last transaction in its own binlog: on MariaDB
// `SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos` (replica threads stopped;
// then ChangeSource with GTIDSlavePos), on MySQL nothing (auto-positioning
// uses gtid_executed).
func (p *Prober) SetReplicaPosFromBinlog(ctx context.Context) error {
	q := p.d.setReplicaPosFromBinlog()
	if q == "" {
		return nil
	}
	return p.exec(ctx, "set gtid_slave_pos from gtid_binlog_pos", q)
}

// WrittenGTIDs returns every GTID the node has in its binlog: MariaDB
// @@gtid_binlog_pos, MySQL @@gtid_executed. Read on a fenced primary it is
// what a candidate must apply before promotion.
func (p *Prober) WrittenGTIDs(ctx context.Context) (string, error) {
	db, err := p.admin()
	if err != nil {
		return "", err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	var v sql.NullString
	if err := db.QueryRowContext(ctx, p.d.writtenGTIDQuery()).Scan(&v); err != nil {
		return "", p.wrap("read binlog GTID position", err)
	}
	return v.String, nil
}

// WaitForGTID waits up to timeout for the node to apply pos (MariaDB
// MASTER_GTID_WAIT, MySQL WAIT_FOR_EXECUTED_GTID_SET). It returns 0 when pos
// was applied and -1 on timeout, as MASTER_GTID_WAIT does; err is set only
// when the wait itself failed.
func (p *Prober) WaitForGTID(ctx context.Context, pos string, timeout time.Duration) (int, error) {
	db, err := p.admin()
	if err != nil {
		return 0, err
	}
	ctx, cancel := p.adminDeadline(ctx, timeout)
	defer cancel()
	q, args := p.d.waitForGTID(pos, timeout)
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		return 0, p.wrap("wait for GTID "+pos, err)
	}
	if !v.Valid {
		return 0, p.wrap("wait for GTID "+pos, errors.New("returned NULL (invalid position?)"))
	}
	if p.d.waitTimedOut(v.Int64) {
		return -1, nil
	}
	return 0, nil
}

// KillClientSessions kills every session on the node that is not a server or
// replication thread (system user, binlog dump, replica IO/SQL threads), not
// the monitor account's own and not one of exceptUsers. It returns how many
// sessions it killed; a session that ended meanwhile (error 1094) is not an
// error. Needs PROCESS (to see other users' sessions) and CONNECTION ADMIN
// (to kill them).
func (p *Prober) KillClientSessions(ctx context.Context, exceptUsers ...string) (int, error) {
	db, err := p.admin()
	if err != nil {
		return 0, err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	rows, err := db.QueryContext(ctx,
		"SELECT ID, USER, COMMAND FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()")
	if err != nil {
		return 0, p.wrap("list sessions", err)
	}
	type session struct {
		id            int64
		user, command string
	}
	var victims []session
	for rows.Next() {
		var s session
		var user, command sql.NullString
		if err := rows.Scan(&s.id, &user, &command); err != nil {
			rows.Close()
			return 0, p.wrap("list sessions", err)
		}
		s.user, s.command = user.String, command.String
		if p.d.systemThread(s.user, s.command) || s.user == p.cred.User || contains(exceptUsers, s.user) {
			continue
		}
		victims = append(victims, s)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return 0, p.wrap("list sessions", err)
	}
	rows.Close()
	killed := 0
	for _, s := range victims {
		if _, err := db.ExecContext(ctx, "KILL CONNECTION ?", s.id); err != nil {
			if mysqlErrNo(err) == erNoSuchThread {
				continue
			}
			return killed, p.wrap(fmt.Sprintf("kill session %d of user %q", s.id, s.user), err)
		}
		killed++
	}
	return killed, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// CheckGrants reads SHOW GRANTS for the monitor account and returns the
// name of every privilege the controller needs that it lacks, in a fixed
// order (MariaDB 10.11: READ_ONLY ADMIN, REPLICATION SLAVE ADMIN, SLAVE
// MONITOR, BINLOG MONITOR, REPLICATION MASTER ADMIN, CONNECTION ADMIN,
// PROCESS, RELOAD — SUPER no longer implies them; ALL PRIVILEGES covers all).
// Only global (ON *.*) grants count, including those of roles SHOW GRANTS
// lists. An empty result means nothing is missing.
func (p *Prober) CheckGrants(ctx context.Context) ([]string, error) {
	db, err := p.admin()
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return nil, p.wrap("SHOW GRANTS", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, p.wrap("SHOW GRANTS", err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, p.wrap("SHOW GRANTS", err)
	}
	missing := missingPrivileges(lines, p.d.requiredPrivileges())
	if !heartbeatGranted(lines) {
		missing = append(missing, heartbeatGrant)
	}
	return missing, nil
}

// heartbeatGrant names what the heartbeat write needs when it is missing.
const heartbeatGrant = "SELECT, INSERT, UPDATE, CREATE ON " + HeartbeatSchema + ".* (heartbeat write)"

// heartbeatGranted reports whether the grants allow the heartbeat write:
// INSERT, UPDATE and CREATE (SELECT too) on *.* or on the switchyard
// schema (ALL PRIVILEGES on either covers them).
func heartbeatGranted(lines []string) bool {
	have := globalPrivileges(lines)
	for k, v := range schemaPrivileges(lines, HeartbeatSchema) {
		have[k] = v
	}
	if have["ALL PRIVILEGES"] || have["ALL"] {
		return true
	}
	return have["SELECT"] && have["INSERT"] && have["UPDATE"] && have["CREATE"]
}

// schemaPrivileges extracts the privileges of every "GRANT ... ON
// `schema`.* TO" line, upper-cased.
func schemaPrivileges(lines []string, schema string) map[string]bool {
	have := map[string]bool{}
	for _, l := range lines {
		u := strings.ToUpper(l)
		if !strings.HasPrefix(u, "GRANT ") {
			continue
		}
		on := -1
		for _, form := range []string{" ON `" + strings.ToUpper(schema) + "`.* TO ", " ON " + strings.ToUpper(schema) + ".* TO "} {
			if i := strings.Index(u, form); i >= 0 {
				on = i
				break
			}
		}
		if on < 0 {
			continue
		}
		for _, priv := range strings.Split(u[len("GRANT "):on], ",") {
			if priv = strings.Join(strings.Fields(priv), " "); priv != "" {
				have[priv] = true
			}
		}
	}
	return have
}

// globalPrivileges extracts the privileges of every "GRANT ... ON *.* TO"
// line, upper-cased. It looks only at the text between GRANT and ON, so the
// password hash in the line is never touched.
func globalPrivileges(lines []string) map[string]bool {
	have := map[string]bool{}
	for _, l := range lines {
		u := strings.ToUpper(l)
		if !strings.HasPrefix(u, "GRANT ") {
			continue
		}
		on := strings.Index(u, " ON *.* TO ")
		if on < 0 {
			continue
		}
		for _, priv := range strings.Split(u[len("GRANT "):on], ",") {
			priv = strings.Join(strings.Fields(priv), " ")
			if priv != "" {
				have[priv] = true
			}
		}
	}
	return have
}

// missingPrivileges lists the Name of every requirement none of whose
// alternatives is granted.
func missingPrivileges(lines []string, required []privilege) []string {
	have := globalPrivileges(lines)
	if have["ALL PRIVILEGES"] || have["ALL"] {
		return nil
	}
	var missing []string
	for _, r := range required {
		ok := false
		for _, alt := range r.AnyOf {
			if have[alt] {
				ok = true
				break
			}
		}
		if !ok {
			missing = append(missing, r.Name)
		}
	}
	return missing
}
