package topo

import (
	"context"
	"errors"
	"time"
)

// Errors returned by Store implementations. Test with errors.Is.
var (
	// ErrNotFound: the key does not exist. Not retryable as such; create it.
	ErrNotFound = errors.New("topo: key not found")
	// ErrExists: Create found the key already present.
	ErrExists = errors.New("topo: key already exists")
	// ErrBadVersion: a compare-and-swap saw a different version than expected;
	// re-read, re-decide and retry.
	ErrBadVersion = errors.New("topo: version mismatch (concurrent update)")
	// ErrNotLeader: a leader-conditioned write found that leadership was lost.
	// The caller must stop acting.
	ErrNotLeader = errors.New("topo: leadership lost")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("topo: store closed")
)

// Version is the store's version of a key (etcd's ModRevision). It increases
// on every write of any key; 0 means "does not exist".
type Version int64

// KV is one key, its value and its version.
type KV struct {
	Key     string
	Value   []byte
	Version Version
}

// EventType says what happened to a watched key.
type EventType int

const (
	// EventPut: the key was created or updated.
	EventPut EventType = iota + 1
	// EventDelete: the key was deleted (KV.Value is nil).
	EventDelete
)

// WatchEvent is one change seen by Watch. If Err is set the watch has failed
// and the channel is closed after this event; the caller re-watches.
type WatchEvent struct {
	Type EventType
	KV   KV
	Err  error
}

// Store is the topology store. Keys are absolute paths; callers build them
// with Keys. Every method honours ctx; context errors and transient transport
// errors are returned wrapped and may be retried. Implementations: etcd
// (production) and memory (unit tests); both pass the conformance suite in
// storetest.
type Store interface {
	// Get returns the key's value and version, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// List returns every key under prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]KV, error)
	// Create writes key only if it does not exist; ErrExists otherwise.
	Create(ctx context.Context, key string, value []byte) (Version, error)
	// Update writes key only if its current version is expect (compare-and-swap);
	// ErrBadVersion if it changed, ErrNotFound if it does not exist.
	Update(ctx context.Context, key string, value []byte, expect Version) (Version, error)
	// Delete removes key if its version is expect (0 = any version).
	// ErrBadVersion on mismatch, ErrNotFound if absent.
	Delete(ctx context.Context, key string, expect Version) error
	// Watch returns the current keys under prefix and then every change after
	// them, in order, until ctx is cancelled (the channel is then closed).
	Watch(ctx context.Context, prefix string) ([]KV, <-chan WatchEvent, error)
	// Campaign blocks until this caller (id) is the leader of election, or ctx
	// ends. Only one Leader exists per election at a time. An entry of the
	// election that carries the same id on another session (left by an
	// earlier process with this identity that died without resigning) is
	// removed first, so ids must be unique among live campaigners.
	Campaign(ctx context.Context, election, id string) (Leader, error)
	// Leader returns the id of the current leader of election, or ErrNotFound.
	Leader(ctx context.Context, election string) (string, error)
	// Register writes key with value, bound to a lease of ttl that is kept
	// alive in the background; the key disappears when the lease is lost
	// (process death, partition longer than ttl) or revoked.
	Register(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error)
	// Close releases the client. Leases and leaderships held are released.
	Close() error
}

// Leader is held leadership of one election.
type Leader interface {
	// ID is the id given to Campaign.
	ID() string
	// Done is closed when leadership is lost (lease expired, resigned, store
	// closed). Cancel all leader work when it closes.
	Done() <-chan struct{}
	// Create is Store.Create conditioned on still being leader; ErrNotLeader
	// if leadership was lost.
	Create(ctx context.Context, key string, value []byte) (Version, error)
	// Update is Store.Update conditioned on still being leader; ErrNotLeader
	// if leadership was lost, ErrBadVersion on a concurrent update.
	Update(ctx context.Context, key string, value []byte, expect Version) (Version, error)
	// Resign gives up leadership.
	Resign(ctx context.Context) error
}

// Lease is a registration kept alive in the background.
type Lease interface {
	// Done is closed when the lease is lost and the key is gone.
	Done() <-chan struct{}
	// Update rewrites the registered value under the same lease.
	Update(ctx context.Context, value []byte) error
	// Revoke deletes the key and ends the lease.
	Revoke(ctx context.Context) error
}
