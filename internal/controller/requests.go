package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// ErrRequestFailed is returned (wrapped, with the request's message) by
// RequestSwitchover when the leader finished the request as Failed.
var ErrRequestFailed = errors.New("request failed")

// ErrNoLeader is returned by RequestSwitchover when no controller leader is
// running to execute the request.
var ErrNoLeader = errors.New("no controller leader is running")

// finishedRetention is how long finished requests are kept in the store.
const finishedRetention = 24 * time.Hour

// RequestSwitchover asks the controller leader for a planned switchover of
// cluster to target ("" lets the leader choose the candidate). It creates a
// Pending request under keys.Requests(cluster) and watches it until the
// leader marks it Done or Failed, or ctx ends. It returns the last version of
// the request it saw (Steps and Message say what happened); the error is nil
// when Done, wraps ErrRequestFailed when Failed, wraps ErrNoLeader (and
// creates nothing) when no leader is elected, and wraps ctx's error when ctx
// ended first — the request then stays in the store and the leader may still
// execute it (LookupRequest reads it later). A cluster that has no published
// state and is not in the current config revision is an error wrapping
// ErrUnknownCluster, and nothing is written.
func RequestSwitchover(ctx context.Context, st topo.Store, keys topo.Keys, cluster, target string) (topo.Request, error) {
	return Submit(ctx, st, keys, topo.Request{Kind: topo.RequestSwitchover, Cluster: cluster, Target: target})
}

// prepareRequest checks that a leader runs and the cluster is known (the
// errors of Submit) and fills in the request's id, state and times.
func prepareRequest(ctx context.Context, st topo.Store, keys topo.Keys, req topo.Request) (topo.Request, []byte, error) {
	kind, cluster := req.Kind, req.Cluster
	if cluster == "" {
		return topo.Request{}, nil, fmt.Errorf("%s: a cluster name is required", kind)
	}
	if _, err := st.Leader(ctx, keys.Election()); err != nil {
		if errors.Is(err, topo.ErrNotFound) {
			return topo.Request{}, nil, fmt.Errorf("%s of %s: %w: start `switchyard up` or `switchyard controller`", kind, cluster, ErrNoLeader)
		}
		return topo.Request{}, nil, fmt.Errorf("%s of %s: find the controller leader: %w", kind, cluster, err)
	}
	// A mistyped cluster leaves nothing behind: no request is written for
	// a cluster that is neither published nor in the current config.
	if err := knownCluster(ctx, st, keys, cluster); err != nil {
		return topo.Request{}, nil, fmt.Errorf("%s: %w", kind, err)
	}
	if req.Kind == topo.RequestSwitchover && req.SeenEpoch == 0 {
		// The epoch this request is decided at (a state whose MAC does
		// not verify leaves it unknown).
		if kv, err := st.Get(ctx, keys.ClusterState(cluster)); err == nil && topo.VerifyDocument(topo.IntegrityClusterState, kv.Value) == nil {
			var cs topo.ClusterState
			if json.Unmarshal(kv.Value, &cs) == nil {
				req.SeenEpoch = cs.Epoch
			}
		}
	}
	now := time.Now().UTC()
	req.ID, req.State, req.CreatedAt, req.UpdatedAt = newRequestID(now), topo.RequestPending, now, now
	data, err := topo.EncodeRequest(&req)
	if err != nil {
		return req, nil, fmt.Errorf("%s: %w", kind, err)
	}
	return req, data, nil
}

// Enqueue hands an operator request to the controller leader like Submit
// but returns as soon as the request is written (State Pending): follow
// it with LookupRequest. Errors are Submit's for a missing leader or an
// unknown cluster (nothing is written then).
func Enqueue(ctx context.Context, st topo.Store, keys topo.Keys, req topo.Request) (topo.Request, error) {
	req, data, err := prepareRequest(ctx, st, keys, req)
	if err != nil {
		return req, err
	}
	key := keys.Request(req.Cluster, req.ID)
	if _, err := st.Create(ctx, key, data); err != nil {
		return req, fmt.Errorf("%s: create request %s: %w", req.Kind, key, err)
	}
	return req, nil
}

// Submit hands an operator request (req.Kind and its fields; ID, State and
// times are filled in) to the controller leader and waits for it to finish,
// exactly as RequestSwitchover describes.
func Submit(ctx context.Context, st topo.Store, keys topo.Keys, req topo.Request) (topo.Request, error) {
	kind := req.Kind
	req, data, err := prepareRequest(ctx, st, keys, req)
	if err != nil {
		return req, err
	}
	key := keys.Request(req.Cluster, req.ID)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Watch first so no update is missed; the request is created below.
	initial, events, err := st.Watch(wctx, key)
	if err != nil {
		return req, fmt.Errorf("%s: watch %s: %w", kind, key, err)
	}
	if _, err := st.Create(ctx, key, data); err != nil {
		return req, fmt.Errorf("%s: create request %s: %w", kind, key, err)
	}
	for _, kv := range initial {
		if kv.Key == key {
			if r, err := decodeRequest(kv.Value); err == nil {
				req = r
			}
		}
	}
	for {
		if done, err := finished(req); done {
			return req, err
		}
		select {
		case <-ctx.Done():
			return req, fmt.Errorf("%s: request %s still %s: %w", kind, req.ID, req.State, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return req, fmt.Errorf("%s: watch of request %s ended: %w", kind, req.ID, context.Cause(wctx))
			}
			if ev.Err != nil {
				// Re-read instead of re-watching: the request is small.
				kv, err := st.Get(ctx, key)
				if err != nil {
					return req, fmt.Errorf("%s: watch of request %s failed (%v) and re-read failed: %w", kind, req.ID, ev.Err, err)
				}
				if r, err := decodeRequest(kv.Value); err == nil {
					req = r
				}
				if done, err := finished(req); done {
					return req, err
				}
				initial, events, err = st.Watch(wctx, key)
				if err != nil {
					return req, fmt.Errorf("%s: re-watch request %s: %w", kind, req.ID, err)
				}
				for _, kv := range initial {
					if r, err := decodeRequest(kv.Value); err == nil && kv.Key == key {
						req = r
					}
				}
				continue
			}
			if ev.Type == topo.EventDelete && ev.KV.Key == key {
				return req, fmt.Errorf("%s: request %s was deleted", kind, req.ID)
			}
			if ev.KV.Key == key {
				if r, err := decodeRequest(ev.KV.Value); err == nil {
					req = r
				}
			}
		}
	}
}

func finished(r topo.Request) (bool, error) {
	switch r.State {
	case topo.RequestDone:
		return true, nil
	case topo.RequestFailed:
		return true, fmt.Errorf("%w: %s", ErrRequestFailed, r.Message)
	}
	return false, nil
}

// decodeRequest is topo.DecodeRequest: with an integrity keyring set, a
// request whose MAC does not verify is returned with an error wrapping
// topo.ErrIntegrity. The waiting CLI skips such versions (a forged result
// is not believed); the leader refuses such a pending request.
func decodeRequest(b []byte) (topo.Request, error) {
	return topo.DecodeRequest(b)
}

// newRequestID is sortable by creation time and unique: UTC timestamp plus
// random bits.
func newRequestID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return now.Format("20060102T150405.000000000Z") + "-" + hex.EncodeToString(b[:])
}

// requestKey splits a key under keys.ClustersPrefix() into cluster and
// request id; ok is false for keys that are not requests.
func (t *term) requestKey(key string) (cluster, id string, ok bool) {
	rest, found := strings.CutPrefix(key, t.c.keys.ClustersPrefix())
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[1] != "requests" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// watchRequests watches every cluster's requests and queues the pending
// ones. Requests found Running when the term starts were abandoned by a
// previous leader and are marked Failed; finished requests older than a day
// are deleted.
func (t *term) watchRequests(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		initial, events, err := t.c.store.Watch(ctx, t.c.keys.ClustersPrefix())
		if err != nil {
			if ctx.Err() == nil {
				t.log.Warn("cannot watch operator requests; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for _, kv := range initial {
			t.notice(ctx, kv, first)
		}
		first = false
		for ev := range events {
			if ev.Err != nil {
				if ctx.Err() == nil {
					t.log.Warn("watch of operator requests failed; re-watching", "err", ev.Err)
				}
				break
			}
			if ev.Type == topo.EventPut {
				t.notice(ctx, ev.KV, false)
			}
		}
	}
}

// notice looks at one key seen by the request watch.
func (t *term) notice(ctx context.Context, kv topo.KV, termStart bool) {
	if _, _, ok := t.requestKey(kv.Key); !ok {
		return
	}
	req, err := decodeRequest(kv.Value)
	if err != nil && !errors.Is(err, topo.ErrIntegrity) {
		t.log.Warn("ignoring an operator request that is not valid JSON", "key", kv.Key)
		return
	}
	if err != nil && req.State != topo.RequestPending {
		return // not the leader's write; only a pending one is answered (refused)
	}
	switch req.State {
	case topo.RequestPending:
		if _, dup := t.queued.LoadOrStore(kv.Key, t.c.now()); dup {
			return
		}
		select {
		case t.queue <- kv.Key:
		case <-ctx.Done():
		}
	case topo.RequestRunning:
		if termStart {
			req.Message = "the controller leader changed while this request was running; " +
				"the new leader finished or rolled back the change: check `switchyard status`"
			t.finishRequest(ctx, kv.Key, &req, kv.Version, topo.RequestFailed)
		}
	case topo.RequestDone, topo.RequestFailed:
		if termStart && t.c.now().Sub(req.UpdatedAt) > finishedRetention {
			_ = t.c.store.Delete(ctx, kv.Key, kv.Version)
		}
	}
}

// serveRequests executes queued requests one at a time.
func (t *term) serveRequests(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-t.queue:
			noticed := t.c.now()
			if v, ok := t.queued.Load(key); ok {
				noticed = v.(time.Time)
			}
			t.serveRequest(ctx, key, noticed)
			t.queued.Delete(key)
		}
	}
}

// serveRequest looks at the request under key, first seen (queued) at
// noticed, and acts on it if it is pending, verifies and is not a replay
// (admitRequest).
func (t *term) serveRequest(ctx context.Context, key string, noticed time.Time) {
	kv, err := t.c.store.Get(ctx, key)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("cannot read operator request", "key", key, "err", err)
		}
		return
	}
	req, err := decodeRequest(kv.Value)
	if (err != nil && !errors.Is(err, topo.ErrIntegrity)) || req.State != topo.RequestPending {
		return
	}
	cluster, id, _ := t.requestKey(key)
	if err == nil && topo.Integrity() != nil && req.ID != id {
		// A signed request copied under another key is a replay.
		err = fmt.Errorf("operator request %s: %w: it is stored under id %s (a signed request copied to another key)", req.ID, topo.ErrIntegrity, id)
	}
	if err != nil {
		t.refuseUnverified(ctx, key, cluster, req, kv.Version, err)
		return
	}
	if err := t.admitRequest(ctx, req, noticed); err != nil {
		if errors.Is(err, errReplay) {
			t.refuseReplay(ctx, key, cluster, req, kv.Version, err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		req.Message = fmt.Sprintf("not acted on: %v (with an integrity key the leader records every request it handles before acting on it, so that a copy written back is refused); submit it again", err)
		t.finishRequest(ctx, key, &req, kv.Version, topo.RequestFailed)
		return
	}
	switch {
	case !knownRequestKind(req.Kind):
		req.Message = fmt.Sprintf("unknown request kind %q (known: %s)", req.Kind, strings.Join(requestKinds, ", "))
		t.finishRequest(ctx, key, &req, kv.Version, topo.RequestFailed)
	case req.Cluster != cluster || t.c.config().Cluster(cluster) == nil:
		req.Message = fmt.Sprintf("unknown cluster %q: not in the controller's config", cluster)
		t.finishRequest(ctx, key, &req, kv.Version, topo.RequestFailed)
	case req.Kind == topo.RequestSwitchover:
		t.runSwitchover(ctx, key, req, kv.Version)
	default:
		t.serveOperator(ctx, key, req, kv.Version)
	}
}

// refuseUnverified answers a pending request whose MAC did not verify
// (cause wraps topo.ErrIntegrity): nothing of it is acted on; an event
// request_integrity (logged at ERROR) records it and the request is
// finished Failed with result refused, signed by the leader, so the
// waiting CLI exits with the reason.
func (t *term) refuseUnverified(ctx context.Context, key, cluster string, req topo.Request, version topo.Version, cause error) {
	msg := fmt.Sprintf("the MAC of operator request %s (%s) did not verify, so it was not acted on: %v; "+
		"requests must be written by switchyard with the store integrity key", orDash(req.ID), orDash(req.Kind), cause)
	t.refuseRequest(ctx, key, cluster, req, version, msg)
}

// refuseReplay answers a verified pending request that admitRequest
// refused (too old, or already handled) like refuseUnverified.
func (t *term) refuseReplay(ctx context.Context, key, cluster string, req topo.Request, version topo.Version, cause error) {
	msg := fmt.Sprintf("operator request %s (%s) is a replay, so it was not acted on: %v; "+
		"submit a new request", orDash(req.ID), orDash(req.Kind), cause)
	t.refuseRequest(ctx, key, cluster, req, version, msg)
}

// refuseRequest records the event request_integrity with msg (logged at
// ERROR) and finishes the request Failed with result refused.
func (t *term) refuseRequest(ctx context.Context, key, cluster string, req topo.Request, version topo.Version, msg string) {
	if err := t.fo.events.emit(ctx, topo.Event{Cluster: cluster, Kind: topo.EventAlarm, Code: "request_integrity",
		Node: req.Target, Message: msg}); err != nil && ctx.Err() == nil {
		t.log.Warn("cannot write event", "err", err)
	}
	req.Steps, req.Plan = nil, nil
	req.Result, req.Override, req.Message = topo.RequestResultRefused, "", msg
	t.finishRequest(ctx, key, &req, version, topo.RequestFailed)
}

// saveRequest writes req with the leader's compare-and-swap and updates
// *version.
func (t *term) saveRequest(ctx context.Context, key string, req *topo.Request, version *topo.Version) error {
	req.UpdatedAt = t.c.now()
	data, err := topo.EncodeRequest(req)
	if err != nil {
		return err
	}
	v, err := t.leader.Update(ctx, key, data, *version)
	if err != nil {
		return fmt.Errorf("update request %s: %w", req.ID, err)
	}
	*version = v
	return nil
}

func (t *term) finishRequest(ctx context.Context, key string, req *topo.Request, version topo.Version, state string) {
	req.State = state
	if err := t.saveRequest(ctx, key, req, &version); err != nil && ctx.Err() == nil {
		t.log.Warn("cannot finish operator request", "request", req.ID, "state", state, "err", err)
	}
}

// WithdrawRequest ends operator request id of cluster if the leader has
// not started it yet (State Pending): it is finished Failed with result
// topo.RequestResultWithdrawn and message why, with a compare-and-swap on
// the version read, so a leader that takes it up at the same moment wins
// and the request runs. It returns the request as it is now and whether
// it was withdrawn; a request already running or finished is left alone.
// A requester that gives up waiting calls it, so that a request nobody
// waits for does not run later, when the controller comes back.
func WithdrawRequest(ctx context.Context, st topo.Store, keys topo.Keys, cluster, id, why string) (topo.Request, bool, error) {
	kv, err := st.Get(ctx, keys.Request(cluster, id))
	if err != nil {
		return topo.Request{}, false, err
	}
	r, err := decodeRequest(kv.Value)
	if err != nil || r.State != topo.RequestPending {
		return r, false, err
	}
	r.State, r.Result, r.Message, r.UpdatedAt = topo.RequestFailed, topo.RequestResultWithdrawn, why, time.Now().UTC()
	data, err := topo.EncodeRequest(&r)
	if err != nil {
		return r, false, err
	}
	if _, err := st.Update(ctx, kv.Key, data, kv.Version); err != nil {
		if errors.Is(err, topo.ErrBadVersion) {
			// Taken up meanwhile: it runs.
			cur, lerr := LookupRequest(ctx, st, keys, cluster, id)
			return cur, false, lerr
		}
		return r, false, err
	}
	return r, true, nil
}

// LookupRequest reads operator request id of cluster (the id Submit
// returned, also after a timeout). Errors wrap topo.ErrNotFound when there
// is no such request (finished requests are kept for a day),
// ErrUnknownCluster for a cluster without a published state, and
// topo.ErrIntegrity when an integrity keyring is set and the document's
// MAC does not verify.
func LookupRequest(ctx context.Context, st topo.Store, keys topo.Keys, cluster, id string) (topo.Request, error) {
	var r topo.Request
	kv, err := st.Get(ctx, keys.Request(cluster, id))
	if err == nil {
		r, err = decodeRequest(kv.Value)
	}
	if errors.Is(err, topo.ErrNotFound) {
		if _, serr := publishedState(ctx, st, keys, cluster); serr != nil {
			return r, serr
		}
		return r, fmt.Errorf("request %s of cluster %s: %w (finished requests are kept for %s)", id, cluster, err, finishedRetention)
	}
	return r, err
}
