package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// globalFlags are the flags every command accepts.
type globalFlags struct {
	configPath    string
	etcdEndpoints []string
	etcdPrefix    string
	logLevel      string
	logFormat     string
	// store security without a config file (or overriding its etcd
	// section): storeflags.go.
	store storeFlags
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "switchyard",
		Short: "High-availability proxy and controller for MySQL/MariaDB replication clusters",
		Long: `Switchyard keeps applications connected to the right MySQL/MariaDB server
through planned switchovers and failures. One binary: the proxy (rw and ro
listeners), the controller (probes, topology, switchover), an embedded etcd
topology store, operator commands and a local MariaDB sandbox.

Operator commands find the topology store from --config (the same file
"switchyard up" uses) or from --etcd-endpoints.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVarP(&g.configPath, "config", "c", "", "path of switchyard.yaml (default $SWITCHYARD_CONFIG, else ./switchyard.yaml, else ./.sandbox/switchyard.yaml)")
	pf.StringSliceVar(&g.etcdEndpoints, "etcd-endpoints", nil, "external etcd endpoints (host:port, comma separated); overrides the config's etcd section")
	pf.StringVar(&g.etcdPrefix, "etcd-prefix", "", "key prefix in etcd (default from config, else /switchyard)")
	g.store.register(pf)
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")

	root.AddCommand(
		newUpCmd(g),
		newProxyCmd(g),
		newControllerCmd(g),
		newStatusCmd(g),
		newSwitchoverCmd(g),
		newDrainCmd(g),
		newUndrainCmd(g),
		newFailoverCmd(g),
		newAckCmd(g),
		newMaintenanceCmd(g),
		newConfigCmd(g),
		newSandboxCmd(g),
		newVersionCmd(),
	)
	return root
}

// logger builds the process logger from the flags.
func (g *globalFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format: %q is not text or json", g.logFormat)
	}
}

// configEnv names the environment variable that gives the default of
// --config (`switchyard sandbox env` exports it).
const configEnv = "SWITCHYARD_CONFIG"

// resolveConfigPath returns --config, else $SWITCHYARD_CONFIG, else the
// first default location that exists.
func (g *globalFlags) resolveConfigPath() (string, error) {
	if g.configPath != "" {
		return g.configPath, nil
	}
	if p := os.Getenv(configEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", configEnv, p, err)
		}
		return p, nil
	}
	for _, p := range []string{"switchyard.yaml", ".sandbox/switchyard.yaml"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no config: pass --config FILE (or --etcd-endpoints), or run `switchyard sandbox up` to create .sandbox/switchyard.yaml")
}

// loadConfig loads and validates the config file named by the flags.
func (g *globalFlags) loadConfig() (*config.Config, string, error) {
	p, err := g.resolveConfigPath()
	if err != nil {
		return nil, "", err
	}
	c, err := config.Load(p)
	if err != nil {
		return nil, "", err
	}
	return c, p, nil
}

// storeTarget says which etcd an operator command talks to.
type storeTarget struct {
	endpoints []string
	prefix    string
	dial      time.Duration
	// cfg is the config file read, for etcd.tls, etcd.username and the
	// integrity keys; nil with --etcd-endpoints alone.
	cfg *config.Config
}

// target works out the etcd endpoints and prefix: --etcd-endpoints wins;
// otherwise the config's external endpoints, else its embedded etcd address.
func (g *globalFlags) target() (storeTarget, error) {
	t := storeTarget{prefix: g.etcdPrefix, dial: 2 * time.Second}
	if len(g.etcdEndpoints) > 0 && g.configPath == "" {
		t.endpoints = g.etcdEndpoints
		if t.prefix == "" {
			t.prefix = "/switchyard"
		}
		return t, nil
	}
	c, _, err := g.loadConfig()
	if err != nil {
		return t, err
	}
	switch {
	case len(g.etcdEndpoints) > 0:
		t.endpoints = g.etcdEndpoints
	case len(c.Etcd.Endpoints) > 0:
		t.endpoints = c.Etcd.Endpoints
	default:
		t.endpoints = []string{c.Etcd.Embedded.ClientAddress}
	}
	if t.prefix == "" {
		t.prefix = c.Etcd.Prefix
	}
	t.dial = c.Etcd.DialTimeout.D()
	t.cfg = c
	return t, nil
}

// openStore connects an operator command to the topology store and checks
// that it answers.
func (g *globalFlags) openStore(ctx context.Context, log *slog.Logger) (topo.Store, topo.Keys, error) {
	t, err := g.target()
	if err != nil {
		return nil, topo.Keys{}, err
	}
	opts := topo.EtcdOptions{Endpoints: t.endpoints, DialTimeout: t.dial, Log: log}
	noteUnverifiedSigned()
	if err := secureStoreOptions(g.store.apply(t.cfg), &opts); err != nil {
		return nil, topo.Keys{}, err
	}
	st, err := topo.NewEtcd(opts)
	if err != nil {
		return nil, topo.Keys{}, fmt.Errorf("connect to etcd %s: %w", strings.Join(t.endpoints, ","), err)
	}
	keys := topo.Keys{Prefix: t.prefix}
	pctx, cancel := context.WithTimeout(ctx, t.dial+time.Second)
	defer cancel()
	if _, err := st.List(pctx, keys.ClustersPrefix()); err != nil {
		st.Close()
		return nil, keys, fmt.Errorf("etcd at %s does not answer (is `switchyard up` running?): %w", strings.Join(t.endpoints, ","), err)
	}
	return st, keys, nil
}

// storeFor opens the topology store for one operator command, under a
// context bounded by timeout. done closes the store and releases the
// context; on error nothing is left open.
func (g *globalFlags) storeFor(parent context.Context, timeout time.Duration) (context.Context, topo.Store, topo.Keys, func(), error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	st, keys, err := g.openStore(ctx, quietLogger())
	if err != nil {
		cancel()
		return nil, nil, topo.Keys{}, nil, err
	}
	return ctx, st, keys, func() { st.Close(); cancel() }, nil
}

// quietLogger is for operator commands: warnings and errors only, to stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and the Go version it was built with (also --version)",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
		},
	}
}

// version and commit are set at build time (Makefile):
// -ldflags "-X main.version=v1.2.3 -X main.commit=abc1234".
var (
	version = "dev"
	commit  = ""
)

// versionString is "switchyard VERSION (commit COMMIT[, modified], GO)".
// Without -X main.commit the commit comes from the VCS stamp Go records in
// the binary (go build in a git checkout), else "unknown".
func versionString() string {
	c, dirty := commit, false
	if bi, ok := debug.ReadBuildInfo(); ok && c == "" {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(c) > 12 {
		c = c[:12]
	}
	if c == "" {
		c = "unknown"
	}
	if dirty {
		c += ", modified"
	}
	return fmt.Sprintf("switchyard %s (commit %s, %s %s/%s)", version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
