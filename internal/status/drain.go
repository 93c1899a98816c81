package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// collectDrained reads each cluster's drained nodes document (clusters
// without one are absent).
func collectDrained(ctx context.Context, st topo.Store, keys topo.Keys, r *Report) error {
	// A missing or unreadable document shows nothing drained; the error
	// return is kept for callers that may want to report it later.
	for _, cs := range r.Clusters {
		kv, err := st.Get(ctx, keys.Drained(cs.Cluster))
		if err != nil {
			continue // absent or unreadable: nothing drained to show
		}
		d, err := topo.DecodeDrained(kv.Value)
		if errors.Is(err, topo.ErrIntegrity) {
			if r.DrainedUnverified == nil {
				r.DrainedUnverified = map[string]string{}
			}
			r.DrainedUnverified[cs.Cluster] = err.Error()
			continue
		}
		if err != nil {
			continue
		}
		if len(d.Nodes) == 0 {
			continue
		}
		if r.Drained == nil {
			r.Drained = map[string]map[string]topo.DrainRecord{}
		}
		r.Drained[cs.Cluster] = d.Nodes
	}
	return nil
}

// writeDrained prints a cluster's drained nodes and how many client
// sessions each proxy still has on them.
func writeDrained(w io.Writer, r *Report, cluster string) {
	if msg := r.DrainedUnverified[cluster]; msg != "" {
		fmt.Fprintf(w, "DRAINED NODES UNVERIFIED: %s; the controller and the proxies ignore it and keep the last verified one; the next drain or undrain replaces it\n", msg)
	}
	nodes := r.Drained[cluster]
	if len(nodes) == 0 {
		return
	}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rec := nodes[n]
		sessions := 0
		for _, p := range r.Proxies {
			for _, b := range p.BackendSessions {
				if b.Cluster == cluster && b.Node == n {
					sessions += b.Sessions
				}
			}
		}
		var extra []string
		if rec.By != "" {
			extra = append(extra, "by "+rec.By)
		}
		if rec.Reason != "" {
			extra = append(extra, rec.Reason)
		}
		safe := "safe to stop"
		if sessions > 0 {
			safe = fmt.Sprintf("%d client sessions still on it", sessions)
		}
		for _, cs := range r.Clusters {
			if cs.Cluster == cluster && cs.Primary == n {
				safe = "NOT safe to stop: still the writable primary — switch over first"
			}
		}
		if rec.Maintenance {
			fmt.Fprintf(w, "MAINTENANCE node %s since %s (%s ago), %s: out of routing and candidacy (%s)%s\n", n,
				rec.Since.UTC().Format(time.RFC3339), age(r.CollectedAt, rec.Since), expiry(rec.Until, r.CollectedAt), safe, joinParen(extra))
			continue
		}
		fmt.Fprintf(w, "drained: %s since %s ago (%s)%s\n", n, age(r.CollectedAt, rec.Since), safe, joinParen(extra))
	}
}

func joinParen(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return " — " + strings.Join(s, ", ")
}
