package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// RecentEvents is how many of each cluster's newest events the report
// carries.
const RecentEvents = 10

// recentEvents reads the newest RecentEvents events of cluster.
func recentEvents(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) ([]topo.Event, error) {
	kvs, err := st.List(ctx, keys.Events(cluster))
	if err != nil {
		return nil, fmt.Errorf("status: list events of %s: %w", cluster, err)
	}
	if len(kvs) > RecentEvents {
		kvs = kvs[len(kvs)-RecentEvents:]
	}
	var out []topo.Event
	for _, kv := range kvs {
		var ev topo.Event
		if json.Unmarshal(kv.Value, &ev) == nil {
			out = append(out, ev)
		}
	}
	return out, nil
}

// writePolicy prints a cluster's failover policy state: maintenance,
// block, disabled automation, quarantine, alarms, analysis codes, the last
// failover and the recent events.
func writePolicy(w io.Writer, r *Report, cs topo.ClusterState) {
	if cs.Phase == topo.PhaseFailover {
		fmt.Fprintf(w, "FAILOVER IN PROGRESS: %s -> %s (epoch %d)\n", cs.OldPrimary, cs.Target, cs.Epoch)
	}
	if m := cs.Maintenance; m != nil {
		by := ""
		if m.By != "" {
			by = " by " + m.By
		}
		fmt.Fprintf(w, "MAINTENANCE on since %s%s, %s: %s (automatic failover blocked; repair and routing continue)\n",
			m.Since.UTC().Format(time.RFC3339), by, expiry(m.Until, r.CollectedAt), m.Reason)
	}
	if b := cs.FailoverBlock; b != nil && r.CollectedAt.Before(b.Until) {
		fmt.Fprintf(w, "automatic failover BLOCKED until %s (%s left) after %s; `switchyard ack --cluster %s` lifts it\n",
			b.Until.UTC().Format(time.RFC3339), b.Until.Sub(r.CollectedAt).Round(time.Second), b.Reason, cs.Cluster)
	}
	if cs.AutoDisabled != "" {
		fmt.Fprintf(w, "automatic failover DISABLED: %s\n", cs.AutoDisabled)
	}
	if len(cs.Quarantined) > 0 {
		names := make([]string, 0, len(cs.Quarantined))
		for n := range cs.Quarantined {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "QUARANTINED %s: %s\n", n, cs.Quarantined[n])
		}
	}
	for _, a := range cs.Alarms {
		fmt.Fprintf(w, "ALARM %s %s: %s (since %s)\n", a.Code, a.Node, a.Message, a.Since.UTC().Format(time.RFC3339))
	}
	if len(cs.Analysis) > 0 {
		var codes []string
		for _, a := range cs.Analysis {
			c := a.Code
			if a.Node != "" {
				c += "(" + a.Node + ")"
			}
			codes = append(codes, c)
		}
		fmt.Fprintf(w, "analysis: %s\n", strings.Join(codes, ", "))
		for _, a := range cs.Analysis {
			if a.Code == "NoWritablePrimary" {
				fmt.Fprintf(w, "NO WRITABLE PRIMARY: %s\n", a.Detail)
			}
		}
	}
	if f := cs.LastFailover; f != nil {
		how := "manual"
		if f.Auto {
			how = "auto"
		}
		lost := "none known"
		if f.Lost != "" {
			lost = f.Lost
		}
		fmt.Fprintf(w, "last failover: %s %s -> %s, epoch %d, at %s, took %dms, estimated lost GTIDs: %s\n",
			how, f.From, f.To, f.Epoch, f.At.UTC().Format(time.RFC3339), f.DurationMS, lost)
	}
	if evs := r.Events[cs.Cluster]; len(evs) > 0 {
		fmt.Fprintln(w, "recent events:")
		for _, ev := range evs {
			fmt.Fprintf(w, "  %s  %-9s %s\n", ev.At.UTC().Format("15:04:05.000"), ev.Kind, ev.Message)
		}
	}
}

// expiry words when a maintenance ends: "until 2026-01-02T03:34:05Z (29m
// left)", "expired at ... (the controller leader turns it off at its next
// round)", or "until turned off".
func expiry(until *time.Time, now time.Time) string {
	switch {
	case until == nil:
		return "until turned off"
	case now.Before(*until):
		return fmt.Sprintf("until %s (%s left)", until.UTC().Format(time.RFC3339), until.Sub(now).Round(time.Second))
	}
	return fmt.Sprintf("expired at %s (the controller leader turns it off at its next round)", until.UTC().Format(time.RFC3339))
}
