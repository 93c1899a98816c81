package topo

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
)

// EtcdOptions configures NewEtcd (config etcd).
type EtcdOptions struct {
	// Endpoints are the etcd client endpoints, "host:port" or
	// "http://host:port" (etcd.endpoints, or Embedded.Endpoints()).
	Endpoints []string
	// DialTimeout bounds connecting and the first request that checks etcd
	// is reachable (etcd.dial_timeout). Default 2s.
	DialTimeout time.Duration
	// SessionTTL is the lease TTL behind a leadership won by Campaign: a
	// leader that cannot reach etcd loses leadership (and another controller
	// may win) within about this long. Rounded up to whole seconds; default 5s.
	SessionTTL time.Duration
	// Log receives the etcd client's warnings and errors. Nil discards them.
	Log *slog.Logger
	// TLS, when set, is the client TLS config (etcd.tls): every endpoint is
	// reached over https. Endpoints given as https://host:port without TLS
	// use the system's roots.
	TLS *tls.Config
	// Username and Password log in to etcd (etcd.username,
	// etcd.password_env/_file); empty Username: no authentication.
	Username string
	Password string
}

// Defaults for EtcdOptions.
const (
	DefaultDialTimeout = 2 * time.Second
	DefaultSessionTTL  = 5 * time.Second
)

// etcdStore is the Store on an etcd v3 cluster. Version is etcd's
// ModRevision; every conditional write is one etcd transaction.
type etcdStore struct {
	cli        *clientv3.Client
	log        *slog.Logger
	sessionTTL int // seconds

	// ctx lives as long as the store; background work (keepalives, leader
	// watches) derives from it and ends at Close.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	leaders map[*etcdLeader]struct{}
	leases  map[*etcdLease]struct{}
	wg      sync.WaitGroup
}

// NewEtcd connects to the etcd cluster at cfg.Endpoints and checks that it
// answers within cfg.DialTimeout. The returned Store must be closed with
// Close, which also releases every leadership and registration it holds.
func NewEtcd(cfg EtcdOptions) (Store, error) {
	eps, err := ParseEndpoints(cfg.Endpoints...)
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return nil, errors.New("topo: no etcd endpoints given (etcd.endpoints)")
	}
	dial := cfg.DialTimeout
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	ttl := cfg.SessionTTL
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tlsCfg := cfg.TLS
	if tlsCfg == nil && anyHTTPS(eps) {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsCfg != nil {
		for i, ep := range eps {
			eps[i] = "https://" + strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
		}
	}
	hint := "check that it runs and is reachable"
	if tlsCfg != nil {
		hint += ", and that etcd.tls (ca_file, server_name, cert_file) matches its certificates"
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          dial,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tlsCfg,
		Username:             cfg.Username,
		Password:             cfg.Password,
		Logger:               newZapLogger(cfg.Log, "etcd-client", zapcore.WarnLevel, clientRetryNoise),
	})
	if err != nil {
		if aerr := authError(cfg.Username, err); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("topo: connect to etcd at %s (%s): %w", strings.Join(eps, ","), hint, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dial)
	_, err = cli.Get(ctx, "/switchyard-reachability-check", clientv3.WithCountOnly())
	cancel()
	if isPermissionDenied(err) {
		// etcd answered and accepted the user; its role covers only
		// switchyard's prefix, not this key.
		err = nil
	}
	if err != nil {
		cli.Close()
		if aerr := authError(cfg.Username, err); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("topo: etcd at %s did not answer within %s (etcd.dial_timeout); %s: %w",
			strings.Join(eps, ","), dial, hint, err)
	}
	s := &etcdStore{
		cli:        cli,
		log:        log,
		sessionTTL: int((ttl + time.Second - 1) / time.Second),
		leaders:    make(map[*etcdLeader]struct{}),
		leases:     make(map[*etcdLease]struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// ErrAuth wraps the errors of NewEtcd when etcd refuses the configured
// user: a wrong name or password, or a user without access to the keys.
var ErrAuth = errors.New("etcd authentication failed")

// authError explains an etcd authentication or permission refusal, naming
// the config field; nil for other errors.
func authError(user string, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed) || strings.Contains(msg, rpctypes.ErrGRPCAuthFailed.Error()):
		return fmt.Errorf("topo: %w for user %s (config etcd.username, etcd.password_env/_file): %v", ErrAuth, user, err)
	case errors.Is(err, rpctypes.ErrUserEmpty) || strings.Contains(msg, rpctypes.ErrGRPCUserEmpty.Error()) ||
		strings.Contains(msg, rpctypes.ErrGRPCInvalidAuthToken.Error()):
		return fmt.Errorf("topo: %w: etcd requires a user (config etcd.username and etcd.password_env/_file): %v", ErrAuth, err)
	case isPermissionDenied(err):
		return fmt.Errorf("topo: %w: etcd user %s (config etcd.username) has no access to switchyard's keys; grant its role readwrite on the etcd.prefix range: %v", ErrAuth, user, err)
	}
	return nil
}

func isPermissionDenied(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrPermissionDenied) || strings.Contains(err.Error(), rpctypes.ErrGRPCPermissionDenied.Error()))
}

func anyHTTPS(eps []string) bool {
	for _, ep := range eps {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return false
}

// clientRetryNoise reports the etcd client's log of a failed request
// attempt: the error is returned to the caller, which decides what it
// means (a cancelled context is routine), so it is logged at debug level.
func clientRetryNoise(msg string) bool { return msg == "retrying of unary invoker failed" }

// ParseEndpoints normalises etcd endpoints to "http://host:port" URLs
// ("https://host:port" for one given so). Each argument may hold several
// endpoints separated by commas (as in --etcd-endpoints); each is
// "host:port", "http://host:port" or "https://host:port". Empty entries
// are skipped.
func ParseEndpoints(list ...string) ([]string, error) {
	var out []string
	for _, item := range list {
		for _, ep := range strings.Split(item, ",") {
			ep = strings.TrimSpace(ep)
			if ep == "" {
				continue
			}
			hostport, scheme := ep, "http"
			if strings.Contains(ep, "://") {
				u, err := url.Parse(ep)
				if err != nil {
					return nil, fmt.Errorf("topo: etcd endpoint %q: %w", ep, err)
				}
				if u.Scheme != "http" && u.Scheme != "https" {
					return nil, fmt.Errorf("topo: etcd endpoint %q: scheme %q not supported; use host:port, http://host:port or https://host:port", ep, u.Scheme)
				}
				scheme = u.Scheme
				if u.Path != "" && u.Path != "/" {
					return nil, fmt.Errorf("topo: etcd endpoint %q: unexpected path %q; use http://host:port", ep, u.Path)
				}
				hostport = u.Host
			}
			host, port, err := net.SplitHostPort(hostport)
			if err != nil || host == "" || port == "" {
				return nil, fmt.Errorf("topo: etcd endpoint %q: want host:port or http://host:port", ep)
			}
			out = append(out, scheme+"://"+net.JoinHostPort(host, port))
		}
	}
	return out, nil
}

// wrap names the operation and key in err, and reports a closed store as
// ErrClosed.
func (s *etcdStore) wrap(op, key string, err error) error {
	if s.isClosed() {
		return fmt.Errorf("topo: %s %s: %w", op, key, ErrClosed)
	}
	return fmt.Errorf("topo: %s %s: %w", op, key, err)
}

func (s *etcdStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Get is a linearizable etcd range read of one key.
func (s *etcdStore) Get(ctx context.Context, key string) (KV, error) {
	if s.isClosed() {
		return KV{}, s.wrap("get", key, ErrClosed)
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return KV{}, s.wrap("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("topo: get %s: %w", key, ErrNotFound)
	}
	return toKV(resp.Kvs[0]), nil
}

// List is a linearizable prefix read, sorted by key.
func (s *etcdStore) List(ctx context.Context, prefix string) ([]KV, error) {
	if s.isClosed() {
		return nil, s.wrap("list", prefix, ErrClosed)
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.wrap("list", prefix, err)
	}
	return toKVs(resp.Kvs), nil
}

// Create: txn if CreateRevision(key) == 0 then put.
func (s *etcdStore) Create(ctx context.Context, key string, value []byte) (Version, error) {
	return s.create(ctx, key, value, nil)
}

// Update: txn if CreateRevision(key) > 0 and ModRevision(key) == expect
// then put, else count the key to tell ErrNotFound from ErrBadVersion.
func (s *etcdStore) Update(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	return s.update(ctx, key, value, expect, nil)
}

// Delete: txn if the key exists (and ModRevision(key) == expect) then delete.
func (s *etcdStore) Delete(ctx context.Context, key string, expect Version) error {
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)}
	if expect != 0 {
		conds = append(conds, clientv3.Compare(clientv3.ModRevision(key), "=", int64(expect)))
	}
	r, err := s.cas(ctx, "delete", key, conds, clientv3.OpDelete(key), nil)
	if err != nil {
		return err
	}
	switch {
	case r.ok:
		return nil
	case r.exists:
		return fmt.Errorf("topo: delete %s at version %d: %w", key, expect, ErrBadVersion)
	default:
		return fmt.Errorf("topo: delete %s: %w", key, ErrNotFound)
	}
}

// create and update implement Create and Update, conditioned on guard (the
// leader's election key) when guard is not nil.
func (s *etcdStore) create(ctx context.Context, key string, value []byte, guard []clientv3.Cmp) (Version, error) {
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	r, err := s.cas(ctx, "create", key, conds, clientv3.OpPut(key, string(value)), guard)
	if err != nil {
		return 0, err
	}
	if !r.ok {
		return 0, fmt.Errorf("topo: create %s: %w", key, ErrExists)
	}
	return Version(r.rev), nil
}

func (s *etcdStore) update(ctx context.Context, key string, value []byte, expect Version, guard []clientv3.Cmp) (Version, error) {
	conds := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), ">", 0),
		clientv3.Compare(clientv3.ModRevision(key), "=", int64(expect)),
	}
	r, err := s.cas(ctx, "update", key, conds, clientv3.OpPut(key, string(value)), guard)
	if err != nil {
		return 0, err
	}
	switch {
	case r.ok:
		return Version(r.rev), nil
	case r.exists:
		return 0, fmt.Errorf("topo: update %s at version %d: %w", key, expect, ErrBadVersion)
	default:
		return 0, fmt.Errorf("topo: update %s: %w", key, ErrNotFound)
	}
}

// casResult is the outcome of one conditional write.
type casResult struct {
	ok     bool  // conds held and op ran
	exists bool  // when !ok: the key exists
	rev    int64 // revision of the write when ok
}

// errGuard reports that a leader guard compare failed.
var errGuard = errors.New("guard failed")

// cas runs op if every cond holds. With a guard it runs one transaction
// "if guard then (if conds then op else get) else nothing", so a failed
// guard (errGuard) is told apart from failed conds in a single round trip.
func (s *etcdStore) cas(ctx context.Context, opName, key string, conds []clientv3.Cmp, op clientv3.Op, guard []clientv3.Cmp) (casResult, error) {
	if s.isClosed() {
		return casResult{}, s.wrap(opName, key, ErrClosed)
	}
	check := clientv3.OpGet(key, clientv3.WithCountOnly())
	var inner *clientv3.TxnResponse
	var rev int64
	if guard == nil {
		resp, err := s.cli.Txn(ctx).If(conds...).Then(op).Else(check).Commit()
		if err != nil {
			return casResult{}, s.wrap(opName, key, err)
		}
		inner, rev = resp, resp.Header.Revision
	} else {
		resp, err := s.cli.Txn(ctx).If(guard...).
			Then(clientv3.OpTxn(conds, []clientv3.Op{op}, []clientv3.Op{check})).
			Commit()
		if err != nil {
			return casResult{}, s.wrap(opName, key, err)
		}
		if !resp.Succeeded {
			return casResult{}, errGuard
		}
		inner, rev = (*clientv3.TxnResponse)(resp.Responses[0].GetResponseTxn()), resp.Header.Revision
	}
	if inner.Succeeded {
		return casResult{ok: true, rev: rev}, nil
	}
	exists := false
	if len(inner.Responses) > 0 {
		if rr := inner.Responses[0].GetResponseRange(); rr != nil {
			exists = rr.Count > 0
		}
	}
	return casResult{exists: exists}, nil
}

// Watch reads the prefix, then watches it from the next revision, so no
// change between the read and the watch is missed. Compaction, a member
// cut off from the quorum (WithRequireLeader) or a closed client end the
// watch with an Err event.
func (s *etcdStore) Watch(ctx context.Context, prefix string) ([]KV, <-chan WatchEvent, error) {
	if s.isClosed() {
		return nil, nil, s.wrap("watch", prefix, ErrClosed)
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, s.wrap("watch", prefix, err)
	}
	initial := toKVs(resp.Kvs)
	// WithRequireLeader: a member cut off from the quorum fails the watch
	// instead of silently delivering nothing.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	out := make(chan WatchEvent, 16)
	go func() {
		defer close(out)
		defer wcancel()
		send := func(ev WatchEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			wr, ok := <-wch
			if ctx.Err() != nil {
				return
			}
			if !ok {
				send(WatchEvent{Err: s.wrap("watch", prefix, errors.New("watch channel closed by the etcd client"))})
				return
			}
			if err := wr.Err(); err != nil {
				send(WatchEvent{Err: s.wrap("watch", prefix, err)})
				return
			}
			if wr.Canceled {
				send(WatchEvent{Err: s.wrap("watch", prefix, fmt.Errorf("watch cancelled by etcd: %s", wr.CancelReason))})
				return
			}
			for _, ev := range wr.Events {
				we := WatchEvent{Type: EventPut, KV: toKV(ev.Kv)}
				if ev.Type == mvccpb.DELETE {
					we.Type = EventDelete
					we.KV.Value = nil
				}
				if !send(we) {
					return
				}
			}
		}
	}()
	return initial, out, nil
}

// Close resigns every leadership and revokes every registration (bounded
// by 2s), then closes the client.
func (s *etcdStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	leaders := make([]*etcdLeader, 0, len(s.leaders))
	for l := range s.leaders {
		leaders = append(leaders, l)
	}
	leases := make([]*etcdLease, 0, len(s.leases))
	for l := range s.leases {
		leases = append(leases, l)
	}
	s.mu.Unlock()

	// Release what we hold so others need not wait for TTLs to expire.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range leaders {
		wg.Go(func() { l.release(ctx) })
	}
	for _, l := range leases {
		wg.Go(func() { l.release(ctx) })
	}
	wg.Wait()
	s.cancel()
	s.wg.Wait()
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("topo: close etcd client: %w", err)
	}
	return nil
}

func toKV(kv *mvccpb.KeyValue) KV {
	return KV{Key: string(kv.Key), Value: kv.Value, Version: Version(kv.ModRevision)}
}

func toKVs(kvs []*mvccpb.KeyValue) []KV {
	out := make([]KV, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, toKV(kv))
	}
	return out
}
