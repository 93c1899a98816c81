package probe

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// DurableSemiSyncTimeoutMS is the rpl_semi_sync_master_timeout (ms) the
// controller sets for durability semi_sync_durable: 2^32-1 ms, about 49.7
// days, i.e. a primary never falls back to asynchronous replication within
// any outage an operator would wait out. MariaDB 10.11.19 accepts values up
// to 18446744073709551615 (checked on a sandbox: SET GLOBAL takes it and a
// commit with no replica connected then waits); 2^32-1 is used because it
// also fits a 32-bit unsigned long.
const DurableSemiSyncTimeoutMS uint64 = 4294967295

// SemiSyncKillConnTimeout is the rpl_semi_sync_slave_kill_conn_timeout
// (seconds) the controller keeps on semi-sync replicas. On STOP SLAVE a
// MariaDB semi-sync replica connects to its source to KILL its binlog dump
// thread there (Repl_semi_sync_slave::slave_stop, sql/semisync_slave.cc),
// and for a source whose packets are dropped that connect waits this long
// (measured on 10.11 with the source cut off: 1.00s at 1, 2.00s at 3): the
// emergency failover of a partitioned semi-sync primary cuts its replicas'
// IO threads (CutReplicaIO) rather than wait for it, but repoints them only
// once they exited. MariaDB's default is 5. 0 is no timeout at
// all for the server's client library, so 1 is the least useful value.
// Whether the replica kills the dump thread is fixed when its IO thread
// starts (rpl_semi_sync_slave_enabled at that moment), so this wait cannot
// be skipped by switching semi-sync off before the stop.
const SemiSyncKillConnTimeout uint64 = 1

// semiSyncStatus fills ss from one SHOW GLOBAL STATUS row.
func semiSyncStatus(ss *topo.SemiSync, name, value string, n int64) {
	on := strings.EqualFold(value, "ON")
	switch name {
	case "Rpl_semi_sync_master_status":
		ss.MasterStatus = on
	case "Rpl_semi_sync_slave_status":
		ss.SlaveStatus = on
	case "Rpl_semi_sync_master_clients":
		ss.Clients = n
	case "Rpl_semi_sync_master_wait_sessions":
		ss.WaitSessions = n
	case "Rpl_semi_sync_master_no_tx":
		ss.NoTx = n
	}
}

// readSemiSyncVariables reads the rpl_semi_sync_* variables into ss; it
// reports false when the server has none or the query failed.
func readSemiSyncVariables(ctx context.Context, conn *sql.Conn, ss *topo.SemiSync) bool {
	rows, err := conn.QueryContext(ctx, "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_%'")
	if err != nil {
		return false
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var name, value string
		if rows.Scan(&name, &value) != nil {
			return false
		}
		on := strings.EqualFold(value, "ON")
		switch strings.ToLower(name) {
		case "rpl_semi_sync_master_enabled":
			ss.MasterEnabled, found = on, true
		case "rpl_semi_sync_master_timeout":
			ss.MasterTimeoutMS, _ = strconv.ParseUint(value, 10, 64)
		case "rpl_semi_sync_master_wait_point":
			ss.WaitPoint = strings.ToUpper(value)
		case "rpl_semi_sync_master_wait_no_slave":
			ss.WaitNoSlave = on
		case "rpl_semi_sync_slave_enabled":
			ss.SlaveEnabled = on
		case "rpl_semi_sync_slave_kill_conn_timeout":
			ss.SlaveKillConnTimeout, _ = strconv.ParseUint(value, 10, 64)
		}
	}
	return rows.Err() == nil && found
}

// SemiSyncSettings are the semi-sync variables the controller sets on a
// primary (Master*) and on replicas (SlaveEnabled). A nil field is left
// as the server has it.
type SemiSyncSettings struct {
	MasterEnabled *bool
	WaitPoint     string // "" leaves it
	TimeoutMS     *uint64
	WaitNoSlave   *bool
	// NoWaitAlone, with MasterEnabled ON and WaitNoSlave nil: when no
	// semi-sync replica is connected (Rpl_semi_sync_master_clients 0),
	// rpl_semi_sync_master_wait_no_slave is set OFF before the master
	// switch. Switched on with it ON and no replica, every commit waits
	// rpl_semi_sync_master_timeout for nobody, and turning it OFF after
	// that does not release the waiting commits (checked on 10.11.19).
	NoWaitAlone bool
}

// ApplySemiSyncPrimary sets the semi-sync master variables on the node
// (SET GLOBAL; needs REPLICATION MASTER ADMIN on MariaDB 10.11). The wait
// point is set before semi-sync is switched on, so no commit waits at the
// weaker point in between. Errors name the variable that failed.
func (p *Prober) ApplySemiSyncPrimary(ctx context.Context, s SemiSyncSettings) error {
	onOff := func(b bool) string {
		if b {
			return "ON"
		}
		return "OFF"
	}
	if s.NoWaitAlone && s.MasterEnabled != nil && *s.MasterEnabled && s.WaitNoSlave == nil {
		clients, err := p.semiSyncClients(ctx)
		if err != nil {
			return err
		}
		if clients == 0 {
			off := false
			s.WaitNoSlave = &off
		}
	}
	var stmts []string
	if s.WaitPoint != "" {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_master_wait_point = "+s.WaitPoint)
	}
	if s.TimeoutMS != nil {
		stmts = append(stmts, fmt.Sprintf("SET GLOBAL rpl_semi_sync_master_timeout = %d", *s.TimeoutMS))
	}
	if s.WaitNoSlave != nil {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_master_wait_no_slave = "+onOff(*s.WaitNoSlave))
	}
	if s.MasterEnabled != nil {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_master_enabled = "+onOff(*s.MasterEnabled))
	}
	for _, q := range stmts {
		if err := p.exec(ctx, q, q); err != nil {
			return err
		}
	}
	return nil
}

// SetSemiSyncKillConnTimeout sets rpl_semi_sync_slave_kill_conn_timeout to
// SemiSyncKillConnTimeout (a global variable that takes effect at once).
// A no-op on MySQL.
func (p *Prober) SetSemiSyncKillConnTimeout(ctx context.Context) error {
	if p.d.name() != FlavorMariaDB {
		return nil
	}
	q := fmt.Sprintf("SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout = %d", SemiSyncKillConnTimeout)
	return p.exec(ctx, "set rpl_semi_sync_slave_kill_conn_timeout", q)
}

// EnableSemiSyncReplica sets rpl_semi_sync_slave_kill_conn_timeout
// (SetSemiSyncKillConnTimeout) and rpl_semi_sync_slave_enabled=ON and, when the
// IO thread is running, restarts it (STOP SLAVE IO_THREAD; START SLAVE
// IO_THREAD) so that it registers as a semi-sync replica: the variable only
// takes effect when the IO thread connects (MariaDB KB, "Semisynchronous
// Replication"). A stopped IO thread is left stopped (an operator may have
// stopped it). The SQL thread keeps applying meanwhile.
func (p *Prober) EnableSemiSyncReplica(ctx context.Context, restartIO bool) error {
	if err := p.SetSemiSyncKillConnTimeout(ctx); err != nil {
		return err
	}
	if err := p.exec(ctx, "set rpl_semi_sync_slave_enabled=ON", "SET GLOBAL rpl_semi_sync_slave_enabled = ON"); err != nil {
		return err
	}
	if !restartIO || p.d.name() != FlavorMariaDB {
		return nil
	}
	if err := p.exec(ctx, "STOP SLAVE IO_THREAD", "STOP SLAVE IO_THREAD"); err != nil {
		return err
	}
	return p.exec(ctx, "START SLAVE IO_THREAD", "START SLAVE IO_THREAD")
}

// semiSyncClients returns Rpl_semi_sync_master_clients: the semi-sync
// replicas connected to the node (0 when the server does not report it).
func (p *Prober) semiSyncClients(ctx context.Context) (int64, error) {
	db, err := p.admin()
	if err != nil {
		return 0, err
	}
	ctx, cancel := p.adminDeadline(ctx, 0)
	defer cancel()
	var name string
	var n int64
	err = db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, p.wrap("read Rpl_semi_sync_master_clients", err)
	}
	return n, nil
}
