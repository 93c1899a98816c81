package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Maintenance comes in two scopes, both requested through the leader so
// that every change is an event (the history):
//
//   - Cluster maintenance (topo.ClusterState.Maintenance) blocks automatic
//     failover only; probing, repair, routing and manual switchover and
//     failover go on.
//   - Node maintenance (a topo.DrainRecord with Maintenance set) takes one
//     replica out of routing and candidacy like ProxySQL's OFFLINE_SOFT:
//     proxies route no new session to it on replica listeners and close
//     idle sessions' connections to it, and it is never promoted. The
//     primary cannot be put in maintenance: move the role away first
//     (`switchyard drain`, which switches over).
//
// Either may carry an expiry (MaintenanceOptions.For): the leader turns it
// off by itself at that time and writes a maintenance_expired event. A
// second "on" with another reason is refused unless Replace; the same
// reason again only moves the expiry. "off" when it is not on is an error.

// MaintenanceOptions are the operator's choices for RequestMaintenance.
type MaintenanceOptions struct {
	// On turns maintenance on (Reason required) or off.
	On bool
	// Node, when set, is the node to put in (or take out of) maintenance;
	// "" is the whole cluster.
	Node string
	// Reason says why (required with On); shown in status and the events.
	Reason string
	// For is how long maintenance lasts before the controller turns it off
	// by itself; 0 lasts until turned off. Must not be negative.
	For time.Duration
	// Replace lets On replace the reason of a maintenance already on.
	Replace bool
	// By names the operator (user@host) for the events.
	By string
}

// Maintenance event codes (topo.Event.Code, kind topo.EventOperator).
const (
	EventMaintenanceOn      = "maintenance_on"
	EventMaintenanceOff     = "maintenance_off"
	EventMaintenanceExpired = "maintenance_expired"
)

// RequestMaintenance turns maintenance of cluster (or of one node, o.Node)
// on or off through the leader and waits for the result, like
// RequestSwitchover. The error wraps ErrRequestFailed when the leader
// refused (already on with another reason and no Replace, not on, unknown
// node, the node is the primary); the request's Message says why.
func RequestMaintenance(ctx context.Context, st topo.Store, keys topo.Keys, cluster string, o MaintenanceOptions) (topo.Request, error) {
	action := "off"
	if o.On {
		action = "on"
		if strings.TrimSpace(o.Reason) == "" {
			return topo.Request{}, errors.New("maintenance on: a --reason is required (it is shown in status and the events)")
		}
	}
	if o.For < 0 {
		return topo.Request{}, fmt.Errorf("maintenance: --for %s is negative", o.For)
	}
	if !o.On && (o.For != 0 || o.Replace) {
		return topo.Request{}, errors.New("maintenance off: --for and --replace apply to on only")
	}
	return Submit(ctx, st, keys, topo.Request{Kind: topo.RequestMaintenance, Cluster: cluster, Action: action, Node: o.Node,
		Reason: o.Reason, For: o.For, Replace: o.Replace, By: o.By})
}

// MaintenanceHistory returns the maintenance events of cluster (on, off,
// expired; cluster and node scope), oldest first, at most limit (all when
// limit <= 0), from the event log (bounded to its newest events).
func MaintenanceHistory(ctx context.Context, st topo.Store, keys topo.Keys, cluster string, limit int) ([]topo.Event, error) {
	if _, err := publishedState(ctx, st, keys, cluster); err != nil {
		return nil, err
	}
	evs, err := ListEvents(ctx, st, keys, cluster, 0)
	if err != nil {
		return nil, err
	}
	var out []topo.Event
	for _, e := range evs {
		if strings.HasPrefix(e.Code, "maintenance_") {
			out = append(out, e)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// until is the expiry of a maintenance of duration d from now (nil: none).
func until(now time.Time, d time.Duration) *time.Time {
	if d <= 0 {
		return nil
	}
	u := now.Add(d).UTC()
	return &u
}

func describeUntil(u *time.Time) string {
	if u == nil {
		return "until turned off"
	}
	return "until " + u.UTC().Format(time.RFC3339)
}

func (t *term) serveMaintenance(ctx context.Context, req *topo.Request) bool {
	on := req.Action == "on"
	if !on && req.Action != "off" {
		req.Message = fmt.Sprintf("maintenance action %q is not on or off", req.Action)
		return false
	}
	if req.Node != "" {
		return t.serveNodeMaintenance(ctx, req, on)
	}
	cr, err := t.cluster(ctx, req.Cluster)
	if err != nil {
		req.Message = err.Error()
		return false
	}
	now := t.c.now()
	var refused string
	st, err := t.update(ctx, cr, func(st *topo.ClusterState) error {
		refused = ""
		m := st.Maintenance
		switch {
		case !on && m == nil:
			refused = fmt.Sprintf("maintenance is not on for cluster %s", req.Cluster)
		case on && m != nil && m.Reason != req.Reason && !req.Replace:
			refused = fmt.Sprintf("maintenance is already on for cluster %s since %s by %s: %q (%s); repeat with --replace to replace it",
				req.Cluster, m.Since.UTC().Format(time.RFC3339), orDash(m.By), m.Reason, describeUntil(m.Until))
		case on:
			since := now
			if m != nil && m.Reason == req.Reason {
				since = m.Since
			}
			st.Maintenance = &topo.Maintenance{Reason: req.Reason, Since: since, By: req.By, Until: until(now, req.For)}
		default:
			st.Maintenance = nil
		}
		if refused != "" {
			return errRefused
		}
		return nil
	})
	if refused != "" {
		req.Message = refused
		return false
	}
	if err != nil {
		req.Message = "maintenance not recorded: " + err.Error()
		return false
	}
	msg := fmt.Sprintf("maintenance mode off for cluster %s by %s: automatic failover (failover.mode %s) applies again", req.Cluster, orDash(req.By), t.modeOf(req.Cluster))
	code := EventMaintenanceOff
	if on {
		code = EventMaintenanceOn
		msg = fmt.Sprintf("maintenance mode on for cluster %s by %s (%s): %s; automatic failover is blocked, repair, routing and manual switchover/failover continue",
			req.Cluster, orDash(req.By), describeUntil(st.Maintenance.Until), req.Reason)
	}
	req.Message = msg
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: req.Cluster, Kind: topo.EventOperator, Code: code, Message: msg, Epoch: st.Epoch, Actor: req.By})
	return true
}

// errRefused ends an update whose request is refused; nothing is written.
var errRefused = errors.New("refused")

func (t *term) serveNodeMaintenance(ctx context.Context, req *topo.Request, on bool) bool {
	cl := t.c.config().Cluster(req.Cluster)
	cr, err := t.cluster(ctx, req.Cluster)
	if err != nil || cl == nil {
		req.Message = fmt.Sprintf("unknown cluster %q", req.Cluster)
		return false
	}
	node := req.Node
	if cl.Node(node) == nil {
		var names []string
		for _, n := range cl.Nodes {
			names = append(names, n.Name)
		}
		req.Message = fmt.Sprintf("%s is not a node of cluster %s (its nodes: %s)", node, cl.Name, strings.Join(names, ", "))
		return false
	}
	cr.mu.Lock()
	primary, epoch := "", int64(0)
	if cr.state != nil {
		primary, epoch = cr.state.Primary, cr.state.Epoch
	}
	cr.mu.Unlock()
	d, _, err := t.c.drained(ctx, cl.Name)
	if err != nil {
		req.Message = "read drained nodes: " + err.Error()
		return false
	}
	rec, has := d.Nodes[node]
	now := t.c.now()
	var msg, code string
	switch {
	case !on && (!has || !rec.Maintenance):
		req.Message = fmt.Sprintf("maintenance is not on for node %s of cluster %s", node, cl.Name)
		if has {
			req.Message += fmt.Sprintf(" (it is drained since %s: `switchyard undrain %s --cluster %s`)", rec.Since.UTC().Format(time.RFC3339), node, cl.Name)
		}
		return false
	case !on:
		if err := setDrained(ctx, t.c.store, t.c.keys, cl.Name, node, nil); err != nil {
			req.Message = "maintenance not turned off: " + err.Error()
			return false
		}
		code = EventMaintenanceOff
		msg = fmt.Sprintf("maintenance off for node %s of cluster %s by %s (was on since %s: %s): it serves reads again once the controller sees it replicating",
			node, cl.Name, orDash(req.By), rec.Since.UTC().Format(time.RFC3339), rec.Reason)
	case primary == node:
		req.Message = fmt.Sprintf("%s is the primary of cluster %s: move the primary role away first with `switchyard drain %s --cluster %s` (a coordinated switchover) or `switchyard switchover --cluster %s`",
			node, cl.Name, node, cl.Name, cl.Name)
		return false
	case has && rec.Reason != req.Reason && !req.Replace:
		what := "drained"
		if rec.Maintenance {
			what = "in maintenance"
		}
		req.Message = fmt.Sprintf("node %s of cluster %s is already %s since %s by %s: %q (%s); repeat with --replace to replace it",
			node, cl.Name, what, rec.Since.UTC().Format(time.RFC3339), orDash(rec.By), rec.Reason, describeUntil(rec.Until))
		return false
	default:
		nr := topo.DrainRecord{Since: now.UTC(), By: req.By, Reason: req.Reason, Maintenance: true, Until: until(now, req.For)}
		if has && rec.Reason == req.Reason {
			nr.Since = rec.Since
		}
		if err := putDrained(ctx, t.c.store, t.c.keys, cl.Name, node, nr); err != nil {
			req.Message = "maintenance not recorded: " + err.Error()
			return false
		}
		code = EventMaintenanceOn
		msg = fmt.Sprintf("maintenance on for node %s of cluster %s by %s (%s): %s; no new session is routed to it, idle sessions leave it, it is never promoted",
			node, cl.Name, orDash(req.By), describeUntil(nr.Until), req.Reason)
	}
	req.Message = msg
	_ = t.fo.events.emit(ctx, topo.Event{Cluster: cl.Name, Kind: topo.EventOperator, Code: code, Node: node, Message: msg, Epoch: epoch, Actor: req.By})
	return true
}

// putDrained writes (adds or replaces) node's record in cluster's drained
// document with compare-and-swap, retrying on conflicts.
func putDrained(ctx context.Context, st topo.Store, keys topo.Keys, cluster, node string, rec topo.DrainRecord) error {
	for range 5 {
		d, v, err := drainedNodes(ctx, st, keys, cluster)
		if err != nil {
			return fmt.Errorf("read drained nodes of %s: %w", cluster, err)
		}
		if d.Nodes == nil {
			d.Nodes = map[string]topo.DrainRecord{}
		}
		d.Nodes[node] = rec
		err = writeDrained(ctx, st, keys, cluster, d, v)
		if err == nil {
			return nil
		}
		if !errors.Is(err, topo.ErrBadVersion) && !errors.Is(err, topo.ErrExists) && !errors.Is(err, topo.ErrNotFound) {
			return fmt.Errorf("write drained nodes of %s: %w", cluster, err)
		}
	}
	return fmt.Errorf("write drained nodes of %s: it kept changing; retry", cluster)
}

// expireMaintenance turns off, once their Until has passed, the cluster's
// maintenance and each node maintenance (or drain) that has an expiry, with
// a maintenance_expired event for each.
func (t *term) expireMaintenance(ctx context.Context, cluster string, cr *clusterRun, st *topo.ClusterState) {
	now := t.c.now()
	if m := st.Maintenance; m != nil && m.Until != nil && !now.Before(*m.Until) {
		var was *topo.Maintenance
		nst, err := t.update(ctx, cr, func(s *topo.ClusterState) error {
			was = s.Maintenance
			if was == nil || was.Until == nil || now.Before(*was.Until) {
				return errRefused // turned off or extended meanwhile
			}
			s.Maintenance = nil
			return nil
		})
		if err == nil {
			msg := fmt.Sprintf("maintenance mode of cluster %s expired at %s (on since %s by %s: %s): automatic failover (failover.mode %s) applies again",
				cluster, was.Until.UTC().Format(time.RFC3339), was.Since.UTC().Format(time.RFC3339), orDash(was.By), was.Reason, t.modeOf(cluster))
			t.log.Info("maintenance expired", "cluster", cluster, "reason", was.Reason)
			_ = t.fo.events.emit(ctx, topo.Event{Cluster: cluster, Kind: topo.EventOperator, Code: EventMaintenanceExpired, Message: msg, Epoch: nst.Epoch})
		} else if !errors.Is(err, errRefused) && ctx.Err() == nil {
			t.log.Warn("cannot turn off expired maintenance", "cluster", cluster, "err", err)
		}
	}
	d, v, err := t.c.drained(ctx, cluster)
	if err != nil || len(d.Nodes) == 0 {
		return
	}
	var expired []string
	for name, rec := range d.Nodes {
		if rec.Until != nil && !now.Before(*rec.Until) {
			expired = append(expired, name)
		}
	}
	if len(expired) == 0 {
		return
	}
	old := make(map[string]topo.DrainRecord, len(expired))
	for _, name := range expired {
		old[name] = d.Nodes[name]
		delete(d.Nodes, name)
	}
	if err := writeDrained(ctx, t.c.store, t.c.keys, cluster, d, v); err != nil {
		if ctx.Err() == nil && !errors.Is(err, topo.ErrBadVersion) {
			t.log.Warn("cannot remove expired node maintenance", "cluster", cluster, "err", err)
		}
		return // a conflict: the next round tries again
	}
	for _, name := range expired {
		rec := old[name]
		msg := fmt.Sprintf("maintenance of node %s of cluster %s expired at %s (on since %s by %s: %s): it serves reads again once the controller sees it replicating",
			name, cluster, rec.Until.UTC().Format(time.RFC3339), rec.Since.UTC().Format(time.RFC3339), orDash(rec.By), rec.Reason)
		t.log.Info("node maintenance expired", "cluster", cluster, "node", name, "reason", rec.Reason)
		_ = t.fo.events.emit(ctx, topo.Event{Cluster: cluster, Kind: topo.EventOperator, Code: EventMaintenanceExpired, Node: name, Message: msg, Epoch: st.Epoch})
	}
}
