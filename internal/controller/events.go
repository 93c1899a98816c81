package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// maxEvents is how many events the log keeps per cluster; older ones are
// deleted as new ones are written.
const maxEvents = 500

// eventRelog is how often an unchanged non-decision ("not failing over
// because ...") is written again while its condition lasts.
const eventRelog = time.Minute

// eventLog writes a cluster's events under Keys.Events with the leader's
// conditional create, keeps the log bounded and suppresses repeats.
type eventLog struct {
	t *term

	mu   sync.Mutex
	seq  uint64
	last map[string]eventMark   // dedup key → last written
	keys map[string][]string    // cluster → event keys in the store, oldest first
	seen map[string]bool        // clusters whose keys were listed
	tail map[string]*topo.Event // cluster → last event written
}

type eventMark struct {
	at  time.Time
	msg string
}

func newEventLog(t *term) *eventLog {
	return &eventLog{t: t, last: map[string]eventMark{}, keys: map[string][]string{}, seen: map[string]bool{}, tail: map[string]*topo.Event{}}
}

// emit writes one event now. The write is conditioned on leadership: an
// error wrapping topo.ErrNotLeader means this controller must stop acting.
// Every event is also logged.
func (e *eventLog) emit(ctx context.Context, ev topo.Event) error {
	c := e.t.c
	ev.At = c.now()
	ev.Leader = c.id
	e.mu.Lock()
	e.seq++
	ev.ID = topo.EventID(ev.At, e.seq)
	e.mu.Unlock()
	level := slog.LevelInfo
	switch ev.Kind {
	case topo.EventAlarm:
		level = slog.LevelError
	case topo.EventNoAction, topo.EventDecision:
		level = slog.LevelWarn
	case topo.EventHook:
		if ev.Code == "hook_failed" {
			level = slog.LevelWarn
		}
	}
	e.t.log.Log(ctx, level, ev.Message, "cluster", ev.Cluster, "event", ev.Kind, "code", ev.Code, "node", ev.Node, "epoch", ev.Epoch)
	c.metrics.events.WithLabelValues(ev.Cluster, ev.Kind).Inc()
	data, err := topo.EncodeEvent(&ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	key := c.keys.Event(ev.Cluster, ev.ID)
	if _, err := e.t.leader.Create(ctx, key, data); err != nil {
		return fmt.Errorf("write event %s: %w", key, err)
	}
	e.mu.Lock()
	e.tail[ev.Cluster] = &ev
	e.mu.Unlock()
	e.trim(ctx, ev.Cluster, key)
	return nil
}

// emitOnce writes ev unless an event with the same dedup key was written
// within every (a non-decision repeated each probe round, with details such
// as probe latencies changing, would flood the log); it reports whether it
// wrote. The key names the condition; use a new key for a new reason.
func (e *eventLog) emitOnce(ctx context.Context, dedup string, every time.Duration, ev topo.Event) bool {
	now := e.t.c.now()
	e.mu.Lock()
	m, ok := e.last[dedup]
	if ok && now.Sub(m.at) < every {
		e.mu.Unlock()
		return false
	}
	e.last[dedup] = eventMark{at: now, msg: ev.Message}
	e.mu.Unlock()
	if err := e.emit(ctx, ev); err != nil && ctx.Err() == nil {
		e.t.log.Warn("cannot write event", "err", err)
	}
	return true
}

// forget drops the dedup marks starting with prefix, so the next
// occurrence of those conditions is written at once.
func (e *eventLog) forget(prefix string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.last {
		if strings.HasPrefix(k, prefix) {
			delete(e.last, k)
		}
	}
}

// trim deletes the oldest events of cluster beyond maxEvents.
func (e *eventLog) trim(ctx context.Context, cluster, added string) {
	e.mu.Lock()
	if !e.seen[cluster] {
		e.mu.Unlock()
		kvs, err := e.t.c.store.List(ctx, e.t.c.keys.Events(cluster))
		if err != nil {
			return
		}
		e.mu.Lock()
		if !e.seen[cluster] {
			e.seen[cluster] = true
			keys := make([]string, 0, len(kvs))
			for _, kv := range kvs {
				keys = append(keys, kv.Key)
			}
			e.keys[cluster] = keys
		}
	} else {
		e.keys[cluster] = append(e.keys[cluster], added)
	}
	keys := e.keys[cluster]
	sort.Strings(keys)
	var drop []string
	if len(keys) > maxEvents {
		drop = append(drop, keys[:len(keys)-maxEvents]...)
		keys = keys[len(keys)-maxEvents:]
	}
	e.keys[cluster] = keys
	e.mu.Unlock()
	for _, k := range drop {
		if err := e.t.c.store.Delete(ctx, k, 0); err != nil && !errors.Is(err, topo.ErrNotFound) && ctx.Err() == nil {
			e.t.log.Debug("cannot delete an old event", "key", k, "err", err)
		}
	}
}

// ListEvents returns the newest limit events of cluster (all when limit
// <= 0), oldest first. Values that do not decode are skipped.
func ListEvents(ctx context.Context, st topo.Store, keys topo.Keys, cluster string, limit int) ([]topo.Event, error) {
	kvs, err := st.List(ctx, keys.Events(cluster))
	if err != nil {
		return nil, fmt.Errorf("list events of cluster %s: %w", cluster, err)
	}
	if limit > 0 && len(kvs) > limit {
		kvs = kvs[len(kvs)-limit:]
	}
	out := make([]topo.Event, 0, len(kvs))
	for _, kv := range kvs {
		if ev, err := topo.DecodeEvent(kv.Value); err == nil {
			out = append(out, ev)
		}
	}
	return out, nil
}
