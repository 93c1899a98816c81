package topo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Register grants a lease of ttl (rounded up to whole seconds, at least
// one), puts key with it and keeps the lease alive until Revoke, Close or
// loss (etcd expires the lease when keepalives stop arriving for ttl).
func (s *etcdStore) Register(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if s.isClosed() {
		return nil, s.wrap("register", key, ErrClosed)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	grant, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, s.wrap("register", key, fmt.Errorf("grant lease: %w", err))
	}
	l := &etcdLease{s: s, key: key, id: grant.ID, done: make(chan struct{})}
	if _, err := s.cli.Put(ctx, key, string(value), clientv3.WithLease(grant.ID)); err != nil {
		l.revokeBounded(ctx)
		return nil, s.wrap("register", key, err)
	}
	kctx, kcancel := context.WithCancel(s.ctx)
	ch, err := s.cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		kcancel()
		l.revokeBounded(ctx)
		return nil, s.wrap("register", key, fmt.Errorf("keep lease alive: %w", err))
	}
	l.cancel = kcancel
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		kcancel()
		l.revokeBounded(ctx)
		return nil, s.wrap("register", key, ErrClosed)
	}
	s.leases[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for range ch {
			// Each response is one renewal; the channel closes when the
			// lease expires, is revoked or keepalive is cancelled.
		}
		kcancel()
		close(l.done)
		s.mu.Lock()
		delete(s.leases, l)
		s.mu.Unlock()
	}()
	return l, nil
}

// etcdLease is a registration made by Register.
type etcdLease struct {
	s      *etcdStore
	key    string
	id     clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (l *etcdLease) Done() <-chan struct{} { return l.done }

// Update re-puts the key with the same lease. It fails with ErrNotFound
// when the lease is already lost (register again).
func (l *etcdLease) Update(ctx context.Context, value []byte) error {
	select {
	case <-l.done:
		return fmt.Errorf("topo: update registration %s: lease lost, register again: %w", l.key, ErrNotFound)
	default:
	}
	if _, err := l.s.cli.Put(ctx, l.key, string(value), clientv3.WithLease(l.id)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("topo: update registration %s: lease lost, register again: %w", l.key, ErrNotFound)
		}
		return l.s.wrap("update registration", l.key, err)
	}
	return nil
}

// Revoke stops keepalives and revokes the lease, which deletes the key.
// Revoking a lost or revoked lease returns nil.
func (l *etcdLease) Revoke(ctx context.Context) error {
	return l.release(ctx)
}

func (l *etcdLease) release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.revokeLease(ctx)
		<-l.done
	})
	return err
}

// revokeBounded revokes the lease of a registration that failed half-way,
// also when ctx has ended (a process stopping), but for at most
// revokeTimeout: with etcd gone a revoke without a deadline waits for it
// forever, and the process could not stop. The lease then expires with
// its TTL.
func (l *etcdLease) revokeBounded(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	_ = l.revokeLease(rctx)
}

// revokeTimeout bounds a revoke made on the way out.
const revokeTimeout = 2 * time.Second

func (l *etcdLease) revokeLease(ctx context.Context) error {
	_, err := l.s.cli.Revoke(ctx, l.id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return l.s.wrap("revoke registration", l.key, err)
	}
	return nil
}
