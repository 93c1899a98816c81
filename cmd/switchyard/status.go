package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/status"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show clusters, nodes (role, lag, GTID position, last probe), proxies and the controller leader",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), 10*time.Second)
			if err != nil {
				return err
			}
			defer done()
			r, err := status.Collect(ctx, st, keys, time.Now())
			if err != nil {
				return err
			}
			if asJSON {
				return status.WriteJSON(cmd.OutOrStdout(), r)
			}
			return status.WriteTable(cmd.OutOrStdout(), r)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of tables")
	return cmd
}
