package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
)

func newMaintenanceCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, reason string
		timeout         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "maintenance on|off --cluster C --reason TEXT",
		Short: "Turn maintenance mode on or off: blocks automatic failover only",
		Long: `Maintenance mode blocks automatic failover of a cluster and nothing else:
the controller keeps probing, repairing replicas (repointing a replica that
replicates from the wrong node, fencing and rejoining a returning old
primary), publishing routing updates (a replica that stops replicating leaves
the ro listener), and running manual switchovers and failovers. It is shown in
status and recorded in the events. "on" needs --reason.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "on" || args[0] == "off") {
				return nil
			}
			got := "nothing"
			if len(args) > 0 {
				got = fmt.Sprintf("%q", strings.Join(args, " "))
			}
			return fmt.Errorf("maintenance: say on or off (got %s): `switchyard maintenance on --cluster C --reason TEXT` or `switchyard maintenance off --cluster C`", got)
		},
		ValidArgs: []string{"on", "off"},
		RunE: func(cmd *cobra.Command, args []string) error {
			on := args[0] == "on"
			if !on && args[0] != "off" {
				return fmt.Errorf("maintenance: %q is not on or off", args[0])
			}
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			if on && reason == "" {
				return fmt.Errorf("maintenance on: --reason is required (shown in status and the events)")
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer done()
			req, err := controller.RequestMaintenance(ctx, st, keys, cluster, on, reason, operatorName())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), req.Message)
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required for on)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the controller")
	return cmd
}
