package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Report is everything `switchyard status` shows.
type Report struct {
	// Leader is the id of the controller leader, "" if none.
	Leader      string                   `json:"leader"`
	Controllers []string                 `json:"controllers"`
	Clusters    []topo.ClusterState      `json:"clusters"`
	Proxies     []topo.ProxyRegistration `json:"proxies"`
	// Events are the newest events of each cluster (at most RecentEvents),
	// oldest first, by cluster name.
	Events map[string][]topo.Event `json:"events,omitempty"`
	// Config is the current config revision and the revision every proxy
	// and controller applied, with their alarms.
	Config *configstore.Summary `json:"config,omitempty"`
	// CollectedAt is when the report was read.
	CollectedAt time.Time `json:"collected_at"`
	// Drained are the drained nodes of each cluster (switchyard drain).
	Drained map[string]map[string]topo.DrainRecord `json:"drained,omitempty"`
	// DrainedUnverified says, by cluster, why the drained nodes document
	// failed its integrity check (it is not shown as drained).
	DrainedUnverified map[string]string `json:"drained_unverified,omitempty"`
	// StateProblems says, per cluster, why the state document in the store
	// is invalid (topo.DecodeState without the config: unparsable, empty,
	// another cluster, inconsistent, or an epoch below what a proxy
	// acknowledged). Proxies do not apply such a state; see also each
	// proxy's StateAlarms.
	StateProblems map[string]string `json:"state_problems,omitempty"`
	// Floors are the promotion floors by cluster (absent: none recorded).
	Floors map[string]topo.PromotionFloor `json:"floors,omitempty"`
	// Rounds are the controller leader's last probe round of each cluster
	// (topo.ProbeRound, rewritten every round while Clusters is rewritten
	// on routing changes): the table shows their probes where they are
	// newer than the state's and the node's role is the same.
	Rounds map[string]topo.ProbeRound `json:"rounds,omitempty"`
}

// Collect reads the report from the store. A missing leader or an empty
// store is not an error; an unreadable store is.
func Collect(ctx context.Context, st topo.Store, keys topo.Keys, now time.Time) (*Report, error) {
	r := &Report{CollectedAt: now}
	leader, err := st.Leader(ctx, keys.Election())
	switch {
	case err == nil:
		r.Leader = leader
	case errors.Is(err, topo.ErrNotFound):
	default:
		return nil, fmt.Errorf("status: read controller leader: %w", err)
	}
	ctrls, err := st.List(ctx, keys.Controllers())
	if err != nil {
		return nil, fmt.Errorf("status: list controllers: %w", err)
	}
	for _, kv := range ctrls {
		r.Controllers = append(r.Controllers, strings.TrimPrefix(kv.Key, keys.Controllers()))
	}
	kvs, err := st.List(ctx, keys.ClustersPrefix())
	if err != nil {
		return nil, fmt.Errorf("status: list clusters: %w", err)
	}
	for _, kv := range kvs {
		if !strings.HasSuffix(kv.Key, "/state") {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(kv.Key, keys.ClustersPrefix()), "/state")
		cs, err := topo.DecodeState(kv.Value, name, nil, nil)
		if err != nil {
			r.addStateProblem(name, err.Error())
			// Show what can be read of it.
			cs = topo.ClusterState{}
			_ = json.Unmarshal(kv.Value, &cs)
			cs.Cluster = name
		}
		r.Clusters = append(r.Clusters, cs)
		evs, err := recentEvents(ctx, st, keys, cs.Cluster)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			if r.Events == nil {
				r.Events = map[string][]topo.Event{}
			}
			r.Events[cs.Cluster] = evs
		}
	}
	pkvs, err := st.List(ctx, keys.Proxies())
	if err != nil {
		return nil, fmt.Errorf("status: list proxies: %w", err)
	}
	for _, kv := range pkvs {
		p, err := topo.DecodeProxyRegistration(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("status: %s: %w", kv.Key, err)
		}
		r.Proxies = append(r.Proxies, p)
	}
	sort.Slice(r.Proxies, func(i, j int) bool { return r.Proxies[i].ID < r.Proxies[j].ID })
	r.checkEpochs()
	if err := collectDrained(ctx, st, keys, r); err != nil {
		return nil, err
	}
	collectFloors(ctx, st, keys, r)
	if err := collectRounds(ctx, st, keys, r); err != nil {
		return nil, err
	}
	if r.Config, err = configstore.ReadSummary(ctx, st, keys); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return r, nil
}

// WriteTable writes the report as aligned text tables.
func WriteTable(w io.Writer, r *Report) error {
	leader := r.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "controller leader: %s   controllers: %d   proxies: %d\n", leader, len(r.Controllers), len(r.Proxies))
	if r.Config != nil {
		if err := r.Config.WriteTable(w, r.CollectedAt); err != nil {
			return err
		}
		writePendingRestart(w, r.Config)
	}
	if len(r.Clusters) == 0 {
		fmt.Fprintln(w, "\nno cluster state published yet (is a controller running?)")
	}
	for _, cs := range r.Clusters {
		phase := cs.Phase
		switch ClusterPhase(cs) {
		case topo.PhaseSwitching:
			phase += " -> " + cs.Target
		case PhaseNoPrimary:
			phase = "NO PRIMARY (writes refused)"
		case PhasePrimaryDead:
			phase = "PRIMARY DEAD (writes refused until a failover; see analysis and events)"
		case PhasePrimaryReadOnly:
			phase = "PRIMARY READ-ONLY (writes fail with error 1290; see analysis and events)"
		}
		primary := cs.Primary
		if primary == "" {
			primary = "(none)"
		}
		probed := ""
		if rd, ok := r.Rounds[cs.Cluster]; ok {
			probed = fmt.Sprintf("   probed: %s ago", age(r.CollectedAt, rd.At))
		}
		fmt.Fprintf(w, "\ncluster %s   primary: %s   epoch: %d   phase: %s   updated: %s ago%s\n",
			cs.Cluster, primary, cs.Epoch, phase, age(r.CollectedAt, cs.UpdatedAt), probed)
		if why := r.StateProblems[cs.Cluster]; why != "" {
			fmt.Fprintf(w, "STATE INVALID: %s (proxies keep routing by the last valid state)\n", why)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tADDRESS\tROLE\tSERVING\tREAD_ONLY\tSOURCE\tIO/SQL\tLAG\tGTID\tPROBE")
		for _, n := range cs.Nodes {
			fmt.Fprintln(tw, strings.Join(r.nodeRow(cs, n), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		writeDrained(w, r, cs.Cluster)
		writeFloor(w, r, cs)
		writePolicy(w, r, cs)
	}
	if len(r.Proxies) > 0 {
		fmt.Fprintln(w, "\nPROXIES")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tLISTENERS\tEPOCHS\tCONFIG\tUPDATED")
		for _, p := range r.Proxies {
			var eps []string
			for c, e := range p.Epochs {
				eps = append(eps, fmt.Sprintf("%s=%d", c, e))
			}
			sort.Strings(eps)
			cfg := r.proxyConfig(p)
			if pending := r.proxyPendingRestart(p); len(pending) > 0 {
				cfg += " PENDING RESTART: " + strings.Join(pending, ", ")
			}
			for _, c := range sortedKeys(p.StateAlarms) {
				cfg += fmt.Sprintf(" STATE ALARM %s: %s", c, p.StateAlarms[c])
			}
			for _, c := range slices.Sorted(maps.Keys(p.Failsafe)) {
				cfg += " " + failsafeText(c, p.Failsafe[c], r.CollectedAt)
			}
			id := p.ID
			if p.Unverified != "" {
				// Not written by a proxy holding the integrity key: not a fact.
				id += " UNVERIFIED"
				cfg += " UNVERIFIED: " + p.Unverified
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\n", id, strings.Join(p.Listeners, ","), strings.Join(eps, ","), cfg, age(r.CollectedAt, p.UpdatedAt))
		}
		return tw.Flush()
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(100 * time.Millisecond).String()
}

func (r *Report) addStateProblem(cluster, why string) {
	if r.StateProblems == nil {
		r.StateProblems = map[string]string{}
	}
	r.StateProblems[cluster] = why
}

// checkEpochs flags a cluster state whose epoch is below the epoch a live
// proxy acknowledged: epochs never go back, so the document was written by
// hand (the proxies keep routing by the last valid state).
func (r *Report) checkEpochs() {
	for _, cs := range r.Clusters {
		if r.StateProblems[cs.Cluster] != "" {
			continue
		}
		for _, p := range r.Proxies {
			if e, ok := p.Epochs[cs.Cluster]; ok && e > cs.Epoch {
				r.addStateProblem(cs.Cluster, fmt.Sprintf("%v: epoch %d is lower than epoch %d acknowledged by proxy %s (epochs never go back)",
					topo.ErrStateInvalid, cs.Epoch, e, p.ID))
				break
			}
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// failsafeText words a proxy's failsafe period for the PROXIES table:
// "FAILSAFE main since 11:48:24 on node1 epoch 3 (2m10s)" while it lasts,
// "failsafe main 11:48:24–11:48:31 (6.4s) on node1: registered again ..."
// once it ended.
func failsafeText(cluster string, p topo.FailsafePeriod, now time.Time) string {
	if p.Until.IsZero() {
		return fmt.Sprintf("FAILSAFE %s since %s on %s epoch %d (%s)", cluster, p.Since.Format("15:04:05"), p.Primary, p.Epoch,
			now.Sub(p.Since).Round(time.Second))
	}
	return fmt.Sprintf("failsafe %s %s–%s (%s) on %s: %s", cluster, p.Since.Format("15:04:05"), p.Until.Format("15:04:05"),
		p.Until.Sub(p.Since).Round(100*time.Millisecond), p.Primary, p.Ended)
}

// writePendingRestart prints, per process and role, the applied config
// changes that take effect only when that process restarts (listeners, the
// admin address, the etcd section): until then it keeps the old setting.
func writePendingRestart(w io.Writer, s *configstore.Summary) {
	for _, c := range s.Consumers {
		if len(c.PendingRestart) == 0 {
			continue
		}
		fmt.Fprintf(w, "PENDING RESTART %s %s (rev %d applied): %s; these take effect only when this process restarts (until then it keeps the old setting)\n",
			c.Name, c.ID, c.AppliedRev, strings.Join(c.PendingRestart, ", "))
	}
}

// proxyPendingRestart is the pending-restart list of proxy p's config
// consumer report (nil when none).
func (r *Report) proxyPendingRestart(p topo.ProxyRegistration) []string {
	if r.Config == nil {
		return nil
	}
	for _, c := range r.Config.Consumers {
		if c.ID == p.ID && c.Name == "proxy" {
			return c.PendingRestart
		}
	}
	return nil
}
