package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// minCheckInterval bounds how often the proxy checks its backends.
const minCheckInterval = 100 * time.Millisecond

// reachState is the proxy's own view of whether each configured node
// answers the MySQL protocol. The controller counts it when deciding
// whether a primary is dead (a quorum of proxies must agree), so it is
// published in the registration whenever a node's reachability changes.
type reachState struct {
	once  sync.Once
	mu    sync.Mutex
	nodes map[string]topo.BackendReach // by cluster + "/" + node
	// checked is when the last completed check of every node began.
	checked time.Time
	changed chan struct{} // a node changed; rewrite the registration
	kick    chan struct{} // a session saw a backend fail; check now
}

func (r *reachState) init() {
	r.once.Do(func() {
		r.nodes = map[string]topo.BackendReach{}
		r.changed = make(chan struct{}, 1)
		r.kick = make(chan struct{}, 1)
	})
}

// backendTrouble is called when a session could not open, or lost, a
// backend connection: the backends are checked again at once instead of at
// the next interval.
func (s *Server) backendTrouble() {
	s.reach.init()
	select {
	case s.reach.kick <- struct{}{}:
	default:
	}
}

// reachable reports whether this proxy's last check of t's node found it
// reachable (true when it was not checked).
func (s *Server) reachable(t *target) bool {
	s.reach.init()
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	b, ok := s.reach.nodes[t.cluster+"/"+t.node]
	return !ok || b.Reachable
}

// answeredSince reports whether a check of this proxy that began after
// since found t's node reachable: a lost primary answering again.
func (s *Server) answeredSince(t *target, since time.Time) bool {
	s.reach.init()
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	b, ok := s.reach.nodes[t.cluster+"/"+t.node]
	return ok && b.Reachable && s.reach.checked.After(since)
}

// backendReport returns the current reachability of every node, sorted by
// cluster and node, for the registration.
func (s *Server) backendReport() []topo.BackendReach {
	s.reach.init()
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	out := make([]topo.BackendReach, 0, len(s.reach.nodes))
	for _, b := range s.reach.nodes {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cluster != out[j].Cluster {
			return out[i].Cluster < out[j].Cluster
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// checkBackends checks every configured node every probe.interval (the
// controller's interval, so both observers see a failure in the same time)
// until ctx ends, and signals reach.changed when a node's reachability
// flips. A session's backend failure triggers a check at once.
func (s *Server) checkBackends(ctx context.Context) {
	s.reach.init()
	for {
		s.checkAll(ctx)
		interval := max(s.cfg.Load().Probe.Interval.D(), minCheckInterval)
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.reach.kick:
			// Sessions failing in a storm kick continuously: at most one
			// extra check per minCheckInterval.
			t.Stop()
			if !sleepCtx(ctx, minCheckInterval) {
				return
			}
			select {
			case <-s.reach.kick:
			default:
			}
		}
	}
}

func (s *Server) checkAll(ctx context.Context) {
	began := time.Now()
	rc := s.rc.Load()
	type job struct{ cluster, node, addr string }
	var jobs []job
	for name, cl := range rc.clusters {
		for _, n := range cl.Nodes {
			jobs = append(jobs, job{name, n.Name, n.Address})
		}
	}
	type result struct {
		job
		err error
	}
	results := make([]result, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = result{job: j, err: checkBackend(ctx, j.addr, rc)}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := s.now()
	changed := false
	s.reach.mu.Lock()
	s.reach.checked = began
	seen := map[string]bool{}
	for _, r := range results {
		key := r.cluster + "/" + r.node
		seen[key] = true
		b := topo.BackendReach{Cluster: r.cluster, Node: r.node, Address: r.addr, Reachable: r.err == nil}
		if r.err != nil {
			b.Error = r.err.Error()
		}
		old, ok := s.reach.nodes[key]
		if ok && old.Reachable == b.Reachable && old.Address == b.Address {
			continue // keep Since (and the first error text) of the current state
		}
		b.Since = now
		s.reach.nodes[key] = b
		changed = true
		if ok || !b.Reachable {
			s.log.Info("backend reachability changed", "cluster", r.cluster, "node", r.node, "addr", r.addr,
				"reachable", b.Reachable, "err", b.Error)
		}
	}
	for key := range s.reach.nodes {
		if !seen[key] {
			delete(s.reach.nodes, key)
			changed = true
		}
	}
	s.reach.mu.Unlock()
	for _, r := range results {
		var cf *connectFailed
		if errors.As(r.err, &cf) {
			// Nothing answers at the TCP level: commands in flight there
			// cannot complete; cut them now rather than at the kernel's
			// timeout (a slow or frozen server accepts connections and is
			// not cut).
			s.cutUnreachable(r.cluster, r.node, r.err.Error())
		}
	}
	if changed {
		select {
		case s.reach.changed <- struct{}{}:
		default:
		}
	}
}

// checkBackend reports whether the server at addr answers the MySQL
// protocol within the proxy's connect timeout: it connects, reads the
// greeting and — when the proxy knows a user's password hash — logs in and
// quits, so the server does not count an aborted connection against the
// proxy's host (max_connect_errors). A server that answers with an error
// packet (1040 too many connections, 1129 host blocked) is reachable: it is
// alive. nil means reachable.
func checkBackend(ctx context.Context, addr string, rc *runtimeConfig) error {
	timeout := rc.connectTimeout
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		rerr := reachError(err, timeout)
		if noTCPAnswer(err) {
			return &connectFailed{rerr}
		}
		return rerr
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	br := bufio.NewReaderSize(conn, 1024)
	p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	if err != nil {
		return reachError(fmt.Errorf("no server greeting: %w", err), timeout)
	}
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		return nil
	}
	h, err := mysqlproto.ParseHandshake(p)
	if err != nil {
		return fmt.Errorf("unreadable server greeting: %w", err)
	}
	user, stage1, ok := rc.checkUser()
	if !ok {
		return nil
	}
	caps := uint32(mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION)
	caps |= h.Capabilities & mysql.CLIENT_PLUGIN_AUTH
	scramble := h.Scramble
	if len(scramble) > mysqlproto.ScrambleLen {
		scramble = scramble[:mysqlproto.ScrambleLen]
	}
	token := []byte{}
	if stage1 != ([mysqlproto.HashLen]byte{}) {
		token = mysqlproto.NativeToken(scramble, stage1)
	}
	resp := mysqlproto.HandshakeResponse{
		Capabilities: caps, MaxPacketSize: 1 << 24, Charset: h.Charset, User: user,
		AuthResponse: token, AuthPlugin: mysql.AUTH_NATIVE_PASSWORD,
	}
	if err := writePacket(conn, 1, mysqlproto.AppendHandshakeResponse(nil, &resp)); err != nil {
		return reachError(fmt.Errorf("sending login: %w", err), timeout)
	}
	if _, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax); err != nil {
		return reachError(fmt.Errorf("reading login result: %w", err), timeout)
	}
	// Any answer (OK, ERR, auth switch) proves the server is alive.
	_ = writePacket(conn, 0, []byte{mysql.COM_QUIT})
	return nil
}

// checkUser returns a user the proxy can log in as (the first, by name,
// whose SHA1(password) it knows).
func (rc *runtimeConfig) checkUser() (string, [mysqlproto.HashLen]byte, bool) {
	names := make([]string, 0, len(rc.users))
	for n := range rc.users {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		u := rc.users[n]
		if u.empty {
			return n, [mysqlproto.HashLen]byte{}, true
		}
		if s1 := u.stage1.Load(); s1 != nil {
			return n, *s1, true
		}
	}
	return "", [mysqlproto.HashLen]byte{}, false
}

// connectFailed is a check whose TCP connect got no answer (timeout, host
// or network unreachable): the node's host or the path to it is gone.
type connectFailed struct{ err error }

func (c *connectFailed) Error() string { return c.err.Error() }
func (c *connectFailed) Unwrap() error { return c.err }

// noTCPAnswer reports whether a dial error means nothing answered at the
// TCP level (as opposed to a refusal: the host is up, the server is not).
func noTCPAnswer(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// reachError words a failed check: refused, timeout or reset.
func reachError(err error, timeout time.Duration) error {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.New("connection refused")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer within %s", timeout)
	case errors.Is(err, syscall.ECONNRESET):
		return errors.New("connection reset")
	}
	return err
}

// updateReach rewrites the registration after a reachability change; on
// failure it signals itself again a second later.
func (s *Server) updateReach(ctx context.Context, lease topo.Lease, started time.Time) {
	val, err := s.registration(started, s.Epochs())
	if err == nil {
		// Bounded: a store that stopped answering must not hold the
		// registration loop (it also watches for the lease's loss).
		uctx, cancel := context.WithTimeout(ctx, time.Second)
		err = lease.Update(uctx, val)
		cancel()
	}
	if err == nil || ctx.Err() != nil {
		return
	}
	s.log.Warn("publishing backend reachability failed; retrying", "err", err)
	go func() {
		if sleepCtx(ctx, time.Second) {
			select {
			case s.reach.changed <- struct{}{}:
			default:
			}
		}
	}()
}
