package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func newSwitchoverCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, to       string
		timeout           time.Duration
		asJSON            bool
		warm, requireWarm bool
		statusID          string
	)
	cmd := &cobra.Command{
		Use:   "switchover --cluster C [--to NODE] | --cluster C --status REQUEST_ID",
		Short: "Planned switchover: move the primary role to another node",
		Long: `switchover asks the controller leader to move the primary role of a cluster,
coordinated with every proxy so that clients see a short pause, not errors:
proxies hold new statements at transaction boundaries and acknowledge;
transactions already open finish (bounded by switchover.drain_timeout; at the
bound switchover.drain_mode aborts the switchover or ends those transactions);
the controller fences the old primary (read_only=ON, client sessions killed),
waits until the candidate has applied every GTID of the old primary (bounded
by switchover.catchup_timeout), promotes it and publishes it with the next
epoch; proxies move held and idle sessions (with their variables and prepared
statements) to it and release the held statements; then the other replicas
and the old primary are repointed. Any failure rolls back: the old primary is
writable again. Without --to the controller picks the most advanced serving
replica (promotion rule prefer first, never must_not, never a drained node).
The candidate's buffer-pool warmth is reported; --warm raises it first by
replaying the proxies' hot read set, --require-warm refuses a cold candidate.

When --timeout passes before the controller leader started the request, the
request is withdrawn (it never runs later); once started, the request id is
printed: the controller may still finish it, and --status REQUEST_ID shows
its state, steps and message later (finished requests are kept for a day).

Exit status: 0 done; 2 refused by a check before anything changed
("switchover refused: <why>; override: <flags>", "none" when no flag lets
it through); 1 anything else (bad flags, no controller leader, rolled back,
failed, still running after --timeout).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			if statusID != "" {
				return switchoverStatus(cmd, g, cluster, statusID, asJSON)
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer done()
			req, err := controller.RequestSwitchoverWith(ctx, st, keys, cluster,
				controller.SwitchoverOptions{Target: to, Warm: warm, RequireWarm: requireWarm, By: operatorName()})
			if cur, werr := withdrawOnTimeout(cmd.Context(), st, keys, "switchover", cluster, req, err, timeout); werr != nil {
				return werr
			} else if cur != nil {
				req = *cur
			}
			if req.ID != "" && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				// The request runs and the leader may still finish it:
				// say how to find out.
				for _, s := range req.Steps {
					fmt.Fprintln(cmd.OutOrStdout(), "  "+s)
				}
				return exitError{code: 1, msg: fmt.Sprintf("switchover request %s is still %s after --timeout %s; the controller may still finish it: "+
					"look it up with `switchyard switchover --cluster %s --status %s`", req.ID, req.State, timeout, cluster, req.ID)}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				_ = enc.Encode(req)
			} else {
				for _, s := range req.Steps {
					fmt.Fprintln(cmd.OutOrStdout(), "  "+s)
				}
			}
			if err != nil && !errors.Is(err, controller.ErrRequestFailed) {
				return err
			}
			if req.State != topo.RequestDone {
				return requestExit("switchover", req, req.Message)
			}
			if !asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "switchover done: cluster %s primary is now %s (epoch %d -> %d)\n", cluster, req.Target, req.FromEpoch, req.ToEpoch)
				if w := req.Warmth; w != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "candidate warmth: %.0f%% of the old primary's buffer-pool data pages (%d of %d), hit ratio %.3f\n",
						100*w.Fraction, w.DataPages, w.PrimaryDataPages, w.HitRatio)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&to, "to", "", "node to promote (default: chosen by the controller)")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait for the controller to finish")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the request record as JSON")
	cmd.Flags().BoolVar(&warm, "warm", false, "replay the proxies' hot read set on the candidate before promotion, until switchover.warm_threshold or switchover.warm_timeout")
	cmd.Flags().StringVar(&statusID, "status", "", "show the state, steps and message of switchover request REQUEST_ID (printed when --timeout passed) instead of starting one")
	cmd.Flags().BoolVar(&requireWarm, "require-warm", false, "refuse a candidate whose buffer pool is below switchover.warm_threshold of the primary's")
	return cmd
}

// switchoverStatus prints one switchover request; it exits 1 unless the
// request is done.
func switchoverStatus(cmd *cobra.Command, g *globalFlags, cluster, id string, asJSON bool) error {
	ctx, st, keys, done, err := g.storeFor(cmd.Context(), 10*time.Second)
	if err != nil {
		return err
	}
	defer done()
	req, err := controller.LookupRequest(ctx, st, keys, cluster, id)
	if err != nil {
		return exitError{code: 1, msg: "switchover --status: " + err.Error()}
	}
	out := cmd.OutOrStdout()
	if asJSON {
		_ = writeJSON(out, req)
	} else {
		fmt.Fprintf(out, "request %s (%s) of cluster %s: %s, created %s, updated %s\n", req.ID, req.Kind, req.Cluster, req.State,
			req.CreatedAt.Format(time.RFC3339), req.UpdatedAt.Format(time.RFC3339))
		for _, s := range req.Steps {
			fmt.Fprintln(out, "  "+s)
		}
		if req.Message != "" {
			fmt.Fprintln(out, req.Message)
		}
	}
	if req.State != topo.RequestDone {
		state := req.State
		if req.Result != "" && req.Result != req.State {
			state += " (" + req.Result + ")"
		}
		return exitError{code: 1, msg: fmt.Sprintf("switchover %s is %s", req.ID, state)}
	}
	return nil
}

// withdrawOnTimeout withdraws req (of kind, made by this command) when err
// says the command gave up waiting (--timeout) before the controller
// leader started it, so that it never runs later (when a stopped
// controller comes back) with nobody waiting. It returns the command's
// exit error once withdrawn; otherwise the request as it is now when it
// could read it (taken up meanwhile: it runs), else nil.
func withdrawOnTimeout(ctx context.Context, st topo.Store, keys topo.Keys, kind, cluster string, req topo.Request, err error, timeout time.Duration) (*topo.Request, error) {
	if req.ID == "" || req.State != topo.RequestPending || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cur, withdrawn, werr := controller.WithdrawRequest(wctx, st, keys, cluster, req.ID,
		fmt.Sprintf("withdrawn: the controller leader had not started it within --timeout %s; nothing was changed", timeout))
	if withdrawn {
		return nil, exitError{code: 1, msg: fmt.Sprintf("%s request %s was not started within --timeout %s: the controller leader had not taken it up (busy with another operation, or not running: check `switchyard status`); "+
			"the request was withdrawn and nothing was changed", kind, req.ID, timeout)}
	}
	if werr != nil {
		return nil, nil
	}
	return &cur, nil
}
