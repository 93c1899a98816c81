package status

import (
	"context"
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
		if ev, err := topo.DecodeEvent(kv.Value); err == nil {
			out = append(out, ev)
		}
	}
	return out, nil
}

// writeAutoFailover prints the controller's automatic-failover readiness
// (topo.AutoFailover): whether a dead primary would be failed over now, to
// which candidate, or why not. Nothing while a switchover or failover runs,
// or when no controller published it.
func writeAutoFailover(w io.Writer, cs topo.ClusterState) {
	a := cs.AutoFailover
	if a == nil || cs.Phase != topo.PhaseStable {
		return
	}
	switch {
	case a.Ready && a.Candidate != "":
		fmt.Fprintf(w, "automatic failover: ready (candidate %s)\n", a.Candidate)
	case a.Ready:
		fmt.Fprintln(w, "automatic failover: ready")
	default:
		fmt.Fprintf(w, "automatic failover: NOT READY (%s): %s\n", a.Class, a.Reason)
	}
}

// writePolicy prints a cluster's failover policy state: maintenance,
// block, disabled automation, quarantine, alarms, analysis codes, the last
// failover and the recent events.
func writePolicy(w io.Writer, r *Report, cs topo.ClusterState) {
	if cs.Phase == topo.PhaseFailover {
		fmt.Fprintf(w, "FAILOVER IN PROGRESS: %s -> %s (epoch %d)\n", cs.OldPrimary, cs.Target, cs.Epoch)
	}
	if pl := cs.PrimaryLost; pl != nil && pl.Node == cs.Primary && pl.Epoch == cs.Epoch && cs.Phase == topo.PhaseStable {
		fmt.Fprintf(w, "PRIMARY LOST: %s dead since %s (%s ago, %d probe rounds); no automatic failover comes (%s): %s\n",
			pl.Node, pl.Since.UTC().Format(time.RFC3339), age(r.CollectedAt, pl.Since), pl.Rounds, pl.Class, pl.Reason)
		if pl.Detail != "" {
			fmt.Fprintf(w, "  finding: %s\n", shorten(pl.Detail))
		}
	}
	writeAutoFailover(w, cs)
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
	evs := collapseEvents(r.Events[cs.Cluster])
	// A long message (a failover plan) is printed in full once: the
	// newest event's if it is long, else the last alarm's; the others are
	// shortened to their first line.
	full := -1 // index into evs; -1: none, -2: the last long alarm
	for i := len(evs) - 1; i >= 0 && full == -1; i-- {
		if isLong(evs[i].ev.Message) {
			full = i
		}
	}
	lastLongAlarm := -1
	for i, a := range cs.Alarms {
		if isLong(a.Message) {
			lastLongAlarm = i
		}
	}
	for i, a := range cs.Alarms {
		msg := a.Message
		if full != -1 || i != lastLongAlarm {
			msg = shorten(msg)
		}
		fmt.Fprintf(w, "ALARM %s %s: %s (since %s)\n", a.Code, a.Node, msg, a.Since.UTC().Format(time.RFC3339))
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
		fmt.Fprintf(w, "last failover: %s %s -> %s, epoch %d, at %s, new primary published %dms after it began, estimated lost GTIDs: %s\n",
			how, f.From, f.To, f.Epoch, f.At.UTC().Format(time.RFC3339), f.DurationMS, f.Estimate())
	}
	if len(evs) > 0 {
		fmt.Fprintln(w, "recent events:")
		for i, e := range evs {
			msg := e.ev.Message
			if i != full {
				msg = shorten(msg)
			}
			if e.n > 1 {
				msg += fmt.Sprintf(" (%d times, first at %s)", e.n, e.first.UTC().Format("15:04:05.000"))
			}
			if e.ev.Unverified != "" {
				msg = "UNVERIFIED (" + e.ev.Unverified + "): " + msg
			}
			fmt.Fprintf(w, "  %s  %-9s %s\n", e.ev.At.UTC().Format("15:04:05.000"), e.ev.Kind, msg)
		}
	}
}

// longMessage is the length above which a single-line message counts as
// long (a failover plan, its candidates and steps).
const longMessage = 200

func isLong(msg string) bool {
	return len(msg) > longMessage || strings.Contains(msg, "\n")
}

// shorten cuts a long message to its first line of at most longMessage
// bytes, saying so; a short one is returned unchanged.
func shorten(msg string) string {
	if !isLong(msg) {
		return msg
	}
	line, _, _ := strings.Cut(msg, "\n")
	if len(line) > longMessage {
		line = line[:longMessage]
	}
	return strings.TrimRight(line, " ;:") + " … (shortened: the newest is shown in full, `status --json` has every one)"
}

// eventRun is one event of the report with how many times the same event
// (kind, code, node and message) occurred among the recent ones.
type eventRun struct {
	ev    topo.Event
	n     int
	first time.Time
}

// collapseEvents folds repeats of an event into its newest occurrence,
// keeping the order of the newest occurrences (oldest first).
func collapseEvents(evs []topo.Event) []eventRun {
	type key struct{ kind, code, node, msg string }
	idx := map[key]int{}
	var out []eventRun
	for _, ev := range evs {
		k := key{ev.Kind, ev.Code, ev.Node, ev.Message}
		if i, ok := idx[k]; ok {
			run := out[i]
			out = append(out[:i], out[i+1:]...)
			for kk, j := range idx {
				if j > i {
					idx[kk] = j - 1
				}
			}
			run.ev, run.n = ev, run.n+1
			idx[k] = len(out)
			out = append(out, run)
			continue
		}
		idx[k] = len(out)
		out = append(out, eventRun{ev: ev, n: 1, first: ev.At})
	}
	return out
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
