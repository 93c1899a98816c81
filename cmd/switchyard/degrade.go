package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// A process that serves (up, proxy, controller) never exits on its own
// because one of its parts failed: the proxy's listeners are what the
// applications depend on, and the proxy keeps routing from its last
// snapshot while the topology store is gone (internal/topo/FAILSAFE.md; an
// embedded etcd that stopped is a store that is unreachable). A part that
// fails is logged at error level, counted in
// switchyard_component_failures_total, shown by /readyz (503 with the
// reason; /healthz stays 200 while the listeners serve) and restarted with
// a backoff of 1 s doubling to 30 s. Only SIGINT/SIGTERM end the process.

// raiseNoFile raises the RLIMIT_NOFILE soft limit to the hard limit and
// returns the resulting soft limit: the descriptor budget of the process.
// (Go's runtime already raises it for the process itself since Go 1.19;
// doing it here makes the budget explicit and logged.) 0 means unknown.
func raiseNoFile(log *slog.Logger) int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot read the descriptor limit (RLIMIT_NOFILE)", "err", err)
		return 0
	}
	if rl.Cur < rl.Max {
		old := rl.Cur
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			log.Warn("cannot raise the descriptor limit (RLIMIT_NOFILE) to its hard limit", "soft", old, "hard", rl.Max, "err", err)
			rl.Cur = old
		}
	}
	if rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}

// health is what /readyz reports beyond the routing state: the parts of
// the process that are down now, by name, with the reason.
type health struct {
	mu       sync.Mutex
	down     map[string]string
	failures *prometheus.CounterVec
	up       *prometheus.GaugeVec
	store    prometheus.Gauge
}

// healthParts are the parts of the process /readyz reports, in order.
var healthParts = []string{"embedded_etcd", "store", "controller", "proxy_follow"}

func newHealth(reg prometheus.Registerer) *health {
	h := &health{down: map[string]string{}, failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_component_failures_total",
		Help: "Failures of a part of the process (embedded_etcd, store, controller, proxy_follow) that the process survived; the part is restarted or retried.",
	}, []string{"component"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_component_up",
			Help: "0 while a part of the process (embedded_etcd, store, controller, proxy_follow) is down (what /readyz reports), else 1.",
		}, []string{"component"}),
		store: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_store_reachable",
			Help: "1 when this process's last read of the topology store (etcd, once a second) succeeded within 2 s, else 0.",
		}),
	}
	for _, p := range healthParts {
		h.up.WithLabelValues(p).Set(1)
	}
	h.store.Set(1)
	reg.MustRegister(h.failures, h.up, h.store)
	return h
}

// set marks part down with reason ("" marks it up again). It reports
// whether the state changed.
func (h *health) set(part, reason string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, was := h.down[part]
	if reason == "" {
		delete(h.down, part)
		h.up.WithLabelValues(part).Set(1)
		return was
	}
	h.down[part] = reason
	h.up.WithLabelValues(part).Set(0)
	return !was || old != reason
}

// restartedPrefix marks the embedded etcd's /readyz reason after a restart,
// until the store answers (watchStore).
const restartedPrefix = "restarted after: "

// clearRestarted clears the embedded etcd's reason once the store answers
// again, if it is the after-restart one.
func (h *health) clearRestarted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.down["embedded_etcd"]; ok && strings.HasPrefix(r, restartedPrefix) {
		delete(h.down, "embedded_etcd")
	}
}

// err returns the parts that are down, or nil.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, part := range healthParts {
		if r, ok := h.down[part]; ok {
			errs = append(errs, fmt.Errorf("%s: %s", part, r))
		}
	}
	return errors.Join(errs...)
}

// keepRunning runs part until ctx ends; when run returns earlier (with or
// without an error) the failure is logged, counted and shown by /readyz,
// and run starts again after a backoff (1 s doubling to 30 s).
func keepRunning(ctx context.Context, log *slog.Logger, h *health, part string, run func(context.Context) error) {
	backoff := time.Second
	for {
		started := time.Now()
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		h.failures.WithLabelValues(part).Inc()
		h.set(part, err.Error())
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		log.Error("part of the process failed; the listeners keep serving and it is restarted", "component", part, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
		h.set(part, "")
	}
}

// watchStore reads the config key every second and marks the store down on
// /readyz while that fails; proxies keep routing from their last snapshot
// meanwhile (failsafe).
func watchStore(ctx context.Context, log *slog.Logger, h *health, st topo.Store, key string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var since time.Time
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := st.Get(rctx, key)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, topo.ErrNotFound) {
			err = nil
		}
		if err == nil {
			h.clearRestarted()
			h.store.Set(1)
		} else {
			h.store.Set(0)
		}
		switch {
		case err != nil && since.IsZero():
			since = time.Now()
			h.failures.WithLabelValues("store").Inc()
			h.set("store", "unreachable: "+err.Error())
			log.Error("topology store unreachable; the proxy keeps routing from its last snapshot", "err", err)
		case err != nil:
			h.set("store", fmt.Sprintf("unreachable for %s: %v", time.Since(since).Round(time.Second), err))
		case !since.IsZero():
			log.Warn("topology store reachable again", "after", time.Since(since).Round(time.Millisecond))
			since = time.Time{}
			h.set("store", "")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// embeddedEtcd owns the embedded etcd of `up` and restarts it when it
// fails or stops on its own.
//
// Decision: restart. An operator expects `up` to keep serving, retry the
// store and say so loudly; the embedded etcd is a single node whose whole
// state is its data directory, so a new server on the same directory is
// the same store (the client reconnects to the same address). The old one
// is closed first (at most 10 s; etcd holds file locks on its WAL and
// database); a restart that fails (the locks or ports still held, the disk
// full, descriptors exhausted) is retried with a backoff of 1 s doubling to
// 30 s, each failure logged at error level and /readyz naming the reason.
type embeddedEtcd struct {
	opts topo.EmbeddedOptions
	log  *slog.Logger
	h    *health
	cur  atomic.Pointer[topo.Embedded]
	done chan struct{}
}

func newEmbeddedEtcd(e *topo.Embedded, opts topo.EmbeddedOptions, log *slog.Logger, h *health) *embeddedEtcd {
	s := &embeddedEtcd{opts: opts, log: log, h: h, done: make(chan struct{})}
	s.cur.Store(e)
	return s
}

// Current returns the running server (the last one started).
func (s *embeddedEtcd) Current() *topo.Embedded { return s.cur.Load() }

// run watches the server until ctx ends, restarting it when it fails.
func (s *embeddedEtcd) run(ctx context.Context) {
	defer close(s.done)
	for {
		e := s.cur.Load()
		var reason string
		select {
		case <-ctx.Done():
			return
		case <-e.Failed():
			reason = e.FailErr().Error()
		case err, ok := <-e.Err():
			reason = "embedded etcd stopped"
			if ok && err != nil {
				reason = fmt.Sprintf("embedded etcd: %v", err)
			}
		case <-e.Stopped():
			reason = "embedded etcd stopped"
		}
		if ctx.Err() != nil {
			return
		}
		s.h.failures.WithLabelValues("embedded_etcd").Inc()
		s.h.set("embedded_etcd", reason+" (restarting)")
		s.log.Error("embedded etcd failed; the proxy keeps routing from its last snapshot and the store is restarted", "err", reason, "data_dir", s.opts.DataDir)
		closed := make(chan struct{})
		go func() { e.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			s.log.Error("embedded etcd did not stop within 10s; starting a new one anyway (it may find its files or ports still held)")
		}
		backoff := time.Second
		for {
			n, err := topo.StartEmbedded(s.opts)
			if err == nil {
				s.cur.Store(n)
				// Named on /readyz until the store answers again
				// (watchStore clears it), so the cause stays visible for
				// the whole outage, not only while the server restarts.
				s.h.set("embedded_etcd", restartedPrefix+reason+"; waiting for the store to answer")
				s.log.Warn("embedded etcd restarted", "endpoints", n.Endpoints(), "data_dir", s.opts.DataDir)
				break
			}
			s.h.set("embedded_etcd", fmt.Sprintf("%s; restart failed: %v (retrying in %s)", reason, err, backoff))
			s.log.Error("embedded etcd restart failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

// Close waits for run to end (after its ctx) and stops the current server.
func (s *embeddedEtcd) Close() {
	<-s.done
	s.cur.Load().Close()
}

// retryStore runs fn until it succeeds, ctx ends, or it fails for a reason
// waiting does not mend (credentials, certificates, a refused config): a
// store that does not answer — no quorum, a partition, etcd still starting
// — is retried with a backoff of 1 s doubling to 10 s, each failure logged
// at error level and /readyz (once the admin endpoint is up) naming it.
func retryStore(ctx context.Context, log *slog.Logger, h *health, what string, fn func() error) error {
	backoff := time.Second
	for {
		err := fn()
		if err == nil {
			h.set("store", "")
			return nil
		}
		if ctx.Err() != nil || !storeUnanswered(err) {
			return err
		}
		h.set("store", "unreachable at start: "+err.Error())
		log.Error("topology store does not answer at start; waiting for it (the process starts once it answers)", "step", what, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// storeUnanswered reports whether err is the store not answering (a
// timeout or an unavailable endpoint), not a refusal.
func storeUnanswered(err error) bool {
	if errors.Is(err, topo.ErrAuth) || errors.Is(err, topo.ErrIntegrity) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"did not answer within", "context deadline exceeded", "connection refused", "no leader", "request timed out", "Unavailable"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
