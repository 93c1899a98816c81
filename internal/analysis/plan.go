package analysis

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// PlanInput is what Plan needs to choose a failover candidate.
type PlanInput struct {
	Cluster string
	Flavor  string
	// OldPrimary is the primary being replaced; OldPrimaryLast is its last
	// complete probe (used for errant GTIDs and the loss estimate; zero when
	// never probed).
	OldPrimary     string
	OldPrimaryLast topo.Probe
	// Nodes are every configured node (the old primary included), in
	// config order, with fresh probes.
	Nodes []Node
	// MaxLag excludes replicas whose last known lag exceeds it
	// (failover.max_lag) while the old primary is reachable; 0 disables the
	// check. Once the old primary is unreachable, Seconds_Behind_Master
	// measured before its death says nothing: a replica's lag is then what
	// it received but has not applied (PlanCandidate.RelayBacklog), which
	// the failover applies before promotion.
	MaxLag time.Duration
	// Floor is the promotion floor ("" when none is recorded): a candidate
	// whose received set does not contain it is rejected (only Force lets
	// it through) and the loss estimate includes what it lacks of it.
	Floor string
	// OldPrimaryBinlogState is the old primary's last known
	// @@gtid_binlog_state (MariaDB; "" unknown): candidates holding a
	// (domain, server_id) entry beyond it are errant, whatever the seqno
	// order says.
	OldPrimaryBinlogState string
	// Target is the requested candidate ("" lets Plan choose).
	Target string
	// Force lets a candidate through the staleness checks (behind the
	// floor, behind another replica, lag over MaxLag). It never overrides must_not, quarantine,
	// unreachability, a stopped SQL thread or errant GTIDs.
	Force bool
}

type cand struct {
	n        *Node
	order    int // config order
	received gtid.Set
	backlog  uint64 // received, not yet applied
	reject   string
	soft     bool // rejected only by a check Force overrides
	errant   bool // holds GTIDs the old primary never had
}

// Overrides a refused failover plan names (topo.FailoverPlan.Override).
const (
	// OverrideForceStale lets a candidate through the staleness checks.
	OverrideForceStale = "--force-stale --reason TEXT"
	// OverrideForceReachable fails over a healthy, reachable primary.
	OverrideForceReachable = "--force --reason TEXT"
)

// Plan orders the failover candidates and picks one. Candidates are every
// node but the old primary; a node is rejected when it is quarantined,
// drained, must_not, unreachable, not replicating, its SQL thread is
// stopped (its relay log would not be applied), it holds GTIDs the old
// primary did not write (errant: by position, per (domain, server_id)
// against the old primary's binlog state, a gtid_strict_mode SQL error, or
// a domain the floor lacks), what it will hold after applying its relay log
// does not contain the promotion floor, its last known lag exceeds MaxLag
// while the old primary is reachable, or what it will hold is a strict
// subset of another reachable replica's (it is stale). The eligible are
// ordered by that received set (most advanced first), then promotion rule
// (prefer before neutral), then the smaller relay backlog (received, not
// yet applied), then config order; the first is the candidate unless
// Target names another. Lost is what the floor, the old primary (last
// probe) and the other nodes hold that the candidate will not; Ahead are
// the replicas holding GTIDs it lacks. An unparsable floor refuses every
// candidate. It is pure.
func Plan(in PlanInput) topo.FailoverPlan {
	plan := topo.FailoverPlan{Cluster: in.Cluster, OldPrimary: in.OldPrimary, Fence: "proxies"}
	oldUp := false
	if old := in.node(in.OldPrimary); old != nil && complete(old.Probe) {
		plan.Fence, oldUp = "read_only", true
	}
	floor, ferr := ParseFloor(in.Flavor, in.Floor)
	if ferr != nil {
		if !in.Force {
			plan.Refusal = fmt.Sprintf("the recorded promotion floor %q does not parse (%v): candidates cannot be checked against it; "+
				"override with --force-stale and a --reason (the floor is then replaced)", in.Floor, ferr)
			plan.Override = OverrideForceStale
			return plan
		}
		plan.Warning = fmt.Sprintf("the recorded promotion floor %q does not parse (%v): ignored (forced)", in.Floor, ferr)
		floor = nil
	}
	if floor != nil {
		plan.Floor = floor.String()
	}
	var oldSet gtid.Set
	if old := in.OldPrimaryLast; complete(old) {
		oldSet, _ = Executed(in.Flavor, old)
	}
	var cands []*cand
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if n.Name == in.OldPrimary {
			continue
		}
		c := &cand{n: n, order: i}
		c.reject, c.errant = in.hardReject(n)
		if complete(n.Probe) {
			// Every reachable node's received set counts for staleness and
			// the loss estimate, eligible or not.
			set, err := Received(in.Flavor, n.Probe)
			if err != nil && c.reject == "" {
				c.reject = "GTID position does not parse: " + err.Error()
			}
			if err == nil {
				c.received = set
				if ex, err := Executed(in.Flavor, n.Probe); err == nil {
					c.backlog = countMissing(ex, set)
				}
				if c.reject == "" && flavorOf(in.Flavor) == gtid.MariaDB {
					if e := errantVsFloor(set, floor, oldSet); e != "" && (floor != nil || oldSet != nil) {
						c.reject, c.errant = fmt.Sprintf("errant GTIDs %s (in a domain primary %s never wrote, or at the floor's seqno by another server)", e, in.OldPrimary), true
					}
				}
			}
		}
		cands = append(cands, c)
	}
	// Staleness (every reason that applies is named): the floor, lag, a
	// strict subset of another reachable replica.
	for _, c := range cands {
		if c.reject != "" {
			continue
		}
		var why []string
		if r := floorReject(in.Flavor, c.received, floor); r != "" {
			why = append(why, r)
		}
		if oldUp && in.MaxLag > 0 && c.n.LastLag != nil && time.Duration(*c.n.LastLag)*time.Second > in.MaxLag {
			why = append(why, fmt.Sprintf("last known lag %ds exceeds failover.max_lag %s", *c.n.LastLag, in.MaxLag))
		}
		for _, o := range cands {
			if o == c || o.received == nil || o.errant {
				continue
			}
			if c.received.Compare(o.received) == gtid.Less {
				missing, _ := gtid.Subtract(o.received, c.received)
				why = append(why, fmt.Sprintf("stale: behind %s (missing %s)", o.n.Name, setString(missing)))
				break
			}
		}
		if len(why) > 0 {
			c.reject, c.soft = strings.Join(why, "; "), true
		}
	}
	eligible := func(c *cand) bool {
		return c.reject == "" || (in.Force && c.soft && (in.Target == "" || in.Target == c.n.Name))
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if ea, eb := eligible(a), eligible(b); ea != eb {
			return ea
		}
		if a.received != nil && b.received != nil {
			switch a.received.Compare(b.received) {
			case gtid.Greater:
				return true
			case gtid.Less:
				return false
			}
		}
		if ra, rb := promotionRank(a.n.Promotion), promotionRank(b.n.Promotion); ra != rb {
			return ra < rb
		}
		if a.backlog != b.backlog {
			return a.backlog < b.backlog // applied sooner: promoted sooner
		}
		return a.order < b.order
	})
	var chosen *cand
	for _, c := range cands {
		if !eligible(c) {
			continue
		}
		if in.Target == "" || in.Target == c.n.Name {
			chosen = c
			break
		}
	}
	for _, c := range cands {
		pc := topo.PlanCandidate{Node: c.n.Name, GTID: gtidText(in.Flavor, c.n.Probe), Eligible: eligible(c), Rejected: c.reject}
		if c.received != nil {
			pc.Received = c.received.String()
		}
		if complete(c.n.Probe) {
			pc.MissingFloor, pc.MissingFloorCount = BehindFloor(in.Flavor, c.received, floor)
			pc.RelayBacklog = c.backlog
		}
		if pc.Eligible && c.reject != "" {
			pc.Rejected = "forced past: " + c.reject
		}
		plan.Candidates = append(plan.Candidates, pc)
	}
	switch {
	case chosen == nil && in.Target != "":
		if in.node(in.Target) == nil {
			plan.Refusal = fmt.Sprintf("%s is not a node of cluster %s", in.Target, in.Cluster)
		} else if in.Target == in.OldPrimary {
			plan.Refusal = fmt.Sprintf("%s is the primary being replaced", in.Target)
		} else {
			for _, c := range cands {
				if c.n.Name == in.Target {
					plan.Refusal = fmt.Sprintf("%s is not eligible: %s", in.Target, c.reject)
					if c.soft && !in.Force {
						plan.Refusal += " (override with --force-stale and a --reason)"
						plan.Override = OverrideForceStale
					}
				}
			}
		}
		return plan
	case chosen == nil:
		plan.Refusal = "no eligible candidate"
		for _, c := range cands {
			if c.soft && !in.Force {
				plan.Override = OverrideForceStale
			}
		}
		return plan
	}
	plan.Candidate = chosen.n.Name
	plan.Forced = chosen.reject != ""
	plan.Lost, plan.LostCount, plan.Ahead = in.loss(chosen, cands, floor)
	plan.Unseen = in.unseen()
	return plan
}

// unseen words the commits of the old primary that no probe saw and no
// replica acknowledged ("" when there are none to fear): when its last
// complete probe shows it replicating asynchronously (no semi-sync, or
// semi-sync fallen back: Rpl_semi_sync_master_status OFF or no semi-sync
// replica connected), a commit acknowledged to its client after that
// probe was on the old primary alone. The estimate (loss) cannot include
// them.
func (in PlanInput) unseen() string {
	old := in.OldPrimaryLast
	if !complete(old) || old.At.IsZero() {
		return ""
	}
	why := "replication was asynchronous"
	if ss := old.SemiSync; ss != nil && ss.MasterEnabled {
		if ss.MasterStatus && ss.Clients > 0 {
			return ""
		}
		why = "semi-sync had fallen back to asynchronous: no semi-sync replica was attached"
	}
	return fmt.Sprintf("commits %s acknowledged after it was last read (%s) are not known and may be lost (%s there); "+
		"compare its binlog (mariadb-binlog) with the new primary when it returns",
		in.OldPrimary, old.At.UTC().Format("15:04:05.000 UTC"), why)
}

// hardReject says why n can never be promoted now ("" when it may be),
// and whether it holds errant GTIDs.
func (in PlanInput) hardReject(n *Node) (string, bool) {
	p := n.Probe
	if complete(p) && in.OldPrimaryLast.Reachable && in.OldPrimaryLast.Error == "" {
		if e := ErrantGTIDs(in.Flavor, p, in.OldPrimaryLast); e != "" {
			return fmt.Sprintf("errant GTIDs %s that primary %s never had", e, in.OldPrimary), true
		}
	}
	if complete(p) && in.OldPrimaryBinlogState != "" {
		if e := ErrantByBinlogState(in.Flavor, p, in.OldPrimaryBinlogState, in.OldPrimaryLast.ServerID); e != "" {
			return fmt.Sprintf("errant GTIDs %s that primary %s's binlog never had (per domain and server_id)", e, in.OldPrimary), true
		}
	}
	if complete(p) && StrictModeError(p.LastSQLError) {
		return "errant transaction: its SQL thread stopped on a gtid_strict_mode conflict: " + p.LastSQLError, true
	}
	switch {
	case n.Quarantined != "":
		return "quarantined: " + n.Quarantined, false
	case n.Drained:
		return "drained (`switchyard undrain` allows it again)", false
	case n.Promotion == "must_not":
		return "promotion rule must_not", false
	case !p.Reachable:
		return "unreachable: " + p.Error, false
	case p.Error != "":
		return "probe incomplete: " + p.Error, false
	case !p.Replicating:
		return "not a replica (no replication configured)", false
	case !p.SQLRunning:
		r := "replication SQL thread stopped (its relay log would not be applied)"
		if p.LastSQLError != "" {
			r += ": " + p.LastSQLError
		}
		return r, false
	}
	return "", false
}

// loss estimates what a promotion of chosen loses and which replicas are
// ahead of it.
func (in PlanInput) loss(chosen *cand, cands []*cand, floor gtid.Set) (string, uint64, []string) {
	all := chosen.received
	if floor != nil {
		all = Merge(all, floor)
	}
	var ahead []string
	for _, c := range cands {
		if c == chosen || c.received == nil || !complete(c.n.Probe) {
			continue
		}
		if d, err := gtid.Subtract(c.received, chosen.received); err == nil && !d.IsEmpty() {
			ahead = append(ahead, c.n.Name)
		}
		if !c.errant {
			all = Merge(all, c.received)
		}
	}
	if old := in.OldPrimaryLast; old.Reachable && old.Error == "" {
		if set, err := Executed(in.Flavor, old); err == nil {
			all = Merge(all, set)
		}
	}
	lost, err := gtid.Subtract(all, chosen.received)
	if err != nil {
		return "", 0, ahead
	}
	return setString(lost), countMissing(chosen.received, all), ahead
}

// countMissing counts the transactions of all that have lacks.
func countMissing(have, all gtid.Set) uint64 {
	switch a := all.(type) {
	case gtid.MariaDBPos:
		h, ok := have.(gtid.MariaDBPos)
		if !ok {
			return 0
		}
		var n uint64
		for _, g := range h.Missing(a) {
			n += g.Behind()
		}
		return n
	case gtid.MySQLSet:
		h, ok := have.(gtid.MySQLSet)
		if !ok {
			return 0
		}
		return a.Subtract(h).Count()
	}
	return 0
}

func (in PlanInput) node(name string) *Node {
	for i := range in.Nodes {
		if in.Nodes[i].Name == name {
			return &in.Nodes[i]
		}
	}
	return nil
}

func promotionRank(rule string) int {
	switch rule {
	case "prefer":
		return 0
	case "must_not":
		return 2
	}
	return 1
}

func gtidText(flavor string, p topo.Probe) string {
	if flavorOf(flavor) == gtid.MySQL {
		return p.GTIDExecuted
	}
	return p.GTIDCurrent
}

func setString(s gtid.Set) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// FormatPlan renders a plan for people: the candidate, every other node
// with why it was rejected, the estimated loss and how the old primary is
// fenced.
func FormatPlan(p topo.FailoverPlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "failover plan for cluster %s (old primary %s)\n", p.Cluster, p.OldPrimary)
	if p.Warning != "" {
		fmt.Fprintf(&b, "  WARNING: %s\n", p.Warning)
	}
	if p.Floor != "" {
		fmt.Fprintf(&b, "  promotion floor: %s (the highest position recorded on the primary; a candidate behind it loses acknowledged writes)\n", p.Floor)
	} else {
		fmt.Fprintf(&b, "  promotion floor: none recorded\n")
	}
	if p.Candidate == "" {
		fmt.Fprintf(&b, "  NO CANDIDATE: %s\n", p.Refusal)
	} else {
		forced := ""
		if p.Forced {
			forced = " (FORCED past a safety check)"
		}
		fmt.Fprintf(&b, "  candidate: %s%s\n", p.Candidate, forced)
	}
	for _, c := range p.Candidates {
		state := "eligible"
		if !c.Eligible {
			state = "rejected: " + c.Rejected
		} else if c.Rejected != "" {
			state = c.Rejected
		}
		fmt.Fprintf(&b, "  - %-12s gtid %-24s received %-24s %s\n", c.Node, dash(c.GTID), dash(c.Received), state)
		if c.MissingFloor != "" {
			fmt.Fprintf(&b, "      behind the floor: missing %s (%d transaction(s))\n", c.MissingFloor, c.MissingFloorCount)
		}
		if c.RelayBacklog > 0 {
			fmt.Fprintf(&b, "      relay log: %d received transaction(s) not applied yet (applied before promotion)\n", c.RelayBacklog)
		}
	}
	if p.Candidate != "" {
		if p.Lost == "" {
			fmt.Fprintf(&b, "  estimated data loss: none known (the candidate holds every GTID seen on the old primary and the replicas)\n")
		} else {
			fmt.Fprintf(&b, "  estimated data loss: %d transaction(s), up to GTIDs %s (held by the old primary or other replicas, not by %s)\n",
				p.LostCount, p.Lost, p.Candidate)
		}
		if p.Unseen != "" {
			fmt.Fprintf(&b, "  not in the estimate: %s\n", p.Unseen)
		}
		if len(p.Ahead) > 0 {
			fmt.Fprintf(&b, "  replicas ahead of the candidate (reported and quarantined, never reset): %s\n", strings.Join(p.Ahead, ", "))
		}
	}
	switch p.Fence {
	case "read_only":
		fmt.Fprintf(&b, "  fencing: %s is reachable: read_only=ON and client sessions killed before the candidate takes writes\n", p.OldPrimary)
	default:
		fmt.Fprintf(&b, "  fencing: %s is unreachable: wait until every proxy applied the new epoch or lost its lease\n", p.OldPrimary)
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
