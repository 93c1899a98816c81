package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Drain: planned maintenance moves traffic first. Draining a node marks it
// in the cluster's drained document (topo.DrainedNodes, in the store, so it
// outlives any controller or proxy): proxies take it out of the replica
// listeners at once and close idle sessions' connections to it, the
// controller never chooses it as a switchover candidate, and — when it is
// the primary — a coordinated switchover moves the primary role away
// first. The node is safe to stop once no proxy reports a client session on
// it (topo.ProxyRegistration.BackendSessions).

// DrainOptions are the operator's choices for Drain.
type DrainOptions struct {
	// By and Reason are recorded in the drained document.
	By, Reason string
	// Wait blocks until no proxy reports a session on the node (or ctx
	// ends).
	Wait bool
	// Progress, when set, receives one line per step.
	Progress func(line string)
}

// DrainResult says what Drain did.
type DrainResult struct {
	Node string `json:"node"`
	// Switchover is the switchover request when the node was the primary.
	Switchover *topo.Request `json:"switchover,omitempty"`
	// Sessions is the number of client sessions proxies still report on
	// the node when Drain returned (0 after a successful wait), and
	// ByProxy says where.
	Sessions int      `json:"sessions"`
	ByProxy  []string `json:"by_proxy,omitempty"`
	// Safe is true when the node is drained, not the primary, and no
	// session uses it.
	Safe bool `json:"safe"`
}

// Drain drains node of cluster (see the package comment above). Errors
// wrap ErrRequestFailed when the switchover away from the primary failed
// (the node stays drained for reads; undrain it to undo), or ctx's error
// when the wait ended first.
func Drain(ctx context.Context, st topo.Store, keys topo.Keys, cluster, node string, o DrainOptions) (DrainResult, error) {
	res := DrainResult{Node: node}
	say := func(format string, args ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, args...))
		}
	}
	var cs topo.ClusterState
	if _, err := topo.GetJSON(ctx, st, keys.ClusterState(cluster), &cs); err != nil {
		if errors.Is(err, topo.ErrNotFound) {
			return res, notFound(fmt.Sprintf("drain: cluster %s has no published state (is a controller running?)", cluster), ErrUnknownCluster)
		}
		return res, fmt.Errorf("drain: read state of cluster %s: %w", cluster, err)
	}
	if cs.Node(node) == nil {
		return res, notFound(fmt.Sprintf("drain: %s is not a node of cluster %s (its nodes: %s)", node, cluster, stateNodeNames(&cs)), ErrUnknownNode)
	}
	before, _, err := drainedNodes(ctx, st, keys, cluster)
	if err != nil {
		return res, fmt.Errorf("drain: read drained nodes of %s: %w", cluster, err)
	}
	_, wasDrained := before.Nodes[node]
	if err := setDrained(ctx, st, keys, cluster, node, &topo.DrainRecord{Since: time.Now().UTC(), By: o.By, Reason: o.Reason}); err != nil {
		return res, err
	}
	say("%s marked drained: no new session is routed to it on replica listeners, and it is never a switchover candidate", node)
	if !wasDrained {
		recordChange(ctx, st, keys, o.By, topo.Event{Cluster: cluster, Code: "drain", Node: node,
			Message: fmt.Sprintf("node %s drained by %s: %s", node, orDash(o.By), orDash(o.Reason))})
	}
	if cs.Primary == node {
		say("%s is the primary: switching over first (coordinated: statements are held, not failed)", node)
		req, err := RequestSwitchoverWith(ctx, st, keys, cluster, SwitchoverOptions{By: o.By})
		res.Switchover = &req
		for _, s := range req.Steps {
			say("  %s", s)
		}
		if err != nil {
			// Nothing is recorded as drained for a primary that could not
			// be moved: status must never call the writable primary safe
			// to stop.
			undo := ""
			if !wasDrained {
				if uerr := setDrained(ctx, st, keys, cluster, node, nil); uerr != nil {
					undo = fmt.Sprintf("; removing the drained mark failed too (%v): run `switchyard undrain --cluster %s %s`", uerr, cluster, node)
				} else {
					say("%s is NOT drained: it is still the primary (drained mark removed)", node)
				}
			}
			return res, fmt.Errorf("drain: %s not drained: still the primary, the switchover away from it failed: %w%s", node, err, undo)
		}
		say("primary is now %s (epoch %d)", req.Target, req.ToEpoch)
	}
	for {
		n, by, err := NodeSessions(ctx, st, keys, cluster, node)
		if err != nil {
			return res, err
		}
		res.Sessions, res.ByProxy = n, by
		if n == 0 {
			if _, err := topo.GetJSON(ctx, st, keys.ClusterState(cluster), &cs); err == nil && cs.Primary != node {
				res.Safe = true
				say("no client session uses %s on any proxy: it is safe to stop", node)
				return res, nil
			}
		}
		if !o.Wait {
			say("%d client sessions still use %s (%s); run with --wait to wait for them", n, node, strings.Join(by, ", "))
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("drain: %d sessions still use %s (%s): %w", n, node, strings.Join(by, ", "), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Undrain removes node from cluster's drained nodes: it serves reads again
// once the controller sees it replicating, and may be a candidate again.
// It reports whether the node was drained.
//
// A node that is neither drained nor a node of the cluster's published
// state is an error naming the cluster's nodes (a typo must not look like
// success); so is a cluster without a published state.
func Undrain(ctx context.Context, st topo.Store, keys topo.Keys, cluster, node string) (bool, error) {
	return UndrainBy(ctx, st, keys, cluster, node, "", "")
}

// UndrainBy is Undrain recording by (the actor) and reason in an undrain
// event of the cluster's log when the node was drained.
func UndrainBy(ctx context.Context, st topo.Store, keys topo.Keys, cluster, node, by, reason string) (bool, error) {
	d, _, err := drainedNodes(ctx, st, keys, cluster)
	if err != nil {
		return false, fmt.Errorf("undrain: %w", err)
	}
	if _, ok := d.Nodes[node]; !ok {
		cs, err := publishedState(ctx, st, keys, cluster)
		if err != nil {
			return false, fmt.Errorf("undrain: %w", err)
		}
		if cs.Node(node) == nil {
			return false, notFound(fmt.Sprintf("undrain: %s is not a node of cluster %s (its nodes: %s)", node, cluster, stateNodeNames(cs)), ErrUnknownNode)
		}
		return false, nil
	}
	if err := setDrained(ctx, st, keys, cluster, node, nil); err != nil {
		return true, err
	}
	recordChange(ctx, st, keys, by, topo.Event{Cluster: cluster, Code: "undrain", Node: node,
		Message: fmt.Sprintf("node %s undrained by %s: %s", node, orDash(by), orDash(reason))})
	return true, nil
}

// ErrUnknownNode is wrapped by operator calls given a node that is not in
// the cluster.
var ErrUnknownNode = errors.New("unknown node")

// notFoundError is msg, wrapping a sentinel for errors.Is.
type notFoundError struct {
	msg string
	err error
}

func (e *notFoundError) Error() string { return e.msg }
func (e *notFoundError) Unwrap() error { return e.err }

func notFound(msg string, sentinel error) error { return &notFoundError{msg: msg, err: sentinel} }

// recordChange writes an operator event for a change made outside the
// leader, with by as its actor; the change stands if the event cannot be
// written.
func recordChange(ctx context.Context, st topo.Store, keys topo.Keys, by string, ev topo.Event) {
	ev.Actor = by
	_ = RecordEvent(ctx, st, keys, orDash(by), ev)
}

// setDrained adds (rec != nil) or removes node in the drained document with
// compare-and-swap, retrying on conflicts.
func setDrained(ctx context.Context, st topo.Store, keys topo.Keys, cluster, node string, rec *topo.DrainRecord) error {
	for range 5 {
		d, v, err := drainedNodes(ctx, st, keys, cluster)
		if err != nil {
			return fmt.Errorf("read drained nodes of %s: %w", cluster, err)
		}
		if d.Nodes == nil {
			d.Nodes = map[string]topo.DrainRecord{}
		}
		if rec != nil {
			// An explicit drain replaces a node maintenance (which may
			// expire by itself); a drain already recorded stays as it is.
			if old, ok := d.Nodes[node]; ok && !old.Maintenance {
				return nil
			}
			d.Nodes[node] = *rec
		} else {
			delete(d.Nodes, node)
		}
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

// NodeSessions sums the client sessions every live proxy reports on node
// of cluster, and lists "proxy=n" for those with any.
func NodeSessions(ctx context.Context, st topo.Store, keys topo.Keys, cluster, node string) (int, []string, error) {
	kvs, err := st.List(ctx, keys.Proxies())
	if err != nil {
		return 0, nil, fmt.Errorf("list proxy registrations: %w", err)
	}
	total := 0
	var by []string
	for _, kv := range kvs {
		var reg topo.ProxyRegistration
		if decodeRegistration(kv.Value, &reg) != nil {
			continue
		}
		for _, b := range reg.BackendSessions {
			if b.Cluster == cluster && b.Node == node && b.Sessions > 0 {
				total += b.Sessions
				by = append(by, fmt.Sprintf("%s=%d", reg.ID, b.Sessions))
			}
		}
	}
	sort.Strings(by)
	return total, by, nil
}

// stateNodeNames lists the nodes of a published state, comma separated.
func stateNodeNames(cs *topo.ClusterState) string {
	names := make([]string, 0, len(cs.Nodes))
	for _, n := range cs.Nodes {
		names = append(names, n.Name)
	}
	if len(names) == 0 {
		return "none published"
	}
	return strings.Join(names, ", ")
}

// publishedState reads cluster's published state. A cluster without one is
// an error naming the clusters that have one (a mistyped --cluster).
func publishedState(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) (*topo.ClusterState, error) {
	var cs topo.ClusterState
	_, err := topo.GetJSON(ctx, st, keys.ClusterState(cluster), &cs)
	if errors.Is(err, topo.ErrNotFound) {
		return nil, unknownCluster(ctx, st, keys, cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("read state of cluster %s: %w", cluster, err)
	}
	return &cs, nil
}

// ErrUnknownCluster is wrapped by operator calls given a cluster that has
// no published state in the store.
var ErrUnknownCluster = errors.New("unknown cluster")

// knownCluster returns nil when cluster has a published state or is in the
// store's current config revision (a cluster just added, not published
// yet), else unknownCluster's error.
func knownCluster(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) error {
	_, err := st.Get(ctx, keys.ClusterState(cluster))
	if err == nil {
		return nil
	}
	if !errors.Is(err, topo.ErrNotFound) {
		return fmt.Errorf("read state of cluster %s: %w", cluster, err)
	}
	if _, cfg, _, cerr := configstore.Current(ctx, st, keys); cerr == nil && cfg.Cluster(cluster) != nil {
		return nil
	}
	return unknownCluster(ctx, st, keys, cluster)
}

// unknownCluster is the error for a cluster without a published state: it
// names the clusters that have one or are in the current config.
func unknownCluster(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) error {
	known := "none: is a controller running?"
	var names []string
	if kvs, err := st.List(ctx, keys.ClustersPrefix()); err == nil {
		for _, kv := range kvs {
			rest := strings.TrimPrefix(kv.Key, keys.ClustersPrefix())
			if name, ok := strings.CutSuffix(rest, "/state"); ok && !strings.Contains(name, "/") {
				names = append(names, name)
			}
		}
	}
	if _, cfg, _, err := configstore.Current(ctx, st, keys); err == nil {
		for _, cl := range cfg.Clusters {
			if !slices.Contains(names, cl.Name) {
				names = append(names, cl.Name)
			}
		}
	}
	if len(names) > 0 {
		sort.Strings(names)
		known = strings.Join(names, ", ")
	}
	return fmt.Errorf("%w %q: not in the config and no published state in the store (known clusters: %s)", ErrUnknownCluster, cluster, known)
}
