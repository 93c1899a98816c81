package proxy

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// The hot read set. Every hotSampleEvery-th read statement of a session
// (a COM_QUERY starting with SELECT or WITH, or a COM_STMT_EXECUTE of such
// a prepared statement) is sampled: its digest (literals replaced by "?")
// is counted and one executable example (for a prepared statement, its
// text with the bound values as literals) is kept. Memory is bounded:
// at most hotMaxPerCluster digests per cluster, kept by the space-saving
// algorithm (a new digest replaces the least counted one and inherits its
// count plus one), examples of at most hotMaxExample bytes. Statements
// that lock rows or write (FOR UPDATE, LOCK IN SHARE MODE, INTO, GET_LOCK,
// user variables, SLEEP) are never kept, so replaying the set on a replica
// is harmless. The set is published under topo.Keys.HotReadSet with the
// proxy's lease; `switchover --warm` replays it on the candidate.

const (
	hotSampleEvery   = 16
	hotMaxPerCluster = 128
	hotPublishMax    = 64
	hotMaxExample    = 2048
	hotPublishEvery  = 5 * time.Second
)

type hotKey struct{ schema, user, digest string }

type hotEntry struct {
	example string
	count   int64
}

// hotReads is the proxy's sampled read statements, per cluster.
type hotReads struct {
	mu        sync.Mutex
	byCluster map[string]map[hotKey]*hotEntry
	version   uint64 // bumped on every change
}

func (h *hotReads) init() { h.byCluster = map[string]map[hotKey]*hotEntry{} }

// add counts one sample.
func (h *hotReads) add(cluster string, k hotKey, example string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.byCluster[cluster]
	if m == nil {
		m = map[hotKey]*hotEntry{}
		h.byCluster[cluster] = m
	}
	h.version++
	if e, ok := m[k]; ok {
		e.count++
		e.example = example
		return
	}
	var min int64
	if len(m) >= hotMaxPerCluster {
		var victim hotKey
		min = -1
		for key, e := range m {
			if min < 0 || e.count < min {
				victim, min = key, e.count
			}
		}
		delete(m, victim)
	}
	m[k] = &hotEntry{example: example, count: min + 1}
}

// snapshot returns the hot reads of every cluster, most counted first, at
// most hotPublishMax per cluster, and the version they reflect.
func (h *hotReads) snapshot() ([]topo.HotRead, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []topo.HotRead
	for cluster, m := range h.byCluster {
		list := make([]topo.HotRead, 0, len(m))
		for k, e := range m {
			list = append(list, topo.HotRead{Cluster: cluster, Schema: k.schema, User: k.user, Digest: k.digest, Example: e.example, Count: e.count})
		}
		sort.Slice(list, func(i, j int) bool {
			if list[i].Count != list[j].Count {
				return list[i].Count > list[j].Count
			}
			return list[i].Digest < list[j].Digest
		})
		if len(list) > hotPublishMax {
			list = list[:hotPublishMax]
		}
		out = append(out, list...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out, h.version
}

// HotReads returns the proxy's current hot read set (most sampled first
// per cluster).
func (s *Server) HotReads() []topo.HotRead {
	r, _ := s.hot.snapshot()
	return r
}

// sampleDue counts a read statement and reports whether to sample it.
func (s *session) sampleDue() bool {
	s.samples++
	return s.samples%hotSampleEvery == 0
}

// replaySafe reports whether a read statement may be replayed on another
// server: it neither locks nor writes nor sleeps.
func replaySafe(q []byte) bool {
	if len(q) > hotMaxExample {
		return false
	}
	if lock, uv := stickyState(q); lock || uv {
		return false
	}
	return !containsFold(q, "for update") && !containsFold(q, "share mode") && !containsFold(q, "into") &&
		!containsFold(q, "sleep") && !containsFold(q, "benchmark")
}

// sampleQuery samples a text-protocol read statement.
func (s *session) sampleQuery(q []byte) {
	if !s.sampleDue() || !replaySafe(q) {
		return
	}
	d := digestInto(make([]byte, 0, len(q)), q)
	s.srv.hot.add(s.l.cluster, hotKey{schema: s.schema, user: s.user, digest: string(d)}, string(q))
	s.srv.metrics.hotSamples.Inc()
}

// sampleExecute samples a COM_STMT_EXECUTE (payload p) of a read statement.
func (s *session) sampleExecute(st *stmtInfo, p []byte) {
	if !s.sampleDue() {
		return
	}
	if st.digest == "" {
		if !replaySafe(st.text) {
			st.digest = "-"
			return
		}
		st.digest = string(digestInto(make([]byte, 0, len(st.text)), st.text))
	}
	if st.digest == "-" {
		return
	}
	ex, err := st.renderExample(p)
	if err != nil || len(ex) > hotMaxExample {
		return
	}
	s.srv.hot.add(s.l.cluster, hotKey{schema: s.schema, user: s.user, digest: st.digest}, ex)
	s.srv.metrics.hotSamples.Inc()
}

// publishHotReads keeps the hot read set in the store under the proxy's
// key with its own lease, rewritten every hotPublishEvery when it changed,
// until ctx ends.
func (s *Server) publishHotReads(ctx context.Context, st topo.Store, keys topo.Keys) {
	key := keys.HotReadSet(s.id)
	var lease topo.Lease
	var published uint64
	t := time.NewTicker(hotPublishEvery)
	defer t.Stop()
	defer func() {
		if lease != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = lease.Revoke(rctx)
			cancel()
		}
	}()
	for {
		reads, version := s.hot.snapshot()
		if version != published || lease == nil {
			val, err := json.Marshal(topo.HotReadSet{Proxy: s.id, UpdatedAt: s.now(), Reads: reads})
			if err == nil {
				if lease != nil {
					select {
					case <-lease.Done():
						lease = nil
					default:
					}
				}
				if lease == nil {
					lease, err = st.Register(ctx, key, val, RegistrationTTL)
				} else {
					err = lease.Update(ctx, val)
				}
				if err == nil {
					published = version
				} else if ctx.Err() == nil {
					s.log.Debug("publishing the hot read set failed; retrying", "err", err)
					lease = nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
