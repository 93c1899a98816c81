package probe

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Credentials are the monitor account the prober logs in with.
type Credentials struct {
	User     string
	Password string
	// TLS, when non-nil, is the client TLS configuration of the
	// connections (clusters[].tls, config.BackendTLS): go-sql-driver sends
	// the SSLRequest after the greeting. It is cloned per connection pool;
	// an empty ServerName is filled with the host of the address.
	TLS *tls.Config
}

// tlsFor returns a copy of cred.TLS for one pool (go-sql-driver writes
// ServerName into the config it is given), or nil.
func (cred Credentials) tlsFor() *tls.Config {
	if cred.TLS == nil {
		return nil
	}
	return cred.TLS.Clone()
}

// Prober probes and administers one node. It keeps two small connection
// pools (at most two connections each): one for probes, with the probe
// timeout as connect, read and write timeout so a hung server cannot hold a
// probe, and one for administrative statements, whose duration is bounded by
// the caller's context instead (MASTER_GTID_WAIT legitimately takes longer
// than a probe). A Prober is safe for concurrent use.
type Prober struct {
	address string
	cred    Credentials
	d       dialect
	timeout time.Duration

	probeDB *sql.DB

	adminOnce sync.Once
	adminDB   *sql.DB
	flavorErr error

	// hbFailed is set while the last heartbeat failed: the next one first
	// checks whether its predecessor is still in the server.
	hbFailed atomic.Bool
	// markerReady is set once switchyard.commit_marker is known to exist;
	// markerSwept is when its old rows were last deleted (UnixNano; 0:
	// never). See commitMarkerUpkeep.
	markerReady atomic.Bool
	markerSwept atomic.Int64

	// replica holds the ReplicaSettings that ChangeSource applies.
	replica atomic.Pointer[ReplicaSettings]
}

// ReplicaSettings are how a replica listens to its source, set with every
// ChangeSource (and by AlignReplicaSettings).
type ReplicaSettings struct {
	// HeartbeatPeriod is MASTER_HEARTBEAT_PERIOD: the source sends a
	// heartbeat event when it has sent nothing for that long, so that a
	// silent connection means a silent source (millisecond resolution; 0
	// means 1s).
	HeartbeatPeriod time.Duration
	// NetTimeout is slave_net_timeout in seconds (a global variable):
	// after that long without a byte from the source the IO thread
	// reconnects. 0 leaves the server's value alone.
	NetTimeout int
	// ParallelThreads is the slave_parallel_threads (slave_parallel_mode
	// optimistic) given to a replica that applies with one SQL thread
	// (slave_parallel_threads 0); a replica with threads of its own keeps
	// them. 0 leaves every replica as it is. MariaDB only.
	ParallelThreads int
}

// SetReplicaSettings sets what the next ChangeSource applies.
func (p *Prober) SetReplicaSettings(s ReplicaSettings) { p.replica.Store(&s) }

func (p *Prober) replicaSettings() ReplicaSettings {
	if s := p.replica.Load(); s != nil {
		return *s
	}
	return ReplicaSettings{}
}

// Result is a probe with the classification of its outcome.
type Result struct {
	Probe topo.Probe
	// Kind is KindOK when the probe completed, otherwise what went wrong.
	Kind Kind
}

// NewProber returns a prober for the node at address (host:port) using the
// monitor credentials, for flavor "mariadb" (default when empty) or "mysql".
// timeout bounds each probe, connect included (default 500ms when <= 0). It
// does not connect; an unknown flavor makes every call fail with an error
// naming it.
func NewProber(address string, cred Credentials, flavor string, timeout time.Duration) *Prober {
	return NewProberConnect(address, cred, flavor, timeout, timeout)
}

// NewProberConnect is NewProber with the probes' TCP connect bounded by
// connectTimeout (at most timeout; <= 0 means timeout): a node whose
// packets are dropped fails its probe after connectTimeout, while the
// handshake and the statements of a probe stay bounded by timeout.
func NewProberConnect(address string, cred Credentials, flavor string, timeout, connectTimeout time.Duration) *Prober {
	if timeout <= 0 {
		timeout = 500 * time.Millisecond
	}
	if connectTimeout <= 0 || connectTimeout > timeout {
		connectTimeout = timeout
	}
	d, err := newDialect(flavor)
	if err != nil {
		d = mariadbDialect{}
	}
	p := &Prober{address: address, cred: cred, d: d, timeout: timeout, flavorErr: err}
	// The context bounds each probe; the I/O deadlines are a backstop.
	p.probeDB = openDB(address, cred, connectTimeout, 2*timeout, timeout)
	return p
}

// openDB builds a pool of at most two connections. readTimeout 0 means no
// I/O deadline (the caller's context bounds statements).
func openDB(address string, cred Credentials, connectTimeout, readTimeout, writeTimeout time.Duration) *sql.DB {
	cfg := mysql.NewConfig()
	cfg.User = cred.User
	cfg.Passwd = cred.Password
	cfg.Net = "tcp"
	cfg.Addr = address
	cfg.Timeout = connectTimeout
	cfg.ReadTimeout = readTimeout
	cfg.WriteTimeout = writeTimeout
	cfg.InterpolateParams = true
	cfg.TLS = cred.tlsFor()
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		// NewConnector only fails on an invalid config, which the fields
		// above cannot produce; fall back to a DSN so errors surface on use.
		db, _ := sql.Open("mysql", cfg.FormatDSN())
		return db
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	db.SetConnMaxLifetime(10 * time.Minute)
	db.SetConnMaxIdleTime(time.Minute)
	return db
}

// Address is the node's host:port.
func (p *Prober) Address() string { return p.address }

// Flavor is the SQL flavor in use ("mariadb" or "mysql").
func (p *Prober) Flavor() string { return p.d.name() }

// Close closes both connection pools.
func (p *Prober) Close() error {
	err := p.probeDB.Close()
	p.adminOnce.Do(func() {}) // no admin pool may be opened after Close
	if p.adminDB != nil {
		if e := p.adminDB.Close(); err == nil {
			err = e
		}
	}
	return err
}

// Probe collects a snapshot of the node within the probe timeout. It never
// returns an error: an unreachable node gives Reachable=false and Error
// saying why (connection refused, timeout, too many connections 1040, access
// denied 1045, ...); a node that answered but refused one of the probe
// statements gives Reachable=true with Error naming the statement, and the
// fields that statement fills left empty.
func (p *Prober) Probe(ctx context.Context) topo.Probe { return p.ProbeResult(ctx).Probe }

// ProbeResult is Probe with the classification of the outcome.
func (p *Prober) ProbeResult(ctx context.Context) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	pr := topo.Probe{At: start}
	kind := p.collect(ctx, &pr)
	pr.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	return Result{Probe: pr, Kind: kind}
}

func (p *Prober) collect(ctx context.Context, pr *topo.Probe) Kind {
	if p.flavorErr != nil {
		pr.Error = p.flavorErr.Error()
		return KindQuery
	}
	fail := func(what string, err error) Kind {
		if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
			// The driver reports a deadline hit mid-packet as a broken
			// connection; the probe timeout is what happened.
			err = fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
		}
		k := Classify(err)
		pr.Error = describe(what, err)
		if connectionLost(k) {
			pr.Reachable = false
		}
		return k
	}
	conn, err := p.probeDB.Conn(ctx)
	if err != nil {
		return fail("connect", err)
	}
	defer conn.Close()
	pr.Reachable = true

	var (
		serverID            sql.NullInt64
		version             sql.NullString
		readOnly            sql.NullInt64
		gtidA, gtidB, gtidC sql.NullString
		netTimeout          sql.NullInt64
		parallelThreads     sql.NullInt64
	)
	err = conn.QueryRowContext(ctx, p.d.variablesQuery()).Scan(&serverID, &version, &readOnly, &gtidA, &gtidB, &gtidC, &netTimeout, &parallelThreads)
	if err != nil {
		return fail("read variables", err)
	}
	pr.ServerID = uint32(serverID.Int64)
	pr.Version = version.String
	pr.ReadOnly = readOnly.Int64 != 0
	pr.NetTimeoutSeconds = netTimeout.Int64
	if parallelThreads.Valid {
		pr.ParallelThreads = &parallelThreads.Int64
	}
	if p.d.name() == FlavorMySQL {
		pr.GTIDExecuted = gtidA.String
	} else {
		pr.GTIDCurrent, pr.GTIDSlave, pr.GTIDBinlog = gtidA.String, gtidB.String, gtidC.String
	}

	rows, err := conn.QueryContext(ctx, p.d.replicaStatusQuery())
	if err != nil {
		return fail(p.d.replicaStatusQuery(), err)
	}
	cols, vals, err := scanAll(rows)
	rows.Close()
	if err != nil {
		return fail(p.d.replicaStatusQuery(), err)
	}
	rs, ok, err := parseReplicaStatus(cols, vals)
	if err != nil {
		pr.Error = err.Error()
		return KindQuery
	}
	if ok {
		rs.fill(pr)
	}

	const statusQuery = "SHOW GLOBAL STATUS WHERE Variable_name IN " +
		"('Innodb_buffer_pool_pages_data', 'Innodb_buffer_pool_pages_total', 'Threads_connected', 'Threads_running', 'Uptime', " +
		"'Rpl_semi_sync_master_status', 'Rpl_semi_sync_slave_status', 'Rpl_semi_sync_master_clients', " +
		"'Rpl_semi_sync_master_wait_sessions', 'Rpl_semi_sync_master_no_tx')"
	ss := &topo.SemiSync{}
	srows, err := conn.QueryContext(ctx, statusQuery)
	if err != nil {
		return fail("SHOW GLOBAL STATUS", err)
	}
	defer srows.Close()
	for srows.Next() {
		var name, value string
		if err := srows.Scan(&name, &value); err != nil {
			return fail("SHOW GLOBAL STATUS", err)
		}
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "Innodb_buffer_pool_pages_data":
			pr.BufferPoolPagesData = n
		case "Innodb_buffer_pool_pages_total":
			pr.BufferPoolPagesTotal = n
		case "Threads_connected":
			pr.ThreadsConnected = n
		case "Threads_running":
			pr.ThreadsRunning = n
		case "Uptime":
			pr.UptimeSeconds = n
		default:
			semiSyncStatus(ss, name, value, n)
		}
	}
	if err := srows.Err(); err != nil {
		return fail("SHOW GLOBAL STATUS", err)
	}
	srows.Close()
	// Semi-sync settings are informative for the probe: a server without
	// them (MySQL without the plugin) or a refusal leaves SemiSync nil and
	// the probe complete.
	if readSemiSyncVariables(ctx, conn, ss) {
		pr.SemiSync = ss
	}
	return KindOK
}

// admin returns the administrative pool, opening it on first use.
func (p *Prober) admin() (*sql.DB, error) {
	if p.flavorErr != nil {
		return nil, p.flavorErr
	}
	p.adminOnce.Do(func() {
		p.adminDB = openDB(p.address, p.cred, p.timeout, 0, p.timeout)
	})
	if p.adminDB == nil {
		return nil, fmt.Errorf("probe %s: closed", p.address)
	}
	return p.adminDB, nil
}
