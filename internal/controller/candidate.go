package controller

import (
	"errors"
	"fmt"
	"strings"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Promotion rules (config nodes[].promotion).
const (
	promotionPrefer  = "prefer"
	promotionNeutral = "neutral"
	promotionMustNot = "must_not"
	// promotionDrained is not a config value: withoutDrained marks drained
	// nodes with it so a refusal names the real reason.
	promotionDrained = "drained"
	// promotionMaintenance marks a node in maintenance (`maintenance on
	// --node`) the same way.
	promotionMaintenance = "maintenance"
)

// notPromotable says why a drained or maintenance node of cluster may not
// be promoted and which command allows it again; "" for any other rule.
func notPromotable(cluster, node, rule string) string {
	switch rule {
	case promotionDrained:
		return fmt.Sprintf("%s is drained (`switchyard undrain %s --cluster %s` allows it again)", node, node, cluster)
	case promotionMaintenance:
		return fmt.Sprintf("%s is in maintenance (`switchyard maintenance off --cluster %s --node %s` allows it again)", node, cluster, node)
	}
	return ""
}

// checkStable verifies that st is ready for a planned switchover: phase
// stable, a primary that is reachable, writable and not replicating.
func checkStable(st *topo.ClusterState) error {
	if st.Phase != topo.PhaseStable {
		return fmt.Errorf("cluster %s is not stable (phase %s, target %s): wait for the running change to finish",
			st.Cluster, st.Phase, st.Target)
	}
	if st.Primary == "" {
		return fmt.Errorf("cluster %s has no known primary: nothing to switch over from", st.Cluster)
	}
	p := st.Node(st.Primary)
	if p == nil {
		return fmt.Errorf("cluster %s: primary %s is not in the cluster state", st.Cluster, st.Primary)
	}
	switch {
	case !p.Probe.Reachable:
		return fmt.Errorf("primary %s is unreachable (%s): a planned switchover needs a reachable primary", p.Name, p.Probe.Error)
	case p.Probe.Error != "":
		return fmt.Errorf("primary %s could not be probed completely (%s)", p.Name, p.Probe.Error)
	case p.Probe.ReadOnly:
		return fmt.Errorf("primary %s has read_only=ON: fix the primary before switching over", p.Name)
	case p.Probe.Replicating:
		return fmt.Errorf("primary %s is itself replicating: fix the topology before switching over", p.Name)
	}
	return nil
}

// checkCandidate says why node name may not be promoted in a planned
// switchover, or returns nil: it must be configured, not the primary, not
// must_not, reachable, replicating from the primary with both threads
// running, lag known and within read_routing.max_lag, and carry no GTID the
// primary lacks (errant GTIDs). The primary's probe must be taken after the
// candidate's so the candidate cannot look ahead of it.
func checkCandidate(cl *config.Cluster, st *topo.ClusterState, name string) error {
	n := cl.Node(name)
	if n == nil {
		return fmt.Errorf("%s is not a node of cluster %s", name, cl.Name)
	}
	if name == st.Primary {
		return fmt.Errorf("%s is already the primary", name)
	}
	if n.Promotion == promotionMustNot {
		return fmt.Errorf("%s has promotion rule must_not", name)
	}
	if why := notPromotable(cl.Name, name, n.Promotion); why != "" {
		return errors.New(why)
	}
	if why := st.Quarantined[name]; why != "" {
		return fmt.Errorf("%s is quarantined (%s): never promoted; it is released once it replicates cleanly from the primary", name, why)
	}
	ns := st.Node(name)
	if ns == nil {
		return fmt.Errorf("%s has no probe yet", name)
	}
	p := ns.Probe
	switch {
	case !p.Reachable:
		return fmt.Errorf("%s is unreachable (%s)", name, p.Error)
	case p.Error != "":
		return fmt.Errorf("%s could not be probed completely (%s)", name, p.Error)
	case !p.Replicating:
		return fmt.Errorf("%s is not replicating", name)
	}
	primary := cl.Node(st.Primary)
	if primary == nil || !sameAddress(p.SourceHost, p.SourcePort, primary.Address) {
		return fmt.Errorf("%s replicates from %s, not from primary %s", name, hostPort(p.SourceHost, p.SourcePort), st.Primary)
	}
	if p.IORunning != "Yes" || !p.SQLRunning {
		return fmt.Errorf("%s replication threads not running (IO %s, SQL %s)", name, orDash(p.IORunning), yesNo(p.SQLRunning))
	}
	maxLag := cl.ReadRouting.MaxLag.D()
	if p.LagSeconds == nil {
		return fmt.Errorf("%s lag unknown (Seconds_Behind_Master is NULL)", name)
	}
	if r := replicaReason(p, primary.Address, st.Primary, maxLag, false, false); r != "" {
		return fmt.Errorf("%s: %s", name, r)
	}
	pp := st.Node(st.Primary)
	if pp != nil {
		errant, err := errantGTIDs(cl.Flavor, p, pp.Probe)
		if err != nil {
			return fmt.Errorf("%s: cannot compare GTIDs with primary %s: %w", name, st.Primary, err)
		}
		if errant != "" {
			return fmt.Errorf("%s has errant GTIDs %s that primary %s lacks", name, errant, st.Primary)
		}
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// executed is the GTID set a node has applied or written: gtid_current_pos
// on MariaDB, gtid_executed on MySQL.
func executed(flavor string, p topo.Probe) (gtid.Set, error) {
	f, err := gtid.ParseFlavor(flavorOrDefault(flavor))
	if err != nil {
		return nil, err
	}
	if f == gtid.MySQL {
		return gtid.Parse(f, p.GTIDExecuted)
	}
	return gtid.Parse(f, p.GTIDCurrent)
}

func flavorOrDefault(f string) string {
	if f == "" {
		return "mariadb"
	}
	return f
}

// errantGTIDs returns the GTIDs the replica has that the primary does not
// ("" when none).
func errantGTIDs(flavor string, replica, primary topo.Probe) (string, error) {
	r, err := executed(flavor, replica)
	if err != nil {
		return "", err
	}
	p, err := executed(flavor, primary)
	if err != nil {
		return "", err
	}
	e, err := gtid.Errant(r, p)
	if err != nil {
		return "", err
	}
	return e.String(), nil
}

func promotionRank(rule string) int {
	switch rule {
	case promotionPrefer:
		return 0
	case promotionMustNot, promotionDrained, promotionMaintenance:
		return 2
	}
	return 1
}

// chooseCandidate returns the node to promote: target when given (after
// checkCandidate), otherwise among the nodes that pass checkCandidate the
// one with promotion rule prefer before neutral, then the most advanced GTID
// position, then config order. The error lists why each node was refused.
func chooseCandidate(cl *config.Cluster, st *topo.ClusterState, target string) (string, error) {
	if target != "" {
		if err := checkCandidate(cl, st, target); err != nil {
			return "", fmt.Errorf("cannot switch over to %s: %w", target, err)
		}
		return target, nil
	}
	var (
		best    string
		bestSet gtid.Set
		refused []string
	)
	for _, n := range cl.Nodes {
		if n.Name == st.Primary {
			continue
		}
		if err := checkCandidate(cl, st, n.Name); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		set, err := executed(cl.Flavor, st.Node(n.Name).Probe)
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", n.Name, err))
			continue
		}
		if best == "" {
			best, bestSet = n.Name, set
			continue
		}
		br, nr := promotionRank(cl.Node(best).Promotion), promotionRank(n.Promotion)
		if nr < br || (nr == br && set.Compare(bestSet) == gtid.Greater) {
			best, bestSet = n.Name, set
		}
	}
	if best == "" {
		if len(refused) == 0 {
			return "", fmt.Errorf("cluster %s has no replica to promote", cl.Name)
		}
		return "", fmt.Errorf("no eligible candidate in cluster %s: %s", cl.Name, strings.Join(refused, "; "))
	}
	return best, nil
}
