package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
)

// Metrics are the hook collectors; create them once per process with
// NewMetrics and share them between the Dispatchers of successive terms.
type Metrics struct {
	runs *prometheus.CounterVec
}

// NewMetrics creates switchyard_hook_runs_total{hook,result} and registers
// it with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{runs: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_hook_runs_total",
		Help: "Hook attempts by hook and result (ok, failed, timeout; dropped: not attempted, the hook's queue was full).",
	}, []string{"hook", "result"})}
	if reg != nil {
		if err := reg.Register(m.runs); err != nil {
			return nil, fmt.Errorf("hooks: register metrics: %w", err)
		}
	}
	return m, nil
}

// Options configure a Dispatcher.
type Options struct {
	// Metrics count the attempts; nil counts nothing.
	Metrics *Metrics
	// Log receives a line per dropped delivery and, when OnResult is nil,
	// per failed attempt; nil discards.
	Log *slog.Logger
	// OnResult, when set, is called after every attempt (from the hook's
	// worker, or from Veto's caller) and logs what it needs to. It must not
	// block for long.
	OnResult func(Attempt)
	// Sleep waits d or until ctx ends (tests shorten backoffs with it);
	// nil uses a timer.
	Sleep func(ctx context.Context, d time.Duration)
}

// Dispatcher delivers payloads to the configured hooks. Create it with New,
// keep it current with Update, stop it with Close.
type Dispatcher struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	client *http.Client

	mu      sync.Mutex
	closed  bool
	workers map[string]*worker // by hook name (non-veto hooks)
	hooks   []config.Hook
	wg      sync.WaitGroup
}

type worker struct {
	hook   config.Hook
	queue  chan delivery
	cancel context.CancelFunc
}

type delivery struct {
	p    Payload
	body []byte
}

// New starts a worker per non-veto hook of hooks.
func New(hooks []config.Hook, o Options) *Dispatcher {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{o: o, ctx: ctx, cancel: cancel, workers: map[string]*worker{},
		// No client-wide timeout: each attempt's context carries the
		// hook's. Redirects are not followed for a POST anyway.
		client: &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}}}
	d.Update(hooks)
	return d
}

// Update applies a new hook list: workers of removed or changed hooks stop
// (what they had queued is dropped, a running attempt cancelled), new and
// changed ones start. Unchanged hooks keep their queue.
func (d *Dispatcher) Update(hooks []config.Hook) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	keep := map[string]bool{}
	for _, h := range hooks {
		if h.Veto {
			continue
		}
		keep[h.Name] = true
		if w, ok := d.workers[h.Name]; ok {
			if reflect.DeepEqual(w.hook, h) {
				continue
			}
			w.cancel()
		}
		d.start(h)
	}
	for name, w := range d.workers {
		if !keep[name] {
			w.cancel()
			delete(d.workers, name)
		}
	}
	d.hooks = slices.Clone(hooks)
}

// start runs a worker for h (d.mu held).
func (d *Dispatcher) start(h config.Hook) {
	n := h.Queue
	if n <= 0 {
		n = config.DefaultHookQueue
	}
	ctx, cancel := context.WithCancel(d.ctx)
	w := &worker{hook: h, queue: make(chan delivery, n), cancel: cancel}
	d.workers[h.Name] = w
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case dl := <-w.queue:
				d.deliver(ctx, h, dl)
			}
		}
	}()
}

// matches reports whether h fires on p.
func matches(h config.Hook, p Payload) bool {
	return slices.Contains(h.Events, p.Event) && (len(h.Clusters) == 0 || slices.Contains(h.Clusters, p.Cluster))
}

// Notify queues p for every non-veto hook that fires on p.Event for
// p.Cluster. It never blocks: when a hook's queue is full the delivery is
// dropped, logged and counted (result "dropped").
func (d *Dispatcher) Notify(p Payload) {
	if p.Version == 0 {
		p.Version = SchemaVersion
	}
	body, err := json.Marshal(p)
	if err != nil {
		d.o.Log.Error("cannot encode hook payload", "event", p.Event, "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	for name, w := range d.workers {
		if !matches(w.hook, p) {
			continue
		}
		select {
		case w.queue <- delivery{p: p, body: body}:
		default:
			d.count(name, ResultDropped)
			d.o.Log.Warn("hook queue full: delivery dropped", "hook", name, "event", p.Event, "cluster", p.Cluster, "queue", cap(w.queue))
		}
	}
}

// deliver makes up to 1+retries attempts, with a doubling backoff between
// them, until one succeeds.
func (d *Dispatcher) deliver(ctx context.Context, h config.Hook, dl delivery) {
	of := 1 + h.HookRetries()
	backoff := h.Backoff.D()
	if backoff <= 0 {
		backoff = config.DefaultHookBackoff
	}
	for n := 1; n <= of && ctx.Err() == nil; n++ {
		a := attempt(ctx, h, dl.body, dl.p, d.client)
		if ctx.Err() != nil {
			return // the hook was removed or the dispatcher closed mid-attempt
		}
		a.N, a.Of = n, of
		d.record(a)
		if a.OK() {
			return
		}
		if n < of {
			d.o.Sleep(ctx, backoff)
			backoff *= 2
		}
	}
}

func (d *Dispatcher) record(a Attempt) {
	d.count(a.Hook, a.Result)
	if !a.OK() && d.o.OnResult == nil { // else the receiver of the result logs it
		d.o.Log.Warn("hook failed", "hook", a.Hook, "event", a.Event, "cluster", a.Cluster, "result", a.Result,
			"attempt", a.N, "of", a.Of, "exit_code", a.ExitCode, "status", a.Status, "took", a.Duration, "err", a.Err)
	}
	if d.o.OnResult != nil {
		d.o.OnResult(a)
	}
}

func (d *Dispatcher) count(hook, result string) {
	if d.o.Metrics != nil {
		d.o.Metrics.runs.WithLabelValues(hook, result).Inc()
	}
}

// VetoError is Veto's refusal: the hook that failed and what it said.
type VetoError struct {
	Attempt Attempt
}

func (e *VetoError) Error() string {
	a := e.Attempt
	msg := fmt.Sprintf("refused by veto hook %q", a.Hook)
	switch {
	case a.Result == ResultTimeout:
		msg += ": " + a.Err
	case a.Status != 0:
		msg += fmt.Sprintf(": HTTP %d", a.Status)
	case a.ExitCode > 0:
		msg += fmt.Sprintf(": exit status %d", a.ExitCode)
	case a.Err != "":
		msg += ": " + a.Err
	}
	if out := strings.TrimSpace(a.Output); out != "" {
		msg += ": " + out
	}
	return msg
}

// Veto runs, one after the other, every veto hook that fires on p.Event for
// p.Cluster, once each (no retry), each bounded by its timeout. It returns
// nil when all succeed (or there are none), else a *VetoError for the first
// that failed; the caller refuses its action with it. Each run is counted
// and passed to OnResult like a queued one.
func (d *Dispatcher) Veto(ctx context.Context, p Payload) error {
	if p.Version == 0 {
		p.Version = SchemaVersion
	}
	d.mu.Lock()
	var gates []config.Hook
	for _, h := range d.hooks {
		if h.Veto && matches(h, p) {
			gates = append(gates, h)
		}
	}
	d.mu.Unlock()
	if len(gates) == 0 {
		return nil
	}
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode hook payload: %w", err)
	}
	for _, h := range gates {
		a := attempt(ctx, h, body, p, d.client)
		a.N, a.Of = 1, 1
		d.record(a)
		if !a.OK() {
			if ctx.Err() != nil {
				return fmt.Errorf("veto hook %q: %w", h.Name, ctx.Err())
			}
			return &VetoError{Attempt: a}
		}
	}
	return nil
}

// IsVeto reports whether err is (or wraps) a veto hook's refusal.
func IsVeto(err error) bool {
	var ve *VetoError
	return errors.As(err, &ve)
}

// Close stops every worker: queued deliveries are dropped, running
// attempts cancelled (a command is killed). It returns once the workers
// have exited.
func (d *Dispatcher) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	d.client.CloseIdleConnections()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Wants reports whether any hook (veto or not) fires on event for cluster
// among hooks; callers use it to skip building a payload nobody receives.
func Wants(hooks []config.Hook, event, cluster string) bool {
	p := Payload{Event: event, Cluster: cluster}
	for _, h := range hooks {
		if matches(h, p) {
			return true
		}
	}
	return false
}
