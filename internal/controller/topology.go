package controller

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Finding codes BuildState reports about a cluster. They are logged when they
// appear and when they clear; the analysis that acts on them comes later.
const (
	// FindingPrimaryUnreachable: the published primary did not answer the
	// probe. There is no automatic failover: the primary is kept.
	FindingPrimaryUnreachable = "primary_unreachable"
	// FindingPrimaryReadOnly: the published primary answers but has
	// read_only=ON outside a switchover.
	FindingPrimaryReadOnly = "primary_read_only"
	// FindingPrimaryReplicating: the published primary is itself a replica.
	FindingPrimaryReplicating = "primary_replicating"
	// FindingMultipleWritable: more than one reachable node is writable and
	// not replicating (a second primary, or a stray writable node).
	FindingMultipleWritable = "multiple_writable"
	// FindingNoPrimary: no primary is known and none could be discovered.
	FindingNoPrimary = "no_primary"
	// FindingPrimaryRemoved: the published primary is no longer in the
	// config.
	FindingPrimaryRemoved = "primary_removed"
)

// Finding is one notable condition of a cluster, named by a Finding* code.
type Finding struct {
	Code string
	// Node is the node concerned, "" for the cluster as a whole.
	Node    string
	Message string
}

// BuildInput is what BuildState needs: the cluster's config, the latest probe
// of each node (by node name; a missing entry means not probed yet), the
// previously published state (nil on first start) and who is writing.
type BuildInput struct {
	Cluster config.Cluster
	Probes  map[string]topo.Probe
	Prev    *topo.ClusterState
	Leader  string
	Now     time.Time
}

// BuildState derives a cluster's state from probes, the previous state and
// the config. It is pure (no I/O) so it can be tested as a table.
//
// The primary: the previously published primary is kept as long as it is in
// the config, whether or not it is reachable or writable — changing the
// primary is a switchover's (or, later, a failover's) decision, never a side
// effect of a probe; conditions are reported as findings. With no previous
// primary, discovery names the single reachable node with read_only=OFF that
// is not replicating and bumps the epoch (1 on first start); if several such
// nodes exist, the one every reachable replica replicates from is taken, and
// otherwise none (FindingMultipleWritable). Phase, Target and Epoch are
// carried over unchanged; a switchover sets them.
//
// Each other node is a replica if replicating; it is Serving when reachable,
// replicating from the current primary's configured address (loopback names
// are equal), with the IO thread "Yes", the SQL thread running and lag known
// and within read_routing.max_lag; Reason says why not otherwise.
func BuildState(in BuildInput) (topo.ClusterState, []Finding) {
	cl := in.Cluster
	st := topo.ClusterState{Cluster: cl.Name, Phase: topo.PhaseStable, Leader: in.Leader, UpdatedAt: in.Now}
	if in.Prev != nil {
		st.Primary, st.Epoch, st.Target = in.Prev.Primary, in.Prev.Epoch, in.Prev.Target
		if in.Prev.Phase != "" {
			st.Phase = in.Prev.Phase
		}
		carryPolicy(&st, in.Prev)
	}
	probe := func(name string) topo.Probe {
		if p, ok := in.Probes[name]; ok {
			return p
		}
		return topo.Probe{Error: "not probed yet"}
	}
	var findings []Finding
	var writable []string
	for _, n := range cl.Nodes {
		if p := probe(n.Name); complete(p) && !p.ReadOnly && !p.Replicating {
			writable = append(writable, n.Name)
		}
	}

	if st.Primary != "" && cl.Node(st.Primary) == nil {
		findings = append(findings, Finding{Code: FindingPrimaryRemoved, Node: st.Primary,
			Message: fmt.Sprintf("published primary %s is no longer in the config; discovering again", st.Primary)})
		st.Primary, st.Phase, st.Target = "", topo.PhaseStable, ""
	}
	if st.Primary == "" && st.Phase == topo.PhaseStable {
		if name, why := discoverPrimary(cl, probe, writable); name != "" {
			st.Primary = name
			st.Epoch++
			st.Phase, st.Target = topo.PhaseStable, ""
		} else {
			findings = append(findings, Finding{Code: FindingNoPrimary, Message: why})
		}
	}
	if st.Primary != "" {
		pp := probe(st.Primary)
		switch {
		case !pp.Reachable:
			findings = append(findings, Finding{Code: FindingPrimaryUnreachable, Node: st.Primary,
				Message: fmt.Sprintf("primary %s unreachable: %s (it stays the routed primary until the failure analysis confirms it dead: see the next findings)", st.Primary, pp.Error)})
		case pp.Error != "":
			// Reachable but the probe was incomplete; nothing more to say.
		case pp.Replicating:
			findings = append(findings, Finding{Code: FindingPrimaryReplicating, Node: st.Primary,
				Message: fmt.Sprintf("primary %s is replicating from %s", st.Primary, hostPort(pp.SourceHost, pp.SourcePort))})
		case pp.ReadOnly && st.Phase == topo.PhaseStable:
			findings = append(findings, Finding{Code: FindingPrimaryReadOnly, Node: st.Primary,
				Message: fmt.Sprintf("primary %s has read_only=ON: writes fail; if it should take writes run `mariadb -e 'SET GLOBAL read_only=OFF'` on it (failover.mode auto does it when safe), otherwise `switchyard failover` to another node (a switchover refuses a read-only primary)", st.Primary)})
		}
		var others []string
		for _, w := range writable {
			if w != st.Primary {
				others = append(others, w)
			}
		}
		if len(others) > 0 {
			findings = append(findings, Finding{Code: FindingMultipleWritable, Node: strings.Join(others, ","),
				Message: fmt.Sprintf("%s writable and not replicating besides primary %s: possible second primary, keeping %s",
					strings.Join(others, ", "), st.Primary, st.Primary)})
		}
	}

	var primaryAddr string
	if n := cl.Node(st.Primary); n != nil {
		primaryAddr = n.Address
	}
	maxLag := cl.ReadRouting.MaxLag.D()
	primaryDown := st.Primary != "" && !probe(st.Primary).Reachable
	for _, n := range cl.Nodes {
		p := probe(n.Name)
		ns := topo.NodeState{Name: n.Name, Address: n.Address, Role: topo.RoleUnknown, Probe: p}
		switch {
		case n.Name == st.Primary:
			ns.Role = topo.RolePrimary
			if !p.Reachable {
				ns.Reason = "primary unreachable: " + p.Error
			}
		case !p.Reachable:
			ns.Reason = "unreachable: " + p.Error
		case p.Error != "":
			ns.Reason = "probe failed: " + p.Error
		case p.Replicating && st.Phase == topo.PhaseFailover:
			ns.Role = topo.RoleReplica
			ns.Reason = failoverReplicaReason(cl, st, p)
			ns.Serving = ns.Reason == ""
		case p.Replicating:
			ns.Role = topo.RoleReplica
			ns.Reason = replicaReason(p, primaryAddr, st.Primary, maxLag, primaryDown, wasServing(in.Prev, n.Name))
			if ns.Reason == "" && !p.ReadOnly {
				ns.Reason = "writable replica (read_only=OFF): being fenced"
			}
			ns.Serving = ns.Reason == ""
		case !p.ReadOnly:
			ns.Reason = "writable but not the primary"
		default:
			ns.Reason = "not replicating"
		}
		if why, ok := st.Quarantined[n.Name]; ok && n.Name != st.Primary {
			ns.Serving, ns.Reason = false, "quarantined: "+why
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st, findings
}

// complete reports whether the probe reached the node and every statement
// of it succeeded.
func complete(p topo.Probe) bool { return p.Reachable && p.Error == "" }

// discoverPrimary picks the primary when none is published: the single
// writable, non-replicating node, or among several the one every reachable
// replica points at. A candidate is refused when a reachable replica
// replicates from another configured node: the topology says the primary is
// elsewhere (perhaps unreachable), and a stale node must never be named
// primary. It returns "" and the reason otherwise.
func discoverPrimary(cl config.Cluster, probe func(string) topo.Probe, writable []string) (string, string) {
	if len(writable) == 0 {
		return "", "no reachable node is writable and not replicating"
	}
	// Which configured node each reachable replica points at.
	sources := map[string]int{}
	for _, n := range cl.Nodes {
		p := probe(n.Name)
		if !complete(p) || !p.Replicating {
			continue
		}
		for _, m := range cl.Nodes {
			if m.Name != n.Name && sameAddress(p.SourceHost, p.SourcePort, m.Address) {
				sources[m.Name]++
			}
		}
	}
	var chosen string
	if len(writable) == 1 {
		chosen = writable[0]
	} else {
		for _, w := range writable {
			if sources[w] > 0 {
				if chosen != "" {
					return "", fmt.Sprintf("replicas point at several writable nodes (%s)", strings.Join(writable, ", "))
				}
				chosen = w
			}
		}
		if chosen == "" {
			return "", fmt.Sprintf("several nodes are writable and not replicating (%s) and no replica tells which is primary",
				strings.Join(writable, ", "))
		}
	}
	for src := range sources {
		if src != chosen {
			return "", fmt.Sprintf("%s is writable but replicas replicate from %s", chosen, src)
		}
	}
	return chosen, ""
}

// replicaReason says why a reachable replica may not serve reads, or "".
// While the primary is unreachable (primaryDown), a replica of it whose SQL
// thread runs keeps serving what it received although its IO thread cannot
// connect: its lag is unknown, but failing every read for the length of a
// primary outage is worse than serving data as of the outage.
// While the primary is unreachable its replicas' IO threads reconnect and
// their lag is unknown; a replica keeps serving reads then only if it was
// serving when the primary was lost (it holds what the primary had shipped
// until then). One that was down, stopped or lagging — a stale node that
// comes back alone while the primary is dead — does not start serving: its
// reads would silently miss acknowledged writes.
func replicaReason(p topo.Probe, primaryAddr, primary string, maxLag time.Duration, primaryDown, wasServing bool) string {
	if primaryAddr == "" {
		return "no primary known"
	}
	if !sameAddress(p.SourceHost, p.SourcePort, primaryAddr) {
		return fmt.Sprintf("replicating from %s not current primary %s", hostPort(p.SourceHost, p.SourcePort), primary)
	}
	ioOK := p.IORunning == "Yes"
	if primaryDown && !ioOK && p.IORunning != "No" && p.SQLRunning {
		if wasServing {
			return ""
		}
		return "primary unreachable and this replica was not serving when it was lost (its data may be stale)"
	}
	switch {
	case !ioOK && !p.SQLRunning:
		return "replication stopped"
	case !ioOK:
		r := "replication IO thread " + orDash(p.IORunning)
		if p.LastIOError != "" {
			r += ": " + p.LastIOError
		}
		return r
	case !p.SQLRunning:
		r := "replication SQL thread stopped"
		if p.LastSQLError != "" {
			r += ": " + p.LastSQLError
		}
		return r
	case p.LagSeconds == nil:
		return "lag unknown (Seconds_Behind_Master is NULL)"
	case time.Duration(*p.LagSeconds)*time.Second > maxLag:
		return fmt.Sprintf("lag %ds > max %s", *p.LagSeconds, maxLag)
	}
	return ""
}

// wasServing reports whether node was serving in the previous state.
func wasServing(prev *topo.ClusterState, node string) bool {
	if prev == nil {
		return false
	}
	n := prev.Node(node)
	return n != nil && n.Serving
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// sameAddress is analysis.SameAddress: a replica's source (Master_Host,
// Master_Port) is the node configured at addr.
func sameAddress(host string, port int, addr string) bool {
	return analysis.SameAddress(host, port, addr)
}

// routingChanged reports whether b differs from a in anything a proxy or an
// operator acts on: primary, epoch, phase, target, node membership, roles,
// serving flags, reasons, reachability.
func routingChanged(a, b *topo.ClusterState) bool {
	if a == nil || b == nil {
		return a != b
	}
	if a.Primary != b.Primary || a.Epoch != b.Epoch || a.Phase != b.Phase || a.Target != b.Target ||
		len(a.Nodes) != len(b.Nodes) {
		return true
	}
	for i := range a.Nodes {
		x, y := &a.Nodes[i], &b.Nodes[i]
		if x.Name != y.Name || x.Address != y.Address || x.Role != y.Role || x.Serving != y.Serving ||
			x.Reason != y.Reason || x.Probe.Reachable != y.Probe.Reachable || x.Probe.ReadOnly != y.Probe.ReadOnly {
			return true
		}
	}
	return false
}
