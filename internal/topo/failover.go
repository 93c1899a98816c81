package topo

import (
	"fmt"
	"path"
	"time"
)

// EventsPrefix is the prefix of every cluster's event log (trailing slash).
// It lives outside ClustersPrefix so that watchers of cluster states and
// requests do not see event traffic.
func (k Keys) EventsPrefix() string { return path.Join(k.Prefix, "events") + "/" }

// Events is the prefix of one cluster's event log (trailing slash). Keys
// under it sort by time (see EventID).
func (k Keys) Events(cluster string) string { return k.EventsPrefix() + cluster + "/" }

// Event is the key of one event of a cluster.
func (k Keys) Event(cluster, id string) string { return k.Events(cluster) + id }

// EventID returns an event id that sorts by at (UTC, nanoseconds) and is
// unique through seq (a per-writer counter).
func EventID(at time.Time, seq uint64) string {
	return fmt.Sprintf("%s-%06d", at.UTC().Format("20060102T150405.000000000Z"), seq%1_000_000)
}

// Maintenance is maintenance mode of a cluster: automatic failover is
// blocked; probing, routing updates, replica repair and operator requests
// go on.
type Maintenance struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// By names who turned it on (user@host), when known.
	By string `json:"by,omitempty"`
	// Until is when the controller turns it off by itself (`maintenance on
	// --for`); nil: until `maintenance off`.
	Until *time.Time `json:"until,omitempty"`
}

// FailoverBlock blocks automatic failover of a cluster after a failover
// until Until or an acknowledgement.
type FailoverBlock struct {
	Until time.Time `json:"until"`
	// Reason names the failover that set the block.
	Reason string `json:"reason"`
}

// Alarm is a condition an operator must act on. Code is stable (for
// scripts and metrics); Message says what happened and what to do.
type Alarm struct {
	Code    string    `json:"code"`
	Node    string    `json:"node,omitempty"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}

// Alarm codes.
const (
	// AlarmRecoveryFailed: a failover failed or timed out; automatic
	// failover is disabled for the cluster until `switchyard ack`.
	AlarmRecoveryFailed = "recovery_failed"
	// AlarmMissingPrivileges: the monitor account lacks privileges a
	// switchover or failover needs.
	AlarmMissingPrivileges = "missing_privileges"
	// AlarmQuarantined: a node is quarantined (errant GTIDs) and needs a
	// human: rebuild it or remove the errant transactions.
	AlarmQuarantined = "quarantined"
	// AlarmAheadOfPrimary: a replica holds transactions the new primary
	// lacks (it was ahead of the promoted candidate).
	AlarmAheadOfPrimary = "ahead_of_primary"
	// AlarmInvalidState: the cluster state key held a document no
	// controller could have written (see CheckState); proxies kept their
	// last good state and the controller overwrote it.
	AlarmInvalidState = "invalid_state"
)

// AnalysisEntry is one analysis code of a cluster as published (see
// package analysis for the codes).
type AnalysisEntry struct {
	Code   string `json:"code"`
	Node   string `json:"node,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// FailoverRecord describes a completed failover.
type FailoverRecord struct {
	From  string    `json:"from"`
	To    string    `json:"to"`
	Epoch int64     `json:"epoch"`
	At    time.Time `json:"at"`
	// Auto is true when the controller decided it, false for an operator's
	// request.
	Auto bool `json:"auto"`
	// Lost is the estimated set of GTIDs the old primary had that the new
	// primary lacks ("" when none are known to be lost).
	Lost string `json:"lost,omitempty"`
	// Unseen is the plan's FailoverPlan.Unseen: commits the estimate
	// cannot cover ("" when none).
	Unseen string `json:"unseen,omitempty"`
	// DurationMS is from the decision to the verified, published primary.
	DurationMS int64 `json:"duration_ms"`
}

// Estimate words the record's loss estimate for people: Lost, or "none
// known", followed by Unseen when there is one.
func (r FailoverRecord) Estimate() string {
	est := "none known"
	if r.Lost != "" {
		est = r.Lost
	}
	if r.Unseen != "" {
		est += "; not in the estimate: " + r.Unseen
	}
	return est
}

// BackendReach is one proxy's view of one node.
type BackendReach struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	Address string `json:"address"`
	// Reachable is true when the node answered the MySQL protocol (a server
	// that refuses with "Too many connections" answered and is reachable).
	Reachable bool `json:"reachable"`
	// Error says why not, when not reachable.
	Error string `json:"error,omitempty"`
	// Since is when Reachable last changed.
	Since time.Time `json:"since"`
}

// Event kinds.
const (
	// EventDecision: the controller decided to act (failover, repair).
	EventDecision = "decision"
	// EventNoAction: the controller saw a problem and decided not to act,
	// saying why ("not failing over because ...").
	EventNoAction = "no_action"
	// EventRecovery: a step or the result of a recovery.
	EventRecovery = "recovery"
	// EventAlarm: an alarm was raised.
	EventAlarm = "alarm"
	// EventOperator: an operator request (maintenance, ack, failover).
	EventOperator = "operator"
	// EventHook: one attempt of a configured hook (code hook_ok or
	// hook_failed, the message naming the hook, its exit code or HTTP
	// status and its duration).
	EventHook = "hook"
)

// Event is one entry of a cluster's event log: every decision and every
// non-decision of the controller, with its analysis code and reason.
type Event struct {
	ID      string    `json:"id"`
	Cluster string    `json:"cluster"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	// Code is the analysis code or step the event is about.
	Code    string `json:"code,omitempty"`
	Node    string `json:"node,omitempty"`
	Message string `json:"message"`
	Epoch   int64  `json:"epoch"`
	// Leader is the controller that wrote it.
	Leader string `json:"leader"`
	// Actor is who asked for the change the event is about: the admin
	// API token's name, or user@host for the command line; empty for what
	// the controller did on its own.
	Actor string `json:"actor,omitempty"`
	// Unverified is set by readers (DecodeEvent), never written: why the
	// event's MAC did not verify with the reader's integrity keyring. Such
	// an event is shown marked UNVERIFIED, never as fact.
	Unverified string `json:"unverified,omitempty"`
}

// FailoverPlan is what a failover would do (or did), computed from a fresh
// probe of every node.
type FailoverPlan struct {
	Cluster    string `json:"cluster"`
	OldPrimary string `json:"old_primary"`
	// Candidate is the node that would be promoted ("" when none is
	// eligible; Refusal says why).
	Candidate string `json:"candidate,omitempty"`
	Refusal   string `json:"refusal,omitempty"`
	// Override names the flags that would let a refused failover through
	// ("--force-stale --reason TEXT", "--force --reason TEXT"); "" when no
	// flag does (no candidate can be promoted at all).
	Override string `json:"override,omitempty"`
	// Candidates lists every node other than the old primary, eligible
	// first in promotion order, with why the others were rejected.
	Candidates []PlanCandidate `json:"candidates"`
	// Lost is the estimated set of GTIDs that would be lost: what the old
	// primary (as last probed) and the other replicas hold that the
	// candidate does not, even after applying its relay log.
	Lost string `json:"lost,omitempty"`
	// LostCount is how many transactions Lost stands for (MariaDB: the
	// seqno gaps per domain; MySQL: the GTIDs in the set).
	LostCount uint64 `json:"lost_count,omitempty"`
	// Unseen says which commits of the old primary the estimate cannot
	// cover: those it acknowledged after its last complete probe while no
	// semi-sync replica acknowledged them (asynchronous replication, or
	// semi-sync fallen back to it). "" when its last probe showed commits
	// waiting for a replica's acknowledgement, or there was no probe.
	Unseen string `json:"unseen,omitempty"`
	// Ahead names replicas holding transactions the candidate lacks; they
	// are reported and quarantined, never reset.
	Ahead []string `json:"ahead,omitempty"`
	// Fence says how the old primary is fenced: "read_only" (reachable) or
	// "proxies" (unreachable: wait until every proxy applied the new epoch
	// or lost its lease).
	Fence string `json:"fence"`
	// Forced is true when the candidate was accepted only because of Force.
	Forced bool `json:"forced,omitempty"`
	// Floor is the promotion floor the plan applied: the highest GTID
	// position the controller ever recorded on the cluster's primary
	// (PromotionFloor); "" when none is recorded. A candidate whose received
	// set lacks part of it is rejected unless forced (--force-stale with a
	// --reason), and Lost includes what it lacks.
	Floor string `json:"floor,omitempty"`
	// Warning is said before anything else (e.g. the primary is healthy and
	// reachable: use a switchover); "" when there is none.
	Warning string `json:"warning,omitempty"`
}

// PlanCandidate is one node's standing in a failover plan.
type PlanCandidate struct {
	Node string `json:"node"`
	// GTID is the node's executed position; Received adds its relay log
	// (Gtid_IO_Pos) — what it holds once the relay log is applied.
	GTID     string `json:"gtid,omitempty"`
	Received string `json:"received,omitempty"`
	Eligible bool   `json:"eligible"`
	// Rejected says why it is not eligible ("" when eligible).
	Rejected string `json:"rejected,omitempty"`
	// MissingFloor is what of the promotion floor the node lacks once its
	// relay log is applied ("" when it holds the floor), and
	// MissingFloorCount how many transactions that is: the acknowledged
	// writes a promotion of this node would lose.
	MissingFloor      string `json:"missing_floor,omitempty"`
	MissingFloorCount uint64 `json:"missing_floor_count,omitempty"`
	// RelayBacklog is how many received transactions the node has not
	// applied yet (Gtid_IO_Pos beyond gtid_current_pos): after the
	// primary's death this, not Seconds_Behind_Master, is its lag; the
	// failover waits until it is applied.
	RelayBacklog uint64 `json:"relay_backlog,omitempty"`
}
