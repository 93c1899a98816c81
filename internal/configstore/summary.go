package configstore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Summary is the config part of `switchyard status`: the current revision
// and what every consumer serves.
type Summary struct {
	// Current is the current revision without its YAML; nil when the key is
	// missing or invalid.
	Current *Revision `json:"current,omitempty"`
	// CurrentVersion is the current key's store version (0: missing).
	CurrentVersion topo.Version `json:"current_version"`
	// CurrentError says why the current key's value is invalid.
	CurrentError string `json:"current_error,omitempty"`
	// Consumers are the reports of every running proxy and controller that
	// follows the config, by id then role.
	Consumers []Status `json:"consumers"`
}

// ReadSummary reads the current revision and the consumers' reports. Reports
// that do not decode are skipped.
func ReadSummary(ctx context.Context, st topo.Store, keys topo.Keys) (*Summary, error) {
	s := &Summary{Consumers: []Status{}}
	kv, err := st.Get(ctx, keys.Config())
	switch {
	case err == nil:
		s.CurrentVersion = kv.Version
		r, _, derr := Decode(kv.Value)
		if derr != nil {
			s.CurrentError = derr.Error()
		} else {
			m := r.Meta()
			s.Current = &m
		}
	case !isNotFound(err):
		return nil, fmt.Errorf("configstore: read %s: %w", keys.Config(), err)
	}
	kvs, err := st.List(ctx, keys.ConfigConsumers())
	if err != nil {
		return nil, fmt.Errorf("configstore: list %s: %w", keys.ConfigConsumers(), err)
	}
	for _, kv := range kvs {
		var c Status
		if json.Unmarshal(kv.Value, &c) == nil {
			s.Consumers = append(s.Consumers, c)
		}
	}
	sort.Slice(s.Consumers, func(i, j int) bool {
		a, b := s.Consumers[i], s.Consumers[j]
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Name < b.Name
	})
	return s, nil
}

// Converged reports whether every consumer serves the current revision
// without an alarm (false when there is no valid current revision).
func (s *Summary) Converged() bool {
	if s.Current == nil {
		return false
	}
	for _, c := range s.Consumers {
		if c.AppliedRev != s.Current.Rev || c.Alarm != nil {
			return false
		}
	}
	return true
}

// WriteTable writes the summary for people:
//
//	config: revision 7 (sha256 1a2b3c4d5e6f) applied 2m ago by ops@host: add db4
//	CONSUMER   ROLE   APPLIED  ALARM
//	proxy-a    proxy  7        -
//	proxy-b    proxy  6        ALARM etcd version 812: the stored value is empty
func (s *Summary) WriteTable(w io.Writer, now time.Time) error {
	switch {
	case s.CurrentError != "":
		fmt.Fprintf(w, "config: ALARM: the current config value (etcd version %d) is invalid: %s\n", s.CurrentVersion, s.CurrentError)
	case s.Current == nil:
		fmt.Fprintln(w, "config: no revision in the store yet")
	default:
		c := s.Current
		extra := ""
		if c.GuardOverridden {
			extra = " [guard overridden]"
		}
		fmt.Fprintf(w, "config: revision %d (sha256 %s) applied %s ago by %s (%s): %s%s\n",
			c.Rev, c.ShortHash(), ago(now, c.Time), c.Author, c.Source, c.Reason, extra)
	}
	if len(s.Consumers) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tROLE\tAPPLIED\tREJECTED\tALARM")
	for _, c := range s.Consumers {
		alarm := "-"
		if c.Alarm != nil {
			alarm = "ALARM " + strings.ReplaceAll(c.Alarm.String(), "\t", " ")
		}
		applied := fmt.Sprint(c.AppliedRev)
		if s.Current != nil && c.AppliedRev != s.Current.Rev {
			applied += " (behind)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", c.ID, c.Name, applied, c.Rejected, alarm)
	}
	return tw.Flush()
}

// WriteHistory writes one line per revision, newest first, marking the
// current one.
func WriteHistory(w io.Writer, history []Revision, current int64, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REV\tWHEN\tAUTHOR\tSOURCE\tSHA256\tGUARD\tREASON")
	for i := len(history) - 1; i >= 0; i-- {
		r := history[i]
		mark := ""
		if r.Rev == current {
			mark = "*"
		}
		src := r.Source
		if r.Source == SourceRollback {
			src = fmt.Sprintf("rollback to %d", r.RollbackOf)
		}
		guard := "ok"
		switch {
		case r.Refused == "integrity":
			// Not written by a holder of the integrity key: not history.
			guard = "REFUSED: integrity (not applied; MAC does not verify)"
		case r.Refused != "":
			guard = "REFUSED: " + r.Refused
		case r.GuardOverridden:
			guard = "OVERRIDDEN: " + strings.Join(r.GuardViolations, "; ")
		}
		fmt.Fprintf(tw, "%d%s\t%s (%s ago)\t%s\t%s\t%s\t%s\t%s\n", r.Rev, mark, r.Time.Local().Format("2006-01-02 15:04:05"), ago(now, r.Time), r.Author, src, r.ShortHash(), guard, r.Reason)
	}
	return tw.Flush()
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
