package controller

import (
	"context"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// progressDivisor: between full probe rounds the leader reads every
// replica's replication status alone every failover.silence_bound /
// progressDivisor (100ms with the default bound), so that when a replica
// last received anything from its source is known to within that, whatever
// probe.interval is. A round dates progress no more finely than
// probe.interval, so a primary cut off just after a round had its silence
// counted up to one interval late. It is the heartbeat period's divisor
// (config.FailoverConfig.HeartbeatPeriod): an idle replica's progress
// changes no more often than that, so finer reads would date nothing
// better; at bound/6 the silence of a partitioned primary counted from
// 100ms after its replicas' last event on average, and was decided that
// much later.
const progressDivisor = 12

// progressCadence is how often the replicas of cl are read between rounds.
func progressCadence(cl *config.Cluster) time.Duration {
	b := cl.Failover.SilenceBound.D()
	if b <= 0 {
		b = config.DefaultSilenceBound
	}
	return b / progressDivisor
}

// watchProgress reads the replicas' replication progress between probe
// rounds (progressCadence) and records it as the rounds do
// (clusterMemory.observeProgress). When every replica of the published
// primary has then heard nothing for a quarter of the silence bound (and at
// least two heartbeat periods), it starts a round at once, once per such
// silence: the round decides, with the same rules as ever; the reads only
// date the silence and never count as a verdict.
func (t *term) watchProgress(ctx context.Context) {
	next := map[string]time.Time{}
	for ctx.Err() == nil {
		cfg := t.c.config()
		now := t.c.now()
		wait := time.Duration(0)
		for i := range cfg.Clusters {
			cl := &cfg.Clusters[i]
			cadence := progressCadence(cl)
			at, ok := next[cl.Name]
			if !ok || !now.Before(at) {
				t.pollProgress(ctx, cfg, cl)
				at = now.Add(cadence)
				next[cl.Name] = at
			}
			if d := at.Sub(now); wait == 0 || d < wait {
				wait = d
			}
		}
		if wait <= 0 {
			wait = progressCadence(&config.Cluster{})
		}
		sleep(ctx, wait)
	}
}

// pollProgress reads every replica of cl's published primary once, in
// parallel, each bounded by the probe timeout, records what they show and starts
// a round when all of them have gone quiet.
func (t *term) pollProgress(ctx context.Context, cfg *config.Config, cl *config.Cluster) {
	t.mu.Lock()
	cr := t.clusters[cl.Name]
	t.mu.Unlock()
	if cr == nil {
		return // no round has loaded the cluster yet
	}
	cr.mu.Lock()
	primary := ""
	if cr.state != nil {
		primary = cr.state.Primary
	}
	cr.mu.Unlock()
	pn := cl.Node(primary)
	if pn == nil {
		return
	}
	m := t.fo.memory(cl.Name)
	m.mu.Lock()
	var names []string
	for _, n := range cl.Nodes {
		if p, ok := m.lastComplete[n.Name]; ok && n.Name != primary && p.Replicating && p.IORunning == "Yes" &&
			analysis.SameAddress(p.SourceHost, p.SourcePort, pn.Address) {
			names = append(names, n.Name)
		}
	}
	m.mu.Unlock()
	if len(names) == 0 {
		return
	}
	reads := make([]topo.Probe, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		n := cl.Node(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, err := t.c.prober(cfg, cl, n)
			if err != nil {
				reads[i] = topo.Probe{Error: err.Error()}
				return
			}
			reads[i] = pr.ReplicationProgress(ctx, 0)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := t.c.now()
	if m.observeProgress(names, reads, pn.Address, cl.Failover.SilenceBound.D()/4, now) {
		t.fo.extraRound()
	}
}

// observeProgress records the progress marks of reads (of the replicas
// names, in order) the way observe does for a round's probes: a changed
// mark is dated by the end of the read that saw it, so a silence measured
// from it is never overstated. A read that failed, or of a replica no
// longer replicating from sourceAddr with its IO thread running, records
// nothing (the rounds deal with those). It reports whether every replica
// read has now been quiet for at least quiet (and two heartbeat periods)
// for the first time since one of them last showed progress.
func (m *clusterMemory) observeProgress(names []string, reads []topo.Probe, sourceAddr string, quiet time.Duration, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	all, counted := true, 0
	for i, name := range names {
		p := reads[i]
		if !complete(p) || !p.Replicating || p.IORunning != "Yes" || !analysis.SameAddress(p.SourceHost, p.SourcePort, sourceAddr) {
			all = false
			continue
		}
		at := p.At
		if at.IsZero() || at.After(now) {
			at = now
		}
		if sig := topo.IOProgressMark(p); m.ioSig[name] != sig {
			m.ioSig[name], m.ioAt[name] = sig, at
		}
		counted++
		need := max(quiet, 2*topo.HeartbeatPeriodOf(p))
		start := p.At.Add(-time.Duration(p.LatencyMS * float64(time.Millisecond)))
		if start.Sub(m.ioAt[name]) < need {
			all = false
		}
	}
	if counted == 0 || !all {
		m.quietKicked = false
		return false
	}
	if m.quietKicked {
		return false
	}
	m.quietKicked = true
	return true
}
