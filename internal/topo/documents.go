package topo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Writer is the write half shared by Store and Leader, so document helpers
// work for plain and leader-conditioned writes alike.
type Writer interface {
	Create(ctx context.Context, key string, value []byte) (Version, error)
	Update(ctx context.Context, key string, value []byte, expect Version) (Version, error)
}

var (
	_ Writer = Store(nil)
	_ Writer = Leader(nil)
)

// PutJSON encodes v as JSON and writes it to key through w: with expect 0
// it creates the key (ErrExists if present), otherwise it updates it if
// its version is still expect (ErrBadVersion, ErrNotFound). Through a
// Leader it fails with ErrNotLeader once leadership is lost. It returns the
// new version.
func PutJSON(ctx context.Context, w Writer, key string, v any, expect Version) (Version, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("topo: encode %s: %w", key, err)
	}
	if expect == 0 {
		return w.Create(ctx, key, b)
	}
	return w.Update(ctx, key, b, expect)
}

// ClusterStateEvent is one cluster's state as seen by WatchClusterStates.
type ClusterStateEvent struct {
	// Cluster is the cluster name taken from the key.
	Cluster string
	// State is the decoded state; nil when the key was deleted or its value
	// could not be decoded.
	State *ClusterState
	// Version is the key's version (for a deletion: the deleting write's).
	Version Version
	// Err is set when the value could not be decoded (keep the last good
	// state; the watch goes on) or when the watch failed (the channel is
	// closed after it; watch again).
	Err error
}

// WatchClusterStates watches every cluster's state document under k. It
// returns the current states (in cluster name order) and then every
// change, in order, until ctx ends. Other keys under the clusters prefix
// (requests) are ignored.
func WatchClusterStates(ctx context.Context, s Store, k Keys) ([]ClusterStateEvent, <-chan ClusterStateEvent, error) {
	prefix := k.ClustersPrefix()
	initial, ch, err := s.Watch(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	var states []ClusterStateEvent
	for _, kv := range initial {
		if ev, ok := clusterStateEvent(prefix, EventPut, kv); ok {
			states = append(states, ev)
		}
	}
	out := make(chan ClusterStateEvent)
	go func() {
		defer close(out)
		for wev := range ch {
			var ev ClusterStateEvent
			if wev.Err != nil {
				ev = ClusterStateEvent{Err: wev.Err}
			} else {
				var ok bool
				if ev, ok = clusterStateEvent(prefix, wev.Type, wev.KV); !ok {
					continue
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return states, out, nil
}

// clusterStateEvent decodes kv if its key is <prefix><cluster>/state.
func clusterStateEvent(prefix string, typ EventType, kv KV) (ClusterStateEvent, bool) {
	cluster, ok := strings.CutSuffix(strings.TrimPrefix(kv.Key, prefix), "/state")
	if !ok || cluster == "" || strings.Contains(cluster, "/") {
		return ClusterStateEvent{}, false
	}
	ev := ClusterStateEvent{Cluster: cluster, Version: kv.Version}
	if typ == EventDelete {
		return ev, true
	}
	var st ClusterState
	if err := json.Unmarshal(kv.Value, &st); err != nil {
		ev.Err = fmt.Errorf("topo: decode cluster state %s at version %d: %w", kv.Key, kv.Version, err)
		return ev, true
	}
	ev.State = &st
	return ev, true
}
