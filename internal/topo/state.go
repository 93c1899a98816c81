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
//	<prefix>/config/consumers/<id>           revision a proxy/controller applied (JSON), leased
//	<prefix>/clusters/<cluster>/state        ClusterState (JSON)
//	<prefix>/clusters/<cluster>/requests/<id> Request (JSON), operator → leader
//	<prefix>/proxies/<id>                    ProxyRegistration (JSON), leased
//	<prefix>/controllers/<id>                ControllerRegistration (JSON), leased
//	<prefix>/election/controller             controller leader election
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

// ConfigConsumer is the key of one consumer's report.
func (k Keys) ConfigConsumer(id string) string { return k.ConfigConsumers() + id }

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
	ConfigAlarm string    `json:"config_alarm,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Request kinds.
const (
	RequestSwitchover = "switchover"
)

// Request states.
const (
	RequestPending = "pending"
	RequestRunning = "running"
	RequestDone    = "done"
	RequestFailed  = "failed"
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
	Target    string    `json:"target,omitempty"`
	State     string    `json:"state"`
	Message   string    `json:"message,omitempty"`
	Steps     []string  `json:"steps,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// FromEpoch and ToEpoch are filled when done.
	FromEpoch int64 `json:"from_epoch,omitempty"`
	ToEpoch   int64 `json:"to_epoch,omitempty"`
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
