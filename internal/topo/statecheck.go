package topo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Cluster state validation. The state key is written by the controller
// leader only, but anyone with access to etcd can write it directly. Every
// consumer (proxies, status) checks a state before it acts on it, like a
// config revision, and keeps the last known good state when the check
// fails. The rules accept every write the controller makes:
//
//   - probe rounds republish the state with the same primary, epoch and
//     phase (a published primary that was removed from the config is
//     dropped, phase stable, same epoch);
//   - discovery names a primary where there was none, epoch+1;
//   - a switchover goes to phase switching (Target set, same epoch), then
//     to stable with the candidate at epoch+1, or back to stable with the
//     old primary at the same epoch;
//   - a failover goes to phase failover (Primary "", OldPrimary and Target
//     set, epoch+1), then to stable with the candidate or, rolled back,
//     the old primary, at that same epoch;
//
// and a consumer that missed states (a partition, a compacted watch) may
// see any later one: epochs may jump by more than one.

// NodeAddrs maps every configured node name of a cluster to its address,
// the config side of CheckState.
type NodeAddrs map[string]string

// ErrStateInvalid wraps every CheckState and DecodeState error.
var ErrStateInvalid = errors.New("invalid cluster state")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrStateInvalid}, args...)...)
}

// DecodeState parses a state document read from the store key of cluster,
// verifies its MAC with the process's integrity keyring (when one is set,
// see SetIntegrity) and checks it with CheckState. It returns the state or
// an error wrapping ErrStateInvalid that says what is wrong (also wrapping
// ErrIntegrity when the MAC is missing or does not verify).
func DecodeState(raw []byte, cluster string, last *ClusterState, nodes NodeAddrs) (ClusterState, error) {
	var st ClusterState
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return st, invalid("the document is empty")
	}
	if err := VerifyDocument(IntegrityClusterState, trimmed); err != nil {
		return st, fmt.Errorf("%w: %w", ErrStateInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&st); err != nil {
		return ClusterState{}, invalid("the document does not decode: %v", err)
	}
	if dec.More() {
		return ClusterState{}, invalid("the document has data after its JSON object")
	}
	if err := CheckState(st, cluster, last, nodes); err != nil {
		return ClusterState{}, err
	}
	return st, nil
}

// EncodeState marshals a cluster state document as the controller writes
// it, signed with the process's integrity keyring when one is set.
func EncodeState(st *ClusterState) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("topo: encode state of cluster %s: %w", st.Cluster, err)
	}
	return SignDocument(IntegrityClusterState, b)
}

// CheckState reports whether next may replace last (the last state the
// consumer applied, nil if none) as the state of cluster. nodes are the
// configured nodes of the cluster; with nodes nil the config checks are
// skipped (a reader without the config, e.g. status). The error wraps
// ErrStateInvalid and names the first rule broken:
//
//   - the cluster name is not cluster; the epoch is negative or lower than
//     last's; the phase is unknown; Nodes is empty or names a node twice;
//   - a node, Primary, Target or OldPrimary that is not configured (or,
//     without nodes, not in Nodes), or a node address that differs from
//     the configured one;
//   - phase stable or switching without a primary while last had one that
//     is still configured (only phase failover drops the primary), phase
//     switching without a Target other than Primary, phase failover with
//     a primary or without OldPrimary;
//   - an AutoFailover that is ready with a Class or Reason, not ready
//     without a known Class or without a Reason, or names a Candidate
//     that is not a node;
//   - a PrimaryLost without a node or with one that is not a node, or
//     without a known Class or a Reason;
//   - another primary in the same epoch as last's (every primary change
//     bumps the epoch), or phase failover entered without an epoch bump.
func CheckState(next ClusterState, cluster string, last *ClusterState, nodes NodeAddrs) error {
	if next.Cluster != cluster {
		return invalid("it names cluster %q, not %q", next.Cluster, cluster)
	}
	if next.Epoch < 0 {
		return invalid("negative epoch %d", next.Epoch)
	}
	if last != nil && next.Epoch < last.Epoch {
		return invalid("epoch %d is lower than the applied epoch %d (epochs never go back)", next.Epoch, last.Epoch)
	}
	switch next.Phase {
	case PhaseStable, PhaseSwitching, PhaseFailover:
	case "":
		next.Phase = PhaseStable
	default:
		return invalid("unknown phase %q", next.Phase)
	}
	if len(next.Nodes) == 0 {
		return invalid("it lists no nodes (the controller publishes every configured node)")
	}
	seen := make(map[string]bool, len(next.Nodes))
	for _, n := range next.Nodes {
		if n.Name == "" {
			return invalid("a node has no name")
		}
		if seen[n.Name] {
			return invalid("node %s is listed twice", n.Name)
		}
		seen[n.Name] = true
		if nodes == nil {
			continue
		}
		addr, ok := nodes[n.Name]
		if !ok {
			return invalid("node %s is not a configured node of cluster %s", n.Name, cluster)
		}
		if n.Address != "" && n.Address != addr {
			return invalid("node %s has address %s, the config says %s", n.Name, n.Address, addr)
		}
	}
	known := func(role, name string) error {
		if name == "" {
			return nil
		}
		if nodes != nil {
			if _, ok := nodes[name]; !ok {
				return invalid("%s %s is not a configured node of cluster %s", role, name, cluster)
			}
			return nil
		}
		if !seen[name] {
			return invalid("%s %s is not among the state's nodes", role, name)
		}
		return nil
	}
	for _, r := range [][2]string{{"primary", next.Primary}, {"target", next.Target}, {"old primary", next.OldPrimary}} {
		if err := known(r[0], r[1]); err != nil {
			return err
		}
	}
	// A last primary the config no longer has may be dropped.
	lastPrimary := ""
	if last != nil && last.Primary != "" {
		if _, ok := nodes[last.Primary]; ok || nodes == nil {
			lastPrimary = last.Primary
		}
	}
	switch next.Phase {
	case PhaseFailover:
		if next.Primary != "" {
			return invalid("phase failover with primary %s (a failover routes no writes until it publishes the new primary)", next.Primary)
		}
		if next.OldPrimary == "" {
			return invalid("phase failover without the old primary")
		}
		if last != nil && last.Phase != PhaseFailover && last.Primary != "" && next.Epoch == last.Epoch {
			return invalid("phase failover in the applied epoch %d (a failover bumps the epoch)", next.Epoch)
		}
	case PhaseSwitching:
		if next.Primary == "" {
			return invalid("phase switching without a primary")
		}
		if next.Target == "" || next.Target == next.Primary {
			return invalid("phase switching without a target other than the primary")
		}
	default:
		if next.Primary == "" && lastPrimary != "" {
			return invalid("it drops primary %s without a failover (phase %s, epoch %d)", lastPrimary, next.Phase, next.Epoch)
		}
	}
	if err := checkAutoFailover(next.AutoFailover, known); err != nil {
		return err
	}
	if pl := next.PrimaryLost; pl != nil {
		if pl.Node == "" {
			return invalid("primary_lost names no node")
		}
		if err := known("primary_lost node", pl.Node); err != nil {
			return err
		}
		switch pl.Class {
		case AutoNotAuto, AutoMaintenance, AutoDisabledOff, AutoBlocked, AutoNoCandidate:
		default:
			return invalid("primary_lost has unknown class %q", pl.Class)
		}
		if pl.Reason == "" {
			return invalid("primary_lost (%s) without a reason", pl.Class)
		}
	}
	if last != nil && next.Epoch == last.Epoch && last.Primary != "" && next.Primary != "" && next.Primary != last.Primary {
		return invalid("primary %s replaces %s in the same epoch %d (a primary change bumps the epoch)", next.Primary, last.Primary, next.Epoch)
	}
	return nil
}

// checkAutoFailover checks the published automatic-failover readiness.
func checkAutoFailover(a *AutoFailover, known func(role, name string) error) error {
	if a == nil {
		return nil
	}
	if err := known("auto_failover candidate", a.Candidate); err != nil {
		return err
	}
	if a.Ready {
		if a.Class != "" || a.Reason != "" {
			return invalid("auto_failover is ready but gives a reason (class %q)", a.Class)
		}
		return nil
	}
	switch a.Class {
	case AutoNotAuto, AutoMaintenance, AutoDisabledOff, AutoBlocked, AutoNoCandidate:
	default:
		return invalid("auto_failover is not ready with unknown class %q", a.Class)
	}
	if a.Reason == "" {
		return invalid("auto_failover is not ready (%s) without a reason", a.Class)
	}
	return nil
}

// EncodeRequest marshals an operator request document as every writer (the
// CLI, the admin API, the controller leader) writes it, signed with the
// process's integrity keyring when one is set.
func EncodeRequest(r *Request) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("topo: encode request %s: %w", r.ID, err)
	}
	return SignDocument(IntegrityOperatorRequest, b)
}

// DecodeRequest parses an operator request document and verifies its MAC
// with the process's integrity keyring (when one is set, see
// SetIntegrity). A document that does not decode is an error and a zero
// Request. A document that decodes but whose MAC is missing or does not
// verify returns the decoded request with an error wrapping ErrIntegrity,
// so the controller can refuse it by its id; such a request must not be
// acted on.
func DecodeRequest(raw []byte) (Request, error) {
	var r Request
	trimmed := bytes.TrimSpace(raw)
	if err := json.Unmarshal(trimmed, &r); err != nil {
		return Request{}, fmt.Errorf("operator request does not decode: %w", err)
	}
	if err := VerifyDocument(IntegrityOperatorRequest, trimmed); err != nil {
		return r, fmt.Errorf("operator request %s: %w", r.ID, err)
	}
	return r, nil
}
