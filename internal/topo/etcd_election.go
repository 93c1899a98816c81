package topo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Campaign joins election with a new session (a lease of SessionTTL) and
// blocks until its key is the oldest in the election (etcd
// concurrency.Election). If the session dies while waiting, it campaigns
// again with a new one.
func (s *etcdStore) Campaign(ctx context.Context, election, id string) (Leader, error) {
	for {
		if s.isClosed() {
			return nil, s.wrap("campaign", election, ErrClosed)
		}
		l, retry, err := s.campaignOnce(ctx, election, id)
		if err != nil && s.isClosed() {
			return nil, s.wrap("campaign", election, ErrClosed)
		}
		if err == nil || !retry || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil {
				err = s.wrap("campaign", election, ctx.Err())
			}
			return l, err
		}
		s.log.Warn("election session lost while campaigning; campaigning again",
			"election", election, "id", id)
	}
}

// campaignOnce campaigns with one session. retry is true when the session
// died before leadership was won.
func (s *etcdStore) campaignOnce(ctx context.Context, election, id string) (_ Leader, retry bool, _ error) {
	// The lease is granted with a bound: a grant sent while the store had
	// no quorum would otherwise wait for the server's own timeout (about
	// 7 s) after the quorum is back.
	gctx, gcancel := context.WithTimeout(ctx, grantTimeout)
	grant, err := s.cli.Grant(gctx, int64(s.sessionTTL))
	gcancel()
	if err != nil {
		return nil, false, s.wrap("campaign", election, fmt.Errorf("grant session lease: %w", err))
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(s.ctx))
	if err != nil {
		return nil, false, s.wrap("campaign", election, fmt.Errorf("create session: %w", err))
	}
	s.dropStaleCampaigns(ctx, election, id, sess.Lease())
	el := concurrency.NewElection(sess, election)
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(sess.Ctx(), cancel)
	err = el.Campaign(cctx, id)
	stop()
	cancel()
	if err == nil {
		// The session may have died while Campaign waited (its key then
		// expired with the lease); Campaign does not notice that.
		err = s.checkElectionKey(ctx, el.Key(), el.Rev())
		if err != nil && !errors.Is(err, errSessionLost) {
			closeSession(s, sess)
			return nil, false, s.wrap("campaign", election, err)
		}
	}
	if err != nil {
		lost := errors.Is(err, errSessionLost) || sessionEnded(sess)
		closeSession(s, sess)
		if lost && ctx.Err() == nil {
			return nil, true, err
		}
		return nil, false, s.wrap("campaign", election, err)
	}
	l := &etcdLeader{
		s:        s,
		id:       id,
		election: election,
		sess:     sess,
		key:      el.Key(),
		rev:      el.Rev(),
		done:     make(chan struct{}),
		resigned: make(chan struct{}),
	}
	l.guard = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closeSession(s, sess)
		return nil, false, s.wrap("campaign", election, ErrClosed)
	}
	s.leaders[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go l.monitor(el.Header().Revision + 1)
	s.log.Info("won election", "election", election, "id", id, "key", l.key)
	return l, false, nil
}

// grantTimeout bounds granting the lease of an election session.
const grantTimeout = 2 * time.Second

// errSessionLost: the election key of a campaign is gone.
var errSessionLost = errors.New("election session lost")

// checkElectionKey returns errSessionLost unless key exists with create
// revision rev.
func (s *etcdStore) checkElectionKey(ctx context.Context, key string, rev int64) error {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev {
		return errSessionLost
	}
	return nil
}

func sessionEnded(sess *concurrency.Session) bool {
	select {
	case <-sess.Done():
		return true
	default:
		return false
	}
}

// closeSession stops the session's keepalives and revokes its lease,
// bounded by the store's context and revokeTimeout. (Session.Close bounds
// the revoke by the session's TTL option, 60s unless set, which a session
// made WithLease does not set: with etcd gone a stop waited that long.)
func closeSession(s *etcdStore, sess *concurrency.Session) {
	sess.Orphan()
	if sessionEnded(sess) {
		return // the lease is already gone; nothing to revoke
	}
	ctx, cancel := context.WithTimeout(s.ctx, revokeTimeout)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, sess.Lease()); err != nil && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.log.Debug("revoke election session", "err", err)
	}
}

// Leader reads the value of the oldest key of the election.
func (s *etcdStore) Leader(ctx context.Context, election string) (string, error) {
	if s.isClosed() {
		return "", s.wrap("leader", election, ErrClosed)
	}
	// Same query as concurrency.Election.Leader: the oldest key of the election.
	resp, err := s.cli.Get(ctx, election+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", s.wrap("leader", election, err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("topo: leader of %s: %w", election, ErrNotFound)
	}
	return string(resp.Kvs[0].Value), nil
}

// etcdLeader is a won election: the election key (key, created at rev) bound
// to the session's lease.
type etcdLeader struct {
	s        *etcdStore
	id       string
	election string
	sess     *concurrency.Session
	key      string
	rev      int64
	guard    []clientv3.Cmp

	done      chan struct{} // closed when leadership is lost
	doneOnce  sync.Once
	resigned  chan struct{} // closed by release; stops monitor
	resigning atomic.Bool   // Resign or Close is deleting the key
	releaseMu sync.Mutex
}

func (l *etcdLeader) ID() string            { return l.id }
func (l *etcdLeader) Done() <-chan struct{} { return l.done }

// monitor closes done when the session ends, the election key is deleted
// (by anyone), Resign is called or the store closes; then it frees the
// session's lease.
func (l *etcdLeader) monitor(fromRev int64) {
	defer l.s.wg.Done()
	defer func() {
		l.lose()
		// Frees the session's lease, bounded: with etcd gone an unbounded
		// call would never return.
		rctx, rcancel := context.WithTimeout(context.Background(), revokeTimeout)
		l.release(rctx)
		rcancel()
		l.s.mu.Lock()
		delete(l.s.leaders, l)
		l.s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(l.sess.Ctx())
	defer cancel()
	go func() {
		select {
		case <-l.resigned:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		wch := l.s.cli.Watch(clientv3.WithRequireLeader(ctx), l.key,
			clientv3.WithRev(fromRev), clientv3.WithFilterPut())
		for wr := range wch {
			if wr.Err() != nil || wr.Canceled {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					if !l.resigning.Load() {
						l.s.log.Warn("election key deleted; leadership lost", "election", l.election, "id", l.id)
					}
					return
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The watch failed (compaction, no leader, transport): check the key
		// directly, then watch again from the revision read.
		gctx, gcancel := context.WithTimeout(ctx, l.s.sessionTTLDuration())
		resp, err := l.s.cli.Get(gctx, l.key)
		gcancel()
		if err != nil {
			continue // the session's keepalive decides whether we are cut off
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
			l.s.log.Warn("election key gone; leadership lost", "election", l.election, "id", l.id)
			return
		}
		fromRev = resp.Header.Revision + 1
	}
}

func (l *etcdLeader) lose() { l.doneOnce.Do(func() { close(l.done) }) }

func (l *etcdLeader) lost() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *etcdLeader) notLeader(op, key string) error {
	return fmt.Errorf("topo: %s %s as leader %q of %s: %w", op, key, l.id, l.election, ErrNotLeader)
}

func (l *etcdLeader) Create(ctx context.Context, key string, value []byte) (Version, error) {
	if l.lost() {
		return 0, l.notLeader("create", key)
	}
	v, err := l.s.create(ctx, key, value, l.guard)
	if errors.Is(err, errGuard) {
		l.lose()
		return 0, l.notLeader("create", key)
	}
	return v, err
}

func (l *etcdLeader) Update(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	if l.lost() {
		return 0, l.notLeader("update", key)
	}
	return l.guardedUpdate(ctx, key, value, expect)
}

// guardedUpdate is Update without the local Done check: etcd alone decides,
// by the election key's create revision, whether we still lead.
func (l *etcdLeader) guardedUpdate(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	v, err := l.s.update(ctx, key, value, expect, l.guard)
	if errors.Is(err, errGuard) {
		l.lose()
		return 0, l.notLeader("update", key)
	}
	return v, err
}

// Resign deletes the election key (if it is still ours), closes Done and
// revokes the session. Resigning twice, or after leadership was lost,
// returns nil.
func (l *etcdLeader) Resign(ctx context.Context) error {
	return l.release(ctx)
}

func (l *etcdLeader) release(ctx context.Context) error {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	select {
	case <-l.resigned:
		return nil
	default:
	}
	l.resigning.Store(true)
	var err error
	if !l.lost() {
		// Same compare as concurrency.Election.Resign, on the key we won.
		_, err = l.s.cli.Txn(ctx).
			If(l.guard...).
			Then(clientv3.OpDelete(l.key)).
			Commit()
	}
	l.lose()
	close(l.resigned)
	// Revoking the session's lease also deletes the key if the delete
	// above failed.
	closeSession(l.s, l.sess)
	if err != nil {
		return fmt.Errorf("topo: resign %s as %q (the key expires with its lease): %w", l.election, l.id, err)
	}
	return nil
}

func (s *etcdStore) sessionTTLDuration() time.Duration {
	return time.Duration(s.sessionTTL) * time.Second
}

// dropStaleCampaigns deletes the election keys that carry id but belong to
// another lease than own, and revokes their leases: they were left by an
// earlier process with the same identity that died without resigning
// (kill -9, a crash, `switchyard up` restarted), and would otherwise keep
// the leadership, with nobody acting on it, until their session TTL runs
// out after etcd restarts or they stop being renewed. Each delete is
// conditioned on the key still holding id at the create revision read, so
// a key that meanwhile changed hands is left alone. Identities must be
// unique: a second live process with the same id loses its leadership to
// this one. Failures are logged and the campaign goes on (the stale key
// then expires with its lease, as before).
func (s *etcdStore) dropStaleCampaigns(ctx context.Context, election, id string, own clientv3.LeaseID) {
	gctx, cancel := context.WithTimeout(ctx, s.sessionTTLDuration())
	defer cancel()
	resp, err := s.cli.Get(gctx, election+"/", clientv3.WithPrefix())
	if err != nil {
		s.log.Debug("cannot list election keys to drop stale campaigns", "election", election, "err", err)
		return
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != id || clientv3.LeaseID(kv.Lease) == own {
			continue
		}
		txn, err := s.cli.Txn(gctx).
			If(clientv3.Compare(clientv3.Value(string(kv.Key)), "=", id),
				clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).
			Commit()
		if err != nil || !txn.Succeeded {
			s.log.Debug("stale election key not dropped", "election", election, "key", string(kv.Key), "err", err)
			continue
		}
		if kv.Lease != 0 {
			if _, err := s.cli.Revoke(gctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				s.log.Debug("revoke the lease of a stale election key", "key", string(kv.Key), "err", err)
			}
		}
		s.log.Info("dropped the election key of an earlier process with this identity",
			"election", election, "id", id, "key", string(kv.Key))
	}
}
