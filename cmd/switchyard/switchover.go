package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func newSwitchoverCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, to string
		timeout     time.Duration
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "switchover --cluster C [--to NODE]",
		Short: "Planned switchover: move the primary role to another node",
		Long: `switchover asks the controller leader to move the primary role of a cluster:
it fences the old primary (read_only=ON, client sessions killed), waits until
the candidate has applied every GTID of the old primary (bounded by
switchover.catchup_timeout; on timeout it aborts and makes the old primary
writable again), promotes the candidate, repoints the other replicas and the
old primary to it, and bumps the epoch. Without --to the controller picks the
most advanced serving replica (promotion rule prefer first, never must_not).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, keys, err := g.openStore(ctx, quietLogger())
			if err != nil {
				return err
			}
			defer st.Close()
			req, err := controller.RequestSwitchover(ctx, st, keys, cluster, to)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				_ = enc.Encode(req)
			} else {
				for _, s := range req.Steps {
					fmt.Fprintln(cmd.OutOrStdout(), "  "+s)
				}
			}
			if err != nil {
				return err
			}
			if req.State != topo.RequestDone {
				return exitError{code: 1, msg: fmt.Sprintf("switchover %s: %s", req.State, req.Message)}
			}
			if !asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "switchover done: cluster %s primary is now %s (epoch %d -> %d)\n", cluster, req.Target, req.FromEpoch, req.ToEpoch)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&to, "to", "", "node to promote (default: chosen by the controller)")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait for the controller to finish")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the request record as JSON")
	return cmd
}
