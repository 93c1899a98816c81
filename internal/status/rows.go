package status

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// collectRounds reads every cluster's last probe round (topo.ProbeRound).
// One that does not decode is left out: the state's probes are shown.
func collectRounds(ctx context.Context, st topo.Store, keys topo.Keys, r *Report) error {
	kvs, err := st.List(ctx, keys.ProbeRounds())
	if err != nil {
		return fmt.Errorf("status: list probe rounds: %w", err)
	}
	for _, kv := range kvs {
		var rd topo.ProbeRound
		if json.Unmarshal(kv.Value, &rd) != nil {
			continue
		}
		if r.Rounds == nil {
			r.Rounds = map[string]topo.ProbeRound{}
		}
		r.Rounds[strings.TrimPrefix(kv.Key, keys.ProbeRounds())] = rd
	}
	return nil
}

// NodeProbe returns the newest probe of node n of cs that describes it in
// its current role: the last probe round's when it is newer than the
// state's and was taken in the same epoch with the same role, else the
// state's. stale is "" or, when even that probe predates the node's role
// (a switchover or failover published the roles before the next probe
// round), says so: its read_only, source and lag are of the node's previous
// role and must not be shown as current.
func (r *Report) NodeProbe(cs topo.ClusterState, n topo.NodeState) (p topo.Probe, stale string) {
	p = n.Probe
	if rd, ok := r.Rounds[cs.Cluster]; ok && rd.Epoch == cs.Epoch {
		for _, rn := range rd.Nodes {
			if rn.Name == n.Name && rn.Role == n.Role && rn.Probe.At.After(p.At) {
				p = rn.Probe
			}
		}
	}
	if !n.RoleSince.IsZero() && p.At.Before(n.RoleSince) {
		stale = fmt.Sprintf("NOT PROBED since it became %s %s ago", n.Role, age(r.CollectedAt, n.RoleSince))
	}
	return p, stale
}

// nodeRow is the NODE table's row of n: NODE ADDRESS ROLE SERVING
// READ_ONLY SOURCE IO/SQL LAG GTID PROBE.
func (r *Report) nodeRow(cs topo.ClusterState, n topo.NodeState) []string {
	p, stale := r.NodeProbe(cs, n)
	serving := "-"
	if n.Role == topo.RoleReplica {
		serving = "yes"
		if !n.Serving {
			serving = "no: " + n.Reason
		}
	}
	if rec, ok := r.Drained[cs.Cluster][n.Name]; ok && n.Role != topo.RolePrimary {
		serving = "no: drained"
		if rec.Maintenance {
			serving = "no: maintenance"
		}
	}
	if stale != "" {
		return []string{n.Name, n.Address, n.Role, serving, "?", "?", "?", "?", "?", stale}
	}
	src, threads, lag := "-", "-", "-"
	if p.Replicating {
		src = fmt.Sprintf("%s:%d", p.SourceHost, p.SourcePort)
		threads = fmt.Sprintf("%s/%s", p.IORunning, yesNo(p.SQLRunning))
		if p.LagSeconds != nil {
			lag = fmt.Sprintf("%ds", *p.LagSeconds)
		} else {
			lag = "NULL"
		}
	}
	gtid := p.GTIDCurrent
	if gtid == "" {
		gtid = p.GTIDExecuted
	}
	if gtid == "" {
		gtid = "-"
	}
	probe := fmt.Sprintf("ok %.1fms, %s ago", p.LatencyMS, age(r.CollectedAt, p.At))
	if !p.Reachable {
		probe = fmt.Sprintf("UNREACHABLE: %s (%s ago)", p.Error, age(r.CollectedAt, p.At))
	} else if hb := p.Heartbeat; hb != nil && hb.OK {
		probe += fmt.Sprintf(", write %.1fms", hb.LatencyMS)
	} else if hb != nil && hb.Kind != "read_only" {
		probe += ", WRITES BLOCKED (" + hb.Kind + ")"
	}
	for _, lc := range p.AppLogins {
		if !lc.OK && lc.Code != 0 {
			probe += fmt.Sprintf(", %s REFUSED (%d)", lc.User, lc.Code)
		}
	}
	ro := "-"
	if p.Reachable {
		ro = yesNo(p.ReadOnly)
	}
	return []string{n.Name, n.Address, n.Role, serving, ro, src, threads, lag, gtid, probe}
}

// proxyConfig is the PROXIES table's CONFIG cell of p: the config revision
// it applied (its registration, else its config consumer report), marked
// when it is behind the current revision, with its alarms.
func (r *Report) proxyConfig(p topo.ProxyRegistration) string {
	rev, alarm := p.ConfigRev, p.ConfigAlarm
	if r.Config != nil {
		for _, c := range r.Config.Consumers {
			if c.ID != p.ID || c.Name != "proxy" {
				continue
			}
			if rev == 0 {
				rev = c.AppliedRev
			}
			if alarm == "" && c.Alarm != nil {
				alarm = strings.ReplaceAll(c.Alarm.String(), "\t", " ")
			}
		}
	}
	cfg := "-"
	if rev > 0 {
		cfg = fmt.Sprintf("rev %d", rev)
		if r.Config != nil && r.Config.Current != nil && r.Config.Current.Rev != rev {
			cfg += fmt.Sprintf(" (behind rev %d)", r.Config.Current.Rev)
		}
	}
	if alarm != "" {
		cfg += " ALARM: " + alarm
	}
	return cfg
}
