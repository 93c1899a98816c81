package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
)

func newDrainCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, reason string
		wait, asJSON    bool
		timeout         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain NODE --cluster C [--wait]",
		Short: "Move traffic off a node before maintenance; say when it is safe to stop",
		Long: `drain marks NODE drained in the topology store (it survives controller and
proxy restarts and is shown in status): proxies stop routing new sessions to
it on replica listeners and close idle sessions' connections to it, and the
controller never promotes it. If NODE is the primary, a coordinated
switchover moves the primary role away first (statements are held at
transaction boundaries and released on the new primary; clients see no
error). With --wait, drain returns once no proxy reports a client session on
NODE and says it is safe to stop (exit 1 on timeout). Undo with
"switchyard undrain NODE".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer done()
			out := cmd.OutOrStdout()
			o := controller.DrainOptions{By: operatorName(), Reason: reason, Wait: wait}
			if !asJSON {
				o.Progress = func(line string) { fmt.Fprintln(out, line) }
			}
			res, err := controller.Drain(ctx, st, keys, cluster, args[0], o)
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(res)
			}
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			if wait && !res.Safe {
				return exitError{code: 1, msg: fmt.Sprintf("drain: %s is not safe to stop yet", args[0])}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the drained nodes document)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until no client session uses the node")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait in all (switchover and sessions)")
	return cmd
}

func newUndrainCmd(g *globalFlags) *cobra.Command {
	var cluster, reason string
	cmd := &cobra.Command{
		Use:   "undrain NODE --cluster C [--reason TEXT]",
		Short: "Undo drain: the node serves reads again and may be promoted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), 30*time.Second)
			if err != nil {
				return err
			}
			defer done()
			was, err := controller.UndrainBy(ctx, st, keys, cluster, args[0], operatorName(), reason)
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			if !was {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not drained\n", args[0])
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s undrained: it serves reads again once the controller sees it replicating, and may be promoted\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the undrain event)")
	return cmd
}
