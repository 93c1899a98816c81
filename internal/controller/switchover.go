package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// stepTimeout bounds one administrative statement of a switchover.
const stepTimeout = 10 * time.Second

// switchover is one planned switchover in progress.
type switchover struct {
	t       *term
	cfg     *config.Config
	cl      *config.Cluster
	cr      *clusterRun
	log     *slog.Logger
	key     string
	req     topo.Request
	version topo.Version
	start   time.Time

	old, cand         string
	oldPr, candPr     *nodeProber
	fromEpoch         int64
	pw                *progressWriter // events and request progress, off the critical path
	holdID            string          // SwitchoverProgress.ID of this attempt
	holdSince         time.Time
	progressVersion   topo.Version  // of the switchover document
	announced         bool          // the switchover document and phase switching were published
	heldFor           time.Duration // from prepare to the publication of the new primary
	replayHit         float64       // buffer-pool hit ratio of the --warm replay
	fenced            bool          // old primary set read-only
	candStopped       bool          // candidate's replication stopped
	candReset         bool          // candidate's replication config removed
	candWritable      bool          // candidate set writable
	hooked            bool          // checks passed: switchover_end is notified
	oldDown           string        // why the old primary was found dead during the switchover ("" if not)
	replUser, replPwd string
}

// runSwitchover executes a Pending switchover request: checks, phase
// switching, fence, catch-up, promote, repoint, publish — or roll back.
func (t *term) runSwitchover(ctx context.Context, key string, req topo.Request, version topo.Version) {
	cfg := t.c.config()
	cl := cfg.Cluster(req.Cluster)
	s := &switchover{
		t: t, cfg: cfg, cl: cl, key: key, req: req, version: version, start: t.c.now(),
		log: t.log.With("cluster", req.Cluster, "request", req.ID),
	}
	s.req.State = topo.RequestRunning
	s.req.Steps = nil
	if err := t.saveRequest(ctx, key, &s.req, &s.version); err != nil {
		s.log.Warn("cannot take the switchover request", "err", err)
		return
	}
	s.log.Info("switchover started", "target", req.Target)
	s.pw = newProgressWriter(ctx)
	result := s.run(ctx)
	s.event("switchover_"+result, s.cand, s.req.Message)
	s.endHooks(result)
	s.pw.close()
	t.c.metrics.switchovers.WithLabelValues(req.Cluster, result).Inc()
	if ctx.Err() != nil {
		// Leadership lost or shutting down: the next leader resolves the
		// cluster and fails the request.
		s.log.Warn("switchover interrupted: leadership lost or controller stopping", "result", result)
		return
	}
	state := topo.RequestDone
	if result != resultDone {
		state = topo.RequestFailed
	}
	s.req.State, s.req.Result = state, result
	if result != resultRefused {
		s.req.Override = ""
	}
	if err := t.saveRequest(ctx, key, &s.req, &s.version); err != nil {
		s.log.Error("cannot record the switchover result", "result", result, "err", err)
	}
	s.log.Info("switchover finished", "result", result, "message", s.req.Message,
		"duration", t.c.now().Sub(s.start).Round(time.Millisecond))
}

// step runs fn, records "name (12ms)" or "name: failed after 12ms: err" in
// the request's steps, logs it, and queues an event and a save of the
// request (so watchers see progress) on the progress writer.
func (s *switchover) step(ctx context.Context, name string, fn func(ctx context.Context) (string, error)) error {
	if h := s.t.c.stepHook; h != nil {
		h(ctx, name)
	}
	begin := s.t.c.now()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout+s.cfg.Switchover.CatchupTimeout.D())
	detail, err := fn(sctx)
	cancel()
	elapsed := s.t.c.now().Sub(begin)
	took := elapsed.Round(100 * time.Microsecond)
	s.req.Phases = append(s.req.Phases, topo.PhaseTiming{Phase: s.phaseOf(name),
		MS: float64(elapsed.Microseconds()) / 1000, Failed: err != nil})
	line := name
	if detail != "" {
		line += ": " + detail
	}
	if err != nil {
		line = fmt.Sprintf("%s: failed after %s: %v", line, took, err)
		s.log.Warn("switchover step failed", "step", name, "took", took, "err", err)
	} else {
		line = fmt.Sprintf("%s (%s)", line, took)
		s.log.Info("switchover step", "step", name, "detail", detail, "took", took)
	}
	s.req.Steps = append(s.req.Steps, line)
	code := name
	if i := strings.IndexByte(code, ' '); i > 0 {
		code = code[:i]
	}
	if err != nil {
		code += "_failed"
	}
	s.event(code, "", line)
	req := s.req
	req.Steps = slices.Clone(s.req.Steps)
	req.Phases = slices.Clone(s.req.Phases)
	s.pw.add(func(ctx context.Context) {
		if serr := s.t.saveRequest(ctx, s.key, &req, &s.version); serr != nil && ctx.Err() == nil {
			s.log.Warn("cannot save switchover progress", "err", serr)
		}
	})
	return err
}

// phaseOf is the phase code of the step name: its words without the
// cluster's node names, joined by '-' ("catch up node2" → "catch-up").
func (s *switchover) phaseOf(name string) string {
	var words []string
	for _, w := range strings.Fields(name) {
		if s.cl.Node(w) == nil {
			words = append(words, w)
		}
	}
	return strings.Join(words, "-")
}

// run performs the switchover and returns its result label. s.req.Message
// is set for every outcome.
func (s *switchover) run(ctx context.Context) string {
	cr, err := s.t.cluster(ctx, s.cl.Name)
	if err != nil {
		s.req.Message = "refused: " + err.Error()
		return resultRefused
	}
	s.cr = cr
	what := "switchover request " + s.req.ID
	if s.req.By != "" {
		what += " by " + s.req.By
	}
	busy, ok := cr.claim(what, s.t.c.now())
	if !ok {
		s.req.Message = "refused: " + busy
		return resultRefused
	}
	defer cr.release()
	if why := s.staleRequest(); why != "" {
		s.req.Message = "refused: " + why
		return resultRefused
	}

	// 1. Refresh and check; measure (and raise) the candidate's warmth.
	if err := s.step(ctx, "check", s.check); err != nil {
		s.req.Message = "refused: " + err.Error()
		return resultRefused
	}
	// Veto hooks may refuse before anything changes; the others are told.
	if err := s.startHooks(ctx); err != nil {
		s.req.Message = "refused: " + err.Error()
		return resultRefused
	}
	if err := s.step(ctx, "warmth "+s.cand, s.warmth); err != nil {
		s.req.Message = "refused: " + err.Error()
		return resultRefused
	}
	// Let the candidate apply what it has received before anything is
	// held, so that the catch-up after the fence (while clients wait) is
	// only what was written during the drain.
	if err := s.step(ctx, "pre-catch-up "+s.cand, s.preCatchUp); err != nil {
		s.req.Message = "refused: " + err.Error()
		return resultRefused
	}
	// 2. Prepare: proxies hold new statements (bounded by max_duration
	// from here to the release).
	s.holdID = s.req.ID + "-" + strconv.FormatInt(s.t.c.now().UnixNano(), 36)
	s.holdSince = s.t.c.now()
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Switchover.MaxDuration.D())
	defer cancel()
	if err := s.step(dctx, "prepare", s.prepare); err != nil {
		if !s.announced {
			s.req.Message = "refused: " + err.Error()
			return resultRefused
		}
		return s.rollback(ctx, "prepare: "+err.Error())
	}
	// 3. Drain: open transactions finish (or, at the bound, drain_mode).
	if err := s.step(dctx, "drain", s.drain); err != nil {
		return s.rollback(ctx, "drain: "+err.Error())
	}
	// 4–6. Fence, catch up, promote; any failure rolls back.
	for _, st := range []struct {
		name string
		fn   func(context.Context) (string, error)
	}{
		{"fence " + s.old, s.fence},
		{"catch up " + s.cand, s.catchUp},
		{"promote " + s.cand, s.promote},
	} {
		if err := s.step(dctx, st.name, st.fn); err != nil {
			if dctx.Err() != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w (switchover.max_duration %s reached)", err, s.cfg.Switchover.MaxDuration)
			}
			return s.rollback(ctx, fmt.Sprintf("%s: %v", st.name, err))
		}
	}
	// 7. Release: publish the new primary and epoch; proxies move their
	// sessions and release what they hold.
	var toEpoch int64
	if err := s.step(ctx, "publish primary "+s.cand, func(ctx context.Context) (string, error) {
		st, err := s.t.update(ctx, cr, func(st *topo.ClusterState) error {
			if st.Primary != s.old || st.Epoch != s.fromEpoch {
				return fmt.Errorf("cluster state changed meanwhile (primary %s, epoch %d)", st.Primary, st.Epoch)
			}
			st.Primary, st.Epoch, st.Phase, st.Target = s.cand, s.fromEpoch+1, topo.PhaseStable, ""
			for i := range st.Nodes {
				switch st.Nodes[i].Name {
				case s.cand:
					st.Nodes[i].Role, st.Nodes[i].Serving, st.Nodes[i].Reason = topo.RolePrimary, false, ""
				default:
					// Until the next probe shows them replicating from the
					// new primary, replicas do not serve reads.
					st.Nodes[i].Role, st.Nodes[i].Serving, st.Nodes[i].Reason = topo.RoleReplica, false, "repointed, not probed yet"
				}
			}
			return nil
		})
		toEpoch = st.Epoch
		s.heldFor = s.t.c.now().Sub(s.holdSince)
		return fmt.Sprintf("epoch %d, statements held for %s", st.Epoch, s.heldFor.Round(time.Millisecond)), err
	}); err != nil {
		s.req.Message = fmt.Sprintf("%s was promoted but the new state could not be published (%v); "+
			"the next leader publishes it from the probes", s.cand, err)
		return resultFailed
	}
	_ = s.step(ctx, "release", func(ctx context.Context) (string, error) {
		if err := s.publishProgress(ctx, topo.SwitchStepDone); err != nil {
			s.log.Warn("cannot mark the switchover document done (proxies released on the new state anyway)", "err", err)
			return "switchover document not marked done (proxies released on the new state anyway): " + err.Error(), nil
		}
		return "switchover document done", nil
	})
	// 8. Repoint: failures are recorded, the switchover goes on (the new
	// primary is writable and the old one fenced). Done after the release
	// so that clients do not wait for it.
	var repointErrs []string
	for _, n := range s.cl.Nodes {
		if n.Name == s.cand {
			continue
		}
		if why := s.cr.quarantinedWhy(n.Name); why != "" {
			_ = s.step(ctx, "repoint "+n.Name, func(context.Context) (string, error) {
				return "not repointed: quarantined (" + why + ")", nil
			})
			continue
		}
		if err := s.step(ctx, "repoint "+n.Name, func(ctx context.Context) (string, error) {
			return s.repoint(ctx, n)
		}); err != nil {
			repointErrs = append(repointErrs, fmt.Sprintf("%s: %v", n.Name, err))
		}
	}
	if mode := s.cl.Durability; (mode == "" || mode == config.DurabilityAsync) && s.oldPrimarySemiSync() {
		// Switchyard does not manage semi-sync here, but the cluster ran
		// it: the new primary takes the role over (as a failover does)
		// rather than leaving the cluster asynchronous behind the
		// operator's back.
		_ = s.step(ctx, "semi-sync on "+s.cand, s.carrySemiSync)
	}
	s.t.applyDurability(ctx, s.cfg, s.cl, s.cand)
	s.req.FromEpoch, s.req.ToEpoch = s.fromEpoch, toEpoch
	s.req.Message = fmt.Sprintf("switched over from %s to %s, epoch %d → %d, in %s (statements held %s)",
		s.old, s.cand, s.fromEpoch, toEpoch, s.t.c.now().Sub(s.start).Round(time.Millisecond), s.heldFor.Round(time.Millisecond))
	if s.req.Warmth != nil {
		s.req.Message += fmt.Sprintf("; candidate warmth %.0f%%", 100*s.req.Warmth.Fraction)
	}
	if len(repointErrs) > 0 {
		s.req.Message += "; not repointed (fix by hand): " + strings.Join(repointErrs, "; ")
	}
	return resultDone
}

// prepare announces the switchover: the switchover document at step hold,
// then the cluster state in PhaseSwitching (proxies hold when both say so).
func (s *switchover) prepare(ctx context.Context) (string, error) {
	if err := s.publishProgress(ctx, topo.SwitchStepHold); err != nil {
		return "", err
	}
	_, err := s.t.update(ctx, s.cr, func(st *topo.ClusterState) error {
		if st.Primary != s.old || st.Epoch != s.fromEpoch || st.Phase != topo.PhaseStable {
			return fmt.Errorf("cluster state changed meanwhile (primary %s, epoch %d, phase %s)", st.Primary, st.Epoch, st.Phase)
		}
		st.Phase, st.Target = topo.PhaseSwitching, s.cand
		return nil
	})
	if err != nil {
		_ = s.publishProgress(ctx, topo.SwitchStepDone)
		return "", err
	}
	s.announced = true
	return fmt.Sprintf("epoch %d, %s → %s, switchover %s", s.fromEpoch, s.old, s.cand, s.holdID), nil
}

// check probes the cluster afresh (replicas first, then the primary, so a
// replica cannot look ahead of the primary), rebuilds its state, verifies
// it is stable and chooses or checks the candidate.
// staleRequest says why the request was decided on another epoch than
// the cluster's now (another switchover or failover ran since it was
// made, e.g. while it waited behind one or for a leader), or "".
func (s *switchover) staleRequest() string {
	s.cr.mu.Lock()
	cur := s.cr.state
	s.cr.mu.Unlock()
	if s.req.SeenEpoch == 0 || cur == nil || cur.Epoch == s.req.SeenEpoch {
		return ""
	}
	return fmt.Sprintf("cluster %s changed since this request was made (%s ago, at epoch %d): it is at epoch %d now, primary %s (another switchover or failover ran meanwhile); run the switchover again if it is still wanted",
		s.cl.Name, s.t.c.now().Sub(s.req.CreatedAt).Round(100*time.Millisecond), s.req.SeenEpoch, cur.Epoch, orDash(cur.Primary))
}

func (s *switchover) check(ctx context.Context) (string, error) {
	s.cr.mu.Lock()
	prev := s.cr.state
	s.cr.mu.Unlock()
	if prev == nil || prev.Primary == "" {
		return "", fmt.Errorf("cluster %s has no published primary yet", s.cl.Name)
	}
	var replicas []string
	for _, n := range s.cl.Nodes {
		if n.Name != prev.Primary {
			replicas = append(replicas, n.Name)
		}
	}
	probes := s.t.probeNodes(ctx, s.cfg, s.cl, replicas)
	for k, v := range s.t.probeNodes(ctx, s.cfg, s.cl, []string{prev.Primary}) {
		probes[k] = v
	}
	st, _ := BuildState(BuildInput{Cluster: *s.cl, Probes: probes, Prev: prev, Leader: s.t.c.id, Now: s.t.c.now()})
	if err := checkStable(&st); err != nil {
		return "", err
	}
	drained, _, err := s.t.c.drained(ctx, s.cl.Name)
	if err != nil {
		return "", fmt.Errorf("read drained nodes: %w", err)
	}
	if rec, ok := drained.Nodes[s.req.Target]; ok && s.req.Target != "" {
		rule := promotionDrained
		if rec.Maintenance {
			rule = promotionMaintenance
		}
		return "", fmt.Errorf("cannot switch over to %s", notPromotable(s.cl.Name, s.req.Target, rule))
	}
	cand, err := chooseCandidate(withoutDrained(s.cl, drained), &st, s.req.Target)
	if err != nil {
		return "", err
	}
	s.old, s.cand, s.fromEpoch = st.Primary, cand, st.Epoch
	s.req.Target = cand // record the chosen candidate when none was requested
	if s.oldPr, err = s.t.c.prober(s.cfg, s.cl, s.cl.Node(s.old)); err != nil {
		return "", err
	}
	if s.candPr, err = s.t.c.prober(s.cfg, s.cl, s.cl.Node(s.cand)); err != nil {
		return "", err
	}
	s.replUser = s.cfg.Credentials.Replication.User
	if s.replPwd, err = s.cfg.Credentials.Replication.Resolve(); err != nil {
		return "", fmt.Errorf("credentials.replication: %w", err)
	}
	if s.replUser == "" {
		return "", errors.New("credentials.replication.user is empty: replicas cannot be repointed")
	}
	cp := st.Node(s.cand).Probe
	return fmt.Sprintf("%s → %s (candidate GTID %s, lag %ds)", s.old, s.cand, gtidOf(s.cl.Flavor, cp), *cp.LagSeconds), nil
}

func gtidOf(flavor string, p topo.Probe) string {
	if flavor == probe.FlavorMySQL {
		return p.GTIDExecuted
	}
	return p.GTIDCurrent
}

// fenceLockWait bounds the first attempt to set read_only, which a client
// session holding LOCK TABLES ... WRITE blocks; the sessions are then killed
// and the fence retried.
const fenceLockWait = 2 * time.Second

// fence makes the old primary read-only, verifies it and kills its client
// sessions (replication and monitor threads are kept).
func (s *switchover) fence(ctx context.Context) (string, error) {
	s.fenced = true // from here on, rollback restores read_only=OFF
	killed := 0
	fctx, cancel := context.WithTimeout(ctx, fenceLockWait)
	err := s.oldPr.SetReadOnly(fctx, true)
	cancel()
	if k := probe.Classify(err); k == probe.KindLockWait || k == probe.KindTimeout {
		s.log.Warn("read_only blocked by a client session's lock; killing client sessions and retrying", "node", s.old, "err", err)
		n, kerr := s.oldPr.KillClientSessions(ctx, s.replUser)
		if kerr != nil {
			return "", fmt.Errorf("%w; then killing client sessions failed: %w", err, kerr)
		}
		killed += n
		err = s.oldPr.SetReadOnly(ctx, true)
	}
	if err != nil {
		return "", err
	}
	ro, err := s.oldPr.ReadOnly(ctx)
	if err != nil {
		return "", err
	}
	if !ro {
		return "", errors.New("read_only is still OFF after SET GLOBAL read_only=ON")
	}
	n, err := s.oldPr.KillClientSessions(ctx, s.replUser)
	if err != nil {
		return "", err
	}
	killed += n
	return fmt.Sprintf("read_only=ON, %d client sessions killed", killed), nil
}

// preCatchUp waits, before statements are held, until the candidate has
// applied the old primary's current position, again for the newer position
// while a wait was long (preCatchUpClose), bounded by
// switchover.catchup_timeout in all. Running behind at the bound is not an
// error: the catch-up after the fence is bounded on its own.
func (s *switchover) preCatchUp(ctx context.Context) (string, error) {
	pos, err := s.oldPr.WrittenGTIDs(ctx)
	if err != nil {
		return "", err
	}
	if pos == "" {
		return "nothing written yet", nil
	}
	timeout := s.cfg.Switchover.CatchupTimeout.D()
	start := s.t.c.now()
	before := s.appliedGTIDs(ctx)
	var last time.Duration
	rounds := 0
	for {
		rounds++
		waitStart := s.t.c.now()
		res, err := s.candPr.WaitForGTID(ctx, pos, timeout-s.t.c.now().Sub(start))
		if err != nil {
			return "", err
		}
		last = s.t.c.now().Sub(waitStart)
		took := s.t.c.now().Sub(start).Round(100 * time.Microsecond)
		if res != 0 {
			// Behind and applying nothing (a lock or a long statement
			// holds its SQL thread, or the thread stopped): holding
			// writes for it would stall them for the catch-up bound and
			// then roll back.
			if after := s.appliedGTIDs(ctx); before != nil && after != nil && before.Contains(after) && after.Contains(before) {
				return "", fmt.Errorf("%s applied nothing in %s while behind the primary's %s (at %s): its SQL thread is stalled or stopped; "+
					"nothing was held or fenced — let it catch up (or fix it) and retry, or choose another --to", s.cand, took, pos, after)
			}
			return fmt.Sprintf("still behind %s after %s (applying); going on", pos, took), nil
		}
		// The candidate applied what the primary had written when the wait
		// began; what was written meanwhile is still to apply. Wait again
		// until one wait is short (the backlog the hold leaves is small).
		if last <= preCatchUpClose || rounds >= preCatchUpRounds || s.t.c.now().Sub(start) >= timeout {
			return fmt.Sprintf("applied %s before holding (waited %s in %d rounds, the last %s)",
				pos, took, rounds, last.Round(100*time.Microsecond)), nil
		}
		if pos, err = s.oldPr.WrittenGTIDs(ctx); err != nil {
			return "", err
		}
	}
}

// appliedGTIDs is the candidate's executed GTID set, nil when it cannot be
// read.
func (s *switchover) appliedGTIDs(ctx context.Context) gtid.Set {
	p := s.candPr.Probe(ctx)
	if !complete(p) {
		return nil
	}
	set, err := executed(s.cl.Flavor, p)
	if err != nil {
		return nil
	}
	return set
}

// preCatchUpClose and preCatchUpRounds bound the pre-catch-up: it waits
// again for the primary's newer position while a wait took longer than
// preCatchUpClose, at most preCatchUpRounds times (and within
// switchover.catchup_timeout).
const (
	preCatchUpClose  = 50 * time.Millisecond
	preCatchUpRounds = 5
)

// catchUp waits until the candidate has applied every GTID of the fenced
// old primary, bounded by switchover.catchup_timeout, and verifies it.
func (s *switchover) catchUp(ctx context.Context) (string, error) {
	pos, err := s.oldPr.WrittenGTIDs(ctx)
	if err != nil {
		return "", err
	}
	timeout := s.cfg.Switchover.CatchupTimeout.D()
	waitStart := s.t.c.now()
	res, err := s.candPr.WaitForGTID(ctx, pos, timeout)
	waited := s.t.c.now().Sub(waitStart)
	if err != nil {
		return "", err
	}
	if res != 0 {
		return "", fmt.Errorf("%s did not apply %s within switchover.catchup_timeout %s", s.cand, pos, timeout)
	}
	// Verify with a probe: the candidate's executed set contains pos.
	cp := s.candPr.Probe(ctx)
	if !complete(cp) {
		return "", fmt.Errorf("cannot verify %s after the wait: %s", s.cand, cp.Error)
	}
	if pos != "" {
		f, _ := gtid.ParseFlavor(flavorOrDefault(s.cl.Flavor))
		want, err := gtid.Parse(f, pos)
		if err != nil {
			return "", fmt.Errorf("old primary position: %w", err)
		}
		have, err := executed(s.cl.Flavor, cp)
		if err != nil {
			return "", fmt.Errorf("candidate position: %w", err)
		}
		if !have.Contains(want) {
			return "", fmt.Errorf("%s at %s does not contain the old primary's %s", s.cand, have, want)
		}
	}
	return fmt.Sprintf("applied %s (waited %s for it)", orDash(pos), waited.Round(100*time.Microsecond)), nil
}

// promote stops replication on the candidate, forgets its source, makes it
// writable and verifies read_only=0.
func (s *switchover) promote(ctx context.Context) (string, error) {
	s.candStopped = true
	if err := s.candPr.StopReplica(ctx); err != nil {
		return "", err
	}
	s.candReset = true
	if err := s.candPr.ResetReplicaAll(ctx); err != nil {
		return "", err
	}
	s.candWritable = true
	if err := s.candPr.SetReadOnly(ctx, false); err != nil {
		return "", err
	}
	ro, err := s.candPr.ReadOnly(ctx)
	if err != nil {
		return "", err
	}
	if ro {
		return "", errors.New("read_only is still ON after SET GLOBAL read_only=OFF (check READ_ONLY ADMIN)")
	}
	return "replication reset, read_only=OFF", nil
}

// oldPrimarySemiSync reports whether the old primary ran as a semi-sync
// primary at its last probe.
func (s *switchover) oldPrimarySemiSync() bool {
	s.cr.mu.Lock()
	defer s.cr.mu.Unlock()
	if s.cr.state == nil {
		return false
	}
	n := s.cr.state.Node(s.old)
	return n != nil && n.Probe.SemiSync != nil && n.Probe.SemiSync.MasterEnabled
}

// carrySemiSync makes the new primary a semi-sync primary once one of its
// replicas acknowledges, and turns the master switch off on the old
// primary (a replica with it on stalls its own applier under some
// settings).
func (s *switchover) carrySemiSync(ctx context.Context) (string, error) {
	var others []string
	for _, n := range s.cl.Nodes {
		if n.Name != s.cand {
			others = append(others, n.Name)
		}
	}
	detail, err := s.t.semiSyncPrimary(ctx, s.cfg, s.cl, s.cand, others)
	if err != nil {
		return "", err
	}
	if old := s.cl.Node(s.old); old != nil {
		if opr, err := s.t.c.prober(s.cfg, s.cl, old); err == nil {
			if err := opr.DisableSemiSyncPrimary(ctx); err != nil {
				detail += "; master switch still on on " + s.old + ": " + err.Error()
			}
		}
	}
	return detail, nil
}

// repoint makes node n (a replica or the old primary) read-only and
// replicate from the new primary with GTID slave_pos. A node that was not
// replicating (the old primary) first sets gtid_slave_pos from its own
// binlog (checked on MariaDB 10.11). A replica whose replication threads were
// stopped (by an operator, or by an error) is repointed but left stopped, so
// the switchover does not undo the operator's STOP SLAVE.
func (s *switchover) repoint(ctx context.Context, n config.Node) (string, error) {
	pr, err := s.t.c.prober(s.cfg, s.cl, &n)
	if err != nil {
		return "", err
	}
	candNode := s.cl.Node(s.cand)
	host, portStr, err := net.SplitHostPort(candNode.Address)
	if err != nil {
		return "", fmt.Errorf("address of %s: %w", s.cand, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", fmt.Errorf("address of %s: port %q: %w", s.cand, portStr, err)
	}
	p := pr.Probe(ctx)
	if !p.Reachable {
		return "", fmt.Errorf("unreachable (%s): repoint it by hand when it is back", p.Error)
	}
	if err := pr.SetReadOnly(ctx, true); err != nil {
		return "", err
	}
	if err := pr.StopReplica(ctx); err != nil {
		return "", err
	}
	how := "slave_pos"
	if !p.Replicating {
		if err := pr.SetReplicaPosFromBinlog(ctx); err != nil {
			return "", err
		}
		how = "slave_pos from its binlog"
	}
	if err := pr.ChangeSource(ctx, host, port, s.replUser, s.replPwd, probe.GTIDSlavePos); err != nil {
		return "", err
	}
	if p.Replicating && (p.IORunning == "No" || !p.SQLRunning) {
		return fmt.Sprintf("points at %s (%s), read_only=ON; replication left stopped as it was (IO %s, SQL %s): START SLAVE when ready",
			candNode.Address, how, orDash(p.IORunning), yesNo(p.SQLRunning)), nil
	}
	if err := pr.StartReplica(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("replicates from %s (%s), read_only=ON", candNode.Address, how), nil
}

// rollback undoes a switchover that failed before the candidate was
// confirmed writable: the candidate goes back to being a read-only replica
// of the old primary, the old primary becomes writable again (never left
// read-only), and the state returns to stable with the old primary and the
// unchanged epoch.
func (s *switchover) rollback(ctx context.Context, reason string) string {
	s.log.Warn("switchover aborted; rolling back", "reason", reason)
	var problems []string
	if s.candWritable || s.candStopped {
		if err := s.step(ctx, "restore "+s.cand+" as replica", s.restoreCandidate); err != nil {
			problems = append(problems, fmt.Sprintf("%s not restored as a replica: %v", s.cand, err))
		}
	}
	oldWritable := !s.fenced
	if s.fenced {
		err := s.step(ctx, "unfence "+s.old, func(ctx context.Context) (string, error) {
			var err error
			for attempt := 1; attempt <= 3; attempt++ {
				if err = s.oldPr.SetReadOnly(ctx, false); err == nil {
					var ro bool
					if ro, err = s.oldPr.ReadOnly(ctx); err == nil && !ro {
						return "read_only=OFF", nil
					} else if err == nil {
						err = errors.New("read_only still ON")
					}
				}
				sleep(ctx, 200*time.Millisecond)
			}
			return "", err
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("OLD PRIMARY %s IS STILL READ-ONLY (%v): run SET GLOBAL read_only=OFF on it now", s.old, err))
		} else {
			oldWritable = true
		}
	}
	if err := s.step(ctx, "publish phase stable", func(ctx context.Context) (string, error) {
		_, err := s.t.update(ctx, s.cr, func(st *topo.ClusterState) error {
			if st.Primary != s.old || st.Epoch != s.fromEpoch {
				return fmt.Errorf("cluster state changed meanwhile (primary %s, epoch %d)", st.Primary, st.Epoch)
			}
			st.Phase, st.Target = topo.PhaseStable, ""
			return nil
		})
		return fmt.Sprintf("primary %s, epoch %d: proxies release held statements on it", s.old, s.fromEpoch), err
	}); err != nil {
		problems = append(problems, fmt.Sprintf("state not republished: %v", err))
	}
	if s.holdID != "" {
		if err := s.publishProgress(ctx, topo.SwitchStepDone); err != nil {
			s.log.Warn("cannot mark the switchover document done (proxies released on the stable state anyway)", "err", err)
		}
	}
	msg := fmt.Sprintf("switchover to %s aborted: %s", s.cand, reason)
	if s.oldDown != "" && len(problems) == 0 {
		s.req.Message = msg + fmt.Sprintf("; rolled back: epoch %d unchanged, %s is down: the failover policy (failover.mode %s) decides what replaces it",
			s.fromEpoch, s.old, s.cl.Failover.Mode)
		return resultRolledBack
	}
	if oldWritable && len(problems) == 0 {
		s.req.Message = msg + fmt.Sprintf("; rolled back: %s is writable again, epoch %d unchanged", s.old, s.fromEpoch)
		return resultRolledBack
	}
	s.req.Message = msg + "; ROLLBACK INCOMPLETE: " + strings.Join(problems, "; ")
	s.log.Error("switchover rollback incomplete", "problems", strings.Join(problems, "; "))
	return resultFailed
}

// restoreCandidate makes the candidate read-only again and, if its
// replication was stopped or reset, points it back at the old primary.
func (s *switchover) restoreCandidate(ctx context.Context) (string, error) {
	if err := s.candPr.SetReadOnly(ctx, true); err != nil {
		return "", err
	}
	if s.candReset {
		oldNode := s.cl.Node(s.old)
		host, portStr, err := net.SplitHostPort(oldNode.Address)
		if err != nil {
			return "", err
		}
		port, _ := strconv.Atoi(portStr)
		if err := s.candPr.ChangeSource(ctx, host, port, s.replUser, s.replPwd, probe.GTIDSlavePos); err != nil {
			return "", err
		}
	}
	if err := s.candPr.StartReplica(ctx); err != nil {
		return "", err
	}
	return "read_only=ON, replicating from " + s.old, nil
}
