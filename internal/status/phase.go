package status

import (
	"encoding/json"
	"io"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Phases status reports besides the stored ones (topo.PhaseStable,
// topo.PhaseSwitching, topo.PhaseFailover): the state says stable but no
// node takes writes.
const (
	// PhaseNoPrimary: the state is stable and names no primary; proxies
	// refuse writes.
	PhaseNoPrimary = "no_primary"
	// PhasePrimaryDead: the state is stable but the last analysis found the
	// primary dead (DeadPrimary); writes are refused until a failover.
	PhasePrimaryDead = "primary_dead"
	// PhasePrimaryReadOnly: the state is stable but the last analysis found
	// the primary answering with read_only=ON (PrimaryReadOnly); writes
	// fail with error 1290 until it is made writable or replaced.
	PhasePrimaryReadOnly = "primary_read_only"
)

// ClusterPhase is the phase status shows for cs: the stored phase, except
// that a stable state without a primary is PhaseNoPrimary and one whose
// last analysis has DeadPrimary of its primary is PhasePrimaryDead
// (PrimaryReadOnly: PhasePrimaryReadOnly); a finding about a node that is
// no longer the primary (an analysis written before a failover's
// publication) does not count. The text and the JSON
// report use it alike.
func ClusterPhase(cs topo.ClusterState) string {
	switch {
	case cs.Phase == topo.PhaseStable && cs.Primary == "":
		return PhaseNoPrimary
	case cs.Phase == topo.PhaseStable && primaryAnalysis(cs, "DeadPrimary"):
		return PhasePrimaryDead
	case cs.Phase == topo.PhaseStable && primaryAnalysis(cs, "PrimaryReadOnly"):
		return PhasePrimaryReadOnly
	}
	return cs.Phase
}

// clusterJSON is a cluster of the JSON report: the state as stored, with
// "phase" as ClusterPhase says and "state_phase" the stored phase.
type clusterJSON struct {
	topo.ClusterState
	Phase      string `json:"phase"`
	StatePhase string `json:"state_phase"`
}

// reportFields is Report without its methods (no MarshalJSON).
type reportFields Report

// MarshalJSON encodes the report with each cluster as its stored state,
// except that "phase" is ClusterPhase ("no_primary", "primary_dead" and
// "primary_read_only" besides the stored phases) and "state_phase" is the phase as stored. The
// admin endpoint's /status and `status --json` are this encoding; it
// decodes back into a Report (phase then holds the reported phase).
func (r *Report) MarshalJSON() ([]byte, error) {
	out := struct {
		*reportFields
		Clusters []clusterJSON `json:"clusters"`
	}{reportFields: (*reportFields)(r), Clusters: make([]clusterJSON, 0, len(r.Clusters))}
	for _, cs := range r.Clusters {
		out.Clusters = append(out.Clusters, clusterJSON{ClusterState: cs, Phase: ClusterPhase(cs), StatePhase: cs.Phase})
	}
	return json.Marshal(out)
}

// WriteJSON writes the report as indented JSON (see Report.MarshalJSON).
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// primaryAnalysis reports whether cs's analysis has code for its primary.
func primaryAnalysis(cs topo.ClusterState, code string) bool {
	for _, a := range cs.Analysis {
		if a.Code == code && (a.Node == "" || a.Node == cs.Primary) {
			return true
		}
	}
	return false
}
