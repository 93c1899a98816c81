package topo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Memory is an in-memory Store with the etcd store's semantics: one global
// revision counter (Version), compare-and-swap writes, ordered watches, one
// leader per election (the oldest campaigner) and leased keys. It is for
// unit tests of other packages; it passes the same conformance suite
// (storetest) as the etcd store. Leases never expire on their own: tests
// simulate process death or a partition with ExpireLeases. Safe for
// concurrent use.
type Memory struct {
	mu        sync.Mutex
	closed    bool
	rev       int64
	data      map[string]*memEntry
	leases    map[int64]*memLease
	nextLease int64
	watchers  map[*memWatcher]struct{}
	// changed is closed and replaced on every write; campaigners wait on it.
	changed chan struct{}
}

type memEntry struct {
	value  []byte
	create int64
	mod    int64
	lease  int64
}

type memLease struct {
	id       int64
	keys     map[string]struct{}
	done     chan struct{}
	election bool // the session of a campaign
}

// NewMemory returns an empty in-memory store. Its dynamic type is *Memory,
// for tests that need ExpireLeases.
func NewMemory() Store {
	return &Memory{
		data:     make(map[string]*memEntry),
		leases:   make(map[int64]*memLease),
		watchers: make(map[*memWatcher]struct{}),
		changed:  make(chan struct{}),
	}
}

// ExpireLeases makes every lease expire now, as if this process had died or
// been cut off for longer than the TTLs: every registration's key and every
// election key is deleted, Lease.Done and Leader.Done close, and a blocked
// Campaign of this store starts over with a new lease.
func (m *Memory) ExpireLeases() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.leases {
		m.expireLocked(id)
	}
}

// begin checks ctx and the closed flag and takes the lock; callers must
// unlock when it returns nil.
func (m *Memory) begin(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("topo: %s %s: %w", op, key, err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("topo: %s %s: %w", op, key, ErrClosed)
	}
	return nil
}

// Get implements Store.Get.
func (m *Memory) Get(ctx context.Context, key string) (KV, error) {
	if err := m.begin(ctx, "get", key); err != nil {
		return KV{}, err
	}
	defer m.mu.Unlock()
	e, ok := m.data[key]
	if !ok {
		return KV{}, fmt.Errorf("topo: get %s: %w", key, ErrNotFound)
	}
	return e.kv(key), nil
}

// List implements Store.List.
func (m *Memory) List(ctx context.Context, prefix string) ([]KV, error) {
	if err := m.begin(ctx, "list", prefix); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return m.listLocked(prefix), nil
}

func (m *Memory) listLocked(prefix string) []KV {
	out := []KV{}
	for k, e := range m.data {
		if strings.HasPrefix(k, prefix) {
			out = append(out, e.kv(k))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Create implements Store.Create.
func (m *Memory) Create(ctx context.Context, key string, value []byte) (Version, error) {
	if err := m.begin(ctx, "create", key); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	return m.createLocked(key, value)
}

func (m *Memory) createLocked(key string, value []byte) (Version, error) {
	if _, ok := m.data[key]; ok {
		return 0, fmt.Errorf("topo: create %s: %w", key, ErrExists)
	}
	return Version(m.putLocked(key, value, 0)), nil
}

// Update implements Store.Update. Like an etcd put, it detaches the key
// from any lease.
func (m *Memory) Update(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	if err := m.begin(ctx, "update", key); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	return m.updateLocked(key, value, expect)
}

func (m *Memory) updateLocked(key string, value []byte, expect Version) (Version, error) {
	e, ok := m.data[key]
	if !ok {
		return 0, fmt.Errorf("topo: update %s: %w", key, ErrNotFound)
	}
	if e.mod != int64(expect) {
		return 0, fmt.Errorf("topo: update %s at version %d: %w", key, expect, ErrBadVersion)
	}
	// Like an etcd put without a lease, an update detaches the key from any
	// lease it had.
	return Version(m.putLocked(key, value, 0)), nil
}

// Delete implements Store.Delete. Deleting an election key ends that
// leadership, as in the etcd store.
func (m *Memory) Delete(ctx context.Context, key string, expect Version) error {
	if err := m.begin(ctx, "delete", key); err != nil {
		return err
	}
	defer m.mu.Unlock()
	e, ok := m.data[key]
	if !ok {
		return fmt.Errorf("topo: delete %s: %w", key, ErrNotFound)
	}
	if expect != 0 && e.mod != int64(expect) {
		return fmt.Errorf("topo: delete %s at version %d: %w", key, expect, ErrBadVersion)
	}
	if l := m.leases[e.lease]; l != nil && l.election {
		// Deleting an election key ends that leadership (or candidacy),
		// as the etcd store's leader watch does.
		m.expireLocked(l.id)
		return nil
	}
	m.deleteLocked(key)
	return nil
}

// putLocked writes key at a new revision, bound to lease (0 = none), and
// returns the revision.
func (m *Memory) putLocked(key string, value []byte, lease int64) int64 {
	m.rev++
	e, ok := m.data[key]
	if !ok {
		e = &memEntry{create: m.rev}
		m.data[key] = e
	}
	if e.lease != 0 && e.lease != lease {
		if l := m.leases[e.lease]; l != nil {
			delete(l.keys, key)
		}
	}
	e.value = append([]byte(nil), value...)
	e.mod = m.rev
	e.lease = lease
	if l := m.leases[lease]; l != nil {
		l.keys[key] = struct{}{}
	}
	m.notifyLocked(WatchEvent{Type: EventPut, KV: e.kv(key)})
	return m.rev
}

func (m *Memory) deleteLocked(key string) {
	e, ok := m.data[key]
	if !ok {
		return
	}
	if l := m.leases[e.lease]; l != nil {
		delete(l.keys, key)
	}
	delete(m.data, key)
	m.rev++
	m.notifyLocked(WatchEvent{Type: EventDelete, KV: KV{Key: key, Version: Version(m.rev)}})
}

func (m *Memory) notifyLocked(ev WatchEvent) {
	for w := range m.watchers {
		if strings.HasPrefix(ev.KV.Key, w.prefix) {
			w.push(ev)
		}
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

func (e *memEntry) kv(key string) KV {
	return KV{Key: key, Value: append([]byte(nil), e.value...), Version: Version(e.mod)}
}

func (m *Memory) newLeaseLocked() *memLease {
	m.nextLease++
	l := &memLease{id: m.nextLease, keys: make(map[string]struct{}), done: make(chan struct{})}
	m.leases[l.id] = l
	return l
}

// expireLocked deletes the lease's keys and closes its done channel.
func (m *Memory) expireLocked(id int64) {
	l, ok := m.leases[id]
	if !ok {
		return
	}
	delete(m.leases, id)
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.deleteLocked(k)
	}
	close(l.done)
}

// Watch implements Store.Watch. Events are queued without bound, so
// writers never wait for slow watchers.
func (m *Memory) Watch(ctx context.Context, prefix string) ([]KV, <-chan WatchEvent, error) {
	if err := m.begin(ctx, "watch", prefix); err != nil {
		return nil, nil, err
	}
	initial := m.listLocked(prefix)
	w := &memWatcher{prefix: prefix, wake: make(chan struct{}, 1)}
	m.watchers[w] = struct{}{}
	m.mu.Unlock()

	out := make(chan WatchEvent)
	go func() {
		defer close(out)
		defer func() {
			m.mu.Lock()
			delete(m.watchers, w)
			m.mu.Unlock()
		}()
		for {
			evs, final := w.take()
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			if final {
				return
			}
			select {
			case <-w.wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return initial, out, nil
}

// memWatcher queues events for one Watch without blocking writers.
type memWatcher struct {
	prefix string
	wake   chan struct{}

	mu     sync.Mutex
	queue  []WatchEvent
	failed bool // an Err event is queued; nothing follows it
}

func (w *memWatcher) push(ev WatchEvent) {
	w.mu.Lock()
	if !w.failed {
		w.queue = append(w.queue, ev)
		w.failed = ev.Err != nil
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the queued events and whether the last is the final one.
func (w *memWatcher) take() ([]WatchEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.queue
	w.queue = nil
	return evs, w.failed
}

// Campaign joins election with a new lease and waits until its key is the
// oldest under the election, as etcd's concurrency.Election does.
func (m *Memory) Campaign(ctx context.Context, election, id string) (Leader, error) {
	if err := m.begin(ctx, "campaign", election); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	prefix := election + "/"
	for {
		l := m.newLeaseLocked()
		l.election = true
		key := fmt.Sprintf("%s%x", prefix, l.id)
		m.putLocked(key, []byte(id), l.id)
		create := m.data[key].create
		for {
			if m.closed {
				return nil, fmt.Errorf("topo: campaign %s: %w", election, ErrClosed)
			}
			if _, alive := m.leases[l.id]; !alive {
				break // our lease expired while waiting: campaign again
			}
			if first, ok := m.oldestLocked(prefix); ok && first == key {
				return &memLeader{m: m, id: id, election: election, key: key, create: create, lease: l}, nil
			}
			changed := m.changed
			m.mu.Unlock()
			select {
			case <-changed:
				m.mu.Lock()
			case <-ctx.Done():
				m.mu.Lock()
				m.expireLocked(l.id)
				return nil, fmt.Errorf("topo: campaign %s: %w", election, ctx.Err())
			}
		}
	}
}

// oldestLocked returns the key with the lowest create revision under prefix.
func (m *Memory) oldestLocked(prefix string) (string, bool) {
	var best string
	var bestRev int64
	for k, e := range m.data {
		if strings.HasPrefix(k, prefix) && (bestRev == 0 || e.create < bestRev) {
			best, bestRev = k, e.create
		}
	}
	return best, bestRev != 0
}

// Leader implements Store.Leader.
func (m *Memory) Leader(ctx context.Context, election string) (string, error) {
	if err := m.begin(ctx, "leader", election); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	key, ok := m.oldestLocked(election + "/")
	if !ok {
		return "", fmt.Errorf("topo: leader of %s: %w", election, ErrNotFound)
	}
	return string(m.data[key].value), nil
}

// memLeader is a won election; Done is its lease's done channel.
type memLeader struct {
	m        *Memory
	id       string
	election string
	key      string
	create   int64
	lease    *memLease
}

func (l *memLeader) ID() string            { return l.id }
func (l *memLeader) Done() <-chan struct{} { return l.lease.done }

// stillLeaderLocked is the guard etcd evaluates: the election key exists
// with the create revision it had when won.
func (l *memLeader) stillLeaderLocked() bool {
	e, ok := l.m.data[l.key]
	return ok && e.create == l.create
}

func (l *memLeader) notLeader(op, key string) error {
	return fmt.Errorf("topo: %s %s as leader %q of %s: %w", op, key, l.id, l.election, ErrNotLeader)
}

func (l *memLeader) Create(ctx context.Context, key string, value []byte) (Version, error) {
	if err := l.m.begin(ctx, "create", key); err != nil {
		return 0, err
	}
	defer l.m.mu.Unlock()
	if !l.stillLeaderLocked() {
		l.m.expireLocked(l.lease.id)
		return 0, l.notLeader("create", key)
	}
	return l.m.createLocked(key, value)
}

func (l *memLeader) Update(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	if err := l.m.begin(ctx, "update", key); err != nil {
		return 0, err
	}
	defer l.m.mu.Unlock()
	if !l.stillLeaderLocked() {
		l.m.expireLocked(l.lease.id)
		return 0, l.notLeader("update", key)
	}
	return l.m.updateLocked(key, value, expect)
}

func (l *memLeader) Resign(ctx context.Context) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	l.m.expireLocked(l.lease.id)
	return nil
}

// Register writes key bound to a new lease. ttl is not enforced: the lease
// lives until Revoke, Close or ExpireLeases.
func (m *Memory) Register(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if err := m.begin(ctx, "register", key); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	l := m.newLeaseLocked()
	m.putLocked(key, value, l.id)
	return &memRegistration{m: m, key: key, lease: l}, nil
}

type memRegistration struct {
	m     *Memory
	key   string
	lease *memLease
}

func (r *memRegistration) Done() <-chan struct{} { return r.lease.done }

func (r *memRegistration) Update(ctx context.Context, value []byte) error {
	if err := r.m.begin(ctx, "update registration", r.key); err != nil {
		return err
	}
	defer r.m.mu.Unlock()
	if _, alive := r.m.leases[r.lease.id]; !alive {
		return fmt.Errorf("topo: update registration %s: lease lost, register again: %w", r.key, ErrNotFound)
	}
	r.m.putLocked(r.key, value, r.lease.id)
	return nil
}

func (r *memRegistration) Revoke(ctx context.Context) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	r.m.expireLocked(r.lease.id)
	return nil
}

// Close releases every lease (deleting leased keys and ending leaderships)
// and ends every watch with an ErrClosed event. Later calls fail with
// ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	for id := range m.leases {
		m.expireLocked(id)
	}
	m.closed = true
	for w := range m.watchers {
		w.push(WatchEvent{Err: fmt.Errorf("topo: watch %s: %w", w.prefix, ErrClosed)})
	}
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}
