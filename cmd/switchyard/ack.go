package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
)

func newAckCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, reason string
		timeout         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "ack --cluster C [--reason TEXT]",
		Short: "Acknowledge a failover: lift the block on automatic failover",
		Long: `After any failover, automatic failover of the cluster is blocked for
failover.block_period so that a flapping primary cannot be failed over again
and again; a failed or timed-out recovery disables automatic failover for the
cluster and raises an alarm. ack, after a human has looked, lifts the block,
re-enables automatic failover and clears the recovery alarms.`,
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
			req, err := controller.RequestAck(ctx, st, keys, cluster, reason, operatorName())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), req.Message)
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "note recorded in the events")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the controller")
	return cmd
}
