package topo

import (
	"path"
	"time"
)

// Documents of the coordinated switchover, the drain of nodes and the hot
// read set. They live under their own keys (not in ClusterState) so that the
// probe loop's rewrites of the state never touch them:
//
//	<prefix>/clusters/<cluster>/switchover   SwitchoverProgress (JSON), written by the leader
//	<prefix>/clusters/<cluster>/drained      DrainedNodes (JSON), written by operators
//	<prefix>/hotreads/<proxy id>             HotReadSet (JSON), leased, written by each proxy

// Switchover is the key of a cluster's switchover progress document.
func (k Keys) Switchover(cluster string) string {
	return path.Join(k.Prefix, "clusters", cluster, "switchover")
}

// Drained is the key of a cluster's drained nodes document.
func (k Keys) Drained(cluster string) string {
	return path.Join(k.Prefix, "clusters", cluster, "drained")
}

// HotReadSets is the prefix of every proxy's hot read set (trailing slash).
func (k Keys) HotReadSets() string { return path.Join(k.Prefix, "hotreads") + "/" }

// HotReadSet is the key of one proxy's hot read set.
func (k Keys) HotReadSet(proxyID string) string { return k.HotReadSets() + proxyID }

// EventSwitchover: a step or the result of a planned switchover (event
// kind, see Event).
const EventSwitchover = "switchover"

// Switchover steps (SwitchoverProgress.Step).
const (
	// SwitchStepHold: proxies hold every new statement of the cluster's
	// primary listeners at transaction boundaries and acknowledge;
	// transactions already open go on to their end on the old primary (the
	// drain).
	SwitchStepHold = "hold"
	// SwitchStepFence: the drain is over and the old primary is being
	// fenced; a session still in a transaction gets an error at its next
	// statement (its transaction is rolled back) and continues on the new
	// primary.
	SwitchStepFence = "fence"
	// SwitchStepDone: the switchover finished or rolled back; proxies
	// release what they hold (they also release as soon as the cluster state
	// leaves PhaseSwitching).
	SwitchStepDone = "done"
)

// SwitchoverProgress is the leader's announcement of a coordinated planned
// switchover. Proxies hold statements while the cluster state is in
// PhaseSwitching at Epoch and this document is at SwitchStepHold or
// SwitchStepFence for the same epoch.
type SwitchoverProgress struct {
	// ID identifies this attempt; acknowledgements name it.
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	// Epoch is the epoch being left (E in E→E+1).
	Epoch int64 `json:"epoch"`
	// From is the old primary, To the candidate.
	From string `json:"from"`
	To   string `json:"to"`
	// Step is one of the SwitchStep* constants.
	Step string `json:"step"`
	// Since is when the leader asked the proxies to hold.
	Since time.Time `json:"since"`
	// Leader is the controller that wrote it.
	Leader string `json:"leader"`
}

// Active reports whether proxies must hold statements for p under state st.
func (p *SwitchoverProgress) Active(st *ClusterState) bool {
	return p != nil && st != nil && p.ID != "" && st.Phase == PhaseSwitching && p.Epoch == st.Epoch &&
		p.Cluster == st.Cluster && (p.Step == SwitchStepHold || p.Step == SwitchStepFence)
}

// SwitchoverAck is one proxy's acknowledgement of a switchover in progress
// (ProxyRegistration.Switchovers, by cluster).
type SwitchoverAck struct {
	// ID is the SwitchoverProgress.ID acknowledged.
	ID string `json:"id"`
	// Holding is true once the proxy starts no new statement of the
	// cluster's primary listeners on the old primary.
	Holding bool `json:"holding"`
	// Busy counts the sessions still running a statement or holding a
	// transaction open on the old primary; 0 means drained.
	Busy int `json:"busy"`
	// Held counts the statements held right now.
	Held int `json:"held"`
	// Fenced is true once the proxy applied SwitchStepFence and none of
	// its sessions has a statement in flight on the old primary: a session
	// still in a transaction there gets the proxy's rolled-back error at
	// its next statement instead of sending it to the old primary. The
	// leader waits for it (at most FenceAckBound) before fencing, so those
	// clients do not see the server's 1290 or a killed connection.
	Fenced bool `json:"fenced,omitempty"`
	// At is when the proxy wrote this acknowledgement.
	At time.Time `json:"at"`
}

// BackendSessions counts one proxy's client sessions connected to one node.
type BackendSessions struct {
	Cluster  string `json:"cluster"`
	Node     string `json:"node"`
	Sessions int    `json:"sessions"`
}

// DrainedNodes lists a cluster's drained nodes: never served on replica
// listeners, never chosen as a switchover candidate, and moved away from
// (primary role first) by `switchyard drain`.
type DrainedNodes struct {
	Cluster string                 `json:"cluster"`
	Nodes   map[string]DrainRecord `json:"nodes"`
}

// DrainRecord says who drained a node and when.
type DrainRecord struct {
	Since  time.Time `json:"since"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	// Maintenance is true when the node was put in maintenance (`switchyard
	// maintenance on --node`) rather than drained; `maintenance off --node`
	// removes only such a record.
	Maintenance bool `json:"maintenance,omitempty"`
	// Until is when the controller leader removes the record by itself
	// (`maintenance on --node --for`); nil: never.
	Until *time.Time `json:"until,omitempty"`
}

// HotReadSet is the read statements a proxy saw most, per cluster, sampled
// on its listeners. A switchover with --warm replays them on the candidate.
type HotReadSet struct {
	Proxy     string    `json:"proxy"`
	UpdatedAt time.Time `json:"updated_at"`
	Reads     []HotRead `json:"reads"`
}

// HotRead is one sampled read statement.
type HotRead struct {
	Cluster string `json:"cluster"`
	// Schema is the default schema the statement ran in; User the account.
	Schema string `json:"schema,omitempty"`
	User   string `json:"user"`
	// Digest is the statement with literals replaced by "?"; Example one
	// executable instance of it (literals included).
	Digest  string `json:"digest"`
	Example string `json:"example"`
	// Count is how many times it was sampled.
	Count int64 `json:"count"`
}

// Warmth describes a node's InnoDB buffer pool relative to the primary's.
type Warmth struct {
	Node string `json:"node"`
	// DataPages and PrimaryDataPages are Innodb_buffer_pool_pages_data of
	// the node and of the primary.
	DataPages        int64 `json:"data_pages"`
	PrimaryDataPages int64 `json:"primary_data_pages"`
	// Fraction is DataPages / PrimaryDataPages, at most 1.
	Fraction float64 `json:"fraction"`
	// HitRatio is 1 - Innodb_buffer_pool_reads / _read_requests since the
	// server started (or over the replay, after --warm).
	HitRatio float64 `json:"hit_ratio"`
	// Replayed counts statements replayed by --warm; ReplayErrors those that
	// failed.
	Replayed     int64 `json:"replayed,omitempty"`
	ReplayErrors int64 `json:"replay_errors,omitempty"`
}
