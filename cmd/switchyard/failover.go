package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func newFailoverCmd(g *globalFlags) *cobra.Command {
	var (
		cluster, to, reason string
		plan, force, asJSON bool
		forceReachable      bool
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "failover --cluster C [--to NODE] [--plan] [--force-stale] [--force] [--reason TEXT]",
		Short: "Emergency failover: promote a replica when the primary is lost",
		Long: `failover asks the controller leader to replace the primary of a cluster now,
whatever failover.mode says (manual mode means exactly this: a human decides).

The leader probes every node afresh and plans: candidates are ordered by GTID
position (what each replica holds once its relay log is applied), then by
promotion rule; must_not, quarantined, unreachable and errant-GTID nodes,
replicas whose SQL thread is stopped, replicas whose last lag exceeds
failover.max_lag and replicas behind another reachable replica are rejected.
Then: a reachable old primary is fenced (read_only=ON, client sessions
killed), otherwise the leader waits until every proxy applied the new epoch
or lost its lease; replication IO threads are stopped, the candidate applies
its whole relay log, is promoted and must accept a write by the application
user; the other replicas are repointed; the new primary is published and
automatic failover is blocked for failover.block_period (see "ack").

A candidate whose received position is behind the promotion floor (the
highest GTID position the controller ever recorded on the primary, kept in
etcd) would lose acknowledged writes and is refused, whatever else is down.
Once the primary is dead, a replica's lag is what it received but has not
applied yet; the failover applies it before promotion (Seconds_Behind_Master
measured before the death does not count).

A primary that is healthy and reachable is not failed over: use "switchyard
switchover" (which loses nothing and fails no statement), or add --force
with a --reason.

--plan prints what would happen (the promotion floor, each candidate's
position, why the others were rejected, the estimated data loss as missing
GTIDs) without acting. --force-stale lets a candidate that is behind the
floor, behind another replica or lagging through; the floor is then reset to
the new primary's position. Both --force-stale and --force need --reason,
which is recorded in the events.

Exit status: 0 the failover (or the plan) is done; 2 refused, nothing was
changed ("failover refused: <why>; override: <flags>", "none" when no flag
lets it through; also --plan of a failover that would be refused); 1
anything else (bad flags, no controller leader, the failover failed, timed
out or was rolled back).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required")
			}
			if force && reason == "" {
				return fmt.Errorf("--force-stale needs --reason (recorded in the events)")
			}
			if forceReachable && reason == "" {
				return fmt.Errorf("--force needs --reason (recorded in the events)")
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer done()
			req, err := controller.RequestFailover(ctx, st, keys, cluster, controller.FailoverOptions{
				Target: to, PlanOnly: plan, Force: force, ForceReachable: forceReachable, Reason: reason, By: operatorName(),
			})
			if _, werr := withdrawOnTimeout(cmd.Context(), st, keys, "failover", cluster, req, err, timeout); werr != nil {
				return werr
			}
			out := cmd.OutOrStdout()
			if asJSON {
				_ = writeJSON(out, req)
			} else {
				printFailover(out, req)
			}
			if err != nil {
				if req.Message == "" {
					return err
				}
				msg := req.Message
				if req.Plan != nil && req.Plan.Cluster != "" {
					msg, _, _ = strings.Cut(msg, "\n") // the plan was printed above (or is in the JSON)
				}
				return requestExit("failover", req, msg)
			}
			// The plan of a failover that would be refused (a healthy,
			// reachable primary without --force) exits as the failover
			// itself would: refused.
			if req.PlanOnly {
				for _, why := range controller.FailoverPlanRefusals(req.Plan, forceReachable) {
					if why == req.Plan.Warning {
						return exitError{code: exitRefused, msg: "failover would be refused: " + why + "; override: " + overrideText(req.Plan.Override)}
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cluster, "cluster", "", "cluster name (required)")
	f.StringVar(&to, "to", "", "node to promote (default: the most advanced eligible replica)")
	f.BoolVar(&plan, "plan", false, "print the plan (candidate, rejections, estimated loss) without acting")
	f.BoolVar(&force, "force-stale", false, "accept a candidate that is behind another replica or lagging (needs --reason)")
	f.BoolVar(&forceReachable, "force", false, "fail over even though the primary is healthy and reachable (needs --reason; prefer switchover)")
	f.StringVar(&reason, "reason", "", "why (required with --force-stale and --force; recorded in the events)")
	f.DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the controller to finish")
	f.BoolVar(&asJSON, "json", false, "print the request record (plan, steps, message) as JSON")
	return cmd
}

func printFailover(w io.Writer, req topo.Request) {
	if req.Plan != nil && req.Plan.Cluster != "" {
		fmt.Fprint(w, analysis.FormatPlan(*req.Plan))
	}
	if req.PlanOnly {
		fmt.Fprintln(w, "(plan only: nothing was changed)")
		return
	}
	for _, s := range req.Steps {
		fmt.Fprintln(w, "  "+s)
	}
	if req.State == topo.RequestDone {
		fmt.Fprintf(w, "failover done: %s\n", req.Message)
	}
}

// operatorName is "user@host" for the events.
func operatorName() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}

// requestExit is the exit of a switchover or failover request that did not
// finish done: a refusal (a safety check, a veto hook or another operation
// said no before anything changed) exits exitRefused with "<kind> refused:
// <why>; override: <flags>"; anything else exits 1 with "<kind> <result>:
// <message>".
func requestExit(kind string, req topo.Request, msg string) error {
	why, refused := strings.CutPrefix(msg, "refused: ")
	if req.Result != "" {
		refused = req.Result == topo.RequestResultRefused
	}
	if refused {
		why = strings.TrimPrefix(why, "refused ") // "refused by veto hook ..."
		return exitError{code: exitRefused, msg: fmt.Sprintf("%s refused: %s; override: %s", kind, why, overrideText(req.Override))}
	}
	result := req.Result
	if result == "" || result == topo.RequestResultDone {
		result = req.State
	}
	return exitError{code: 1, msg: fmt.Sprintf("%s %s: %s", kind, result, msg)}
}

// overrideText words a refusal's override ("none" when no flag lets it
// through).
func overrideText(o string) string {
	if o == "" {
		return "none (no flag lets this through: remove the cause and retry)"
	}
	return o
}
