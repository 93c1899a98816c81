package proxy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Failsafe (internal/topo/FAILSAFE.md): a proxy whose registration lease is
// lost no longer counts for the controller, which may then promote another
// node without waiting for it. It keeps routing writes to a cluster's
// primary only while it confirms directly, with every node of the cluster,
// that no other node can take writes: the primary is writable and not
// replicating, every other node is read_only=ON and replicating from it
// with its IO thread running and having received something from it
// (event or heartbeat) within topo.FailsafeProgress of the check's start (a
// candidate's IO thread is stopped before it is promoted, and the
// controller waits until no confirmation can still be valid). A
// confirmation is valid for topo.FailsafeValidity from the start of the
// check; rounds of checks start every failsafeInterval while the lease is
// lost. A node that answers with anything that rules the primary out ends
// the confirmation at once; one that does not answer, or a replica that
// shows no recent progress, only stops renewing it.
// Patroni's failsafe_mode is the model (a primary that cannot reach the
// DCS keeps its role only while every member confirms it).
const (
	failsafeInterval = 150 * time.Millisecond
	// failsafeTimeoutMax bounds one check of one node (the probe timeout
	// when it is shorter), so that a pass is renewed well within the window.
	failsafeTimeoutMax = 350 * time.Millisecond
	// failsafeRoundsMax bounds the rounds of checks in flight at once.
	failsafeRoundsMax = 3
	// failsafeSettleMax bounds the rounds run before the fence goes up
	// while a cluster is refused only for want of replica progress (the
	// first round only gives each replica's progress baseline): writes keep
	// flowing meanwhile, as during the first round, and the controller's
	// grace after a lease disappears (2s) covers it.
	failsafeSettleMax = time.Second
)

// failsafeState is the proxy's failsafe bookkeeping, under mu (never taken
// per query: snapshots carry the outcome).
type failsafeState struct {
	enter sync.Mutex // serialises entering the fence (fenceWrites)

	mu       sync.Mutex
	cancel   context.CancelFunc             // stops the check loop; nil when not running
	held     map[string]*failsafeHold       // clusters confirmed now, by name
	why      map[string]string              // why a cluster is not confirmed
	periods  map[string]topo.FailsafePeriod // last period per cluster (registration)
	probers  map[string]*probe.Prober       // by address
	proberTO time.Duration
	progress map[string]map[string]*progressMark // by cluster, then node

	active *prometheus.GaugeVec
	since  *prometheus.GaugeVec
	checks *prometheus.CounterVec
}

// progressMark is what the checks know of one replica's IO progress: the
// mark (topo.IOProgressMark) read by the check that started last, when that
// check started, and the latest moment after which the replica is known to
// have received something (zero until two checks read different marks).
type progressMark struct {
	mark         string
	readStart    time.Time
	changedAfter time.Time
}

// observe records that a check started at start read mark. Two checks that
// read different marks prove a change after the earlier of their reads,
// which is no earlier than the earlier of their starts; so the bound holds
// whatever order concurrent rounds finish in. The first observation is
// only a baseline.
func (m *progressMark) observe(mark string, start time.Time) {
	switch {
	case m.readStart.IsZero():
		m.mark, m.readStart = mark, start
	case mark != m.mark:
		if lb := minTime(start, m.readStart); lb.After(m.changedAfter) {
			m.changedAfter = lb
		}
		if start.After(m.readStart) {
			m.mark, m.readStart = mark, start
		}
	case start.After(m.readStart):
		m.readStart = start
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// failsafeHold is one cluster whose primary the last checks confirmed.
type failsafeHold struct {
	primary    string
	epoch      int64
	since      time.Time
	validUntil time.Time
	timer      *time.Timer
}

func (f *failsafeState) initMetrics(reg prometheus.Registerer) error {
	f.active = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_failsafe_active",
		Help: "1 while the proxy routes writes to the cluster's primary without a registration in the topology store, on its direct checks of every node (failsafe), else 0, by cluster.",
	}, []string{"cluster"})
	f.since = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_failsafe_since_seconds",
		Help: "Unix time (seconds) at which the proxy entered failsafe for the cluster; 0 when it is not in failsafe.",
	}, []string{"cluster"})
	f.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_failsafe_checks_total",
		Help: "Direct checks of a cluster's nodes made while the registration lease was lost, by cluster and result (confirmed, refused).",
	}, []string{"cluster", "result"})
	if reg == nil {
		return nil
	}
	var err error
	if f.active, err = register(reg, f.active); err != nil {
		return fmt.Errorf("proxy: register metrics: %w", err)
	}
	if f.since, err = register(reg, f.since); err != nil {
		return fmt.Errorf("proxy: register metrics: %w", err)
	}
	if f.checks, err = register(reg, f.checks); err != nil {
		return fmt.Errorf("proxy: register metrics: %w", err)
	}
	return nil
}

// Failsafe returns, per cluster, the current or last failsafe period (an
// active one has a zero Until). Nil when the proxy never was in failsafe.
func (s *Server) Failsafe() map[string]topo.FailsafePeriod {
	f := &s.failsafe
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.periods) == 0 {
		return nil
	}
	out := make(map[string]topo.FailsafePeriod, len(f.periods))
	for k, v := range f.periods {
		out[k] = v
	}
	return out
}

// failsafeHolds reports whether snap's primary is confirmed by a check that
// is still valid; otherwise it returns why not.
func (s *Server) failsafeHolds(snap *routeSnapshot) (bool, string) {
	if !s.cfg.Load().Proxy.FailsafeOn() {
		return false, ""
	}
	f := &s.failsafe
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &snap.state
	h := f.held[st.Cluster]
	switch {
	case snap.primary == nil:
		return false, ""
	case h == nil:
		if why := f.why[st.Cluster]; why != "" {
			return false, why
		}
		return false, "no direct check has confirmed the primary"
	case h.primary != st.Primary || h.epoch != st.Epoch:
		return false, "the confirmed primary is not the routed one"
	case !s.now().Before(h.validUntil):
		return false, "no direct check confirmed the primary within " + topo.FailsafeValidity.String()
	}
	return true, ""
}

// startFailsafe runs one round of checks (so that a healthy cluster keeps
// its writes the moment the fence goes up) and then the check loop, until
// stopFailsafe or ctx ends.
func (s *Server) startFailsafe(ctx context.Context) {
	f := &s.failsafe
	f.mu.Lock()
	if f.cancel != nil {
		f.mu.Unlock()
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	f.mu.Unlock()
	begin := s.now()
	for s.failsafeRound(lctx, false) && s.now().Sub(begin) < failsafeSettleMax {
		// The first round gives the replicas' progress baseline; later
		// ones see the next heartbeat. Writes are not fenced yet.
		if !sleepCtx(lctx, failsafeInterval) {
			break
		}
	}
	go func() {
		// A round starts every failsafeInterval whether or not the last
		// one finished (at most failsafeRoundsMax at once): one slow probe
		// on a loaded machine must not let a confirmation lapse.
		var inFlight sync.WaitGroup
		defer inFlight.Wait()
		sem := make(chan struct{}, failsafeRoundsMax)
		t := time.NewTicker(failsafeInterval)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue
			}
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				defer func() { <-sem }()
				s.failsafeRound(lctx, true)
			}()
		}
	}()
}

// stopFailsafe ends the check loop and every failsafe period (the proxy is
// registered again and re-read the topology: the store decides again).
func (s *Server) stopFailsafe(why string) {
	f := &s.failsafe
	f.mu.Lock()
	if f.cancel != nil {
		f.cancel()
		f.cancel = nil
	}
	now := s.now()
	for name, h := range f.held {
		s.endHoldLocked(name, h, now, why)
	}
	f.why = nil
	f.progress = nil
	probers := f.probers
	f.probers = nil
	f.mu.Unlock()
	for _, p := range probers {
		p.Close()
	}
}

// endHoldLocked ends the failsafe period of cluster (f.mu held).
func (s *Server) endHoldLocked(name string, h *failsafeHold, now time.Time, why string) {
	f := &s.failsafe
	if h.timer != nil {
		h.timer.Stop()
	}
	delete(f.held, name)
	p := f.periods[name]
	p.Until, p.Ended = now, why
	f.periods[name] = p
	f.active.WithLabelValues(name).Set(0)
	f.since.WithLabelValues(name).Set(0)
	s.log.Warn("failsafe ended", "cluster", name, "primary", h.primary,
		"epoch", h.epoch, "since", h.since, "lasted", now.Sub(h.since).Round(time.Millisecond), "why", why)
}

// failsafeRound checks every cluster that has a routed primary, in
// parallel, and updates the replicas' progress and the holds; clusters
// whose outcome changed are rebuilt when rebuild is set (the rounds before
// the fence is applied do not: applying it rebuilds everything). It reports
// whether a cluster is left unsettled: not confirmed, and refused only
// because a replica showed no recent progress yet (a node that did not
// answer fences at once, as it did before the progress rule).
func (s *Server) failsafeRound(ctx context.Context, rebuild bool) (unsettled bool) {
	type job struct {
		st topo.ClusterState
		cl *config.Cluster
	}
	cfg := s.cfg.Load()
	var jobs []job
	s.mu.Lock()
	for name, cr := range s.clusters {
		snap := cr.snap.Load()
		if snap == nil || snap.state.Primary == "" {
			continue
		}
		if cl := cfg.Cluster(name); cl != nil {
			jobs = append(jobs, job{st: snap.state, cl: cl})
		}
	}
	s.mu.Unlock()
	start := s.now()
	errs := make([]error, len(jobs))
	probes := make([]map[string]topo.Probe, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i], errs[i] = s.failsafeProbe(ctx, cfg, j.cl)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	var changed []string
	f := &s.failsafe
	f.mu.Lock()
	if ctx.Err() != nil {
		// stopFailsafe ran meanwhile (it cancels under f.mu).
		f.mu.Unlock()
		return false
	}
	if f.held == nil {
		f.held, f.periods = map[string]*failsafeHold{}, map[string]topo.FailsafePeriod{}
	}
	if f.why == nil {
		f.why = map[string]string{}
	}
	if f.progress == nil {
		f.progress = map[string]map[string]*progressMark{}
	}
	now := s.now()
	for i, j := range jobs {
		name := j.st.Cluster
		if errs[i] == nil {
			hist := f.progress[name]
			if hist == nil {
				hist = map[string]*progressMark{}
				f.progress[name] = hist
			}
			observeProgress(hist, j.st.Primary, probes[i], start)
			errs[i] = failsafeVerdict(j.cl, j.st, probes[i], hist, start)
		}
		h := f.held[name]
		if err := errs[i]; err != nil {
			f.checks.WithLabelValues(name, "refused").Inc()
			var r *failsafeRefusal
			definitive := !errors.As(err, &r) || r.definitive
			if h == nil && r != nil && r.progressOnly {
				unsettled = true
			}
			if h != nil && !definitive {
				// A node did not answer this time: the last confirmation
				// stands until it expires (failsafeExpired), as another
				// round may still confirm within the window.
				s.log.Debug("failsafe: a check did not complete", "cluster", name, "err", err)
				continue
			}
			if r != nil && r.progressOnly && h == nil {
				// The baseline round, or heartbeats not seen yet.
				s.log.Debug("failsafe: waiting for replica progress", "cluster", name, "err", err)
			} else if f.why[name] != err.Error() || h != nil {
				s.log.Error("failsafe: a direct check does not confirm the primary; writes refused until registered again or confirmed",
					"cluster", name, "primary", j.st.Primary, "epoch", j.st.Epoch, "err", err)
			}
			f.why[name] = err.Error()
			if h != nil {
				s.endHoldLocked(name, h, now, "check failed: "+err.Error())
				changed = append(changed, name)
			}
			continue
		}
		f.checks.WithLabelValues(name, "confirmed").Inc()
		delete(f.why, name)
		if h != nil && (h.primary != j.st.Primary || h.epoch != j.st.Epoch) {
			s.endHoldLocked(name, h, now, "the routed primary changed")
			h = nil
		}
		if h == nil {
			h = &failsafeHold{primary: j.st.Primary, epoch: j.st.Epoch, since: now}
			f.held[name] = h
			f.periods[name] = topo.FailsafePeriod{Primary: h.primary, Epoch: h.epoch, Since: now}
			f.active.WithLabelValues(name).Set(1)
			f.since.WithLabelValues(name).Set(float64(now.UnixMilli()) / 1000)
			s.log.Warn("failsafe: registration lease lost; writes keep going to the primary, confirmed directly with every node",
				"cluster", name, "primary", h.primary, "epoch", h.epoch, "validity", topo.FailsafeValidity)
			changed = append(changed, name)
		}
		if v := start.Add(topo.FailsafeValidity); v.After(h.validUntil) {
			h.validUntil = v
		}
		if h.timer == nil {
			h.timer = time.AfterFunc(h.validUntil.Sub(now), func() { s.failsafeExpired(name, h) })
		} else {
			h.timer.Reset(h.validUntil.Sub(now))
		}
	}
	f.mu.Unlock()
	if rebuild {
		for _, name := range changed {
			s.rebuildCluster(name)
		}
	}
	return unsettled
}

// observeProgress records, in hist, the IO progress mark of every replica
// of primary that a check started at start read.
func observeProgress(hist map[string]*progressMark, primary string, probes map[string]topo.Probe, start time.Time) {
	for name, p := range probes {
		if name == primary || !p.Reachable || p.Error != "" || !p.Replicating {
			continue
		}
		m := hist[name]
		if m == nil {
			m = &progressMark{}
			hist[name] = m
		}
		m.observe(topo.IOProgressMark(p), start)
	}
}

// failsafeExpired ends h when no check renewed it within the window.
func (s *Server) failsafeExpired(name string, h *failsafeHold) {
	f := &s.failsafe
	f.mu.Lock()
	if f.held[name] != h || s.now().Before(h.validUntil) {
		f.mu.Unlock()
		return
	}
	why := "no direct check confirmed the primary within " + topo.FailsafeValidity.String()
	f.why[name] = why
	s.endHoldLocked(name, h, s.now(), why)
	f.mu.Unlock()
	s.rebuildCluster(name)
}

// rebuildCluster re-installs the snapshot of one cluster from its inputs.
func (s *Server) rebuildCluster(name string) {
	s.mu.Lock()
	cr := s.clusters[name]
	s.mu.Unlock()
	if cr == nil {
		return
	}
	cr.mu.Lock()
	s.rebuild(cr)
	cr.mu.Unlock()
}

// failsafeProbe probes every node of cl with the monitor account, by node
// name; failsafeVerdict judges the result.
func (s *Server) failsafeProbe(ctx context.Context, cfg *config.Config, cl *config.Cluster) (map[string]topo.Probe, error) {
	if !cfg.Proxy.FailsafeOn() {
		return nil, errors.New("failsafe is off (proxy.failsafe)")
	}
	pw, err := cfg.Credentials.Monitor.Resolve()
	if err != nil || cfg.Credentials.Monitor.User == "" {
		return nil, fmt.Errorf("the monitor account (credentials.monitor) is not usable here: %v", err)
	}
	timeout := min(cfg.Probe.Timeout.D(), failsafeTimeoutMax)
	if timeout <= 0 {
		timeout = failsafeTimeoutMax
	}
	tc, err := config.BackendTLS(cl.TLS, "")
	if err != nil {
		return nil, fmt.Errorf("clusters[].tls of %s: %w", cl.Name, err)
	}
	cred := probe.Credentials{User: cfg.Credentials.Monitor.User, Password: pw, TLS: tc}
	probes := make(map[string]topo.Probe, len(cl.Nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	probers := make([]*probe.Prober, len(cl.Nodes))
	for i, n := range cl.Nodes {
		if probers[i] = s.failsafeProber(n.Address, cred, cl.Flavor, timeout); probers[i] == nil {
			return nil, errors.New("failsafe stopped")
		}
	}
	for i, n := range cl.Nodes {
		pr := probers[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			res := pr.ProbeResult(pctx)
			cancel()
			p := res.Probe
			if p.Error != "" {
				p.ErrorKind = string(res.Kind)
			}
			mu.Lock()
			probes[n.Name] = p
			mu.Unlock()
		}()
	}
	wg.Wait()
	return probes, nil
}

// failsafeProber returns the prober of addr, or nil once failsafe stopped.
func (s *Server) failsafeProber(addr string, cred probe.Credentials, flavor string, timeout time.Duration) *probe.Prober {
	f := &s.failsafe
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel == nil {
		return nil // stopped: no prober is made that nobody closes
	}
	if f.probers == nil || f.proberTO != timeout {
		for _, p := range f.probers {
			p.Close()
		}
		f.probers, f.proberTO = map[string]*probe.Prober{}, timeout
	}
	p := f.probers[addr]
	if p == nil {
		p = probe.NewProber(addr, cred, flavor, timeout)
		f.probers[addr] = p
	}
	return p
}

// failsafeVerdict is the failsafe rule, pure: st's primary may keep taking
// writes routed by a proxy without its registration, on a check that
// started at start and read probes, only if
//   - the primary answered, is read_only=OFF and does not replicate;
//   - every other configured node answered, is read_only=ON and replicates
//     from the primary's address with its IO thread running (Slave_IO_Running
//     Yes) and, by hist (the progress marks, updated with this check),
//     received something after start − topo.FailsafeProgress of its heartbeat
//     period; or is quarantined in st (never promoted) and read_only=ON.
//
// A node that cannot be reached cannot be ruled out as a new primary, so
// it refuses. The error names every node that fails and how; it is not
// definitive when the only failures are nodes that did not answer or
// replicas without recent progress (the last confirmation then expires at
// the end of its validity).
func failsafeVerdict(cl *config.Cluster, st topo.ClusterState, probes map[string]topo.Probe, hist map[string]*progressMark, start time.Time) error {
	prim := cl.Node(st.Primary)
	if prim == nil {
		return fmt.Errorf("primary %q is not a configured node", st.Primary)
	}
	var bad, quiet []string
	definitive := false
	for _, n := range cl.Nodes {
		p, ok := probes[n.Name]
		before := len(bad)
		switch {
		case !ok:
			bad = append(bad, n.Name+": not checked")
			before = len(bad)
		case (!p.Reachable || p.Error != "") && n.Name == st.Primary && p.ErrorKind == string(probe.KindRefused):
			// The port is closed: the primary's server is not running
			// (killed, crashed, shut down). That rules it out at once: the
			// controller fails it over without a failsafe window.
			bad = append(bad, fmt.Sprintf("%s: primary refuses connections (%s)", n.Name, p.Error))
		case !p.Reachable || p.Error != "":
			bad = append(bad, fmt.Sprintf("%s: unreachable (%s)", n.Name, p.Error))
			before = len(bad)
		case n.Name == st.Primary:
			if p.ReadOnly {
				bad = append(bad, n.Name+": primary is read_only=ON (fenced)")
			} else if p.Replicating {
				bad = append(bad, n.Name+": primary replicates from "+hostPortOf(p))
			}
		case !p.ReadOnly:
			bad = append(bad, n.Name+": writable (read_only=OFF)")
		case st.Quarantined[n.Name] != "":
			// read-only and never promoted: no threat.
		case !p.Replicating:
			bad = append(bad, n.Name+": not replicating")
		case !analysis.SameAddress(p.SourceHost, p.SourcePort, prim.Address):
			bad = append(bad, n.Name+": replicates from "+hostPortOf(p)+", not from "+st.Primary)
		case p.IORunning != "Yes":
			bad = append(bad, fmt.Sprintf("%s: IO thread %q", n.Name, p.IORunning))
		default:
			if why := progressLacking(hist[n.Name], p, start); why != "" {
				quiet = append(quiet, n.Name+": "+why)
			}
		}
		if len(bad) > before {
			definitive = true
		}
	}
	if len(bad)+len(quiet) > 0 {
		all := append(bad, quiet...)
		sort.Strings(all)
		return &failsafeRefusal{definitive: definitive, progressOnly: len(bad) == 0,
			msg: fmt.Sprintf("cannot confirm %s as the only writable node: %s", st.Primary, strings.Join(all, "; "))}
	}
	return nil
}

// progressLacking says why replica p (history m) shows no progress recent
// enough for a check started at start, or "" when it does (or when its
// heartbeat period is 0 and none is required: topo.FailsafeProgress).
func progressLacking(m *progressMark, p topo.Probe, start time.Time) string {
	need := topo.FailsafeProgress(topo.HeartbeatPeriodOf(p))
	switch {
	case need == 0:
		return ""
	case m == nil || m.changedAfter.IsZero():
		return "no progress from the primary seen yet (event or heartbeat)"
	case start.Sub(m.changedAfter) > need:
		return fmt.Sprintf("nothing received from the primary for over %s (need progress within %s, heartbeat period %s)",
			start.Sub(m.changedAfter).Round(time.Millisecond), need, topo.HeartbeatPeriodOf(p))
	}
	return ""
}

// failsafeRefusal is a check that did not confirm the primary. It is
// definitive when a node answered with something that rules the primary
// out (read-only primary, another writable node, a replica not replicating
// from it); a node that did not answer only stops renewing the last
// confirmation, which then expires at the end of its window.
type failsafeRefusal struct {
	msg        string
	definitive bool
	// progressOnly: every failure is a replica without recent progress.
	progressOnly bool
}

func (r *failsafeRefusal) Error() string { return r.msg }

func hostPortOf(p topo.Probe) string { return fmt.Sprintf("%s:%d", p.SourceHost, p.SourcePort) }
