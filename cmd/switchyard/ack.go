package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func newAckCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, reason string
		resetFloor      bool
		timeout         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "ack --cluster C [--reason TEXT] [--reset-floor --reason TEXT]",
		Short: "Acknowledge a failover: lift the block on automatic failover",
		Long: `After any failover, automatic failover of the cluster is blocked for
failover.block_period so that a flapping primary cannot be failed over again
and again; a failed or timed-out recovery disables automatic failover for the
cluster and raises an alarm. ack, after a human has looked, lifts the block,
re-enables automatic failover and clears the recovery alarms.

--reset-floor instead sets the cluster's promotion floor (the highest GTID
position ever seen on the primary, below which no failover candidate is
promoted without --force-stale) to the live primary's current position: for
a cluster rebuilt with lower positions, whose old floor would refuse every
failover. It needs --reason, recorded with the floor and in the events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer done()
			var req topo.Request
			if resetFloor {
				req, err = controller.RequestFloorReset(ctx, st, keys, cluster, reason, operatorName())
			} else {
				req, err = controller.RequestAck(ctx, st, keys, cluster, reason, operatorName())
			}
			if err != nil {
				if req.Message != "" {
					return exitError{code: 1, msg: req.Message}
				}
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), req.Message)
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "note recorded in the events (required with --reset-floor)")
	cmd.Flags().BoolVar(&resetFloor, "reset-floor", false, "set the promotion floor to the primary's current position (after a rebuild; needs --reason)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the controller")
	return cmd
}
