package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/admin"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/status"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// roleFlags are the flags of up, proxy and controller.
type roleFlags struct {
	id        string
	pidFile   string
	admin     string
	applyFile bool
	// embeddedStarted, when set (tests), receives the embedded etcd's
	// owner once it runs.
	embeddedStarted func(*embeddedEtcd)
}

func (r *roleFlags) register(cmd *cobra.Command, role string) {
	cmd.Flags().StringVar(&r.id, "id", "", "id of this "+role+" in the topology store (default hostname-pid; for up with an embedded etcd, hostname-up-<hash of its data directory>, the same after a restart)")
	cmd.Flags().StringVar(&r.pidFile, "pid-file", "", "write the process id to this file (removed on exit)")
	cmd.Flags().StringVar(&r.admin, "admin-address", "", "host:port of the admin HTTP endpoint (/healthz, /metrics, the admin API /api/v1); overrides admin.address, \"off\" disables it")
}

func newUpCmd(g *globalFlags) *cobra.Command {
	rf := &roleFlags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything on this machine: embedded etcd (unless etcd.endpoints is set), controller, proxy and admin HTTP",
		Long: `up runs every role of Switchyard in one process from one config file:
an embedded single-node etcd (unless etcd.endpoints or --etcd-endpoints names
an external cluster), the controller, the proxy listeners and the admin HTTP
endpoint. It refuses to start on an invalid config and names the field.
Stop it with SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRoles(cmd.Context(), g, rf, true, true, true)
		},
	}
	rf.register(cmd, "process")
	cmd.Flags().BoolVar(&rf.applyFile, "apply-config-file", false, "apply the config file as a new revision even when etcd already holds a config (through the destructive-change guard); by default a config already in etcd wins and a differing file is only reported")
	return cmd
}

func newProxyCmd(g *globalFlags) *cobra.Command {
	rf := &roleFlags{}
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run only the proxy role against an external etcd",
		Long: `proxy serves the listeners of the config, routing from the cluster state it
watches in etcd. The config comes from --config, or from etcd (written there by
"switchyard up" or "switchyard config apply") when only --etcd-endpoints is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRoles(cmd.Context(), g, rf, false, true, false)
		},
	}
	rf.register(cmd, "proxy")
	return cmd
}

func newControllerCmd(g *globalFlags) *cobra.Command {
	rf := &roleFlags{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run only the controller role against an external etcd",
		Long: `controller probes every node, publishes the topology to etcd and, while it is
the elected leader, executes switchovers. Run several for availability: one is
leader, the others wait.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRoles(cmd.Context(), g, rf, false, false, true)
		},
	}
	rf.register(cmd, "controller")
	return cmd
}

// runRoles runs the chosen roles until SIGINT/SIGTERM.
func runRoles(parent context.Context, g *globalFlags, rf *roleFlags, embed, runProxy, runController bool) error {
	log, err := g.logger(os.Stderr)
	if err != nil {
		return err
	}
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	host, _ := os.Hostname()
	id := rf.id
	if id == "" {
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	idLog := log
	log = log.With("id", id)
	budget := raiseNoFile(log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := newHealth(reg)
	reg.MustRegister(buildInfo())

	cfg, cfgPath, fileErr := g.loadConfig()
	if fileErr != nil && (embed || len(g.etcdEndpoints) == 0 || g.configPath != "") {
		return fmt.Errorf("refusing to start: %w", fileErr)
	}

	endpoints := g.etcdEndpoints
	if len(endpoints) == 0 && cfg != nil {
		endpoints = cfg.Etcd.Endpoints
	}
	reserve := proxy.DefaultReservedDescriptors
	var embedded *embeddedEtcd
	if embed && len(endpoints) == 0 {
		dataDir := cfg.Etcd.Embedded.DataDir
		if !filepath.IsAbs(dataDir) {
			dataDir = filepath.Join(filepath.Dir(cfgPath), dataDir)
		}
		// A second `up` on this directory fails here at once instead of
		// waiting on etcd's database lock.
		lock, err := lockDataDir(dataDir)
		if err != nil {
			return fmt.Errorf("refusing to start: %w", err)
		}
		defer lock.Close()
		opts := topo.EmbeddedOptions{
			DataDir:       dataDir,
			ClientAddress: cfg.Etcd.Embedded.ClientAddress,
			PeerAddress:   cfg.Etcd.Embedded.PeerAddress,
			Log:           log,
		}
		e, err := topo.StartEmbedded(opts)
		if err != nil {
			return fmt.Errorf("start embedded etcd: %w", err)
		}
		reserve += proxy.EmbeddedEtcdDescriptors
		// A failure of the embedded etcd later restarts it instead of
		// ending the process (degrade.go).
		embedded = newEmbeddedEtcd(e, opts, log, h)
		ectx, cancelEmbedded := context.WithCancel(context.Background())
		go embedded.run(ectx)
		if rf.embeddedStarted != nil {
			rf.embeddedStarted(embedded)
		}
		defer embedded.Close()
		defer cancelEmbedded()
		endpoints = e.Endpoints()
		if rf.id == "" {
			// The embedded etcd holds its data directory exclusively, so an
			// id derived from it is unique among live processes and the
			// same after a restart: the restarted controller then drops
			// the election key its killed predecessor left and leads at
			// once (topo: campaign drops stale keys of its identity).
			id = embeddedID(host, dataDir)
			log = idLog.With("id", id)
			embedded.log = log
		}
		log.Info("embedded etcd started", "endpoints", endpoints, "data_dir", dataDir)
	}
	if len(endpoints) == 0 {
		return errors.New("no etcd: set etcd.endpoints in the config or pass --etcd-endpoints")
	}
	dial := 2 * time.Second
	prefix := g.etcdPrefix
	if cfg != nil {
		dial = cfg.Etcd.DialTimeout.D()
		if prefix == "" {
			prefix = cfg.Etcd.Prefix
		}
	}
	if prefix == "" {
		prefix = "/switchyard"
	}
	etcdOpts := topo.EtcdOptions{Endpoints: endpoints, DialTimeout: dial, Log: log}
	if err := secureStoreOptions(g.store.apply(cfg), &etcdOpts); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	if cfg != nil {
		if topo.Integrity() != nil {
			log.Info("config revisions and cluster states are signed and verified", "integrity_key", topo.Integrity().SigningKeyID(), "keys", topo.Integrity().Len())
		} else {
			log.Warn("no integrity key (etcd.integrity_key_env/_file): config revisions and cluster states in etcd are not verified")
		}
	}
	// A store that does not answer at start (no quorum, a partition, etcd
	// still starting) is waited for, not a reason to exit: the process
	// starts once it answers. Wrong credentials or certificates end it.
	var st topo.Store
	if err := retryStore(ctx, log, h, "connect to etcd", func() error {
		var err error
		st, err = topo.NewEtcd(etcdOpts)
		return err
	}); err != nil {
		return fmt.Errorf("connect to etcd: %w", err)
	}
	defer st.Close()
	keys := topo.Keys{Prefix: prefix}
	if runProxy {
		limit := cfg.Proxy.MaxClientConnections
		if limit == 0 {
			limit = proxy.DefaultMaxClientConnections(budget, reserve, proxy.BackendDescriptors(cfg))
		}
		log.Info("descriptor budget", "rlimit_nofile", budget, "reserved", reserve, "max_client_connections", limit,
			"derived", cfg.Proxy.MaxClientConnections == 0)
		if safe := proxy.DefaultMaxClientConnections(budget, reserve, proxy.BackendDescriptors(cfg)); limit > safe {
			log.Warn("proxy.max_client_connections is above what the descriptor budget holds: past about that many clients, "+
				"descriptor exhaustion reaches the embedded etcd, the probes and the failsafe checks (which then refuse writes); "+
				"raise RLIMIT_NOFILE or unset proxy.max_client_connections",
				"max_client_connections", limit, "budget_allows", safe, "rlimit_nofile", budget)
		}
	} else {
		log.Info("descriptor budget", "rlimit_nofile", budget)
	}

	// The config becomes (or already is) a revision in the store, through the
	// same validation and destructive-change guard as `config apply`.
	var rev int64
	var loaded configstore.FileLoad
	if cfg != nil && cfgPath != "" {
		// A start that is going to fail on a secret writes nothing to the
		// store: check the ones this process needs before the bootstrap.
		if err := checkRoleSecrets(cfg, runProxy, runController); err != nil {
			return fmt.Errorf("refusing to start (nothing was written to etcd): %w", err)
		}
		bootstrap := configstore.Bootstrap
		if rf.applyFile {
			bootstrap = configstore.BootstrapFromFile
		}
		var res *configstore.Result
		if err := retryStore(ctx, log, h, "read the config in etcd", func() error {
			var err error
			res, err = bootstrap(ctx, st, keys, cfg, configstore.Author())
			return err
		}); err != nil {
			return fmt.Errorf("refusing to start: %w", err)
		}
		rev = res.Revision.Rev
		if loaded, err = configstore.LoadedFile(cfgPath, rev); err != nil {
			return fmt.Errorf("refusing to start: %w", err)
		}
		if res.Running != nil {
			cfg = res.Running
		}
		if res.FileDiffers {
			log.Warn("config file differs from the revision in etcd; running the revision in etcd (apply the file with `switchyard config apply FILE --reason TEXT`, SIGHUP, or start with --apply-config-file)",
				"file", cfgPath, "rev", rev, "diff", res.Diff.String())
		}
	} else {
		var r *configstore.Revision
		var c *config.Config
		if err := retryStore(ctx, log, h, "read the config in etcd", func() error {
			var err error
			r, c, _, err = configstore.Current(ctx, st, keys)
			return err
		}); err != nil {
			return fmt.Errorf("read config from etcd: %w", err)
		}
		cfg, rev = c, r.Rev
	}

	if rf.pidFile != "" {
		if err := os.WriteFile(rf.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return fmt.Errorf("--pid-file: %w", err)
		}
		defer os.Remove(rf.pidFile)
	}

	var ctrl *controller.Controller
	if runController {
		ctrl, err = controller.New(controller.Options{Config: cfg, Store: st, Keys: keys, ID: id, Log: log.With("role", "controller"), Registry: reg})
		if err != nil {
			return err
		}
		go keepRunning(ctx, log, h, "controller", ctrl.Run)
		if _, err := configstore.Follow(ctx, st, keys, configstore.FollowOptions{
			Name: "controller", ID: id, Log: log.With("role", "controller"), Registry: reg,
			Initial: cfg, InitialRev: rev, Report: true,
			OnApply: func(c *config.Config, _ int64) error {
				if _, err := c.Credentials.Monitor.Resolve(); err != nil {
					return fmt.Errorf("credentials.monitor: %w", err)
				}
				ctrl.SetConfig(c)
				return nil
			},
			PendingRestart: func(started, applied *config.Config) []string {
				return usedSettings(config.ComputeDiff(started, applied).RestartOnlySettings(), embedded != nil)
			},
		}); err != nil {
			return err
		}
	}
	var srv *proxy.Server
	if runProxy {
		setProcs(log, cfg.Proxy.GOMAXPROCS, !runController && !embed)
		srv, err = proxy.New(proxy.Options{Config: cfg, ID: id, Log: log.With("role", "proxy"), Registry: reg,
			Descriptors: budget, ReservedDescriptors: reserve})
		if err != nil {
			return err
		}
		if err := srv.Start(); err != nil {
			return err
		}
		defer srv.Close()
		go keepRunning(ctx, log, h, "proxy_follow", func(ctx context.Context) error { return proxy.Follow(ctx, st, keys, srv) })
		if _, err := configstore.Follow(ctx, st, keys, configstore.FollowOptions{
			Name: "proxy", ID: id, Log: log.With("role", "proxy"), Registry: reg,
			Initial: cfg, InitialRev: rev, Report: true,
			OnApply: func(c *config.Config, _ int64) error {
				if err := srv.SetConfig(c); err != nil {
					return err
				}
				setProcs(log, c.Proxy.GOMAXPROCS, !runController && !embed)
				return nil
			},
			PendingRestart: func(started, applied *config.Config) []string {
				return usedSettings(config.ComputeDiff(started, applied).RestartOnly(), embedded != nil)
			},
		}); err != nil {
			return err
		}
		for _, l := range cfg.Listeners {
			log.Info("listener ready", "listener", l.Name, "address", srv.ListenerAddr(l.Name), "cluster", l.Cluster, "role", l.Role)
		}
	}

	adminAddr := cfg.Admin.Address
	if rf.admin != "" {
		adminAddr = rf.admin
	}
	var adminSrv *admin.Server
	if adminAddr != "off" {
		var sessions admin.Sessions
		if srv != nil {
			sessions = srv
		}
		a, err := admin.Start(admin.Options{
			Address:  adminAddr,
			Gatherer: reg,
			Pprof:    cfg.Admin.Pprof,
			Store:    st,
			Keys:     keys,
			// The admin section is read at start (a change of it is
			// pending restart), the certificate files again on change.
			Tokens:      cfg.Admin.Tokens,
			TLS:         cfg.Admin.TLS,
			MetricsAuth: cfg.Admin.MetricsAuth,
			Sessions:    sessions,
			Status: func(ctx context.Context) (any, error) {
				return status.Collect(ctx, st, keys, time.Now())
			},
			// Ready is 503 with no routing state yet and, through
			// Listeners, while a listener's route lacks what its role
			// needs (no reachable primary). A part down (the store
			// unreachable, the embedded etcd restarting) is Degraded:
			// plain /readyz is 503, a listener serving from its last
			// routing state stays ready. /healthz stays 200 while the
			// listeners serve.
			Degraded: h.err,
			Ready: func() error {
				if srv == nil {
					return nil
				}
				epochs := srv.Epochs()
				for _, cl := range cfg.Clusters {
					if epochs[cl.Name] == 0 {
						return fmt.Errorf("no routing state for cluster %q yet (is a controller running?)", cl.Name)
					}
				}
				return nil
			},
			Listeners: listenerHealth(srv),
			Log:       log,
		})
		if err != nil {
			return err
		}
		defer a.Close()
		adminSrv = a
		log.Info("admin endpoint ready", "address", a.Addr(), "https", a.TLS(), "tokens", len(cfg.Admin.Tokens))
		for _, w := range cfg.AdminWarnings() {
			log.Warn(w)
		}
	}

	reloadRefused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_config_reload_refused_total",
		Help: "SIGHUP reloads of the config file that were refused (invalid or destructive file, or a file not based on the store's current revision, which would undo another apply); the running config is unchanged. An unchanged file with nothing to undo is not counted.",
	})
	reg.MustRegister(reloadRefused)
	hup := make(chan os.Signal, 1)
	if cfgPath != "" || srv != nil || adminSrv != nil {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	go watchStore(ctx, log, h, st, keys.Config())
	log.Info("switchyard running", "proxy", runProxy, "controller", runController, "etcd", endpoints, "config_rev", rev)
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			return nil
		case <-hup:
			// Listener certificates are read again (a pair that fails to
			// load keeps the previous one).
			if srv != nil {
				srv.ReloadTLS()
			}
			if adminSrv != nil {
				_ = adminSrv.ReloadTLS()
			}
			if cfgPath == "" {
				continue
			}
			// A bad, destructive, unchanged or stale file changes nothing
			// (a file loaded at an older revision than the store's would
			// undo another operator's apply); the followers apply a good
			// one like any other revision.
			res, next, err := configstore.ReloadFile(ctx, st, keys, loaded, configstore.Author())
			var rr *configstore.ReloadRefusedError
			switch {
			case errors.As(err, &rr) && rr.Kind == configstore.ReloadUnchanged && rr.Current != nil && (rr.Current.Rev == loaded.Rev || rr.Diff.Empty()):
				// A SIGHUP for the certificates: nothing to apply, nothing
				// refused — also when the store moved to another revision
				// with the same content (a rollback to it): nothing to undo.
				log.Info("config file unchanged since it was loaded; nothing to apply", "file", cfgPath, "rev", loaded.Rev)
				continue
			case errors.As(err, &rr):
				reloadRefused.Inc()
				log.Warn("config reload refused; the running config is unchanged", "file", cfgPath, "why", rr.Kind, "reason", rr.Why,
					"diff", rr.Diff.String())
				continue
			case err != nil:
				reloadRefused.Inc()
				log.Error("config reload refused; the running config is unchanged", "file", cfgPath, "err", err)
				continue
			}
			loaded = next
			log.Info("config reloaded", "file", cfgPath, "rev", res.Revision.Rev, "unchanged", res.Unchanged)
		}
	}
}

// embeddedID is the default id of `switchyard up` with an embedded etcd:
// "<host>-up-<8 hex digits of the FNV-1a hash of the data directory>".
func embeddedID(host, dataDir string) string {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	h := fnv.New32a()
	h.Write([]byte(dataDir))
	return fmt.Sprintf("%s-up-%08x", host, h.Sum32())
}

// listenerHealth is the admin endpoint's view of the proxy's listeners; nil
// when this process runs no proxy.
func listenerHealth(srv *proxy.Server) func() []proxy.ListenerHealth {
	if srv == nil {
		return nil
	}
	return srv.Health
}

// usedSettings drops from a pending-restart list the etcd.embedded settings
// of a process that runs no embedded etcd (it uses etcd.endpoints): a
// change there waits for nothing in it.
func usedSettings(pending []string, embedded bool) []string {
	if embedded {
		return pending
	}
	return slices.DeleteFunc(pending, func(s string) bool { return strings.HasPrefix(s, "etcd.embedded") })
}

// checkRoleSecrets resolves the secrets the roles of this process use
// (config.CheckSecrets names each field): the monitor account for both (the
// proxy's failsafe checks probe with it), the replication account for the
// controller and the hooks' header secrets for the controller, the users'
// and proxy.backend_accounts passwords for the proxy.
func checkRoleSecrets(cfg *config.Config, runProxy, runController bool) error {
	err := cfg.CheckSecrets()
	if err == nil {
		return nil
	}
	var keep []error
	for _, e := range flattenErrors(err) {
		var fe *config.FieldError
		if errors.As(e, &fe) {
			switch {
			case strings.HasPrefix(fe.Field, "credentials.monitor."), strings.HasPrefix(fe.Field, "admin."):
			case strings.HasPrefix(fe.Field, "hooks["):
				if !runController {
					continue
				}
			case strings.HasPrefix(fe.Field, "credentials."):
				if !runController {
					continue
				}
			default:
				if !runProxy {
					continue
				}
			}
		}
		keep = append(keep, e)
	}
	return errors.Join(keep...)
}

// flattenErrors returns the errors joined in err (err itself if it is not
// a join).
func flattenErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
