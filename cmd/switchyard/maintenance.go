package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
)

const maintenanceUsage = "`switchyard maintenance on --cluster C [--node N] --reason TEXT [--for 30m] [--replace]`, " +
	"`switchyard maintenance off --cluster C [--node N]` or `switchyard maintenance history --cluster C`"

func newMaintenanceCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, node, reason string
		dur                   time.Duration
		replace, asJSON       bool
		limit                 int
		timeout               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "maintenance on|off|history --cluster C [--node N] [--reason TEXT] [--for D] [--replace]",
		Short: "Maintenance of a cluster (blocks automatic failover only) or of one node (out of routing and candidacy), with expiry and history",
		Long: `Cluster maintenance (no --node) blocks automatic failover of a cluster and
nothing else: the controller keeps probing, repairing replicas (repointing a
replica that replicates from the wrong node, fencing and rejoining a returning
old primary), publishing routing updates (a replica that stops replicating
leaves the ro listener), and running manual switchovers and failovers.

Node maintenance (--node N) takes one replica out of service like ProxySQL's
OFFLINE_SOFT: proxies route no new session to it on replica listeners and
close idle sessions' connections to it, and it is never promoted (switchover
or failover). The primary cannot be put in maintenance: "switchyard drain N"
moves the primary role away first.

"on" needs --reason. --for D turns it off by itself after D (the controller
leader does it and records a maintenance_expired event). A second "on" with
another reason is refused unless --replace (the same reason again only sets
the new expiry). "off" when maintenance is not on exits 1 with "maintenance
is not on". Every on, off and expiry is an event: "history" lists them with
who, when and why. Status shows the maintenance in effect.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "on" || args[0] == "off" || args[0] == "history") {
				return nil
			}
			got := "nothing"
			if len(args) > 0 {
				got = fmt.Sprintf("%q", strings.Join(args, " "))
			}
			return fmt.Errorf("maintenance: say on, off or history (got %s): %s", got, maintenanceUsage)
		},
		ValidArgs: []string{"on", "off", "history"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			out := cmd.OutOrStdout()
			if args[0] == "history" {
				ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
				if err != nil {
					return err
				}
				defer done()
				evs, err := controller.MaintenanceHistory(ctx, st, keys, cluster, limit)
				if err != nil {
					return exitError{code: 1, msg: "maintenance history: " + err.Error()}
				}
				if asJSON {
					return writeJSON(out, evs)
				}
				if len(evs) == 0 {
					fmt.Fprintf(out, "no maintenance recorded for cluster %s (in the event log)\n", cluster)
				}
				for _, e := range evs {
					scope := "cluster"
					if e.Node != "" {
						scope = "node " + e.Node
					}
					fmt.Fprintf(out, "%s  %-19s %-12s %s\n", e.At.UTC().Format(time.RFC3339), e.Code, scope, e.Message)
				}
				return nil
			}
			on := args[0] == "on"
			if on && strings.TrimSpace(reason) == "" {
				return fmt.Errorf("maintenance on: --reason is required (shown in status and the events)")
			}
			if dur < 0 {
				return fmt.Errorf("--for %s: must be positive (a duration such as 30m or 2h)", dur)
			}
			if !on && (dur != 0 || replace) {
				return fmt.Errorf("maintenance off: --for and --replace apply to on only")
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer done()
			req, err := controller.RequestMaintenance(ctx, st, keys, cluster, controller.MaintenanceOptions{
				On: on, Node: node, Reason: reason, For: dur, Replace: replace, By: operatorName()})
			if err != nil {
				if req.Message != "" {
					return exitError{code: 1, msg: "maintenance " + args[0] + ": " + req.Message}
				}
				return err
			}
			fmt.Fprintln(out, req.Message)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cluster, "cluster", "", "cluster name (required)")
	f.StringVar(&node, "node", "", "one node instead of the whole cluster: out of routing and candidacy (OFFLINE_SOFT)")
	f.StringVar(&reason, "reason", "", "why (required for on)")
	f.DurationVar(&dur, "for", 0, "turn it off by itself after this long (e.g. 30m); default: until `maintenance off`")
	f.BoolVar(&replace, "replace", false, "replace the reason of a maintenance already on")
	f.IntVar(&limit, "limit", 0, "history: show only the newest N entries")
	f.BoolVar(&asJSON, "json", false, "history: print the events as JSON")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the controller")
	return cmd
}
