package status

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// collectFloors reads each cluster's promotion floor; an absent or
// unreadable document shows as none recorded.
func collectFloors(ctx context.Context, st topo.Store, keys topo.Keys, r *Report) {
	for _, cs := range r.Clusters {
		var f topo.PromotionFloor
		if _, err := topo.GetJSON(ctx, st, keys.Floor(cs.Cluster), &f); err != nil {
			continue
		}
		if r.Floors == nil {
			r.Floors = map[string]topo.PromotionFloor{}
		}
		r.Floors[cs.Cluster] = f
	}
}

// floorFlavor tells the flavor from the floor's text: MySQL GTID sets carry
// a source UUID and a colon.
func floorFlavor(gtid string) string {
	if strings.Contains(gtid, ":") {
		return "mysql"
	}
	return "mariadb"
}

// writeFloor prints the cluster's promotion floor and, for every node
// other than the primary, what of it the node lacks once its relay log is
// applied: the acknowledged writes a failover to it would lose.
func writeFloor(w io.Writer, r *Report, cs topo.ClusterState) {
	f, ok := r.Floors[cs.Cluster]
	if !ok || f.GTID == "" {
		fmt.Fprintf(w, "promotion floor: none recorded\n")
		return
	}
	fmt.Fprintf(w, "promotion floor: %s (highest position seen on primary %s, epoch %d, raised %s ago)\n",
		f.GTID, f.Primary, f.Epoch, age(r.CollectedAt, f.UpdatedAt))
	if f.ResetAt != nil {
		fmt.Fprintf(w, "  floor RESET at %s from %s: %s\n", f.ResetAt.UTC().Format("2006-01-02T15:04:05Z"), f.Lowered, f.ResetReason)
	}
	flavor := floorFlavor(f.GTID)
	floor, err := analysis.ParseFloor(flavor, f.GTID)
	if err != nil {
		fmt.Fprintf(w, "  the floor does not parse (%v): failovers are refused until it is replaced\n", err)
		return
	}
	// While the published primary answers, its replicas are only as far
	// behind the floor as replication in flight (the floor rises with every
	// round's heartbeat, the node rows may be a few rounds old): a gap then
	// means nothing for a failover and is not shown for serving replicas.
	primaryUp := false
	if pn := cs.Node(cs.Primary); pn != nil && cs.Phase == topo.PhaseStable {
		primaryUp = pn.Probe.Reachable && pn.Probe.Error == ""
	}
	for _, n := range cs.Nodes {
		if n.Name == cs.Primary {
			continue
		}
		if primaryUp && n.Serving {
			fmt.Fprintf(w, "  %s: replicating from the primary (serving); its gap to the floor is judged if the primary is lost\n", n.Name)
			continue
		}
		p := n.Probe
		if !p.Reachable || p.Error != "" {
			fmt.Fprintf(w, "  %s: position unknown (%s): not a failover candidate\n", n.Name, orDash(p.Error))
			continue
		}
		recv, err := analysis.Received(flavor, p)
		if err != nil {
			fmt.Fprintf(w, "  %s: position does not parse: %v\n", n.Name, err)
			continue
		}
		if missing, count := analysis.BehindFloor(flavor, recv, floor); missing != "" {
			fmt.Fprintf(w, "  %s: behind the floor at %s: missing %s (%d transaction(s) a failover to it would lose; refused without --force-stale --reason)\n",
				n.Name, orDash(recv.String()), missing, count)
		} else {
			fmt.Fprintf(w, "  %s: holds the floor (received %s)\n", n.Name, recv)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
