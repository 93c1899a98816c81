package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/hooks"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// refreshRounds: besides every routing change, the state is rewritten every
// this many probe rounds so its probe times stay fresh for status.
const refreshRounds = 5

// findingRelog is how often a finding that persists is logged again.
const findingRelog = time.Minute

// term is one period of leadership. Everything it starts stops when its
// context ends (leadership lost or Run's context done), and run returns only
// after that.
type term struct {
	c      *Controller
	leader topo.Leader
	log    *slog.Logger

	mu       sync.Mutex
	clusters map[string]*clusterRun
	// wakeFenced: the old primaries on which this term keeps a fence
	// pending (its own failovers, and those of a term that ended:
	// failover_finish.go), by cluster|node|epoch.
	wakeFenced map[string]bool

	queue  chan string // request keys to look at
	queued sync.Map    // request key → time.Time it was first seen

	fo *termFailover // failure detection, policy and events (observe.go, policy.go)

	hooks *termHooks // notifications to the configured hooks (hooks.go); set by run
}

// clusterRun is the leader's view of one cluster.
type clusterRun struct {
	name string

	mu        sync.Mutex
	loaded    bool
	state     *topo.ClusterState // last written or read; nil if none exists
	version   topo.Version       // of state in the store; 0 = key absent
	lastWrite time.Time
	// switching is true while this term runs a switchover or failover of
	// the cluster: the probe loop then leaves Primary/Epoch/Phase/Target
	// alone. op says what holds it and opSince since when (claim).
	switching bool
	op        string
	opSince   time.Time
	findings  map[string]time.Time // finding key → last logged
	// roundAt and roundVersion are the last probe round record written
	// (round.go) and its version in the store (0: read it again).
	roundAt      time.Time
	roundVersion topo.Version
	// primaryAt is when this term last saw the primary, epoch or phase
	// change (a write of its own or a state read from the store). A probe
	// round that began before it saw the previous topology: its findings
	// and analysis are not judged (notePrimary, staleRound).
	primaryAt time.Time
}

// notePrimary records the time when the primary, the epoch or the phase
// of the cluster's state changed from prev to next (cr.mu held).
func (cr *clusterRun) notePrimary(prev, next *topo.ClusterState, now time.Time) {
	if prev == nil || next == nil {
		return
	}
	if prev.Primary != next.Primary || prev.Epoch != next.Epoch || prev.Phase != next.Phase {
		cr.primaryAt = now
	}
}

// staleRound reports whether a probe round that began at start began
// before the last change of primary, epoch or phase (cr.mu held): its
// probes show the new primary as the replica it was (a failover or a
// switchover ran while they were taken), and judging the new topology by
// them would report a read-only primary replicating from the old one.
func (cr *clusterRun) staleRound(start time.Time) bool {
	return !cr.primaryAt.IsZero() && start.Before(cr.primaryAt)
}

// quarantinedWhy is why node is quarantined in the cluster's state ("" when
// it is not). Quarantined nodes are never repointed by a switchover or a
// failover: they hold transactions the primary lacks, and a repoint would
// only stop their IO thread on a divergence error.
func (cr *clusterRun) quarantinedWhy(node string) string {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.state == nil {
		return ""
	}
	return cr.state.Quarantined[node]
}

func newTerm(c *Controller, leader topo.Leader) *term {
	t := &term{
		c:        c,
		leader:   leader,
		log:      c.log,
		clusters: map[string]*clusterRun{},
		queue:    make(chan string, 64),
	}
	t.fo = newTermFailover(t)
	return t
}

func (t *term) run(ctx context.Context) {
	t.hooks = t.startHooks(ctx)
	defer t.hooks.close()
	var wg sync.WaitGroup
	wg.Add(6)
	go func() { defer wg.Done(); t.reportFailsafe(ctx) }()
	go func() { defer wg.Done(); t.watchProgress(ctx) }()
	go func() { defer wg.Done(); t.guardStates(ctx) }()
	go func() { defer wg.Done(); t.watchRequests(ctx) }()
	go func() { defer wg.Done(); t.serveRequests(ctx) }()
	go func() { defer wg.Done(); t.watchProxies(ctx) }()
	defer wg.Wait()
	defer t.fo.wg.Wait()

	interval := t.c.config().Probe.Interval.D()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		t.round(ctx)
		if iv := t.c.config().Probe.Interval.D(); iv != interval && iv > 0 {
			interval = iv
			ticker.Reset(interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-t.fo.kick: // a sign of trouble: probe again at once
		}
	}
}

// cluster returns the run state of a cluster, loading its published state
// from the store on first use.
func (t *term) cluster(ctx context.Context, name string) (*clusterRun, error) {
	t.mu.Lock()
	cr, ok := t.clusters[name]
	if !ok {
		cr = &clusterRun{name: name, findings: map[string]time.Time{}}
		t.clusters[name] = cr
	}
	t.mu.Unlock()
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if !cr.loaded {
		if err := t.reload(ctx, cr); err != nil {
			return nil, err
		}
		cr.loaded = true
	}
	return cr, nil
}

// reload reads the cluster's state from the store (cr.mu held).
func (t *term) reload(ctx context.Context, cr *clusterRun) error {
	kv, err := t.c.store.Get(ctx, t.c.keys.ClusterState(cr.name))
	if errors.Is(err, topo.ErrNotFound) {
		cr.state, cr.version = nil, 0
		if e := t.proxiesEpoch(ctx, cr.name); e > 0 {
			// No state while proxies route by epoch e: the key was
			// deleted (by hand, or the store wiped or restored without
			// it). A state rebuilt from epoch 1 would be refused by every
			// proxy (epochs never go back): the rebuilt one starts above.
			cr.state = &topo.ClusterState{Cluster: cr.name, Phase: topo.PhaseStable, Epoch: e}
			t.c.metrics.stateRejected.WithLabelValues(cr.name).Inc()
			t.invalidState(ctx, cr.name, "missing", e+1, fmt.Sprintf(
				"the cluster state key %s is missing while proxies route by epoch %d: the controller rebuilds the state from its probes at epoch %d and up; find who deleted it",
				t.c.keys.ClusterState(cr.name), e, e+1))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read state of cluster %s: %w", cr.name, err)
	}
	st, err := topo.DecodeState(kv.Value, cr.name, cr.state, t.nodeAddrs(cr.name))
	if err != nil {
		// Only the leader writes this key, with compare-and-swap: a
		// document that does not decode, or that no controller could have
		// written after the state this leader holds (an epoch going back,
		// a primary dropped outside a failover, unknown nodes), was written
		// by hand. It is never adopted: the next write replaces it with
		// the last good state (or, with none, a state rebuilt from the
		// probes), as proxies keep their last good state meanwhile.
		t.log.Error("cluster state in the store is invalid; not adopted, the controller rebuilds it from its probes",
			"cluster", cr.name, "err", err, "store_version", kv.Version)
		t.c.metrics.stateRejected.WithLabelValues(cr.name).Inc()
		t.invalidState(ctx, cr.name, "", 0, fmt.Sprintf(
			"the cluster state was not written by a controller (%v): not adopted; the controller rebuilds it from its probes; find who writes %s",
			err, t.c.keys.ClusterState(cr.name)))
		cr.version = kv.Version
		if cr.state == nil {
			// No good state to fall back on (a new leader): start from
			// the highest epoch any proxy routes by, so that the state
			// rebuilt from the probes carries a later epoch than every
			// proxy's last good state and is accepted by them.
			cr.state = &topo.ClusterState{Cluster: cr.name, Phase: topo.PhaseStable, Epoch: t.proxiesEpoch(ctx, cr.name)}
		}
		return nil
	}
	cr.notePrimary(cr.state, &st, t.c.now())
	cr.state, cr.version = &st, kv.Version
	return nil
}

// invalidState records an invalid_state alarm of cluster: an event (once
// per eventRelog for the same dedup key) and, when it is written, the
// alarm_raised hook. epoch is the epoch the controller publishes next (0:
// unknown).
func (t *term) invalidState(ctx context.Context, cluster, dedup string, epoch int64, msg string) {
	if !t.fo.events.emitOnce(ctx, cluster+"|alarm|invalid_state|"+dedup, eventRelog, topo.Event{
		Cluster: cluster, Kind: topo.EventAlarm, Code: topo.AlarmInvalidState, Epoch: epoch, Message: msg}) {
		return
	}
	a := topo.Alarm{Code: topo.AlarmInvalidState, Message: msg, Since: t.c.now()}
	t.notify(hooks.Payload{Event: config.HookAlarmRaised, Cluster: cluster, Epoch: epoch, Reason: msg, Alarm: &a})
}

// proxiesEpoch is the highest epoch of cluster that a registered proxy
// routes by (0 when none is known or the store cannot be read).
func (t *term) proxiesEpoch(ctx context.Context, cluster string) int64 {
	kvs, err := t.c.store.List(ctx, t.c.keys.Proxies())
	if err != nil {
		return 0
	}
	var most int64
	for _, kv := range kvs {
		var reg topo.ProxyRegistration
		if decodeRegistration(kv.Value, &reg) == nil {
			most = max(most, reg.Epochs[cluster])
		}
	}
	return most
}

// nodeAddrs maps the configured nodes of cluster to their addresses (nil
// when the cluster is not configured).
func (t *term) nodeAddrs(cluster string) topo.NodeAddrs {
	cl := t.c.config().Cluster(cluster)
	if cl == nil {
		return nil
	}
	out := make(topo.NodeAddrs, len(cl.Nodes))
	for _, n := range cl.Nodes {
		out[n.Name] = n.Address
	}
	return out
}

// round probes every node of every cluster in parallel and publishes each
// cluster's state when it changed (or is getting old).
func (t *term) round(ctx context.Context) {
	cfg := t.c.config()
	t.c.pruneProbers(cfg)
	type result struct {
		cl     *config.Cluster
		cr     *clusterRun
		probes map[string]topo.Probe
	}
	results := make([]result, len(cfg.Clusters))
	var wg sync.WaitGroup
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		cr, err := t.cluster(ctx, cl.Name)
		if err != nil {
			if ctx.Err() == nil {
				t.c.warnRepeated(cl.Name, "cannot load cluster state; skipping this round", "cluster", cl.Name, "err", err)
			}
			continue
		}
		results[i] = result{cl: cl, cr: cr}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i].probes = t.probeNodes(ctx, cfg, cl, nodeNames(cl))
			t.checkWritePath(ctx, cfg, cl, cr, results[i].probes)
		}(i)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for _, r := range results {
		if r.cr == nil {
			continue
		}
		t.publishRound(ctx, cfg, r.cl, r.cr, r.probes)
		t.writeRound(ctx, r.cl, r.cr, r.probes)
		t.afterRound(ctx, cfg, r.cl, r.cr, r.probes)
	}
}

func nodeNames(cl *config.Cluster) []string {
	names := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		names[i] = n.Name
	}
	return names
}

// probeNodes probes the named nodes of cl in parallel, each bounded by the
// probe timeout, counts the results and checks grants once per node.
func (t *term) probeNodes(ctx context.Context, cfg *config.Config, cl *config.Cluster, names []string) map[string]topo.Probe {
	out := make(map[string]topo.Probe, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		n := cl.Node(name)
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, err := t.c.prober(cfg, cl, n)
			if err != nil {
				mu.Lock()
				out[n.Name] = topo.Probe{At: t.c.now(), Error: err.Error()}
				mu.Unlock()
				return
			}
			res := pr.ProbeResult(ctx)
			res.Probe.At = t.c.now()
			if res.Kind != probe.KindOK {
				res.Probe.ErrorKind = string(res.Kind)
			}
			t.noteProbeKind(cl.Name, n.Name, pr, res.Kind, res.Probe)
			t.c.metrics.probes.WithLabelValues(cl.Name, n.Name, string(res.Kind)).Inc()
			t.c.metrics.probeLatency.WithLabelValues(cl.Name).Observe(res.Probe.LatencyMS / 1000)
			if res.Probe.Reachable && pr.grantsChecked.CompareAndSwap(false, true) {
				t.checkGrants(ctx, cl.Name, n.Name, pr)
			}
			mu.Lock()
			out[n.Name] = res.Probe
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (t *term) checkGrants(ctx context.Context, cluster, node string, pr *nodeProber) {
	missing, err := pr.CheckGrants(ctx)
	switch {
	case err != nil:
		pr.grantsChecked.Store(false) // try again next round
		t.log.Warn("cannot check the monitor account's grants", "cluster", cluster, "node", node, "err", err)
	case len(missing) > 0:
		t.log.Warn("monitor account lacks privileges a switchover needs; grant them on every node",
			"cluster", cluster, "node", node, "user", pr.user, "missing", strings.Join(missing, ", "))
		t.grantsMissing(ctx, cluster, node, pr.user, missing)
	default:
		t.log.Info("monitor account has every privilege needed", "cluster", cluster, "node", node)
	}
}

// publishRound builds the cluster's state from probes and writes it if it
// changed in a way that matters, or every refreshRounds rounds.
func (t *term) publishRound(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, probes map[string]topo.Probe) {
	cr.mu.Lock()
	abandoned := cr.state != nil && cr.state.Phase == topo.PhaseSwitching && !cr.switching
	abandonedFailover := cr.state != nil && cr.state.Phase == topo.PhaseFailover && !cr.switching
	cr.mu.Unlock()
	if abandoned {
		t.resolveAbandoned(ctx, cfg, cl, cr, probes)
	}
	if abandonedFailover {
		t.resolveAbandonedFailover(ctx, cfg, cl, cr, probes)
	}
	// Epochs never go back: a proxy routing by a later epoch than the
	// state (the key deleted or the store wiped or restored while proxies
	// ran, before this leader could tell) would refuse every state from
	// here on, failovers included. The state moves past it.
	pe := t.proxiesEpoch(ctx, cl.Name)

	cr.mu.Lock()
	defer cr.mu.Unlock()
	now := t.c.now()
	bumped := false
	if cr.state != nil && !cr.switching && pe > cr.state.Epoch {
		bumped = true
		behind := *cr.state
		behind.Epoch = pe
		t.invalidState(ctx, cl.Name, "behind", pe+1, fmt.Sprintf(
			"the cluster state's epoch %d is lower than epoch %d a proxy routes by (the state was deleted, or the store wiped or restored, while proxies ran): republished at epoch %d and up",
			cr.state.Epoch, pe, pe+1))
		t.c.metrics.stateRejected.WithLabelValues(cl.Name).Inc()
		if behind.Primary != "" {
			behind.Epoch = pe + 1 // the same primary in a later epoch
		}
		cr.state = &behind
	}
	next, findings := BuildState(BuildInput{Cluster: *cl, Probes: probes, Prev: cr.state, Leader: t.c.id, Now: now})
	if !cr.staleRound(roundStart(probes, now)) {
		t.logFindings(cr, findings, now)
	}
	if next.Primary != "" && (cr.state == nil || cr.state.Primary != next.Primary) {
		t.log.Info("primary discovered", "cluster", cl.Name, "primary", next.Primary, "epoch", next.Epoch)
	}
	refresh := time.Duration(refreshRounds) * cfg.Probe.Interval.D()
	if !bumped && !routingChanged(cr.state, &next) && now.Sub(cr.lastWrite) < refresh {
		return
	}
	if err := t.write(ctx, cr, &next); err != nil && ctx.Err() == nil {
		t.c.warnRepeated(cl.Name, "cluster state not written; next round retries", "cluster", cl.Name, "err", err)
	}
}

// logFindings logs findings when they appear (and again every
// findingRelog while they last) and when they clear (cr.mu held).
func (t *term) logFindings(cr *clusterRun, findings []Finding, now time.Time) {
	seen := map[string]bool{}
	for _, f := range findings {
		key := f.Code + "|" + f.Node
		seen[key] = true
		if last, ok := cr.findings[key]; ok && now.Sub(last) < findingRelog {
			continue
		}
		cr.findings[key] = now
		level := slog.LevelWarn
		if f.Code == FindingMultipleWritable || f.Code == FindingNoPrimary {
			level = slog.LevelError
		}
		t.log.Log(context.Background(), level, f.Message, "cluster", cr.name, "finding", f.Code, "node", f.Node)
	}
	var cleared []string
	for key := range cr.findings {
		if !seen[key] {
			cleared = append(cleared, key)
		}
	}
	sort.Strings(cleared)
	for _, key := range cleared {
		delete(cr.findings, key)
		code, node, _ := strings.Cut(key, "|")
		t.log.Info("finding cleared", "cluster", cr.name, "finding", code, "node", node)
	}
}

// write stores st as the cluster's state with the leader's compare-and-swap
// (cr.mu held). On a version conflict it reloads the stored state into cr
// and returns the error; on ErrNotLeader the caller must stop acting.
func (t *term) write(ctx context.Context, cr *clusterRun, st *topo.ClusterState) error {
	stampRoles(cr.state, st, t.c.now())
	data, err := topo.EncodeState(st)
	if err != nil {
		return fmt.Errorf("encode state of cluster %s: %w", cr.name, err)
	}
	key := t.c.keys.ClusterState(cr.name)
	var v topo.Version
	if cr.version == 0 {
		v, err = t.leader.Create(ctx, key, data)
	} else {
		v, err = t.leader.Update(ctx, key, data, cr.version)
	}
	switch {
	case err == nil:
		prev := cr.state
		cr.notePrimary(prev, st, t.c.now())
		cr.state, cr.version, cr.lastWrite = st, v, t.c.now()
		t.stateHooks(prev, st)
		t.c.metrics.publishes.WithLabelValues(cr.name, "ok").Inc()
		return nil
	case errors.Is(err, topo.ErrBadVersion) || errors.Is(err, topo.ErrExists) || errors.Is(err, topo.ErrNotFound):
		t.c.metrics.publishes.WithLabelValues(cr.name, "conflict").Inc()
		if cr.state != nil {
			// Only this term writes the key while it holds a state: the
			// write that came between was made outside the controller.
			kv, gerr := t.c.store.Get(ctx, key)
			switch {
			case errors.Is(gerr, topo.ErrNotFound):
				t.disown(ctx, cr, nil, 0)()
			case gerr != nil:
				return errors.Join(err, gerr)
			default:
				t.disown(ctx, cr, kv.Value, kv.Version)()
			}
		} else if rerr := t.reload(ctx, cr); rerr != nil {
			return errors.Join(err, rerr)
		}
		return fmt.Errorf("state of cluster %s changed in the store meanwhile: %w", cr.name, err)
	default:
		t.c.metrics.publishes.WithLabelValues(cr.name, "error").Inc()
		return fmt.Errorf("write state of cluster %s: %w", cr.name, err)
	}
}

// update applies mutate to a copy of the cluster's current state and writes
// it, re-reading and re-applying up to three times on a version conflict.
// mutate may refuse (return an error) when the state is not what it
// expects; that error is returned as is.
func (t *term) update(ctx context.Context, cr *clusterRun, mutate func(st *topo.ClusterState) error) (topo.ClusterState, error) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	var err error
	for range 3 {
		var next topo.ClusterState
		if cr.state != nil {
			next = *cr.state
			next.Nodes = append([]topo.NodeState(nil), cr.state.Nodes...)
		} else {
			next = topo.ClusterState{Cluster: cr.name, Phase: topo.PhaseStable}
		}
		if merr := mutate(&next); merr != nil {
			return topo.ClusterState{}, merr
		}
		next.Leader, next.UpdatedAt = t.c.id, t.c.now()
		if err = t.write(ctx, cr, &next); err == nil {
			return next, nil
		}
		if !errors.Is(err, topo.ErrBadVersion) && !errors.Is(err, topo.ErrExists) && !errors.Is(err, topo.ErrNotFound) {
			return topo.ClusterState{}, err
		}
	}
	return topo.ClusterState{}, err
}

// resolveAbandoned finishes a switchover a previous leader left in phase
// switching: if the target was promoted (writable, not replicating) while
// the old primary is not, the target becomes primary with the next epoch;
// otherwise the old primary stays, is made writable again if it was fenced,
// and the phase returns to stable with the epoch unchanged.
func (t *term) resolveAbandoned(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, probes map[string]topo.Probe) {
	cr.mu.Lock()
	old, target := cr.state.Primary, cr.state.Target
	cr.mu.Unlock()
	op, tp := probes[old], probes[target]
	writable := func(p topo.Probe) bool { return complete(p) && !p.ReadOnly && !p.Replicating }
	log := t.log.With("cluster", cl.Name, "old_primary", old, "target", target)
	if target != "" && writable(tp) && !writable(op) {
		log.Warn("previous leader left a switchover unfinished after promoting the target; publishing the target as primary")
		_, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
			if st.Phase != topo.PhaseSwitching || st.Primary != old {
				return errors.New("state changed meanwhile")
			}
			st.Primary, st.Epoch, st.Phase, st.Target = target, st.Epoch+1, topo.PhaseStable, ""
			return nil
		})
		if err != nil {
			log.Error("could not publish the promoted target", "err", err)
		}
		return
	}
	log.Warn("previous leader left a switchover unfinished before promotion; restoring the old primary")
	// A promotion stopped right after the candidate's STOP SLAVE leaves it
	// with both threads stopped: a candidate passed the check with both
	// running, so they are started again.
	if n, on := cl.Node(target), cl.Node(old); n != nil && on != nil && complete(tp) && tp.Replicating &&
		sameAddress(tp.SourceHost, tp.SourcePort, on.Address) && (tp.IORunning == "No" || !tp.SQLRunning) {
		pr, err := t.c.prober(cfg, cl, n)
		if err == nil {
			err = pr.StartReplica(ctx)
		}
		if err != nil {
			log.Error("could not restart replication on the candidate: run START SLAVE on it", "err", err)
		} else {
			log.Info("replication restarted on the candidate (START SLAVE)")
		}
	}
	if n := cl.Node(old); n != nil && complete(op) && op.ReadOnly && !op.Replicating {
		pr, err := t.c.prober(cfg, cl, n)
		if err == nil {
			err = pr.SetReadOnly(ctx, false)
		}
		if err != nil {
			log.Error("could not make the old primary writable again: run SET GLOBAL read_only=OFF on it", "err", err)
		} else {
			log.Info("old primary writable again (read_only=OFF)")
			op.ReadOnly = false
			probes[old] = op
		}
	}
	_, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		if st.Phase != topo.PhaseSwitching || st.Primary != old {
			return errors.New("state changed meanwhile")
		}
		st.Phase, st.Target = topo.PhaseStable, ""
		return nil
	})
	if err != nil {
		log.Error("could not publish the restored state", "err", err)
	}
}

// claim takes the cluster's operation slot for what (e.g. "automatic
// failover of node1") at now: ok is false when a switchover or failover
// already holds it, and busy then says which and since when, for the
// refusal. release gives the slot back.
func (cr *clusterRun) claim(what string, now time.Time) (busy string, ok bool) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.switching {
		return cr.busyText(now), false
	}
	cr.switching, cr.op, cr.opSince = true, what, now
	return "", true
}

// release ends what claim took.
func (cr *clusterRun) release() {
	cr.mu.Lock()
	cr.switching, cr.op, cr.opSince = false, "", time.Time{}
	cr.mu.Unlock()
}

// busyText words the operation that holds the slot (cr.mu held): "another
// operation on cluster main is running: automatic failover of node1
// (started 1.2s ago); retry when it has finished (see `switchyard status`)".
func (cr *clusterRun) busyText(now time.Time) string {
	what := cr.op
	if what == "" {
		what = "a switchover or failover"
	}
	return fmt.Sprintf("another switchover or failover of cluster %s is running: %s (started %s ago); retry when it has finished (see `switchyard status`)",
		cr.name, what, now.Sub(cr.opSince).Round(100*time.Millisecond))
}
