package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// maxLoginChecks bounds the application accounts logged in as per round.
const maxLoginChecks = 3

// writePathCodes are the analysis codes about the write path: each gets
// an event when it starts and when it ends, and a gauge.
var writePathCodes = []analysis.Code{analysis.PrimaryWritesBlocked, analysis.ApplicationLoginsRefused}

// gaugeCodes always have a switchyard_cluster_finding series (0 while
// absent) so that alert rules need no absent(): the write-path codes and
// the codes that say the primary is lost.
var gaugeCodes = append([]analysis.Code{analysis.DeadPrimary, analysis.UnreachablePrimary, analysis.NoPrimary,
	analysis.TwoWritablePrimaries}, writePathCodes...)

// healthMemory is what the leader remembers about write-path health and
// durability between rounds, per cluster.
type healthMemory struct {
	mu       sync.Mutex
	clusters map[string]*clusterHealth
}

type clusterHealth struct {
	hbFailures map[string]int         // node → consecutive failed heartbeats
	active     map[string]time.Time   // write-path finding (code|node) → since
	codes      map[analysis.Code]bool // codes set to 1 on the finding gauge
	durability map[string]string      // node → role whose durability settings were applied
	driftAt    map[string]time.Time   // node → last drift repair (alarm kept until quiet)
	applyAt    map[string]time.Time   // node → last apply attempt (rate limit)
	fellBack   map[string]bool        // node → semi-sync fallback reported
	lastDrift  map[string]string      // node → drift last reported
	reportedAt map[string]time.Time   // node → when lastDrift was reported
}

func (h *healthMemory) cluster(name string) *clusterHealth {
	if h.clusters == nil {
		h.clusters = map[string]*clusterHealth{}
	}
	c, ok := h.clusters[name]
	if !ok {
		c = &clusterHealth{hbFailures: map[string]int{}, active: map[string]time.Time{}, codes: map[analysis.Code]bool{},
			durability: map[string]string{}, driftAt: map[string]time.Time{}, applyAt: map[string]time.Time{},
			fellBack: map[string]bool{}, lastDrift: map[string]string{}, reportedAt: map[string]time.Time{}}
		h.clusters[name] = c
	}
	return c
}

// heartbeatFailures returns the consecutive failed heartbeats of a node.
func (h *healthMemory) heartbeatFailures(cluster, node string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cluster(cluster).hbFailures[node]
}

// checkWritePath runs, after a round's probes, the heartbeat write and the
// application login checks on the published primary and stores their
// results in its probe. It does nothing while a switchover or failover of
// the cluster runs, outside phase stable, or when the primary's probe did
// not complete; the heartbeat is written only to a primary that reported
// read_only=OFF and no replication (and the statement itself re-checks
// read_only, see probe.Heartbeat), so no replica ever gets a write. A
// failed heartbeat never changes the probe's Reachable or Error: failure
// detection (DeadPrimary) does not see it.
func (t *term) checkWritePath(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, probes map[string]topo.Probe) {
	if ctx.Err() != nil || cr == nil {
		return
	}
	cr.mu.Lock()
	var primary string
	var epoch int64
	if cr.state != nil && !cr.switching && cr.state.Phase == topo.PhaseStable {
		primary, epoch = cr.state.Primary, cr.state.Epoch
	}
	cr.mu.Unlock()
	n := cl.Node(primary)
	if n == nil {
		return
	}
	p, ok := probes[primary]
	if !ok {
		return
	}
	pr, err := t.c.prober(cfg, cl, n)
	if err != nil {
		return
	}
	h := &t.fo.health
	if complete(p) && !p.ReadOnly && !p.Replicating {
		hb := pr.Heartbeat(ctx, probe.Heartbeat{Cluster: cl.Name, Node: primary, Epoch: epoch})
		p.Heartbeat = &hb
		result := "ok"
		if !hb.OK {
			result = hb.Kind
		}
		t.c.metrics.heartbeats.WithLabelValues(cl.Name, result).Inc()
		t.c.metrics.heartbeatLatency.WithLabelValues(cl.Name).Set(hb.LatencyMS / 1000)
		h.mu.Lock()
		ch := h.cluster(cl.Name)
		before := ch.hbFailures[primary]
		if analysis.HeartbeatFailed(p) {
			ch.hbFailures[primary]++
		} else {
			delete(ch.hbFailures, primary)
		}
		h.mu.Unlock()
		switch {
		case before == 0 && !hb.OK:
			t.log.Warn("heartbeat write on the primary failed", "cluster", cl.Name, "node", primary, "kind", hb.Kind,
				"err", hb.Error, "blockers", strings.Join(hb.Blockers, "; "), "latency_ms", hb.LatencyMS)
		case before > 0 && hb.OK:
			t.log.Info("heartbeat write on the primary succeeds again", "cluster", cl.Name, "node", primary,
				"failed_rounds", before, "latency_ms", hb.LatencyMS)
		}
	}
	if p.Reachable || p.ErrorKind == string(probe.KindTooManyConnections) {
		p.AppLogins = t.loginChecks(ctx, cfg, cl.Name, pr)
	}
	probes[primary] = p
}

// loginChecks logs in as up to maxLoginChecks application accounts whose
// password the config holds (config order) and counts refusals.
func (t *term) loginChecks(ctx context.Context, cfg *config.Config, cluster string, pr *nodeProber) []topo.LoginCheck {
	var out []topo.LoginCheck
	for _, u := range cfg.Users {
		if len(out) == maxLoginChecks {
			break
		}
		pw, ok, err := u.Secret()
		if err != nil || !ok {
			continue
		}
		lc := pr.LoginCheck(ctx, u.Name, pw)
		if !lc.OK && lc.Code != 0 {
			t.c.metrics.loginRefusals.WithLabelValues(cluster, u.Name, fmt.Sprint(lc.Code)).Inc()
		}
		out = append(out, lc)
	}
	return out
}

// writePathEvents writes an event when a write-path finding starts (with
// its evidence, and that no failover follows) and when it ends (with how
// long it lasted), and sets the finding gauges of every code.
func (t *term) writePathEvents(ctx context.Context, cl *config.Cluster, st *topo.ClusterState, res analysis.Result) {
	h := &t.fo.health
	now := t.c.now()
	type change struct {
		f     analysis.Finding
		start bool
		since time.Time
	}
	var changes []change
	h.mu.Lock()
	ch := h.cluster(cl.Name)
	seen := map[string]bool{}
	present := map[analysis.Code]bool{}
	for _, f := range res.Findings {
		present[f.Code] = true
		if !isWritePath(f.Code) {
			continue
		}
		key := string(f.Code) + "|" + f.Node
		seen[key] = true
		if _, ok := ch.active[key]; !ok {
			ch.active[key] = now
			changes = append(changes, change{f: f, start: true})
		}
	}
	for key, since := range ch.active {
		if !seen[key] {
			delete(ch.active, key)
			code, node, _ := strings.Cut(key, "|")
			changes = append(changes, change{f: analysis.Finding{Code: analysis.Code(code), Node: node}, since: since})
		}
	}
	for _, c := range gaugeCodes {
		if _, ok := present[c]; !ok {
			present[c] = false
		}
	}
	for c := range ch.codes {
		if _, ok := present[c]; !ok {
			present[c] = false
		}
	}
	for c, on := range present {
		v := 0.0
		if on {
			v = 1
			ch.codes[c] = true
		}
		t.c.metrics.findings.WithLabelValues(cl.Name, string(c)).Set(v)
	}
	h.mu.Unlock()
	for _, c := range changes {
		ev := topo.Event{Cluster: cl.Name, Code: string(c.f.Code), Node: c.f.Node, Epoch: st.Epoch}
		if c.start {
			ev.Kind = topo.EventNoAction
			ev.Message = fmt.Sprintf("%s on %s: %s", c.f.Code, c.f.Node, c.f.Detail)
		} else {
			ev.Kind = topo.EventRecovery
			ev.Message = fmt.Sprintf("%s on %s cleared after %s", c.f.Code, c.f.Node, now.Sub(c.since).Round(100*time.Millisecond))
		}
		if err := t.fo.events.emit(ctx, ev); err != nil && ctx.Err() == nil {
			t.log.Warn("cannot write event", "err", err)
		}
	}
}

func isWritePath(c analysis.Code) bool {
	for _, w := range writePathCodes {
		if c == w {
			return true
		}
	}
	return false
}
