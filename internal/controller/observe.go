package controller

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Analysis thresholds that are not configurable.
const (
	// overloadThreadsRunning: more running threads on the primary is a sign
	// of overload (reported, never acted on).
	overloadThreadsRunning = 100
)

// termFailover is the failure-detection state of one term of leadership:
// what the controller remembers between probe rounds (IO-thread progress,
// last lag, last complete probes, consecutive DeadPrimary rounds), the
// proxies' reachability reports, the event log and the channel that starts
// an extra probe round.
type termFailover struct {
	kick   chan struct{}
	events *eventLog
	wg     sync.WaitGroup // failovers started by the policy

	timerMu sync.Mutex
	timer   *time.Timer // a round requested for later (roundAt)
	timerAt time.Time   // when timer fires; zero when it is not pending

	mu       sync.Mutex
	proxies  map[string]topo.ProxyRegistration // by proxy id (live registrations)
	clusters map[string]*clusterMemory

	health healthMemory // write-path health and durability (health.go)
}

// clusterMemory is what the leader remembers about one cluster between
// rounds.
type clusterMemory struct {
	// mu guards ioSig, ioAt, lastLag and lastComplete: a failover run reads
	// and refreshes them from its own goroutine while probe rounds go on.
	mu           sync.Mutex
	ioSig        map[string]string     // node → IO progress signature
	ioAt         map[string]time.Time  // node → when the signature last changed
	lastLag      map[string]int64      // node → last non-NULL lag
	lastComplete map[string]topo.Probe // node → last complete probe
	deadRounds   int                   // consecutive rounds with DeadPrimary
	deadRoundAt  time.Time             // start of the last round counted in deadRounds
	trouble      bool                  // the last round saw trouble on the primary
	repairAt     map[string]time.Time  // node → last repair attempt
	// startedFor: node → the epoch of the interrupted failover for which
	// finishFailover issued START SLAVE there (once per node and epoch).
	startedFor        map[string]int64
	alignAt           map[string]time.Time // node → last replica-settings alignment (replicasettings.go)
	primaryWritableAt time.Time            // last complete probe of the published primary with read_only=OFF
	primaryWritable   string               // the primary primaryWritableAt is about
	primaryUptime     int64                // its Uptime (seconds) at primaryWritableAt
	primaryDown       bool                 // a probe found it unreachable since primaryWritableAt
	analysis          []topo.AnalysisEntry // last published codes
	analysisAt        time.Time            // when they were published
	floor             floorMemory          // the promotion floor (floor.go)
	quietKicked       bool                 // a round was started for the replicas' current silence (progress.go)
}

func newTermFailover(t *term) *termFailover {
	return &termFailover{
		kick:     make(chan struct{}, 1),
		events:   newEventLog(t),
		proxies:  map[string]topo.ProxyRegistration{},
		clusters: map[string]*clusterMemory{},
	}
}

// extraRound asks the probe loop for another round at once.
func (f *termFailover) extraRound() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// maxTroubleSpacing bounds the time between the starts of two probe rounds
// while the primary shows trouble: rounds start every min(probe.interval,
// maxTroubleSpacing), so a replica's silence is sampled finely whatever
// probe.interval is.
const maxTroubleSpacing = 100 * time.Millisecond

// confirmSpacing is the least time between the starts of two rounds that
// both count towards confirming a DeadPrimary that rests on a replica's
// silence (failover.confirm_rounds): the primary must still be silent that
// long after its replicas' silence first passed failover.silence_bound.
const confirmSpacing = 150 * time.Millisecond

// troubleSpacing is the spacing of probe rounds during trouble for a probe
// interval.
func troubleSpacing(interval time.Duration) time.Duration {
	if interval <= 0 {
		return maxTroubleSpacing
	}
	return min(interval, maxTroubleSpacing)
}

// roundAt asks the probe loop for a round starting at at (at once when at
// is not after now). Of several requests the earliest wins; the regular
// ticker keeps running meanwhile. A request outliving the term only sends
// a kick nobody reads.
func (f *termFailover) roundAt(at, now time.Time) {
	d := at.Sub(now)
	if d <= 0 {
		f.extraRound()
		return
	}
	f.timerMu.Lock()
	defer f.timerMu.Unlock()
	if f.timer != nil && !f.timerAt.IsZero() && !f.timerAt.After(at) {
		return // an earlier round is already due
	}
	if f.timer == nil {
		f.timer = time.AfterFunc(d, func() {
			f.timerMu.Lock()
			f.timerAt = time.Time{}
			f.timerMu.Unlock()
			f.extraRound()
		})
	} else {
		f.timer.Reset(d)
	}
	f.timerAt = at
}

// roundStart is when a round's probes started: the earliest probe start
// (At minus its latency), or now without probes.
func roundStart(probes map[string]topo.Probe, now time.Time) time.Time {
	start := now
	for _, p := range probes {
		if p.At.IsZero() {
			continue
		}
		if s := p.At.Add(-time.Duration(p.LatencyMS * float64(time.Millisecond))); s.Before(start) {
			start = s
		}
	}
	return start
}

func (f *termFailover) memory(cluster string) *clusterMemory {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.clusters[cluster]
	if !ok {
		m = &clusterMemory{ioSig: map[string]string{}, ioAt: map[string]time.Time{}, lastLag: map[string]int64{},
			lastComplete: map[string]topo.Probe{}, repairAt: map[string]time.Time{}, alignAt: map[string]time.Time{}}
		f.clusters[cluster] = m
	}
	return m
}

// observe records what a round's probes say about progress and lag. A
// replica's progress is dated by the end of the probe that saw it (its At;
// now when unset), the latest moment its IO thread can have received what
// it showed.
func (m *clusterMemory) observe(probes map[string]topo.Probe, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, p := range probes {
		if !complete(p) {
			continue
		}
		m.lastComplete[name] = p
		if !p.Replicating {
			delete(m.ioSig, name)
			continue
		}
		if p.LagSeconds != nil {
			m.lastLag[name] = *p.LagSeconds
		}
		sig := topo.IOProgressMark(p)
		if m.ioSig[name] != sig {
			m.ioSig[name] = sig
			at := p.At
			if at.IsZero() || at.After(now) {
				at = now
			}
			m.ioAt[name] = at
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// proxyReports returns the live proxies' reports about cluster's nodes.
func (f *termFailover) proxyReports(cluster string) []analysis.Proxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]analysis.Proxy, 0, len(f.proxies))
	for id, reg := range f.proxies {
		p := analysis.Proxy{ID: id, Reach: map[string]topo.BackendReach{}}
		for _, b := range reg.Backends {
			if b.Cluster == cluster {
				p.Reach[b.Node] = b
			}
		}
		out = append(out, p)
	}
	return out
}

// watchProxies keeps f.proxies current and starts an extra probe round when
// a proxy reports a node it could reach before as unreachable.
func (t *term) watchProxies(ctx context.Context) {
	f := t.fo
	prefix := t.c.keys.Proxies()
	for ctx.Err() == nil {
		initial, events, err := t.c.store.Watch(ctx, prefix)
		if err != nil {
			if ctx.Err() == nil {
				t.log.Warn("cannot watch proxy registrations; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		f.mu.Lock()
		f.proxies = map[string]topo.ProxyRegistration{}
		f.mu.Unlock()
		for _, kv := range initial {
			f.putProxy(prefix, kv)
		}
		for ev := range events {
			if ev.Err != nil {
				break
			}
			switch ev.Type {
			case topo.EventPut:
				if f.putProxy(prefix, ev.KV) {
					f.extraRound()
				}
			case topo.EventDelete:
				f.mu.Lock()
				delete(f.proxies, strings.TrimPrefix(ev.KV.Key, prefix))
				f.mu.Unlock()
			}
		}
	}
}

// putProxy stores a registration; it reports whether a node became
// unreachable for that proxy (a sign of trouble).
func (f *termFailover) putProxy(prefix string, kv topo.KV) bool {
	var reg topo.ProxyRegistration
	if decodeRegistration(kv.Value, &reg) != nil {
		return false
	}
	id := strings.TrimPrefix(kv.Key, prefix)
	f.mu.Lock()
	defer f.mu.Unlock()
	old, had := f.proxies[id]
	f.proxies[id] = reg
	was := map[string]bool{}
	for _, b := range old.Backends {
		was[b.Cluster+"/"+b.Node] = b.Reachable
	}
	for _, b := range reg.Backends {
		if !b.Reachable && (!had || was[b.Cluster+"/"+b.Node]) {
			return true
		}
	}
	return false
}

// analysisSnapshot builds analysis input from the published state, the
// round's probes, the memory and the proxies' reports.
func (t *term) analysisSnapshot(cfg *config.Config, cl *config.Cluster, st *topo.ClusterState, probes map[string]topo.Probe, m *clusterMemory, now time.Time) analysis.Snapshot {
	s := analysis.Snapshot{
		Cluster: cl.Name, Flavor: cl.Flavor, Primary: st.Primary, Phase: st.Phase, Now: now,
		Proxies: t.fo.proxyReports(cl.Name),
		Limits: analysis.Limits{
			MaxLag:            cl.ReadRouting.MaxLag.D(),
			SlowProbe:         cfg.Probe.Timeout.D() / 2,
			MaxThreadsRunning: overloadThreadsRunning,
			SilenceBound:      cl.Failover.SilenceBound.D(),
		},
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.floor.binlogStateOf == st.Primary {
		s.PrimaryBinlogState = m.floor.binlogState
	}
	for _, n := range cl.Nodes {
		p, ok := probes[n.Name]
		if !ok {
			p = topo.Probe{Error: "not probed yet"}
		}
		an := analysis.Node{Name: n.Name, Address: n.Address, Promotion: n.Promotion, Probe: p,
			IOProgressAt: m.ioAt[n.Name], Quarantined: st.Quarantined[n.Name]}
		if l, ok := m.lastLag[n.Name]; ok {
			an.LastLag = &l
		}
		an.HeartbeatFailures = t.fo.health.heartbeatFailures(cl.Name, n.Name)
		s.Nodes = append(s.Nodes, an)
	}
	return s
}
