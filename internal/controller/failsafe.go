package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// waitFailsafeWindow waits, in a failover that could not fence the old
// primary, until topo.FailsafeWindow has passed since the replicas' IO
// threads were stopped (stoppedAt). A proxy cut off from the store keeps
// routing writes to the old primary only while its direct checks find
// every replica replicating from it (internal/topo/FAILSAFE.md); a check
// confirms for FailsafeWindow from its start, so once this wait is over no
// such proxy routes to the old primary any more and the candidate may take
// writes. The controller cannot tell a proxy in failsafe from one that is
// gone (neither has a registration), so it always waits.
func (f *failoverRun) waitFailsafeWindow(ctx context.Context, stoppedAt time.Time) (string, error) {
	left := stoppedAt.Add(topo.FailsafeWindow).Sub(f.t.c.now())
	if left <= 0 {
		return fmt.Sprintf("%s since the IO threads stopped", topo.FailsafeWindow), nil
	}
	sleep(ctx, left)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("waited %s so that a proxy without its registration sees the stopped IO threads",
		left.Round(time.Millisecond)), nil
}
