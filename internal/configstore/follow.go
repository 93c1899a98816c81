package configstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// ReportTTL is the lease TTL of a consumer's report in the store.
const ReportTTL = 10 * time.Second

// Backoff bounds for re-watching and re-registering after store errors.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// FollowOptions configure Follow.
type FollowOptions struct {
	// Name is the consumer's role, e.g. "proxy" or "controller": the
	// `consumer` label of the metrics and a log attribute. Required.
	Name string
	// ID identifies this consumer process in its report
	// (topo.Keys.ConfigConsumer(Name, ID)) and in status. Default: Name.
	ID string
	// OnApply hands a revision that passed every check to the consumer
	// (e.g. proxy.Server.SetConfig). It is called from one goroutine, one
	// revision at a time. An error refuses the revision like a failed check:
	// the alarm is raised and the last-known-good config is kept. Required.
	OnApply func(cfg *config.Config, rev int64) error
	// OnStatus, when set, is called after every change of the applied
	// revision or of the alarm (e.g. to copy them into the proxy's
	// registration). It must not block.
	OnStatus func(Status)
	// Log receives a line per applied or refused revision. Default: discard.
	Log *slog.Logger
	// Registry, when set, receives switchyard_config_alarm,
	// switchyard_config_rejected_revisions_total,
	// switchyard_config_integrity_failures_total and
	// switchyard_config_applied_revision, labelled consumer=Name. Several
	// Followers may share a registry if their Names differ.
	Registry prometheus.Registerer
	// Initial is the config the consumer already runs (from the file or
	// from Current), the first last-known-good. Nil: the first valid
	// revision is applied without the destructive-change check.
	Initial *config.Config
	// InitialRev is Initial's revision (0 if unknown).
	InitialRev int64
	// Live supplies the running state for the destructive-change check.
	// Default: ReadLive on the store; if that fails the check runs with no
	// live state (the empty and route-fraction rules still apply).
	Live func(ctx context.Context) (config.Live, error)
	// Report writes a Status document under topo.Keys.ConfigConsumer(Name, ID),
	// bound to a lease of ReportTTL, so `switchyard status` shows the
	// revision every consumer applied and its alarm.
	Report bool
	// Now is the clock for alarm and report times. Default time.Now.
	Now func() time.Time
	// PendingRestart, when set, says which changes from Initial (the config
	// the process started with) to an applied revision the process does not
	// apply until it restarts (e.g. config.Diff.RestartOnly): they are kept
	// in Status.PendingRestart and logged once per revision.
	PendingRestart func(started, applied *config.Config) []string
}

// Alarm is a revision a consumer refused while it keeps serving its
// last-known-good config.
type Alarm struct {
	// Version is the store version (etcd mod revision) of the refused value.
	Version topo.Version `json:"version"`
	// Rev is the revision number the value claims; 0 when it has none
	// (empty value, garbage, deleted key).
	Rev int64 `json:"rev,omitempty"`
	// Reason says what is wrong with it.
	Reason string `json:"reason"`
	// Since is when the alarm was raised.
	Since time.Time `json:"since"`
}

// String formats as "etcd version V (revision R): reason".
func (a *Alarm) String() string {
	if a == nil {
		return ""
	}
	if a.Rev > 0 {
		return fmt.Sprintf("etcd version %d (revision %d): %s", a.Version, a.Rev, a.Reason)
	}
	return fmt.Sprintf("etcd version %d: %s", a.Version, a.Reason)
}

// Status is a consumer's view of the config: the document of its report in
// the store.
type Status struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// AppliedRev is the revision the consumer serves (0: its initial config,
	// of unknown revision).
	AppliedRev int64 `json:"applied_rev"`
	// AppliedSHA256 is the content hash of the config it serves.
	AppliedSHA256 string `json:"applied_sha256,omitempty"`
	// Alarm is set while the current revision is refused.
	Alarm *Alarm `json:"alarm,omitempty"`
	// Rejected counts the revisions refused since start.
	Rejected int64 `json:"rejected"`
	// PendingRestart lists the changes of the applied revision that this
	// process applies only when it restarts (listener addresses, the admin
	// address, the etcd section); empty when none.
	PendingRestart []string `json:"pending_restart,omitempty"`
	// UpdatedAt is when the status last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// Follower keeps one consumer's config current from the store; see Follow.
type Follower struct {
	st   topo.Store
	keys topo.Keys
	o    FollowOptions
	log  *slog.Logger
	now  func() time.Time
	m    *followMetrics

	mu      sync.Mutex
	lkg     *config.Config
	status  Status
	changed chan struct{} // signals the reporter, capacity 1
	done    chan struct{}
}

// Follow makes a consumer follow the current config revision: it reads the
// current value before returning, then watches topo.Keys.Config() until ctx
// ends. Every value it sees is decoded and checked (Decode: a revision
// document whose YAML matches its hash, parses and validates) and compared
// with the last-known-good config by the destructive-change guard (unless
// the revision records an override); a value that passes is handed to
// OnApply and becomes the last-known-good. A value that fails (empty,
// garbage, invalid, failing its integrity check (an ERROR log line and
// switchyard_config_integrity_failures_total besides the alarm), destructive,
// deleted key, or refused by OnApply) is not
// applied: the consumer keeps its last-known-good config, the alarm is raised
// (Alarm, the switchyard_config_alarm gauge, a warning log line naming the
// etcd version) and it keeps watching; the next revision that passes clears
// the alarm. Watch errors are retried with backoff (100 ms to 5 s). It fails
// only on invalid options.
func Follow(ctx context.Context, st topo.Store, keys topo.Keys, o FollowOptions) (*Follower, error) {
	if st == nil || o.OnApply == nil || o.Name == "" {
		return nil, errors.New("configstore: Follow needs a store, FollowOptions.Name and FollowOptions.OnApply")
	}
	f := &Follower{st: st, keys: keys, o: o, log: o.Log, now: o.Now, changed: make(chan struct{}, 1), done: make(chan struct{})}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.log = f.log.With("consumer", o.Name)
	if f.now == nil {
		f.now = time.Now
	}
	if f.o.ID == "" {
		f.o.ID = o.Name
	}
	m, err := newFollowMetrics(o.Registry, o.Name)
	if err != nil {
		return nil, err
	}
	f.m = m
	f.lkg = o.Initial
	f.status = Status{ID: f.o.ID, Name: o.Name, AppliedRev: o.InitialRev, UpdatedAt: f.now()}
	if o.Initial != nil {
		if data, err := o.Initial.Marshal(); err == nil {
			f.status.AppliedSHA256 = Hash(data)
		}
	}
	f.m.applied.Set(float64(o.InitialRev))

	// The first watch runs before returning, so the caller sees the current
	// revision applied (or the alarm raised) when Follow returns.
	kvs, events, werr := st.Watch(ctx, keys.Config())
	if werr == nil {
		f.initial(ctx, kvs)
	} else if ctx.Err() == nil {
		f.log.Warn("watching the config failed; retrying", "key", keys.Config(), "err", werr)
	}
	var wg sync.WaitGroup
	if o.Report {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.report(ctx)
		}()
	}
	go func() {
		defer close(f.done)
		f.watch(ctx, events, werr == nil)
		wg.Wait()
	}()
	return f, nil
}

// Done is closed when the follower has stopped (after ctx ended).
func (f *Follower) Done() <-chan struct{} { return f.done }

// Alarm returns the current alarm, or nil when the consumer serves the
// current revision.
func (f *Follower) Alarm() *Alarm {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status.Alarm == nil {
		return nil
	}
	a := *f.status.Alarm
	return &a
}

// AppliedRev returns the revision the consumer serves (0: its initial
// config, of unknown revision).
func (f *Follower) AppliedRev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status.AppliedRev
}

// Config returns the last-known-good config (the one last applied).
func (f *Follower) Config() *config.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lkg
}

// Status returns the consumer's applied revision, alarm and counters.
func (f *Follower) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.status
	if s.Alarm != nil {
		a := *s.Alarm
		s.Alarm = &a
	}
	return s
}

func (f *Follower) initial(ctx context.Context, kvs []topo.KV) {
	for _, kv := range kvs {
		if kv.Key == f.keys.Config() {
			f.consider(ctx, kv, false)
			return
		}
	}
	if f.AppliedRev() > 0 {
		f.reject(0, 0, "the current config key "+f.keys.Config()+" does not exist")
	}
}

// watch consumes events, re-watching with backoff after errors.
func (f *Follower) watch(ctx context.Context, events <-chan topo.WatchEvent, ok bool) {
	backoff := backoffMin
	for ctx.Err() == nil {
		if !ok {
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, backoffMax)
			var kvs []topo.KV
			var err error
			kvs, events, err = f.st.Watch(ctx, f.keys.Config())
			if err != nil {
				if ctx.Err() == nil {
					f.log.Warn("watching the config failed; retrying", "key", f.keys.Config(), "err", err, "retry_in", backoff)
				}
				continue
			}
			ok = true
			backoff = backoffMin
			f.initial(ctx, kvs)
		}
		for ev := range events {
			if ev.Err != nil {
				if ctx.Err() == nil {
					f.log.Warn("config watch ended; watching again", "err", ev.Err)
				}
				break
			}
			if ev.KV.Key != f.keys.Config() {
				continue
			}
			f.consider(ctx, ev.KV, ev.Type == topo.EventDelete)
		}
		ok = false
	}
}

// consider checks one value of the current key and applies it or raises
// the alarm.
func (f *Follower) consider(ctx context.Context, kv topo.KV, deleted bool) {
	if deleted {
		f.reject(kv.Version, 0, "the current config key was deleted")
		return
	}
	rev, cfg, err := Decode(kv.Value)
	if err != nil {
		var n int64
		if rev != nil {
			n = rev.Rev
		}
		if errors.Is(err, topo.ErrIntegrity) {
			// Not written by a holder of the integrity key: a forgery
			// (or a writer without the key), never applied.
			f.m.integrity.Inc()
			f.log.Error("config revision in the store fails its integrity check; not applied, keeping the last-known-good config",
				"version", int64(kv.Version), "rev", n, "err", err)
		}
		f.reject(kv.Version, n, err.Error())
		return
	}
	f.mu.Lock()
	lkg, appliedRev, appliedHash := f.lkg, f.status.AppliedRev, f.status.AppliedSHA256
	f.mu.Unlock()

	if topo.Integrity() != nil {
		// Its MAC verifies but it is not newer than the revision applied
		// (or than the history's newest, for a consumer that just started):
		// an old signed revision written back by hand (a replay). `config
		// rollback` writes old content under a new, higher number.
		why := ""
		if appliedRev > 0 && (rev.Rev < appliedRev || rev.Rev == appliedRev && rev.SHA256 != appliedHash) {
			why = fmt.Sprintf("%v: replayed revision %d is not newer than the applied revision %d", topo.ErrIntegrity, rev.Rev, appliedRev)
		} else if s, err := Load(ctx, f.st, f.keys); err == nil && s.Version == kv.Version && s.CurrentErr != nil && errors.Is(s.CurrentErr, topo.ErrIntegrity) {
			why = s.CurrentErr.Error()
		}
		if why != "" {
			f.m.integrity.Inc()
			f.log.Error("config revision in the store is not newer than the applied one (a replayed signed revision); not applied, keeping the last-known-good config",
				"version", int64(kv.Version), "rev", rev.Rev, "applied_rev", appliedRev, "err", why)
			f.reject(kv.Version, rev.Rev, why)
			return
		}
	}
	if rev.SHA256 == appliedHash && lkg != nil {
		// Same content (e.g. a rollback to what this consumer kept serving):
		// nothing to hand over.
		f.accept(kv.Version, rev, lkg, appliedRev != rev.Rev)
		return
	}
	if !rev.GuardOverridden {
		live := config.Live{}
		if lkg != nil {
			live = f.liveState(ctx)
		}
		if vs := config.Guard(lkg, cfg, live); len(vs) > 0 {
			reason := fmt.Sprintf("destructive change against revision %d refused:", appliedRev)
			for _, v := range vs {
				reason += " " + v.String() + ";"
			}
			f.reject(kv.Version, rev.Rev, reason[:len(reason)-1])
			return
		}
	}
	if err := f.o.OnApply(cfg, rev.Rev); err != nil {
		f.reject(kv.Version, rev.Rev, "the consumer refused it: "+err.Error())
		return
	}
	f.accept(kv.Version, rev, cfg, true)
}

func (f *Follower) liveState(ctx context.Context) config.Live {
	get := f.o.Live
	if get == nil {
		get = func(ctx context.Context) (config.Live, error) { return ReadLive(ctx, f.st, f.keys) }
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	live, err := get(cctx)
	if err != nil {
		f.log.Warn("cannot read the live state for the config guard; checking without it", "err", err)
		return config.Live{}
	}
	return live
}

func (f *Follower) accept(version topo.Version, rev *Revision, cfg *config.Config, log bool) {
	f.mu.Lock()
	cleared := f.status.Alarm
	f.lkg = cfg
	f.status.AppliedRev = rev.Rev
	f.status.AppliedSHA256 = rev.SHA256
	f.status.Alarm = nil
	f.status.UpdatedAt = f.now()
	var pending []string
	if f.o.PendingRestart != nil && f.o.Initial != nil {
		pending = f.o.PendingRestart(f.o.Initial, cfg)
	}
	f.status.PendingRestart = pending
	st := f.status
	f.mu.Unlock()
	if len(pending) > 0 && log {
		f.log.Warn("config revision applied, but some changes wait for a restart of this process", "rev", rev.Rev, "pending_restart", pending)
	}
	f.m.alarm.Set(0)
	f.m.applied.Set(float64(rev.Rev))
	if log {
		f.log.Info("config revision applied", "rev", rev.Rev, "version", int64(version), "sha256", rev.ShortHash(), "author", rev.Author, "reason", rev.Reason, "guard_overridden", rev.GuardOverridden)
	}
	if cleared != nil {
		f.log.Info("config alarm cleared", "rev", rev.Rev, "version", int64(version), "was", cleared.String())
	}
	f.notify(st)
}

func (f *Follower) reject(version topo.Version, rev int64, reason string) {
	f.mu.Lock()
	a := &Alarm{Version: version, Rev: rev, Reason: reason, Since: f.now()}
	f.status.Alarm = a
	f.status.Rejected++
	f.status.UpdatedAt = a.Since
	applied := f.status.AppliedRev
	st := f.status
	f.mu.Unlock()
	f.m.alarm.Set(1)
	f.m.rejected.Inc()
	f.log.Warn("config revision refused; keeping the last-known-good config", "version", int64(version), "rev", rev, "applied_rev", applied, "reason", reason)
	f.notify(st)
}

func (f *Follower) notify(st Status) {
	if f.o.OnStatus != nil {
		f.o.OnStatus(st)
	}
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// report keeps the consumer's Status registered under its lease.
func (f *Follower) report(ctx context.Context) {
	key := f.keys.ConfigConsumer(f.o.Name, f.o.ID)
	backoff := backoffMin
	for ctx.Err() == nil {
		val, _ := json.Marshal(f.Status())
		lease, err := f.st.Register(ctx, key, val, ReportTTL)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.log.Warn("registering the config report failed; retrying", "key", key, "err", err, "retry_in", backoff)
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, backoffMax)
			continue
		}
		backoff = backoffMin
		if f.keepReport(ctx, lease) {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := lease.Revoke(rctx); err != nil {
				f.log.Warn("revoking the config report failed; it expires with its lease", "err", err)
			}
			cancel()
			return
		}
		f.log.Warn("config report lease lost; registering again", "key", key)
	}
}

// keepReport rewrites the report on every status change; true when ctx
// ended, false when the lease was lost.
func (f *Follower) keepReport(ctx context.Context, lease topo.Lease) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case <-lease.Done():
			return false
		case <-f.changed:
			val, _ := json.Marshal(f.Status())
			if err := lease.Update(ctx, val); err != nil {
				if ctx.Err() != nil {
					return true
				}
				f.log.Warn("updating the config report failed; retrying", "err", err)
				go func() {
					if sleepCtx(ctx, time.Second) {
						select {
						case f.changed <- struct{}{}:
						default:
						}
					}
				}()
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
