package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/probe"
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
// gone (neither has a registration), so it waits unless the old primary's
// server is down (oldPrimaryDown).
func (f *failoverRun) waitFailsafeWindow(ctx context.Context, stoppedAt time.Time) (string, error) {
	if why := f.oldPrimaryDown(ctx); why != "" {
		return "not needed: " + why, nil
	}
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

// oldPrimaryDown returns why no proxy can be writing to the old primary,
// or "" when one might: its server refused the controller's connections
// (port closed: mysqld is not running, as after a crash or kill) when the
// failover refreshed and refuses them again now, and no replica then had
// its IO thread connected to it. A proxy in failsafe confirms the primary
// only while every replica's IO thread is connected to it, so its
// confirmation ended when they lost it, and a server that is not running
// takes no writes meanwhile; waiting out the window would only delay a
// crash failover. A primary that merely does not answer (timeout, network)
// gets the window.
func (f *failoverRun) oldPrimaryDown(ctx context.Context) string {
	op := f.probes[f.old]
	if op.ErrorKind != string(probe.KindRefused) {
		return ""
	}
	old := f.cl.Node(f.old)
	if old == nil {
		return ""
	}
	for name, p := range f.probes {
		if name != f.old && complete(p) && p.Replicating && p.IORunning == "Yes" &&
			analysis.SameAddress(p.SourceHost, p.SourcePort, old.Address) {
			return ""
		}
	}
	pr, err := f.prober(f.old)
	if err != nil {
		return ""
	}
	if res := pr.ProbeResult(ctx); res.Kind != probe.KindRefused {
		return ""
	}
	return f.old + " refuses connections (its server is not running) and no replica's IO thread is connected to it"
}

// failsafeEventRecent bounds which ended failsafe periods a term reports:
// a proxy keeps its last period in its registration until it restarts, and
// a new leader must not report old periods again.
const failsafeEventRecent = 5 * time.Minute

// reportFailsafe writes an alarm event for every failsafe period a proxy
// reports in its registration once it is registered again (the period has
// ended): which primary and epoch it kept routing to without the store, from
// when to when, and why it ended. It runs for the term.
func (t *term) reportFailsafe(ctx context.Context) {
	prefix := t.c.keys.Proxies()
	for ctx.Err() == nil {
		initial, events, err := t.c.store.Watch(ctx, prefix)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for _, kv := range initial {
			t.failsafeEvents(ctx, prefix, kv)
		}
		for ev := range events {
			if ev.Err != nil {
				break
			}
			if ev.Type == topo.EventPut {
				t.failsafeEvents(ctx, prefix, ev.KV)
			}
		}
	}
}

func (t *term) failsafeEvents(ctx context.Context, prefix string, kv topo.KV) {
	var reg topo.ProxyRegistration
	if decodeJSON(kv.Value, &reg) != nil || len(reg.Failsafe) == 0 {
		return
	}
	id := strings.TrimPrefix(kv.Key, prefix)
	now := t.c.now()
	for cluster, p := range reg.Failsafe {
		if p.Until.IsZero() || now.Sub(p.Until) > failsafeEventRecent {
			continue
		}
		t.fo.events.emitOnce(ctx, "failsafe|"+id+"|"+cluster+"|"+p.Since.Format(time.RFC3339Nano), failsafeEventRecent, topo.Event{
			Cluster: cluster, Kind: topo.EventAlarm, Code: topo.AlarmProxyFailsafe, Node: p.Primary, Epoch: p.Epoch,
			Message: fmt.Sprintf("proxy %s routed writes to %s (epoch %d) without its registration in the topology store from %s to %s (%s), on its direct checks of every node (failsafe); ended: %s",
				id, p.Primary, p.Epoch, p.Since.Format(time.RFC3339), p.Until.Format(time.RFC3339),
				p.Until.Sub(p.Since).Round(100*time.Millisecond), p.Ended)})
	}
}
