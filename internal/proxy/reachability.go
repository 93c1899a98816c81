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

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// minCheckInterval bounds how often the proxy checks its backends. It is
// also the cadence of the checks while a node's last check failed or was
// slow, whatever probe.interval is.
const minCheckInterval = 100 * time.Millisecond

// reachState is the proxy's own view of whether each configured node
// answers the MySQL protocol. The controller counts it when deciding
// whether a primary is dead (a quorum of proxies must agree), so it is
// published in the registration whenever a node's reachability changes.
type reachState struct {
	once  sync.Once
	mu    sync.Mutex
	nodes map[string]topo.BackendReach // by cluster + "/" + node
	// began is, by node, when the check whose verdict nodes holds began.
	began map[string]time.Time
	// long marks the nodes with a check running whose second connect
	// waits the whole proxy.connect_timeout (the evidence for a cut).
	long    map[string]bool
	changed chan struct{} // a node changed; rewrite the registration
	kick    chan struct{} // a session saw a backend fail; check now
}

func (r *reachState) init() {
	r.once.Do(func() {
		r.nodes = map[string]topo.BackendReach{}
		r.began = map[string]time.Time{}
		r.long = map[string]bool{}
		r.changed = make(chan struct{}, 1)
		r.kick = make(chan struct{}, 1)
	})
}

// backendTrouble is called when a session could not open, or lost, a
// backend connection, or when the controller publishes trouble on a
// primary: the backends are checked again at once instead of at the next
// interval.
func (s *Server) backendTrouble() {
	s.reach.init()
	select {
	case s.reach.kick <- struct{}{}:
	default:
	}
}

// primaryInTrouble reports whether the published state st says the
// controller is losing its primary: an UnreachablePrimary or DeadPrimary
// code (package analysis) naming it, or its last published probe failed.
// During a failover the old primary is the one in question.
func primaryInTrouble(st *topo.ClusterState) bool {
	p := st.Primary
	if p == "" {
		p = st.OldPrimary
	}
	if p == "" {
		return false
	}
	for _, a := range st.Analysis {
		if a.Node == p && (a.Code == string(analysis.DeadPrimary) || a.Code == string(analysis.UnreachablePrimary)) {
			return true
		}
	}
	n := st.Node(p)
	return n != nil && !n.Probe.At.IsZero() && !n.Probe.Reachable
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

// reachError is the error of this proxy's last check of t's node ("" when
// it was reachable or not checked).
func (s *Server) reachError(t *target) string {
	s.reach.init()
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	return s.reach.nodes[t.cluster+"/"+t.node].Error
}

// answeredSince reports whether a check of this proxy that began after
// since found t's node reachable: a lost primary answering again.
func (s *Server) answeredSince(t *target, since time.Time) bool {
	s.reach.init()
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	key := t.cluster + "/" + t.node
	b, ok := s.reach.nodes[key]
	return ok && b.Reachable && s.reach.began[key].After(since)
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
// flips. While a node's last check failed or was slow the checks follow
// each other every minCheckInterval instead, so that a node that stops
// answering is confirmed (and one that answers again is cleared) within a
// few hundred milliseconds; healthy nodes cost one check per interval. A
// kick (a session's backend failure, the controller's trouble on the
// primary) starts a check at once, at most one per minCheckInterval.
func (s *Server) checkBackends(ctx context.Context) {
	s.reach.init()
	for {
		began := time.Now()
		again := s.checkAll(ctx)
		interval := max(s.cfg.Load().Probe.Interval.D(), minCheckInterval)
		if again {
			interval = minCheckInterval
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.reach.kick:
			// Sessions failing in a storm kick continuously: at most one
			// check per minCheckInterval.
			t.Stop()
			if !sleepCtx(ctx, time.Until(began.Add(minCheckInterval))) {
				return
			}
			select {
			case <-s.reach.kick:
			default:
			}
		}
	}
}

// checkJob is one node to check.
type checkJob struct{ cluster, node, addr string }

func (j checkJob) key() string { return j.cluster + "/" + j.node }

// checkResult is one check's verdict on one node.
type checkResult struct {
	checkJob
	err     error     // nil: reachable
	began   time.Time // when the check began
	retried bool      // the first connect got no answer within probe.connect_timeout
	slow    bool      // the check took more than half of proxy.connect_timeout
}

// checkAll checks every configured node once and applies the verdicts; it
// reports whether a node failed or was slow (check again soon). It returns
// when every node has a verdict: a node whose connects go unanswered is
// reported unreachable after its second connect (see checkBackend), while
// that connect goes on waiting in the background for the whole
// proxy.connect_timeout; only then, if it still got no answer, are the
// commands in flight there cut (cutUnreachable).
func (s *Server) checkAll(ctx context.Context) (again bool) {
	s.reach.init()
	rc := s.rc.Load()
	var jobs []checkJob
	for name, cl := range rc.clusters {
		for _, n := range cl.Nodes {
			jobs = append(jobs, checkJob{name, n.Name, n.Address})
		}
	}
	results := make([]checkResult, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		first := make(chan checkResult, 1)
		go s.checkNode(ctx, j, rc, first)
		wg.Go(func() {
			select {
			case results[i] = <-first:
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	s.applyChecks(results, jobs)
	for _, r := range results {
		if r.err != nil || r.retried || r.slow {
			return true
		}
	}
	return false
}

// checkNode checks j's node and sends the verdict to first: the final one,
// or the early one (no answer to two connects) of a check whose second
// connect goes on waiting the whole proxy.connect_timeout. That check's
// final verdict is applied by checkNode itself when it comes.
func (s *Server) checkNode(ctx context.Context, j checkJob, rc *runtimeConfig, first chan<- checkResult) {
	key := j.key()
	s.reach.mu.Lock()
	long := !s.reach.long[key]
	if long {
		s.reach.long[key] = true
	}
	s.reach.mu.Unlock()
	began := time.Now()
	var once sync.Once
	early := false
	deliver := func(r checkResult, isEarly bool) bool {
		sent := false
		once.Do(func() {
			early, sent = isEarly, true
			first <- r
		})
		return sent
	}
	cr := checkBackend(ctx, j.addr, rc, long, func(err error) {
		deliver(checkResult{checkJob: j, err: err, began: began, retried: true}, true)
	})
	if long {
		s.reach.mu.Lock()
		delete(s.reach.long, key)
		s.reach.mu.Unlock()
	}
	r := checkResult{checkJob: j, err: cr.err, began: began, retried: cr.retried,
		slow: time.Since(began) > rc.connectTimeout/2}
	if deliver(r, false) || !early || ctx.Err() != nil {
		return
	}
	// The early verdict (unreachable) was applied by the round; this is
	// the end of the connect that waited the whole bound.
	if s.rc.Load().nodeAddr(j.cluster, j.node) != j.addr {
		return // the node left the configuration meanwhile
	}
	s.applyChecks([]checkResult{r}, nil)
}

// applyChecks records verdicts (each only if no check that began later has
// been recorded for its node), signals reach.changed when a node flipped,
// and cuts the commands in flight on nodes that gave no TCP answer within
// proxy.connect_timeout (connectFailed) and are still recorded
// unreachable. When jobs is not nil it is the whole configuration: nodes
// not in it are forgotten.
func (s *Server) applyChecks(results []checkResult, jobs []checkJob) {
	now := s.now()
	changed := false
	var cut []checkResult
	s.reach.mu.Lock()
	for _, r := range results {
		if localResource(r.err) {
			// This host's descriptors or ports ran out (localres.go): no
			// verdict on the node.
			continue
		}
		key := r.key()
		var cf *connectFailed
		if r.began.Before(s.reach.began[key]) {
			// A check that began later has spoken; cut only if it too
			// found the node unreachable.
			if errors.As(r.err, &cf) && !s.reach.nodes[key].Reachable {
				cut = append(cut, r)
			}
			continue
		}
		if errors.As(r.err, &cf) {
			cut = append(cut, r)
		}
		s.reach.began[key] = r.began
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
	if jobs != nil {
		seen := make(map[string]bool, len(jobs))
		for _, j := range jobs {
			seen[j.key()] = true
		}
		for key := range s.reach.nodes {
			if !seen[key] {
				delete(s.reach.nodes, key)
				delete(s.reach.began, key)
				changed = true
			}
		}
	}
	s.reach.mu.Unlock()
	for _, r := range cut {
		// Nothing answers at the TCP level: commands in flight there
		// cannot complete; cut them now rather than at the kernel's
		// timeout (a slow or frozen server accepts connections and is
		// not cut).
		s.cutUnreachable(r.cluster, r.node, r.err.Error())
	}
	if changed {
		select {
		case s.reach.changed <- struct{}{}:
		default:
		}
	}
}

// backendCheck is what checkBackend found.
type backendCheck struct {
	err     error // nil: reachable
	retried bool  // the first connect got no answer within probe.connect_timeout
}

// checkBackend reports whether the server at addr answers the MySQL
// protocol: it connects, reads the greeting and — when the proxy knows a
// user's password hash — logs in and quits, so the server does not count
// an aborted connection against the proxy's host (max_connect_errors). A
// server that answers with an error packet (1040 too many connections,
// 1129 host blocked) is reachable: it is alive. The greeting and the login
// are bounded by proxy.connect_timeout.
//
// The TCP connect is first bounded by probe.connect_timeout (100 ms by
// default, the controller's bound for the same purpose). A SYN not
// answered in that time is followed at once by a second connect (a new
// SYN: the kernel would retransmit only after 1 s, RFC 6298 §2), so one
// lost packet is not a verdict. When the second is not answered within
// probe.connect_timeout either, early (if not nil) gets the error: the
// evidence the registration reports (the controller counts it towards a
// quorum, with its own probes and every replica's silence). With long the
// second connect then goes on waiting up to proxy.connect_timeout, and if
// it gets no answer in all that time the error is a *connectFailed — the
// only verdict on which commands in flight are cut (cutUnreachable).
//
// A short failure may be spurious: a live server whose accept queue is
// full (back_log) drops SYNs in a connection storm, and a healthy node is
// then reported unreachable. That report never cuts a statement; it counts
// towards DeadPrimary only together with the controller failing to reach
// the node and every replica having heard nothing from it for
// failover.silence_bound (a server in a storm still sends its replicas
// events and heartbeats on their established connections); replica
// listeners avoid the node for new sessions meanwhile (primary listeners do
// not look at it); and a failed node is checked again every
// minCheckInterval, the first answered check clearing the report.
func checkBackend(ctx context.Context, addr string, rc *runtimeConfig, long bool, early func(error)) backendCheck {
	timeout := rc.connectTimeout
	short := min(rc.checkConnect, timeout)
	if short <= 0 {
		short = timeout
	}
	conn, err := (&net.Dialer{Timeout: short}).DialContext(ctx, "tcp", addr)
	retried := false
	if err != nil && noTCPAnswer(err) && ctx.Err() == nil && short < timeout {
		retried = true
		second := short
		if long {
			second = timeout
		}
		var t *time.Timer
		if long && early != nil {
			t = time.AfterFunc(short, func() {
				early(fmt.Errorf("no answer to two connects within %s each", short))
			})
		}
		conn, err = (&net.Dialer{Timeout: second}).DialContext(ctx, "tcp", addr)
		if t != nil {
			t.Stop()
		}
		if err != nil && noTCPAnswer(err) && second == short {
			return backendCheck{fmt.Errorf("no answer to two connects within %s each", short), true}
		}
	}
	if err != nil {
		rerr := reachError(err, timeout)
		if long && noTCPAnswer(err) {
			return backendCheck{&connectFailed{rerr}, retried}
		}
		return backendCheck{rerr, retried}
	}
	return backendCheck{greetAndLogin(conn, rc), retried}
}

// greetAndLogin reads the server's greeting on conn, logs in when the
// proxy knows a user's password hash, quits and closes conn.
func greetAndLogin(conn net.Conn, rc *runtimeConfig) error {
	timeout := rc.connectTimeout
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
