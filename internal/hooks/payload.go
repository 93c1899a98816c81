package hooks

import (
	"strconv"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// SchemaVersion is the payload's "version"; it changes only when a field
// changes meaning or is removed (fields may be added).
const SchemaVersion = 1

// Payload is what a hook receives: the JSON body of a URL hook's POST, the
// stdin of a command hook (which also gets the scalar fields as SWITCHYARD_*
// environment variables, see Env).
type Payload struct {
	// Version is SchemaVersion.
	Version int `json:"version"`
	// Event is one of the config.Hook* event names (failover_start, ...).
	Event string `json:"event"`
	// Cluster is the cluster's name.
	Cluster string `json:"cluster"`
	// Node is the node the event is about: the candidate of a failover or
	// the target of a switchover, the dead primary, the alarm's or the
	// quarantined node ("" when none).
	Node string `json:"node,omitempty"`
	// Primary is the cluster's primary when the event happened (for a
	// failover or switchover: the old one).
	Primary string `json:"primary,omitempty"`
	// Time is when the controller saw the event (UTC, RFC 3339).
	Time time.Time `json:"time"`
	// Epoch is the cluster's epoch: for a failover or switchover end that
	// changed the primary, the new one.
	Epoch int64 `json:"epoch"`
	// Reason says why, in the words of the event log.
	Reason string `json:"reason"`
	// Result is the outcome of a failover_end or switchover_end: done,
	// refused, rolled_back, failed, timed_out, aborted.
	Result string `json:"result,omitempty"`
	// Mode is "auto" or "manual" for failover events.
	Mode string `json:"mode,omitempty"`
	// Plan is the failover plan (failover_start, failover_end, and for
	// dead_primary the plan `switchyard failover` would run): candidate,
	// every node's GTID positions, why the others were rejected, what
	// would be lost.
	Plan *topo.FailoverPlan `json:"plan,omitempty"`
	// Steps are the recovery's audited steps with their durations
	// (failover_end, switchover_end).
	Steps []string `json:"steps,omitempty"`
	// Alarm is the alarm raised or cleared (alarm_raised, alarm_cleared).
	Alarm *topo.Alarm `json:"alarm,omitempty"`
	// Controller is the id of the leader controller that sent it.
	Controller string `json:"controller"`
}

// Env returns the payload's scalar fields as environment entries
// ("SWITCHYARD_EVENT=failover_start", ...) for a command hook, plus
// SWITCHYARD_HOOK naming the hook and, when there is a plan,
// SWITCHYARD_CANDIDATE.
func (p Payload) Env(hook string) []string {
	env := []string{
		"SWITCHYARD_HOOK=" + hook,
		"SWITCHYARD_EVENT=" + p.Event,
		"SWITCHYARD_CLUSTER=" + p.Cluster,
		"SWITCHYARD_NODE=" + p.Node,
		"SWITCHYARD_PRIMARY=" + p.Primary,
		"SWITCHYARD_TIME=" + p.Time.UTC().Format(time.RFC3339Nano),
		"SWITCHYARD_EPOCH=" + strconv.FormatInt(p.Epoch, 10),
		"SWITCHYARD_REASON=" + p.Reason,
		"SWITCHYARD_RESULT=" + p.Result,
	}
	if p.Plan != nil {
		env = append(env, "SWITCHYARD_CANDIDATE="+p.Plan.Candidate)
	}
	return env
}
