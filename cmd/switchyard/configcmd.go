package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Exit status of a refusal, nothing changed: a config change the
// destructive-change guard refused, a switchover or failover a safety
// check, a veto hook or another running operation refused.
const exitRefused = 2

// configOpTimeout bounds one config command's store work.
const configOpTimeout = 30 * time.Second

func newConfigCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Validate, diff, apply, show and roll back the config kept in etcd",
		Long: `The config every proxy and controller runs is kept in etcd as numbered
revisions (author, time, reason, SHA-256 of the content). apply and rollback
show the diff against the current revision, refuse destructive changes (an
empty config; removing a listener or cluster that carries sessions, or a node
that is primary or serving; removing more than config.guard.max_removed_fraction
of the routes) unless --allow-destructive is given with a --reason, and write
the new revision by compare-and-swap. Every proxy and controller checks each
revision again and keeps its last-known-good config when one is bad.`,
	}
	cmd.AddCommand(
		newConfigValidateCmd(),
		newConfigDiffCmd(g),
		newConfigApplyCmd(g),
		newConfigShowCmd(g),
		newConfigHistoryCmd(g),
		newConfigRollbackCmd(g),
	)
	return cmd
}

func newConfigValidateCmd() *cobra.Command {
	var requireSecrets bool
	cmd := &cobra.Command{
		Use:   "validate FILE [--require-secrets]",
		Short: "Check a config file: strict YAML (unknown keys are errors), defaults, cross-field rules, secrets",
		Long: `validate checks FILE exactly as switchyard up does at start: strict YAML
(unknown keys are errors), defaults, cross-field rules. It also resolves every
secret the file refers to (password_env variables, password_file files) in
this environment: one that cannot be resolved is a warning (the file may be
checked on a machine that does not hold the secrets, e.g. in CI), printed
with its field, and the output says "valid, but". Settings that leave the
topology store open to forgery (no etcd.integrity_key_env/_file; an external
etcd without etcd.tls or etcd.username) are warnings on stderr. With --require-secrets —
on the machine that runs switchyard up — it is an error (exit 1): up would
refuse to start with it.

Admin endpoint settings that are valid but unsafe are warned about on
stderr: no admin.tokens (on a loopback address the API then needs no
token; on any other address it refuses every call), and an address other
machines reach without admin.tls.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := config.ValidateFile(args[0])
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			nodes := 0
			for _, cl := range c.Clusters {
				nodes += len(cl.Nodes)
			}
			summary := fmt.Sprintf("%d clusters, %d nodes, %d listeners, %d users", len(c.Clusters), nodes, len(c.Listeners), len(c.Users))
			// Unsafe but valid admin and store settings go to stderr: the
			// verdict on stdout stays one line.
			for _, w := range append(c.AdminWarnings(), c.StoreWarnings()...) {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			if serr := c.CheckSecrets(); serr != nil {
				var lines []string
				for _, e := range flattenErrors(serr) {
					lines = append(lines, "  "+e.Error())
				}
				msg := fmt.Sprintf("%d secret(s) cannot be resolved in this environment (switchyard up would refuse to start):\n%s",
					len(lines), strings.Join(lines, "\n"))
				if requireSecrets {
					return exitError{code: 1, msg: fmt.Sprintf("%s: %s", args[0], msg)}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (%s), but %s\n(warning only: pass --require-secrets to make it an error)\n", args[0], summary, msg)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (%s)\n", args[0], summary)
			return nil
		},
	}
	cmd.Flags().BoolVar(&requireSecrets, "require-secrets", false, "fail (exit 1) when a password_env variable or password_file cannot be resolved here")
	return cmd
}

// openForFile connects to the store; without --config or --etcd-endpoints
// it uses the etcd section of the file being applied.
func (g *globalFlags) openForFile(ctx context.Context, file string) (topo.Store, topo.Keys, error) {
	if g.configPath == "" && len(g.etcdEndpoints) == 0 {
		local := *g
		local.configPath = file
		return local.openStore(ctx, quietLogger())
	}
	return g.openStore(ctx, quietLogger())
}

func newConfigDiffCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff FILE",
		Short: "Show what applying FILE would change against the current revision, and whether the guard would refuse it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.ValidateFile(args[0])
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), configOpTimeout)
			defer cancel()
			st, keys, err := g.openForFile(ctx, args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			res, err := configstore.Apply(ctx, st, keys, configstore.Change{Config: cfg, DryRun: true})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			refused := exitError{code: 2}
			if asJSON {
				if err := writeJSON(w, changeReport("preview", res, nil)); err != nil {
					return err
				}
				if len(res.Violations) > 0 {
					return refused
				}
				return nil
			}
			fmt.Fprintf(w, "%s against %s:\n", args[0], describeRev(res.Previous))
			if res.Unchanged {
				fmt.Fprintln(w, "no changes (same content as the current revision)")
				return nil
			}
			io.WriteString(w, res.Diff.String())
			writeRestartOnly(w, res.Diff)
			if len(res.Violations) == 0 {
				fmt.Fprintln(w, "guard: the change is not destructive; apply it with: switchyard config apply "+args[0]+" --reason TEXT")
				return nil
			}
			fmt.Fprintln(w, "guard: apply would REFUSE this change:")
			for _, v := range res.Violations {
				fmt.Fprintln(w, "  "+v.String())
			}
			fmt.Fprintln(w, "to apply it anyway: switchyard config apply "+args[0]+" --reason TEXT --allow-destructive")
			return refused
		},
	}
	cmd.Long = "diff shows what applying FILE would change against the current revision in etcd.\nExit status: 0 when apply would accept it, 2 when the destructive-change guard would refuse it, 1 on other errors."
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the diff and the guard's verdict as JSON")
	return cmd
}

// changeFlags are the flags of apply and rollback.
type changeFlags struct {
	reason           string
	allowDestructive bool
	asJSON           bool
}

func (f *changeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.reason, "reason", "", "why (required; recorded in the history)")
	cmd.Flags().BoolVar(&f.allowDestructive, "allow-destructive", false, "apply even if the guard refuses the change (recorded in the history with the reasons)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

func (f *changeFlags) check() error {
	if strings.TrimSpace(f.reason) == "" {
		return exitError{code: 1, msg: "--reason TEXT is required: it is recorded in the config history"}
	}
	return nil
}

func newConfigApplyCmd(g *globalFlags) *cobra.Command {
	var (
		f      changeFlags
		ifRev  int64
		hintOf = func(file string) string {
			return "to apply it anyway: switchyard config apply " + file + " --reason TEXT --allow-destructive (the override and its reason are recorded in the history)"
		}
	)
	cmd := &cobra.Command{
		Use:   "apply FILE --reason TEXT [--allow-destructive]",
		Short: "Validate FILE and make it the current revision, unless the destructive-change guard refuses it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			cfg, err := config.ValidateFile(args[0])
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), configOpTimeout)
			defer cancel()
			st, keys, err := g.openForFile(ctx, args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			res, err := configstore.Apply(ctx, st, keys, configstore.Change{
				Config: cfg, Reason: f.reason, Author: configstore.Author(), Source: configstore.SourceApply,
				AllowDestructive: f.allowDestructive, ExpectRev: ifRev, OverrideHint: hintOf(args[0]),
			})
			return reportChange(cmd.OutOrStdout(), f.asJSON, res, err)
		},
	}
	f.register(cmd)
	cmd.Flags().Int64Var(&ifRev, "if-rev", 0, "apply only if the current revision is still N (the one reviewed with config diff)")
	return cmd
}

func newConfigRollbackCmd(g *globalFlags) *cobra.Command {
	var (
		f  changeFlags
		to int64
	)
	cmd := &cobra.Command{
		Use:   "rollback --to N --reason TEXT [--allow-destructive]",
		Short: "Make the content of revision N current again, as a new revision, through the same guard as apply",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to <= 0 {
				return exitError{code: 1, msg: "--to N is required (see `switchyard config history`)"}
			}
			if err := f.check(); err != nil {
				return err
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), configOpTimeout)
			if err != nil {
				return err
			}
			defer done()
			res, err := configstore.Rollback(ctx, st, keys, to, configstore.Change{
				Reason: f.reason, Author: configstore.Author(), AllowDestructive: f.allowDestructive,
				OverrideHint: fmt.Sprintf("to roll back anyway: switchyard config rollback --to %d --reason TEXT --allow-destructive (the override and its reason are recorded in the history)", to),
			})
			if errors.Is(err, topo.ErrNotFound) {
				return exitError{code: 1, msg: err.Error()}
			}
			return reportChange(cmd.OutOrStdout(), f.asJSON, res, err)
		},
	}
	f.register(cmd)
	cmd.Flags().Int64Var(&to, "to", 0, "revision to restore (required)")
	return cmd
}

// reportChange prints the outcome of apply or rollback and turns a refusal
// into exit status 2.
func reportChange(w io.Writer, asJSON bool, res *configstore.Result, err error) error {
	var refused *configstore.RefusedError
	isRefused := errors.As(err, &refused)
	if err != nil && !isRefused {
		return err
	}
	if asJSON {
		outcome := "applied"
		switch {
		case isRefused:
			outcome = "refused"
		case res.Unchanged:
			outcome = "unchanged"
		}
		if werr := writeJSON(w, changeReport(outcome, res, refused)); werr != nil {
			return werr
		}
		if isRefused {
			return exitError{code: exitRefused, msg: "change refused by the destructive-change guard (see the JSON on stdout)"}
		}
		return nil
	}
	if isRefused {
		return exitError{code: exitRefused, msg: strings.TrimPrefix(err.Error(), "configstore: ")}
	}
	if res.Unchanged {
		fmt.Fprintf(w, "nothing to apply: the content is that of the current %s\n", describeRev(res.Revision))
		return nil
	}
	fmt.Fprintf(w, "changes against %s:\n", describeRev(res.Previous))
	io.WriteString(w, res.Diff.String())
	if res.Repaired != "" {
		fmt.Fprintf(w, "replaced an invalid current value: %s\n", res.Repaired)
	}
	r := res.Revision
	fmt.Fprintf(w, "applied revision %d (sha256 %s) by %s: %s\n", r.Rev, r.ShortHash(), r.Author, r.Reason)
	writeRestartOnly(w, res.Diff)
	if r.GuardOverridden {
		fmt.Fprintln(w, "destructive-change guard OVERRIDDEN (recorded in the history):")
		for _, v := range r.GuardViolations {
			fmt.Fprintln(w, "  "+v)
		}
	}
	for _, warn := range res.Warnings {
		fmt.Fprintln(w, "warning: "+warn)
	}
	return nil
}

// writeRestartOnly says which changes wait for a restart of the processes
// (config.Diff.RestartOnly).
func writeRestartOnly(w io.Writer, d config.Diff) {
	ro := d.RestartOnly()
	if len(ro) == 0 {
		return
	}
	fmt.Fprintf(w, "PENDING RESTART: %d change(s) take effect only when each switchyard up/proxy process restarts (until then they keep the old setting):\n", len(ro))
	for _, l := range ro {
		fmt.Fprintln(w, "  "+l)
	}
}

// changeJSON is the --json output of diff, apply and rollback.
type changeJSON struct {
	// Outcome is preview, applied, unchanged or refused.
	Outcome    string                `json:"outcome"`
	Revision   *configstore.Revision `json:"revision,omitempty"`
	Previous   *configstore.Revision `json:"previous,omitempty"`
	Diff       config.Diff           `json:"diff"`
	Violations []config.Violation    `json:"violations"`
	Override   string                `json:"override,omitempty"`
	Repaired   string                `json:"repaired,omitempty"`
	Warnings   []string              `json:"warnings,omitempty"`
	// PendingRestart lists the changes that take effect only after a
	// restart (config.Diff.RestartOnly).
	PendingRestart []string `json:"pending_restart,omitempty"`
}

func changeReport(outcome string, res *configstore.Result, refused *configstore.RefusedError) changeJSON {
	out := changeJSON{Outcome: outcome, Diff: res.Diff, Violations: res.Violations, Repaired: res.Repaired, Warnings: res.Warnings,
		PendingRestart: res.Diff.RestartOnly()}
	if out.Violations == nil {
		out.Violations = []config.Violation{}
	}
	if res.Revision != nil {
		m := res.Revision.Meta()
		out.Revision = &m
	}
	if res.Previous != nil {
		m := res.Previous.Meta()
		out.Previous = &m
	}
	if refused != nil {
		out.Override = refused.Override
	}
	return out
}

func describeRev(r *configstore.Revision) string {
	if r == nil {
		return "no revision (the store holds no config yet)"
	}
	return fmt.Sprintf("revision %d (sha256 %s, %s by %s: %s)", r.Rev, r.ShortHash(), r.Time.Local().Format("2006-01-02 15:04:05"), r.Author, r.Reason)
}

func newConfigShowCmd(g *globalFlags) *cobra.Command {
	var (
		rev         int64
		asJSON      bool
		showSecrets bool
	)
	cmd := &cobra.Command{
		Use:   "show [--rev N]",
		Short: "Print the current revision (or revision N) as YAML, passwords redacted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), configOpTimeout)
			if err != nil {
				return err
			}
			defer done()
			var r *configstore.Revision
			if rev > 0 {
				if r, _, err = configstore.Get(ctx, st, keys, rev); err != nil {
					return exitError{code: 1, msg: err.Error()}
				}
			} else {
				var s *configstore.State
				r, _, s, err = configstore.Current(ctx, st, keys)
				if err != nil {
					return exitError{code: 1, msg: err.Error()}
				}
				if s.CurrentErr != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "switchyard: ALARM: the current config value (etcd version %d) is invalid: %v\nshowing the newest valid revision instead; restore it with: switchyard config rollback --to %d --reason TEXT\n", s.Version, s.CurrentErr, r.Rev)
				}
			}
			out := *r
			if !showSecrets {
				red, err := configstore.RedactYAML([]byte(r.YAML))
				if err != nil {
					return err
				}
				out.YAML = string(red)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, out)
			}
			fmt.Fprintf(w, "# %s\n# source: %s", describeRev(r), r.Source)
			if r.Source == configstore.SourceRollback {
				fmt.Fprintf(w, " of revision %d", r.RollbackOf)
			}
			fmt.Fprintf(w, "; sha256 %s\n", r.SHA256)
			if r.GuardOverridden {
				fmt.Fprintf(w, "# destructive-change guard overridden: %s\n", strings.Join(r.GuardViolations, "; "))
			}
			io.WriteString(w, out.YAML)
			return nil
		},
	}
	cmd.Flags().Int64Var(&rev, "rev", 0, "revision to show (default: the current one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the revision document as JSON")
	cmd.Flags().BoolVar(&showSecrets, "show-secrets", false, "print passwords as stored instead of redacting them")
	return cmd
}

func newConfigHistoryCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List the config revisions kept in etcd, newest first (* marks the current one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), configOpTimeout)
			if err != nil {
				return err
			}
			defer done()
			s, err := configstore.Load(ctx, st, keys)
			if err != nil {
				return err
			}
			var current int64
			if s.Current != nil {
				current = s.Current.Rev
			}
			w := cmd.OutOrStdout()
			if asJSON {
				type historyJSON struct {
					Current      int64                  `json:"current"`
					CurrentError string                 `json:"current_error,omitempty"`
					Revisions    []configstore.Revision `json:"revisions"`
				}
				h := historyJSON{Current: current, Revisions: s.History}
				if s.CurrentErr != nil {
					h.CurrentError = s.CurrentErr.Error()
				}
				if h.Revisions == nil {
					h.Revisions = []configstore.Revision{}
				}
				return writeJSON(w, h)
			}
			if s.CurrentErr != nil {
				fmt.Fprintf(w, "ALARM: the current config value (etcd version %d) is invalid: %v\n", s.Version, s.CurrentErr)
			}
			if len(s.History) == 0 {
				fmt.Fprintln(w, "no config revisions in etcd yet")
				return nil
			}
			return configstore.WriteHistory(w, s.History, current, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the revisions as JSON")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
