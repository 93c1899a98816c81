package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/hooks"
	"github.com/switchyard-db/switchyard/internal/logx"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Options configure a Controller.
type Options struct {
	// Config is the validated configuration (clusters, credentials, probe
	// interval and timeout, read-routing limits, switchover timeouts).
	Config *config.Config
	// Store is the topology store; Keys its key layout.
	Store topo.Store
	Keys  topo.Keys
	// ID names this controller in the election and its registration; unique
	// among the controllers sharing a store (e.g. hostname-pid).
	ID string
	// Log receives the controller's logs; nil discards them.
	Log *slog.Logger
	// Registry receives the controller's metrics; nil leaves them
	// unregistered.
	Registry prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StepHook, when set, runs before each step of a switchover or
	// failover this controller runs, with the step's name as events show
	// it ("fence node1", "promote node2", ...), in the goroutine that runs
	// the step: fault-injection tests stall a node or stop the leader at a
	// chosen step. nil in production.
	StepHook func(ctx context.Context, step string)
}

// Registration is what a running controller writes, under a lease, at
// Keys.Controller(ID).
type Registration struct {
	ID string `json:"id"`
	// Leader is true while this controller is the elected leader.
	Leader    bool      `json:"leader"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// registrationTTL is how long a dead controller's registration outlives it.
const registrationTTL = 10 * time.Second

// Controller probes the clusters and, while elected leader, publishes their
// state and runs operator requests. Create it with New and drive it with Run.
type Controller struct {
	store   topo.Store
	keys    topo.Keys
	id      string
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics
	// hookMetrics count hook attempts across terms (package hooks).
	hookMetrics *hooks.Metrics

	cfgMu sync.Mutex
	cfg   *config.Config

	leader atomic.Bool

	probersMu sync.Mutex
	probers   map[string]*nodeProber // by cluster + "/" + node

	// stepHook, when set (tests only), runs before each failover and
	// switchover step.
	stepHook func(ctx context.Context, step string)

	// handled is the memory of the operator requests handled within
	// RequestMaxAge, across terms (replay.go).
	handled handledSet

	// drainedGood is the last drained nodes document that verified, by
	// cluster; drainedBad the version of the refused one already logged.
	drainedMu   sync.Mutex
	drainedGood map[string]topo.DrainedNodes
	drainedBad  map[string]topo.Version

	// agg aggregates the warnings every round repeats while a condition
	// lasts (warnRepeated).
	agg *logx.Aggregator
}

// warnRepeated logs a warning through the aggregating logger: the first at
// once, then one summary per interval with the count (logx.Aggregator).
// key adds what the line is about (cluster, node) to msg as its key.
func (c *Controller) warnRepeated(key, msg string, args ...any) {
	if c.agg == nil {
		c.log.Warn(msg, args...)
		return
	}
	c.agg.Warn(msg+"|"+key, msg, args...)
}

// New checks the options and returns a controller. It fails when a required
// option is missing, the monitor password cannot be resolved, or the metrics
// cannot be registered.
func New(o Options) (*Controller, error) {
	switch {
	case o.Config == nil:
		return nil, errors.New("controller: Options.Config is required")
	case o.Store == nil:
		return nil, errors.New("controller: Options.Store is required")
	case o.ID == "":
		return nil, errors.New("controller: Options.ID is required (unique per controller, e.g. hostname-pid)")
	}
	if _, err := o.Config.Credentials.Monitor.Resolve(); err != nil {
		return nil, fmt.Errorf("controller: credentials.monitor: %w", err)
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	hm, err := hooks.NewMetrics(o.Registry)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	log = log.With("component", "controller", "controller_id", o.ID)
	return &Controller{
		store:       o.Store,
		keys:        o.Keys,
		id:          o.ID,
		log:         log,
		now:         now,
		stepHook:    o.StepHook,
		metrics:     m,
		hookMetrics: hm,
		cfg:         o.Config,
		probers:     map[string]*nodeProber{},
		agg:         logx.New(log, logx.Options{}),
	}, nil
}

// IsLeader reports whether this controller currently holds leadership.
func (c *Controller) IsLeader() bool { return c.leader.Load() }

// SetConfig replaces the configuration (nodes added or removed, limits,
// intervals). It takes effect at the next probe round; a switchover already
// running keeps the config it started with. A config whose monitor password
// cannot be resolved is refused (logged) and the previous one kept.
func (c *Controller) SetConfig(cfg *config.Config) {
	if cfg == nil {
		return
	}
	if _, err := cfg.Credentials.Monitor.Resolve(); err != nil {
		c.log.Error("config refused: keeping the previous one", "field", "credentials.monitor", "err", err)
		return
	}
	c.cfgMu.Lock()
	c.cfg = cfg
	c.cfgMu.Unlock()
	c.log.Info("config updated", "clusters", len(cfg.Clusters))
}

func (c *Controller) config() *config.Config {
	c.cfgMu.Lock()
	defer c.cfgMu.Unlock()
	return c.cfg
}

// Run registers the controller, campaigns for leadership and, while leader,
// probes, publishes and serves requests. When leadership is lost it stops
// acting and campaigns again. It returns nil when ctx ends (after resigning
// and removing its registration), or an error only if the store is closed.
func (c *Controller) Run(ctx context.Context) error {
	defer c.agg.Close() // the summaries of what was held back
	defer c.closeProbers()
	started := c.now()
	reg := newRegistrar(c, started)
	go reg.run(ctx)
	defer reg.stop()

	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		c.log.Debug("campaigning for leadership", "election", c.keys.Election())
		leader, err := c.store.Campaign(ctx, c.keys.Election(), c.id)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, topo.ErrClosed) {
				return fmt.Errorf("controller: campaign: %w", err)
			}
			c.warnRepeated("", "campaign failed; retrying", "err", err, "retry_in", backoff)
			sleep(ctx, backoff)
			// At most a second: leadership returns soon after the store
			// does (each attempt is bounded by the store's own timeouts).
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		c.lead(ctx, leader, reg)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := leader.Resign(rctx); err != nil {
				c.log.Warn("resign failed; leadership ends when the session expires", "err", err)
			}
			cancel()
		}
	}
	return nil
}

// lead does the leader's work until leadership is lost or ctx ends.
func (c *Controller) lead(ctx context.Context, leader topo.Leader, reg *registrar) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-leader.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	c.leader.Store(true)
	c.metrics.leader.Set(1)
	reg.setLeader(true)
	c.log.Info("became leader")
	defer func() {
		c.leader.Store(false)
		c.metrics.leader.Set(0)
		c.metrics.forgetClusters()
		reg.setLeader(false)
		if ctx.Err() == nil {
			c.log.Warn("leadership lost; stopped acting, campaigning again")
		} else {
			c.log.Info("stopping leader work")
		}
	}()
	t := newTerm(c, leader)
	t.run(lctx)
}

// stopWriteTimeout bounds a store write made after the term's context
// ended (an event that must still be recorded): with etcd gone, an
// unbounded write would keep the controller from stopping.
const stopWriteTimeout = 5 * time.Second

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// registrar keeps this controller's leased registration up to date.
type registrar struct {
	c       *Controller
	started time.Time
	changed chan struct{}
	done    chan struct{}

	mu     sync.Mutex
	leader bool
}

func newRegistrar(c *Controller, started time.Time) *registrar {
	return &registrar{c: c, started: started, changed: make(chan struct{}, 1), done: make(chan struct{})}
}

func (r *registrar) setLeader(v bool) {
	r.mu.Lock()
	r.leader = v
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *registrar) value() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(Registration{ID: r.c.id, Leader: r.leader, StartedAt: r.started, UpdatedAt: r.c.now()})
	return b
}

// run registers (retrying while the store is unavailable), re-registers when
// the lease is lost, updates the value on leadership changes and every
// registrationTTL, and revokes the registration when ctx ends.
func (r *registrar) run(ctx context.Context) {
	defer close(r.done)
	key := r.c.keys.Controller(r.c.id)
	// The value is written again every registrationTTL as well: a key
	// deleted by hand (or a store wiped) while its lease lives comes back,
	// so that status keeps showing a standby controller.
	refresh := time.NewTicker(registrationTTL)
	defer refresh.Stop()
	for ctx.Err() == nil {
		lease, err := r.c.store.Register(ctx, key, r.value(), registrationTTL)
		if err != nil {
			if ctx.Err() == nil {
				r.c.warnRepeated(key, "controller registration failed; retrying", "key", key, "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
	live:
		for {
			select {
			case <-ctx.Done():
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = lease.Revoke(rctx)
				cancel()
				return
			case <-lease.Done():
				r.c.log.Warn("controller registration lease lost; registering again", "key", key)
				break live
			case <-r.changed:
				if err := lease.Update(ctx, r.value()); err != nil && ctx.Err() == nil {
					r.c.log.Warn("controller registration update failed", "key", key, "err", err)
				}
			case <-refresh.C:
				if err := lease.Update(ctx, r.value()); err != nil && ctx.Err() == nil {
					r.c.log.Warn("controller registration update failed", "key", key, "err", err)
				}
			}
		}
	}
}

func (r *registrar) stop() { <-r.done }

// nodeProber is a probe.Prober with what the controller remembers about it.
type nodeProber struct {
	*probe.Prober
	address, flavor, user, password string
	timeout, connect                time.Duration
	tls                             config.ClusterTLS
	grantsChecked                   atomic.Bool

	// lastKind is the outcome of the node's previous probe (noteProbeKind).
	kindMu   sync.Mutex
	lastKind probe.Kind
}

// prober returns the prober of a node, creating or replacing it when the
// node's address, flavor, credentials or the probe timeout changed.
func (c *Controller) prober(cfg *config.Config, cl *config.Cluster, n *config.Node) (*nodeProber, error) {
	pw, err := cfg.Credentials.Monitor.Resolve()
	if err != nil {
		return nil, fmt.Errorf("credentials.monitor: %w", err)
	}
	key := cl.Name + "/" + n.Name
	var prevKind probe.Kind
	user, timeout, connect := cfg.Credentials.Monitor.User, cfg.Probe.Timeout.D(), cfg.Probe.ConnectTimeout.D()
	c.probersMu.Lock()
	defer c.probersMu.Unlock()
	if p, ok := c.probers[key]; ok {
		if p.address == n.Address && p.flavor == cl.Flavor && p.user == user && p.password == pw && p.timeout == timeout && p.connect == connect && p.tls == cl.TLS {
			p.SetReplicaSettings(replicaSettings(cl))
			return p, nil
		}
		_ = p.Close()
		p.kindMu.Lock()
		prevKind = p.lastKind // a fixed password logs that probes work again
		p.kindMu.Unlock()
	}
	tc, err := config.BackendTLS(cl.TLS, "")
	if err != nil {
		return nil, fmt.Errorf("clusters %s tls: %w", cl.Name, err)
	}
	p := &nodeProber{
		Prober:  probe.NewProberConnect(n.Address, probe.Credentials{User: user, Password: pw, TLS: tc}, cl.Flavor, timeout, connect),
		address: n.Address, flavor: cl.Flavor, user: user, password: pw, timeout: timeout, connect: connect, tls: cl.TLS,
		lastKind: prevKind,
	}
	// Every CHANGE MASTER through this prober carries the cluster's
	// heartbeat period and slave_net_timeout (failover.silence_bound).
	p.SetReplicaSettings(replicaSettings(cl))
	c.probers[key] = p
	return p, nil
}

// pruneProbers closes the probers of nodes no longer in cfg.
func (c *Controller) pruneProbers(cfg *config.Config) {
	keep := map[string]bool{}
	for _, cl := range cfg.Clusters {
		for _, n := range cl.Nodes {
			keep[cl.Name+"/"+n.Name] = true
		}
	}
	c.probersMu.Lock()
	defer c.probersMu.Unlock()
	for k, p := range c.probers {
		if !keep[k] {
			_ = p.Close()
			delete(c.probers, k)
		}
	}
}

func (c *Controller) closeProbers() {
	c.probersMu.Lock()
	defer c.probersMu.Unlock()
	for k, p := range c.probers {
		_ = p.Close()
		delete(c.probers, k)
	}
}
