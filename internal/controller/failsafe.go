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
// primary, until no proxy cut off from the store can still route writes to
// it. Such a proxy routes to the old primary only on a direct check that
// started less than topo.FailsafeValidity ago and found every replica
// replicating from it with its IO thread running and having received
// something within topo.FailsafeProgress of the check's start
// (internal/topo/FAILSAFE.md). So the wait ends at the earlier of
//   - topo.FailsafeWindow after the IO threads were stopped (stoppedAt):
//     a check started later sees a stopped thread;
//   - failsafeClearAt of the replicas' progress: when every replica's IO
//     progress mark was unchanged from a moment L to a read after its IO
//     thread stopped, no check can pass after L + FailsafeProgress +
//     FailsafeValidity (a failover decided on the replicas' silence is
//     already past it).
//
// The controller cannot tell a proxy in failsafe from one that is gone
// (neither has a registration), so it waits unless the old primary's
// server is down (oldPrimaryDown).
func (f *failoverRun) waitFailsafeWindow(ctx context.Context, stoppedAt time.Time) (string, error) {
	if why := f.oldPrimaryDown(ctx); why != "" {
		return "not needed: " + why, nil
	}
	deadline := stoppedAt.Add(topo.FailsafeWindow)
	clear, why := failsafeClearAt(f.progressEvidence(ctx))
	by := fmt.Sprintf("%s after the IO threads stopped (%s)", topo.FailsafeWindow, why)
	if !clear.IsZero() && clear.Before(deadline) {
		deadline = clear
		by = "the replicas' silence: " + why
	}
	left := deadline.Sub(f.t.c.now())
	if left <= 0 {
		return "no proxy without its registration can still confirm " + f.old + ", by " + by, nil
	}
	sleep(ctx, left)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("waited %s so that a proxy without its registration can no longer confirm %s, by %s",
		left.Round(time.Millisecond), f.old, by), nil
}

// progressEvidence is what one replica's probes say about when its IO
// thread last received anything.
type progressEvidence struct {
	node string
	// lastBy: the replica's IO progress mark (topo.IOProgressMark) was the
	// same from this moment until a read at which its IO thread was
	// stopped, so it received nothing after lastBy. Zero when not proven.
	lastBy time.Time
	// period is its heartbeat period (Slave_heartbeat_period).
	period time.Duration
	// why says why lastBy is not proven.
	why string
}

// progressEvidence probes every replica that a proxy's failsafe check
// requires progress of (every node but the old primary that is not
// quarantined) after their IO threads were stopped, and returns what their
// probes prove about their last progress: the IO thread must have been
// running (Yes) when the failover refreshed — an IO thread that dropped its
// connection may reconnect, and a reconnect may start
// Slave_received_heartbeats again — and the mark seen now must be the one
// the controller has seen since ioAt (the end of the probe that first read
// it), with the IO thread stopped and the source the old primary.
func (f *failoverRun) progressEvidence(ctx context.Context) []progressEvidence {
	f.cr.mu.Lock()
	var quarantined map[string]string
	if f.cr.state != nil {
		quarantined = f.cr.state.Quarantined
	}
	f.cr.mu.Unlock()
	old := f.cl.Node(f.old)
	var names []string
	for _, n := range f.cl.Nodes {
		if n.Name != f.old && quarantined[n.Name] == "" {
			names = append(names, n.Name)
		}
	}
	post := f.t.probeNodes(ctx, f.cfg, f.cl, names)
	f.m.observe(post, f.t.c.now())
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	out := make([]progressEvidence, 0, len(names))
	for _, name := range names {
		p := post[name]
		e := progressEvidence{node: name, period: topo.HeartbeatPeriodOf(p)}
		switch {
		case f.probes[name].IORunning != "Yes":
			e.why = "IO thread " + orDash(f.probes[name].IORunning) + " when the failover started (not silence)"
		case !complete(p):
			e.why = "not reached after the IO threads stopped"
		case !p.Replicating || old == nil || !analysis.SameAddress(p.SourceHost, p.SourcePort, old.Address):
			e.why = "not replicating from " + f.old
		case p.IORunning != "No" && f.cut(name) == nil:
			// A cut IO thread (ioCut) still shows Yes while it exits,
			// but reads nothing more since the KILL returned.
			e.why = "IO thread " + orDash(p.IORunning) + ", not stopped"
		case f.m.ioSig[name] != topo.IOProgressMark(p) || f.m.ioAt[name].IsZero():
			e.why = "no progress mark recorded"
		default:
			e.lastBy = f.m.ioAt[name]
		}
		out = append(out, e)
	}
	return out
}

// failsafeClearAt returns the moment after which no proxy's failsafe check
// can pass on the old primary any more, given every required replica's
// evidence (pure): max over the replicas of lastBy +
// topo.FailsafeProgress(period) + topo.FailsafeValidity. A pass started at
// c needs progress of each of them after c − FailsafeProgress, that is
// before lastBy, so c < lastBy + FailsafeProgress, and it lasts
// FailsafeValidity. (One replica would be enough; every one is required so
// that a proxy whose state quarantines a node the controller's does not is
// covered too.) Zero, with why, when a replica proves nothing or requires
// no progress (heartbeats off), or there is no replica; otherwise why
// names the least silence.
func failsafeClearAt(ev []progressEvidence) (time.Time, string) {
	if len(ev) == 0 {
		return time.Time{}, "no replica to go by"
	}
	var at time.Time
	var latest string
	for _, e := range ev {
		if e.lastBy.IsZero() {
			return time.Time{}, e.node + ": " + e.why
		}
		need := topo.FailsafeProgress(e.period)
		if need == 0 {
			return time.Time{}, e.node + ": heartbeats off (no progress required by a proxy's check)"
		}
		if t := e.lastBy.Add(need + topo.FailsafeValidity); t.After(at) {
			at = t
			latest = fmt.Sprintf("%s, progress within %s needed, pass valid %s", e.node, need, topo.FailsafeValidity)
		}
	}
	return at, "no replica received anything from its last progress until its IO thread stopped (latest bound: " + latest + ")"
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
	if decodeRegistration(kv.Value, &reg) != nil || len(reg.Failsafe) == 0 {
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
