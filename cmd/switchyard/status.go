package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/status"
)

// Exit codes of `switchyard status` besides 0 (the report was printed) and
// 1 (bad flags or config, or the store's content could not be read).
const (
	// exitStoreUnreachable: no endpoint of the store could be reached
	// (refused, timeout, unresolvable host).
	exitStoreUnreachable = 2
	// exitStoreDenied: the store answered and refused the credentials or
	// the TLS handshake failed.
	exitStoreDenied = 3
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show clusters, nodes (role, lag, GTID position, last probe), proxies and the controller leader",
		Long: `Show clusters, nodes (role, lag, GTID position, last probe), proxies and the controller leader.

Exit status: 0 the report was printed; 1 bad flags or config, or the store's
content could not be read; 2 the store is unreachable (connection refused,
timeout, unresolvable host); 3 the store refused the credentials or the TLS
handshake failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := g.target()
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			// A plain TCP connect first: a refused connection is known
			// at once, without waiting for the etcd client's retries.
			if err := status.DialStore(cmd.Context(), t.endpoints, t.dial); err != nil {
				return storeExit(err)
			}
			ctx, st, keys, done, err := g.storeFor(cmd.Context(), 10*time.Second)
			if err != nil {
				return storeExit(status.ClassifyStoreError(status.EndpointAddr(t.endpoints[0]), err))
			}
			defer done()
			r, err := status.Collect(ctx, st, keys, time.Now())
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return storeExit(status.ClassifyStoreError(status.EndpointAddr(t.endpoints[0]), err))
				}
				return exitError{code: 1, msg: err.Error()}
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

// storeExit maps a store failure to the command's exit status.
func storeExit(err error) error {
	code := exitStoreUnreachable
	var se *status.StoreError
	if errors.As(err, &se) && (se.Kind == status.StoreAuth || se.Kind == status.StoreTLS) {
		code = exitStoreDenied
	} else if errors.As(err, &se) && se.Kind == status.StoreOther {
		code = 1
	}
	return exitError{code: code, msg: err.Error()}
}
