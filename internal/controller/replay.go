package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// RequestMaxAge bounds how old a pending operator request may be when the
// leader first sees it (by its signed created_at, against the leader's
// clock; the same bound applies to a creation time in the future, for clock
// skew). With an integrity keyring an older request is refused as a
// replay: a signed request written back under its own key long after it
// was handled cannot be told from the original by its MAC.
const RequestMaxAge = 5 * time.Minute

// handledSet is the controller's memory of the operator requests it
// handled within RequestMaxAge (kept across terms), and the highest
// counter of the store's record (topo.HandledRequests) it has seen.
type handledSet struct {
	mu      sync.Mutex
	ids     map[string]time.Time
	counter int64
}

// errReplay wraps the refusals of replayed requests; it wraps
// topo.ErrIntegrity.
var errReplay = fmt.Errorf("%w: replayed request", topo.ErrIntegrity)

// admitRequest decides whether a verified pending request may be acted
// on, with an integrity keyring set (without one there is nothing to
// protect: anyone who can write to etcd can forge a request). noticed is
// when the leader first saw it. A request older than RequestMaxAge, or one
// already handled by this process or (per the store's record) by another
// leader, is refused: the error wraps errReplay. Otherwise its id is
// recorded as handled, in memory and in the signed record, before it is
// acted on; failing to write the record is an error that does not wrap
// errReplay (the request is not acted on either).
func (t *term) admitRequest(ctx context.Context, req topo.Request, noticed time.Time) error {
	if topo.Integrity() == nil {
		return nil
	}
	age := noticed.Sub(req.CreatedAt)
	if age > RequestMaxAge || -age > RequestMaxAge {
		return fmt.Errorf("%w: it was created at %s, %s before the leader saw it (requests older than %s are refused, "+
			"as a signed request written back into the store would be carried out again)",
			errReplay, req.CreatedAt.Format(time.RFC3339), age.Round(time.Second), RequestMaxAge)
	}
	h := &t.c.handled
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, seen := h.ids[req.ID]; seen {
		return fmt.Errorf("%w: this controller already handled request %s (a signed request written back into the store)", errReplay, req.ID)
	}
	key := t.c.keys.HandledRequests()
	for attempt := 0; ; attempt++ {
		rec := topo.HandledRequests{}
		var version topo.Version
		kv, err := t.c.store.Get(ctx, key)
		switch {
		case errors.Is(err, topo.ErrNotFound):
		case err != nil:
			return fmt.Errorf("read the record of handled requests %s: %w", key, err)
		default:
			version = kv.Version
			r, derr := topo.DecodeHandledRequests(kv.Value)
			switch {
			case derr != nil:
				t.log.Error("the record of handled operator requests fails its integrity check; it is replaced by this leader's",
					"key", key, "err", derr)
			case r.Counter < h.counter:
				t.log.Error("the record of handled operator requests is older than one this controller saw (written back); it is replaced by this leader's",
					"key", key, "counter", r.Counter, "seen", h.counter)
			default:
				rec = r
				h.counter = r.Counter
			}
		}
		if _, seen := rec.IDs[req.ID]; seen {
			h.remember(req.ID, req.CreatedAt)
			return fmt.Errorf("%w: request %s was already handled by controller %s (a signed request written back into the store)",
				errReplay, req.ID, orDash(rec.Leader))
		}
		now := t.c.now()
		ids := map[string]time.Time{}
		for id, at := range rec.IDs {
			ids[id] = at
		}
		for id, at := range h.ids {
			ids[id] = at
		}
		ids[req.ID] = req.CreatedAt
		for id, at := range ids {
			if now.Sub(at) > 2*RequestMaxAge {
				delete(ids, id)
			}
		}
		out := topo.HandledRequests{Counter: h.counter + 1, IDs: ids, UpdatedAt: now, Leader: t.c.id}
		data, err := topo.EncodeHandledRequests(&out)
		if err != nil {
			return err
		}
		if version == 0 {
			_, err = t.leader.Create(ctx, key, data)
		} else {
			_, err = t.leader.Update(ctx, key, data, version)
		}
		if err == nil {
			h.counter = out.Counter
			h.ids = ids
			return nil
		}
		if (errors.Is(err, topo.ErrBadVersion) || errors.Is(err, topo.ErrExists) || errors.Is(err, topo.ErrNotFound)) && attempt < 3 {
			continue
		}
		return fmt.Errorf("record request %s as handled in %s: %w", req.ID, key, err)
	}
}

// remember adds id to the in-memory set (h.mu held).
func (h *handledSet) remember(id string, at time.Time) {
	if h.ids == nil {
		h.ids = map[string]time.Time{}
	}
	h.ids[id] = at
}
