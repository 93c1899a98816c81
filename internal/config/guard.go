package config

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Live is what runs now, as the topology store reports it: the input of the
// destructive-change guard besides the two configs. The zero value means
// nothing is known to be running.
type Live struct {
	// Sessions is the number of open client sessions per listener name,
	// summed over every proxy.
	Sessions map[string]int `json:"sessions,omitempty"`
	// SessionsUnknown names proxies that do not report their sessions. While
	// it is not empty, every listener of the current config is treated as
	// carrying sessions: the guard does not assume a listener is idle
	// because nobody said otherwise.
	SessionsUnknown []string `json:"sessions_unknown,omitempty"`
	// Clusters is the published state of each cluster, by name.
	Clusters map[string]LiveCluster `json:"clusters,omitempty"`
}

// LiveCluster is one cluster's published state, as the guard needs it.
type LiveCluster struct {
	// Primary is the node that takes writes ("" when none is known).
	Primary string `json:"primary,omitempty"`
	// Serving are the replicas that take reads on replica listeners.
	Serving []string `json:"serving,omitempty"`
	// Drained are the nodes marked drained (`switchyard drain`): no new
	// session is routed to them.
	Drained []string `json:"drained,omitempty"`
	// NodeSessions is the number of client sessions on each node, summed
	// over every proxy that reports them; a node absent from it has none.
	NodeSessions map[string]int `json:"node_sessions,omitempty"`
}

// idle reports whether node is drained and known to carry no client
// session: removing it takes nothing away from any client (the drain has
// already moved its traffic). Unknown is Live.SessionsUnknown non-empty.
func (lc LiveCluster) idle(node string, unknown bool) bool {
	return !unknown && contains(lc.Drained, node) && lc.NodeSessions[node] == 0 && lc.Primary != node
}

// Guard rules, the Rule of a Violation.
const (
	// RuleEmpty: the new config has no route at all (no listener, no
	// cluster, no node), or there is no new config.
	RuleEmpty = "empty"
	// RuleListenerInUse: a listener that carries client sessions is removed.
	RuleListenerInUse = "listener-in-use"
	// RuleClusterInUse: a cluster whose listeners carry client sessions is
	// removed.
	RuleClusterInUse = "cluster-in-use"
	// RuleNodeInUse: a node that is the primary or a serving replica is
	// removed.
	RuleNodeInUse = "node-in-use"
	// RuleRoutesRemoved: more than config.guard.max_removed_fraction of the
	// routes are removed.
	RuleRoutesRemoved = "routes-removed"
	// RuleAddressInUse: the address of a node that is the primary or a
	// serving replica changes: every proxy would send that node's sessions
	// to an address nothing has checked (a typo takes the whole route away,
	// and the replicas still replicate from the old address).
	RuleAddressInUse = "address-in-use"
)

// Violation is one reason the guard refuses a change.
type Violation struct {
	// Rule is one of the Rule constants.
	Rule string `json:"rule"`
	// Subject is what the rule is about: a listener, cluster or
	// "cluster/node" name, or "routes"/"config".
	Subject string `json:"subject"`
	// Msg says what would happen, in words.
	Msg string `json:"message"`
}

// String formats as "rule: msg".
func (v Violation) String() string { return v.Rule + ": " + v.Msg }

// Guard is the destructive-change guard: it returns why replacing cur by next
// would take routes away from running clients, or nil when it would not.
// It refuses a next that is nil or has no route (RuleEmpty); that removes a
// listener with sessions (RuleListenerInUse) or a cluster whose listeners
// have sessions (RuleClusterInUse); that removes a node that is the primary
// or a serving replica of its cluster (RuleNodeInUse); that changes the
// address of such a node (RuleAddressInUse); or that removes more
// than cur's config.guard.max_removed_fraction of cur's routes
// (RuleRoutesRemoved; see Route). Routes to a node that is drained and
// carries no client session (LiveCluster.idle) are not counted as removed:
// draining first is how to remove nodes. With a nil cur (nothing applied yet) only
// RuleEmpty applies. Renaming counts as removing and adding. It is a pure
// function; callers decide whether an override (--allow-destructive with a
// reason) lets the change through.
func Guard(cur, next *Config, live Live) []Violation {
	var out []Violation
	nextRoutes := next.Routes()
	if len(nextRoutes) == 0 {
		why := "the new config has no routes"
		switch {
		case next == nil:
			why = "there is no new config"
		case len(next.Listeners) == 0:
			why = "the new config has no listeners"
		case len(next.Clusters) == 0:
			why = "the new config has no clusters"
		}
		out = append(out, Violation{Rule: RuleEmpty, Subject: "config", Msg: why + ": every proxy would drop every route"})
	}
	if cur == nil {
		return out
	}
	if next == nil {
		next = &Config{}
	}
	unknown := ""
	if len(live.SessionsUnknown) > 0 {
		u := append([]string(nil), live.SessionsUnknown...)
		sort.Strings(u)
		unknown = fmt.Sprintf("may carry sessions: proxies %s do not report theirs", strings.Join(u, ", "))
	}
	// inUse says whether a listener carries sessions, and how it is known:
	// "carries N open client sessions" or "may carry sessions: ...".
	inUse := func(listener string) (string, bool) {
		if n := live.Sessions[listener]; n > 0 {
			return fmt.Sprintf("carries %d open client sessions", n), true
		}
		if unknown != "" {
			return unknown, true
		}
		return "", false
	}

	newListeners := map[string]bool{}
	for _, l := range next.Listeners {
		newListeners[l.Name] = true
	}
	for _, l := range cur.Listeners {
		if newListeners[l.Name] {
			continue
		}
		if why, ok := inUse(l.Name); ok {
			out = append(out, Violation{Rule: RuleListenerInUse, Subject: l.Name,
				Msg: fmt.Sprintf("listener %q (%s) is removed but %s", l.Name, l.Address, why)})
		}
	}

	for _, cl := range cur.Clusters {
		ncl := next.Cluster(cl.Name)
		if ncl == nil {
			var busy []string
			for _, l := range cur.Listeners {
				if l.Cluster != cl.Name {
					continue
				}
				if why, ok := inUse(l.Name); ok {
					busy = append(busy, fmt.Sprintf("listener %q: %s", l.Name, why))
				}
			}
			if len(busy) > 0 {
				out = append(out, Violation{Rule: RuleClusterInUse, Subject: cl.Name,
					Msg: fmt.Sprintf("cluster %q is removed but its listeners are in use (%s)", cl.Name, strings.Join(busy, "; "))})
			}
		}
		lc := live.Clusters[cl.Name]
		for _, n := range cl.Nodes {
			role := ""
			switch {
			case lc.Primary == n.Name:
				role = "the primary"
			case contains(lc.Serving, n.Name):
				role = "a serving replica"
			}
			if ncl != nil && ncl.Node(n.Name) != nil {
				if na := ncl.Node(n.Name).Address; na != n.Address && role != "" {
					how := fmt.Sprintf("run `switchyard drain %s --cluster %s --wait` first, then apply again", n.Name, cl.Name)
					if role == "the primary" {
						how = fmt.Sprintf("switch over to another node first (`switchyard switchover --cluster %s`), drain %s, then apply again", cl.Name, n.Name)
					}
					out = append(out, Violation{Rule: RuleAddressInUse, Subject: cl.Name + "/" + n.Name,
						Msg: fmt.Sprintf("node %q of cluster %q is %s and its address changes from %s to %s: every proxy would route its sessions to the new address at once, unchecked, and its replicas still replicate from the old one; %s",
							n.Name, cl.Name, role, n.Address, na, how)})
				}
				continue
			}
			if role == "" {
				continue
			}
			out = append(out, Violation{Rule: RuleNodeInUse, Subject: cl.Name + "/" + n.Name,
				Msg: fmt.Sprintf("node %q of cluster %q (%s) is removed but is %s; run `switchyard drain %s --cluster %s --wait` first, then apply again",
					n.Name, cl.Name, n.Address, role, n.Name, cl.Name)})
		}
	}

	curRoutes := cur.Routes()
	if len(curRoutes) > 0 && len(nextRoutes) > 0 {
		kept := map[string]bool{}
		for _, r := range nextRoutes {
			kept[r.String()] = true
		}
		removed, idle := 0, 0
		var undrained []string
		for _, r := range curRoutes {
			if kept[r.String()] {
				continue
			}
			if live.Clusters[r.Cluster].idle(r.Node, unknown != "") {
				idle++
				continue
			}
			removed++
			if next.Cluster(r.Cluster) != nil && next.Cluster(r.Cluster).Node(r.Node) == nil && !contains(undrained, r.Cluster+"/"+r.Node) {
				undrained = append(undrained, r.Cluster+"/"+r.Node)
			}
		}
		limit := cur.MaxRemovedFraction()
		frac := float64(removed) / float64(len(curRoutes))
		if removed > 0 && frac > limit {
			msg := fmt.Sprintf("%d of %d routes (%.0f%%) are removed, more than config.guard.max_removed_fraction %s", removed, len(curRoutes), 100*frac, formatFraction(limit))
			if idle > 0 {
				msg += fmt.Sprintf(" (%d more to drained nodes without sessions are not counted)", idle)
			}
			if len(undrained) > 0 {
				var cmds []string
				for _, cn := range undrained {
					c, n, _ := strings.Cut(cn, "/")
					cmds = append(cmds, fmt.Sprintf("`switchyard drain %s --cluster %s --wait`", n, c))
				}
				msg += "; to remove nodes, drain them first (" + strings.Join(cmds, ", ") + "): routes to a drained node without sessions do not count"
			}
			out = append(out, Violation{Rule: RuleRoutesRemoved, Subject: "routes", Msg: msg})
		}
	}
	return out
}

func formatFraction(f float64) string {
	return fmt.Sprintf("%g (%.0f%%)", f, 100*f)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// GuardError is a change refused by the guard: what it would have changed
// and why it is refused. Test with errors.As.
type GuardError struct {
	// Violations are the reasons, in the order Guard found them.
	Violations []Violation
	// Diff is the refused change.
	Diff Diff
}

// Error lists every violation on its own line, after a summary line.
func (e *GuardError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config: destructive change refused (%d reason", len(e.Violations))
	if len(e.Violations) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, v := range e.Violations {
		b.WriteString("\n  " + v.String())
	}
	return b.String()
}

// validateVersioning checks the config: section.
func (c *Config) validateVersioning(v *validator) {
	if n := c.Versioning.HistoryLimit; n < 1 || n > 10000 {
		v.add("config.history_limit", "%d is out of range (1..10000)", n)
	}
	if f := c.Versioning.Guard.MaxRemovedFraction; f != nil && (math.IsNaN(*f) || *f < 0 || *f > 1) {
		v.add("config.guard.max_removed_fraction", "%g is out of range (0..1: the fraction of routes one change may remove)", *f)
	}
}
