package topo

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"time"
)

// Keys builds the store's key layout under a prefix (config etcd.prefix):
//
//	<prefix>/config/current                  current config revision (JSON, configstore.Revision)
//	<prefix>/config/history/<rev>            past revisions, rev zero-padded to 12 digits
//	<prefix>/config/consumers/<role>/<id>    revision a proxy/controller applied (JSON), leased
//	<prefix>/clusters/<cluster>/state        ClusterState (JSON)
//	<prefix>/clusters/<cluster>/requests/<id> Request (JSON), operator → leader
//	<prefix>/proxies/<id>                    ProxyRegistration (JSON), leased
//	<prefix>/controllers/<id>                ControllerRegistration (JSON), leased
//	<prefix>/election/controller             controller leader election
//	<prefix>/events/<cluster>/<id>           Event (JSON), written by the leader, bounded
//	<prefix>/clusters/<cluster>/switchover   SwitchoverProgress (JSON), written by the leader
//	<prefix>/clusters/<cluster>/drained      DrainedNodes (JSON), written by operators
//	<prefix>/hotreads/<id>                   HotReadSet (JSON), leased, written by each proxy
//	<prefix>/rounds/<cluster>                ProbeRound (JSON), written by the leader every round
type Keys struct{ Prefix string }

// Config is the key of the current config revision document (see package
// configstore). It is written only by compare-and-swap.
func (k Keys) Config() string { return path.Join(k.Prefix, "config", "current") }

// ConfigHistory is the prefix of the config revision history (trailing
// slash). Keys under it sort by revision.
func (k Keys) ConfigHistory() string { return path.Join(k.Prefix, "config", "history") + "/" }

// ConfigRevision is the key of revision rev in the history, zero-padded to
// 12 digits so that keys sort by revision.
func (k Keys) ConfigRevision(rev int64) string { return fmt.Sprintf("%s%012d", k.ConfigHistory(), rev) }

// ConfigConsumers is the prefix of the reports of every config consumer
// (proxy, controller): which revision it applied and its alarm (trailing
// slash).
func (k Keys) ConfigConsumers() string { return path.Join(k.Prefix, "config", "consumers") + "/" }

// ConfigConsumer is the key of one consumer's report: role is "proxy" or
// "controller", id the process's id (one process may run both roles).
func (k Keys) ConfigConsumer(role, id string) string { return k.ConfigConsumers() + role + "/" + id }

// ClusterState is the key of a cluster's state.
func (k Keys) ClusterState(cluster string) string {
	return path.Join(k.Prefix, "clusters", cluster, "state")
}

// ClustersPrefix is the prefix under which every cluster's keys live (with a
// trailing slash).
func (k Keys) ClustersPrefix() string { return path.Join(k.Prefix, "clusters") + "/" }

// Requests is the prefix of a cluster's operator requests (trailing slash).
func (k Keys) Requests(cluster string) string {
	return path.Join(k.Prefix, "clusters", cluster, "requests") + "/"
}

// Request is the key of one operator request.
func (k Keys) Request(cluster, id string) string { return k.Requests(cluster) + id }

// Proxies is the prefix of proxy registrations (trailing slash).
func (k Keys) Proxies() string { return path.Join(k.Prefix, "proxies") + "/" }

// Proxy is the key of one proxy registration.
func (k Keys) Proxy(id string) string { return k.Proxies() + id }

// Controllers is the prefix of controller registrations (trailing slash).
func (k Keys) Controllers() string { return path.Join(k.Prefix, "controllers") + "/" }

// Controller is the key of one controller registration.
func (k Keys) Controller(id string) string { return k.Controllers() + id }

// Election is the controller leader election name.
func (k Keys) Election() string { return path.Join(k.Prefix, "election", "controller") }

// Cluster phases.
const (
	// PhaseStable: Primary is the writable primary of Epoch.
	PhaseStable = "stable"
	// PhaseSwitching: a switchover from Primary to Target is in progress.
	PhaseSwitching = "switching"
	// PhaseFailover: an emergency failover from OldPrimary to Target is in
	// progress. Primary is "" so that no proxy routes writes anywhere until
	// the new primary is published (in the same Epoch, Phase back to stable).
	PhaseFailover = "failover"
)

// Node roles as discovered.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
	RoleUnknown = "unknown"
)

// ClusterState is what the controller leader publishes about one cluster.
// Proxies route from it; status shows it.
type ClusterState struct {
	Cluster string `json:"cluster"`
	// Primary is the name of the node that takes writes; "" if none is known.
	Primary string `json:"primary"`
	// Epoch increases by one on every primary change (never decreases).
	Epoch int64 `json:"epoch"`
	// Phase is PhaseStable or PhaseSwitching.
	Phase string `json:"phase"`
	// Target is the candidate during PhaseSwitching.
	Target string `json:"target,omitempty"`
	// Nodes are every configured node with its last probe, in config order.
	Nodes []NodeState `json:"nodes"`
	// Leader is the id of the controller that wrote this state.
	Leader string `json:"leader"`
	// UpdatedAt is when the controller wrote it.
	UpdatedAt time.Time `json:"updated_at"`

	// OldPrimary is the primary being replaced during PhaseFailover.
	OldPrimary string `json:"old_primary,omitempty"`
	// TargetAuto is true during PhaseFailover when the controller decided
	// the failover (false for an operator's request), so that a leader
	// that takes over and finishes it records it as it was.
	TargetAuto bool `json:"target_auto,omitempty"`
	// Repoint are the replicas a failover stops receiving from the old
	// primary and must leave replicating from the new one (not those an
	// operator had stopped before it). Set when the failover is announced
	// (PhaseFailover) and kept after the publication until each
	// replicates from the primary that failover published, or is
	// quarantined or gone from the config: a leader that takes over from
	// one that died in the middle finishes the repointing (nodes it
	// repointed but had not started yet are started). Cleared once the
	// epoch moves on.
	Repoint []string `json:"repoint,omitempty"`
	// Maintenance is set while maintenance mode is on: automatic failover
	// is blocked, everything else goes on.
	Maintenance *Maintenance `json:"maintenance,omitempty"`
	// FailoverBlock is set after a failover: automatic failover stays
	// blocked until Until or until an operator acknowledges (switchyard ack).
	FailoverBlock *FailoverBlock `json:"failover_block,omitempty"`
	// AutoDisabled says why automatic failover was disabled for the cluster
	// (a recovery failed or timed out); "" when it is not. `switchyard ack`
	// clears it.
	AutoDisabled string `json:"auto_disabled,omitempty"`
	// Alarms are conditions an operator must look at (failed recovery,
	// missing privileges, quarantined nodes), newest last.
	Alarms []Alarm `json:"alarms,omitempty"`
	// Analysis are the analysis codes of the last probe round.
	Analysis []AnalysisEntry `json:"analysis,omitempty"`
	// Quarantined are nodes never routed to nor promoted, by name, with
	// the reason (e.g. errant GTIDs on a returning old primary).
	Quarantined map[string]string `json:"quarantined,omitempty"`
	// LastFailover records the most recent failover.
	LastFailover *FailoverRecord `json:"last_failover,omitempty"`
	// AutoFailover says whether the controller would fail the primary over
	// automatically if it were found dead now, and if not why; the leader
	// recomputes it every probe round and rewrites it when it changes.
	// Proxies hold statements while the primary is lost only when it is
	// ready (failover.max_hold); otherwise they answer at once with its
	// reason. nil: not published (an older controller).
	AutoFailover *AutoFailover `json:"auto_failover,omitempty"`
	// PrimaryLost is set while the leader holds the primary dead — the
	// DeadPrimary finding in failover.confirm_rounds consecutive rounds,
	// the rule an automatic failover starts on — and no automatic
	// failover comes for it (manual mode, maintenance, a block, disabled,
	// no candidate). Primary listeners then answer new statements and
	// logins at once with the reason instead of trying the backend, and
	// cut the statements in flight there. Cleared when the finding no
	// longer holds; ignored unless Node is Primary and Epoch is Epoch.
	PrimaryLost *PrimaryLost `json:"primary_lost,omitempty"`
}

// PrimaryLost records the leader's verdict that the primary of an epoch is
// dead while no automatic failover replaces it (ClusterState.PrimaryLost).
type PrimaryLost struct {
	Node  string `json:"node"`
	Epoch int64  `json:"epoch"`
	// Since is when the verdict was reached (the leader's clock).
	Since time.Time `json:"since"`
	// Rounds is how many consecutive probe rounds found DeadPrimary.
	Rounds int `json:"rounds"`
	// Class is one of the Auto* constants: why no automatic failover
	// comes. Reason says it for people, with what an operator must run.
	Class  string `json:"class"`
	Reason string `json:"reason"`
	// Detail is the DeadPrimary finding's detail.
	Detail string `json:"detail,omitempty"`
}

// Why an automatic failover would not happen (AutoFailover.Class).
const (
	AutoNotAuto     = "manual"       // failover.mode is manual
	AutoMaintenance = "maintenance"  // maintenance mode is on
	AutoDisabledOff = "disabled"     // disabled after a failed recovery
	AutoBlocked     = "blocked"      // failover.block_period after a failover
	AutoNoCandidate = "no_candidate" // no replica could be promoted
)

// AutoFailover is the controller's answer to "would a dead primary be
// failed over automatically now?".
type AutoFailover struct {
	// Ready is true when failover.mode is auto, no maintenance, block or
	// disable applies, and a promotable replica exists (Candidate).
	Ready bool `json:"ready"`
	// Candidate is the replica that looks promotable now (a hint: the
	// failover plans again when it runs); "" when none.
	Candidate string `json:"candidate,omitempty"`
	// Class is one of the Auto* constants when Ready is false, else "".
	Class string `json:"class,omitempty"`
	// Reason says, for people, why not and what an operator can do; ""
	// when Ready.
	Reason string `json:"reason,omitempty"`
}

// Node returns the node named name, or nil.
func (s *ClusterState) Node(name string) *NodeState {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i]
		}
	}
	return nil
}

// NodeState is one node as the controller last saw it.
type NodeState struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Role is RolePrimary, RoleReplica or RoleUnknown (unreachable, or
	// neither the primary nor replicating).
	Role string `json:"role"`
	// Serving is true when the node may take reads on replica listeners:
	// reachable, both replication threads running, replicating from the
	// current primary, lag within read_routing.max_lag.
	Serving bool `json:"serving"`
	// Reason says why a replica is not serving ("" when serving).
	Reason string `json:"reason,omitempty"`
	// Probe is the last probe result.
	Probe Probe `json:"probe"`
	// RoleSince is when the node took Role, when the controller saw the
	// change (zero: before the first recorded change). A Probe older than
	// RoleSince predates the role (a switchover publishes roles before the
	// next probe round) and does not describe the node in it.
	RoleSince time.Time `json:"role_since,omitzero"`
}

// Probe is the result of one probe of one node.
type Probe struct {
	Reachable bool      `json:"reachable"`
	Error     string    `json:"error,omitempty"`
	At        time.Time `json:"at"`
	// LatencyMS is how long the probe took, in milliseconds.
	LatencyMS float64 `json:"latency_ms"`
	ServerID  uint32  `json:"server_id,omitempty"`
	Version   string  `json:"version,omitempty"`
	ReadOnly  bool    `json:"read_only"`
	// Replicating is true when SHOW SLAVE STATUS returned a row.
	Replicating bool `json:"replicating"`
	// SourceHost and SourcePort are Master_Host / Master_Port.
	SourceHost string `json:"source_host,omitempty"`
	SourcePort int    `json:"source_port,omitempty"`
	// IORunning is Slave_IO_Running: "Yes", "No" or "Connecting".
	IORunning  string `json:"io_running,omitempty"`
	SQLRunning bool   `json:"sql_running"`
	// LagSeconds is Seconds_Behind_Master; nil when NULL.
	LagSeconds   *int64 `json:"lag_seconds,omitempty"`
	LastIOError  string `json:"last_io_error,omitempty"`
	LastSQLError string `json:"last_sql_error,omitempty"`
	// GTIDCurrent, GTIDSlave, GTIDBinlog are MariaDB's gtid_current_pos,
	// gtid_slave_pos and gtid_binlog_pos; GTIDExecuted is MySQL's gtid_executed.
	GTIDCurrent  string `json:"gtid_current,omitempty"`
	GTIDSlave    string `json:"gtid_slave,omitempty"`
	GTIDBinlog   string `json:"gtid_binlog,omitempty"`
	GTIDExecuted string `json:"gtid_executed,omitempty"`
	// BufferPoolPagesData and BufferPoolPagesTotal are
	// Innodb_buffer_pool_pages_data / _total.
	BufferPoolPagesData  int64 `json:"buffer_pool_pages_data,omitempty"`
	BufferPoolPagesTotal int64 `json:"buffer_pool_pages_total,omitempty"`
	ThreadsConnected     int64 `json:"threads_connected,omitempty"`

	// ErrorKind classifies Error (probe.Kind: refused, timeout,
	// too_many_connections, access_denied, network, ...); "" when the
	// probe completed.
	ErrorKind string `json:"error_kind,omitempty"`
	// ThreadsRunning is the Threads_running status variable.
	ThreadsRunning int64 `json:"threads_running,omitempty"`
	// UptimeSeconds is the Uptime status variable: seconds since the server
	// started (tells a restart from a slow probe).
	UptimeSeconds int64 `json:"uptime_seconds,omitempty"`
	// GTIDIO is MariaDB's Gtid_IO_Pos: the GTIDs the replica has received
	// into its relay log (applied or not).
	GTIDIO string `json:"gtid_io,omitempty"`
	// HeartbeatsReceived is Slave_received_heartbeats and HeartbeatPeriod
	// Slave_heartbeat_period (seconds); with SourceLogFile/ReadSourceLogPos
	// (Master_Log_File/Read_Master_Log_Pos) they tell whether the IO thread
	// still hears from its source between probes.
	HeartbeatsReceived int64   `json:"heartbeats_received,omitempty"`
	HeartbeatPeriod    float64 `json:"heartbeat_period,omitempty"`
	SourceLogFile      string  `json:"source_log_file,omitempty"`
	ReadSourceLogPos   int64   `json:"read_source_log_pos,omitempty"`
	// NetTimeoutSeconds is @@global.slave_net_timeout (seconds; 0 when not
	// read): how long the node's IO thread waits for its source before it
	// reconnects.
	NetTimeoutSeconds int64 `json:"net_timeout_s,omitempty"`
	// ParallelThreads and ParallelMode are @@global.slave_parallel_threads
	// and @@global.slave_parallel_mode (MariaDB; 0 and "" when not read).
	ParallelThreads int64  `json:"parallel_threads,omitempty"`
	ParallelMode    string `json:"parallel_mode,omitempty"`

	// SemiSync is the node's semi-sync settings and status (MariaDB
	// rpl_semi_sync_* variables and Rpl_semi_sync_* status); nil when the
	// server has none (MySQL without the plugin) or they were not read.
	SemiSync *SemiSync `json:"semi_sync,omitempty"`
	// Heartbeat is the result of the controller's heartbeat write on the
	// published primary in this round; nil on other nodes or when no write
	// was attempted (not the primary, read_only=ON, a change in progress).
	Heartbeat *Heartbeat `json:"heartbeat,omitempty"`
	// AppLogins are the controller's login checks as the application
	// accounts on the published primary in this round (nil elsewhere).
	AppLogins []LoginCheck `json:"app_logins,omitempty"`
}

// SemiSync is what a node reports about semi-synchronous replication
// (MariaDB 10.11 built-in semi-sync; names from SHOW GLOBAL VARIABLES and
// SHOW GLOBAL STATUS).
type SemiSync struct {
	// MasterEnabled is rpl_semi_sync_master_enabled.
	MasterEnabled bool `json:"master_enabled"`
	// MasterTimeoutMS is rpl_semi_sync_master_timeout in milliseconds:
	// after this long without an acknowledgement the primary falls back to
	// asynchronous replication.
	MasterTimeoutMS uint64 `json:"master_timeout_ms"`
	// WaitPoint is rpl_semi_sync_master_wait_point (AFTER_SYNC or
	// AFTER_COMMIT).
	WaitPoint string `json:"wait_point,omitempty"`
	// WaitNoSlave is rpl_semi_sync_master_wait_no_slave.
	WaitNoSlave bool `json:"wait_no_slave"`
	// SlaveEnabled is rpl_semi_sync_slave_enabled.
	SlaveEnabled bool `json:"slave_enabled"`
	// SlaveKillConnTimeout is rpl_semi_sync_slave_kill_conn_timeout in
	// seconds (0 when not read): how long STOP SLAVE on a semi-sync
	// replica waits to connect to its source to kill its dump thread.
	SlaveKillConnTimeout uint64 `json:"slave_kill_conn_timeout,omitempty"`
	// MasterStatus is Rpl_semi_sync_master_status: OFF on an enabled
	// primary means it fell back to asynchronous replication.
	MasterStatus bool `json:"master_status"`
	// SlaveStatus is Rpl_semi_sync_slave_status (the IO thread
	// acknowledges).
	SlaveStatus bool `json:"slave_status"`
	// Clients is Rpl_semi_sync_master_clients (connected semi-sync
	// replicas) and WaitSessions Rpl_semi_sync_master_wait_sessions
	// (commits waiting for an acknowledgement now).
	Clients      int64 `json:"clients"`
	WaitSessions int64 `json:"wait_sessions"`
	// NoTx is Rpl_semi_sync_master_no_tx: commits not acknowledged by any
	// replica since the server started.
	NoTx int64 `json:"no_tx"`
}

// Heartbeat is one bounded write of the controller into
// switchyard.heartbeat on the primary.
type Heartbeat struct {
	// OK is true when the row was written (committed) within the bound.
	OK bool `json:"ok"`
	// LatencyMS is how long the write took (until the error, if any).
	LatencyMS float64 `json:"latency_ms"`
	// Error is why the write failed; Kind classifies it: lock_wait
	// (lock_wait_timeout, e.g. FLUSH TABLES WITH READ LOCK), timeout
	// (max_statement_time or the probe bound), pending (the previous
	// heartbeat is still waiting in the server, e.g. for a semi-sync
	// acknowledgement), disk_full, read_only, denied (missing privileges),
	// error (anything else).
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Blockers name what holds writes up, read from the server after a
	// failure: lock holders (information_schema.METADATA_LOCK_INFO),
	// sessions waiting for a semi-sync acknowledgement, read_only.
	Blockers []string `json:"blockers,omitempty"`
}

// LoginCheck is one login attempt as an application account.
type LoginCheck struct {
	User string `json:"user"`
	// OK is true when the server accepted the login.
	OK bool `json:"ok"`
	// Code is the server's error number when refused (1040 too many
	// connections, 1203 max_user_connections, 1226 resource limit, 1045
	// access denied, 1129 host blocked); 0 for network errors.
	Code  uint16 `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// ProxyRegistration is what a live proxy writes under its lease.
type ProxyRegistration struct {
	ID string `json:"id"`
	// Epochs is the epoch the proxy routes with, per cluster.
	Epochs map[string]int64 `json:"epochs"`
	// Listeners are the addresses the proxy serves.
	Listeners []string `json:"listeners"`
	// Sessions is the number of open client sessions per listener name. The
	// destructive-change guard reads it; a proxy that leaves it nil is taken
	// to carry sessions on every listener.
	Sessions map[string]int `json:"sessions,omitempty"`
	// ConfigRev is the config revision the proxy has applied (0: unknown).
	ConfigRev int64 `json:"config_rev,omitempty"`
	// ConfigAlarm says why the proxy refused the current config revision and
	// keeps serving ConfigRev ("" when it applied the current one).
	ConfigAlarm string `json:"config_alarm,omitempty"`
	// StateAlarms says, per cluster, why the proxy refused the latest
	// cluster state in the store (topo.DecodeState) and keeps routing by
	// the last valid one; absent when every state was applied.
	StateAlarms map[string]string `json:"state_alarms,omitempty"`
	// Backends is the proxy's own view of whether each node answers,
	// rewritten when a node's reachability changes. Failure detection
	// counts it: a primary is dead only if a quorum of proxies cannot
	// reach it either.
	Backends []BackendReach `json:"backends,omitempty"`
	// Switchovers acknowledges, per cluster, the coordinated switchover in
	// progress (see SwitchoverProgress); absent when none is.
	Switchovers map[string]SwitchoverAck `json:"switchovers,omitempty"`
	// BackendSessions counts the proxy's client sessions per node, so a
	// drain can tell when no session uses a node any more. Rewritten at most
	// every second while counts change.
	BackendSessions []BackendSessions `json:"backend_sessions,omitempty"`
	// Failsafe is, per cluster, the last period in which the proxy routed
	// writes without a registration (the store unreachable), kept until the
	// proxy restarts; absent when it never did (see FailsafeWindow).
	Failsafe  map[string]FailsafePeriod `json:"failsafe,omitempty"`
	StartedAt time.Time                 `json:"started_at"`
	UpdatedAt time.Time                 `json:"updated_at"`
	// Unverified is set by readers (DecodeProxyRegistration), never
	// written: why the registration's MAC did not verify with the reader's
	// integrity keyring. Such a report is shown marked UNVERIFIED.
	Unverified string `json:"unverified,omitempty"`
}

// Request kinds.
const (
	RequestSwitchover = "switchover"
	// RequestFailover: emergency failover (or, with PlanOnly, its plan).
	RequestFailover = "failover"
	// RequestMaintenance: maintenance mode on or off (Action).
	RequestMaintenance = "maintenance"
	// RequestAck: acknowledge a failover (lifts the block and re-enables
	// automatic failover).
	RequestAck = "ack"
)

// Request states.
const (
	RequestPending = "pending"
	RequestRunning = "running"
	RequestDone    = "done"
	RequestFailed  = "failed"
)

// Request results besides the failures (Request.Result).
const (
	RequestResultDone    = "done"
	RequestResultPlanned = "planned"
	RequestResultRefused = "refused"
	// RequestResultWithdrawn: the requester gave up waiting (its
	// --timeout) before the leader started the request; nothing was done.
	RequestResultWithdrawn = "withdrawn"
)

// Request is an operator request (e.g. switchover) handed to the controller
// leader through the store. The operator creates it Pending; the leader moves
// it to Running and then Done or Failed, with Message and Steps saying what
// happened.
type Request struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Cluster string `json:"cluster"`
	// Target is the requested new primary ("" = let the controller choose).
	Target  string `json:"target,omitempty"`
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// Result is, once finished, the outcome of a switchover or failover:
	// RequestResultDone, RequestResultPlanned, RequestResultRefused (a
	// safety check, a veto hook or another operation said no before
	// anything changed) or a failure ("failed", "timed_out", "rolled_back",
	// "aborted"); "" for other kinds and for requests of older controllers.
	Result string `json:"result,omitempty"`
	// Override names the flags that would let a refused request through
	// (e.g. "--force --reason TEXT"); "" when there is none.
	Override  string    `json:"override,omitempty"`
	Steps     []string  `json:"steps,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// SeenEpoch is the cluster's epoch when the request was made (0:
	// unknown, e.g. no state published yet). A switchover whose cluster
	// is at another epoch when the leader takes it up is refused: another
	// switchover or failover ran meanwhile, and what the operator asked
	// for was decided on a primary that is no longer the one.
	SeenEpoch int64 `json:"seen_epoch,omitempty"`
	// FromEpoch and ToEpoch are filled when done.
	FromEpoch int64 `json:"from_epoch,omitempty"`
	ToEpoch   int64 `json:"to_epoch,omitempty"`

	// Force allows a failover to a candidate that safety checks refuse
	// (behind another replica, lagging); Reason must say why and is
	// recorded in the events.
	Force bool `json:"force,omitempty"`
	// ForceReachable allows a failover of a primary that is healthy and
	// reachable (a switchover is the tool for that); Reason must say why.
	ForceReachable bool `json:"force_reachable,omitempty"`
	// Reason is the operator's reason (maintenance, forced failover, ack).
	Reason string `json:"reason,omitempty"`
	// PlanOnly asks for the failover plan without acting.
	PlanOnly bool `json:"plan_only,omitempty"`
	// Action is "on" or "off" for RequestMaintenance.
	Action string `json:"action,omitempty"`
	// Node, for RequestMaintenance, puts one node in (or out of)
	// maintenance instead of the whole cluster.
	Node string `json:"node,omitempty"`
	// For, for RequestMaintenance on, is how long it lasts before the
	// controller turns it off by itself (0: until turned off).
	For time.Duration `json:"for,omitempty"`
	// Replace, for RequestMaintenance on, replaces the reason of a
	// maintenance that is already on (otherwise that is refused).
	Replace bool `json:"replace,omitempty"`
	// By names who asked (user@host), for the events.
	By string `json:"by,omitempty"`
	// Plan is the failover plan the leader computed (PlanOnly, and every
	// failover request).
	Plan *FailoverPlan `json:"plan,omitempty"`

	// Warm asks a switchover to replay the proxies' hot read set on the
	// candidate before promotion, until switchover.warm_threshold or
	// switchover.warm_timeout.
	Warm bool `json:"warm,omitempty"`
	// RequireWarm refuses a switchover whose candidate is colder than
	// switchover.warm_threshold (after warming, with Warm).
	RequireWarm bool `json:"require_warm,omitempty"`
	// Warmth is the candidate's buffer-pool warmth the switchover measured
	// (after warming, with Warm).
	Warmth *Warmth `json:"warmth,omitempty"`
	// Phases are the durations of a switchover's steps, in order, as its
	// Steps list them (check, warmth, pre-catch-up, prepare, drain, fence,
	// catch-up, promote, publish-primary, release, repoint, …).
	Phases []PhaseTiming `json:"phases,omitempty"`
}

// PhaseTiming is how long one step of an operation took.
type PhaseTiming struct {
	// Phase is the step's name without the node names, words joined by
	// '-': "pre-catch-up", "prepare" (statements held from its start),
	// "drain", "fence", "catch-up", "promote", "publish-primary", "release"
	// (the switchover document marked done), "repoint", ….
	Phase string `json:"phase"`
	// MS is the step's duration in milliseconds.
	MS float64 `json:"ms"`
	// Failed is set when the step failed.
	Failed bool `json:"failed,omitempty"`
}

// GetJSON reads key and decodes its JSON value into v.
func GetJSON(ctx context.Context, s Store, key string, v any) (Version, error) {
	kv, err := s.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return 0, fmt.Errorf("topo: %s: %w", key, err)
	}
	return kv.Version, nil
}
