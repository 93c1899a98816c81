package analysis

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// NoWritablePrimary: no primary is published and every reachable node is
// read_only (e.g. after everything restarted: MariaDB starts read_only
// where the config says so). Node names the node the others replicate
// from when that is unambiguous: it is reachable, read_only, not
// replicating itself, every reachable replica replicates from it and none
// holds a transaction it lacks (no errant GTIDs). Detail says how to make
// it writable; the controller never does so on its own. Node is "" when no
// single such node exists (Detail says why).
const NoWritablePrimary Code = "NoWritablePrimary"

// readOnlySource looks for the replication source of an all-read_only
// cluster; see NoWritablePrimary. found is false when some reachable node
// is writable (discovery's case) or no node is reachable.
func (s Snapshot) readOnlySource() (node, detail string, found bool) {
	var sources, replicas []*Node
	for i := range s.Nodes {
		n := &s.Nodes[i]
		switch p := n.Probe; {
		case !complete(p):
		case !p.ReadOnly && !p.Replicating:
			return "", "", false // a writable node: discovery decides
		case p.Replicating:
			replicas = append(replicas, n)
		default:
			sources = append(sources, n)
		}
	}
	if len(sources)+len(replicas) == 0 {
		return "", "", false
	}
	if len(sources) == 0 {
		return "", "every reachable node is read_only and replicating; none is the source of the others", true
	}
	pointed := map[string][]string{}
	var elsewhere []string
	for _, r := range replicas {
		src := ""
		for _, c := range s.Nodes {
			if sameHostPort(r.Probe.SourceHost, r.Probe.SourcePort, c.Address) {
				src = c.Name
			}
		}
		if src == "" {
			elsewhere = append(elsewhere, fmt.Sprintf("%s replicates from %s, not a node of the cluster", r.Name,
				net.JoinHostPort(r.Probe.SourceHost, strconv.Itoa(r.Probe.SourcePort))))
			continue
		}
		pointed[src] = append(pointed[src], r.Name)
	}
	var cands []*Node
	for _, c := range sources {
		if len(pointed[c.Name]) == len(replicas) && len(replicas) > 0 {
			cands = append(cands, c)
		}
	}
	if len(cands) != 1 || len(elsewhere) > 0 {
		var why []string
		for _, c := range sources {
			why = append(why, fmt.Sprintf("%s (source of %d of %d replicas)", c.Name, len(pointed[c.Name]), len(replicas)))
		}
		sort.Strings(why)
		return "", fmt.Sprintf("every reachable node is read_only and no single node is the source of every replica: %s; %s",
			strings.Join(append(why, elsewhere...), ", "), "pick the primary by its GTID position and set read_only=OFF on it by hand"), true
	}
	c := cands[0]
	cs, cerr := Executed(s.Flavor, c.Probe)
	for _, r := range replicas {
		// Nothing writes while every node is read_only: the source must
		// hold everything each replica applied.
		rs, rerr := Executed(s.Flavor, r.Probe)
		if cerr != nil || rerr != nil || !cs.Contains(rs) {
			return "", fmt.Sprintf("every reachable node is read_only; %s is the source of every replica but %s holds transactions it lacks (%s at %s, %s at %s): "+
				"decide by hand which node is the primary", c.Name, r.Name, r.Name, roGTID(r.Probe), c.Name, roGTID(c.Probe)), true
		}
		if errant := ErrantGTIDs(s.Flavor, r.Probe, c.Probe); errant != "" {
			return "", fmt.Sprintf("every reachable node is read_only; %s is the source of every replica but %s holds transactions it lacks (%s): "+
				"decide by hand which node is the primary", c.Name, r.Name, errant), true
		}
	}
	return c.Name, fmt.Sprintf("every reachable node is read_only; %s is the replication source of %s and holds every transaction they have: "+
		"if it is the primary, make it writable with `SET GLOBAL read_only=OFF` on %s (%s); the controller then publishes it as primary",
		c.Name, strings.Join(pointed[c.Name], ", "), c.Name, c.Address), true
}

// sameHostPort reports whether host:port is addr ("localhost" and
// 127.0.0.1 are one host).
func sameHostPort(host string, port int, addr string) bool {
	h, p, err := net.SplitHostPort(addr)
	if err != nil || p != strconv.Itoa(port) {
		return false
	}
	norm := func(s string) string {
		if s == "localhost" || s == "::1" {
			return "127.0.0.1"
		}
		return s
	}
	return norm(h) == norm(host)
}

// noteReadOnly adds NoWritablePrimary to a cluster without a published
// primary whose reachable nodes are all read_only.
func (s Snapshot) noteReadOnly(add func(Code, string, string, ...any)) {
	if node, detail, found := s.readOnlySource(); found {
		add(NoWritablePrimary, node, "%s", detail)
	}
}

func roGTID(p topo.Probe) string {
	if p.GTIDCurrent != "" {
		return p.GTIDCurrent
	}
	if p.GTIDExecuted != "" {
		return p.GTIDExecuted
	}
	return "-"
}
