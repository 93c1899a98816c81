package proxy

import (
	"bufio"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Backend connection pools. Every backend connection belongs to the pool
// of its node address (backendCounter): sessions take a connection there
// (connect) and give it back when they no longer need it — at logout on
// a listener with pooling "session", at every transaction boundary with
// pooling "transaction" (txpool.go) — instead of closing it. A pooled
// connection is interchangeable only between sessions of the same user
// with the same relayed capabilities and login charset (poolKey): those
// are fixed at login. Everything else is per checkout:
//
//   - a connection given back at logout is reset at once with
//     COM_RESET_CONNECTION (MariaDB ≥ 10.2: rolls back, drops temporary
//     tables, user variables, prepared statements and locks, resets the
//     session variables — session_track_* included, so tracking is set up
//     again — and restores the login charset; the default schema stays,
//     but character_set_database and collation_database take their global
//     values, so a COM_INIT_DB selects the schema again in the same round
//     trip) and is "clean";
//   - a connection given back at a transaction boundary keeps its owner's
//     state; it is clean only when that session had none (no variable
//     changed, no user variable, no prepared statement);
//   - a checkout prefers the session's own previous connection (nothing to
//     send), then a clean one (at most a COM_INIT_DB for the schema), and
//     otherwise resets one and re-creates the session's state on it in one
//     pipelined round trip (COM_RESET_CONNECTION, COM_INIT_DB of its
//     schema even when it is the connection's, the SET of
//     replaySQL, a COM_STMT_PREPARE per statement: migrate.go
//     setupBackend).
//
// proxy.max_connections_per_backend caps, per node, the connections open
// plus those being opened; a session that finds its node at the cap
// closes an idle connection of another key if there is one, else waits up
// to proxy.pool.wait_timeout for a connection to come back and then gets
// error 1040 naming the limit: a login is refused with it (as MariaDB
// refuses one past max_connections), a logged-in session gets it for one
// command and keeps its state (migrate.go moveTo). On a primary listener a
// route change that leaves the node no longer the primary ends the wait
// (errRouteChanged: the session routes again, holding for a failover), and
// a wait that times out while the primary is reported unreachable holds
// for the failover instead of 1040. The cap is per node, shared by every
// listener whatever its pooling, nothing reserved for either. It is
// lowered to the server's max_connections less a reserve for other
// clients and what they hold (servermax.go), and while the server is
// within that reserve idle connections above a small floor are closed
// within seconds (trimIdle). A dial the server refuses with 1040 (its
// max_connections) closes the oldest idle connection of the node, one
// refused with 1203 (max_user_connections) the oldest of the same user,
// and dials again. Idle connections are closed after
// proxy.pool.idle_timeout, when their node leaves the cluster's route or
// changes role, and are never used for the primary when they were opened
// or last used before the node became primary (primarySince) or under an
// older primary generation (routeSnapshot.gen).

// poolKey is what a backend connection's login fixes and sessions sharing
// it must agree on.
type poolKey struct {
	user    string
	caps    uint32 // the session's relayCaps
	ext     uint32 // the session's MariaDB extended capabilities (relayExtCaps)
	charset byte
}

// nodePool is the pool part of a backendCounter.
type nodePool struct {
	mu sync.Mutex
	// total counts connections open plus those being dialed: what
	// proxy.max_connections_per_backend caps.
	total   int
	idle    []*backend    // oldest first
	waiters []*poolWaiter // first come, first served
	// srv is what the proxy last read of the server's connection limits
	// (servermax.go).
	srv serverLimits
	// learnMu makes the checkouts that find the server's limits never read
	// wait for the first new connection, which reads them, before they
	// dial: a burst of logins on a fresh pool does not open past them.
	learnMu sync.Mutex
	// primarySince is the epoch of the first snapshot of the node's
	// current spell as primary (0 when it is not primary).
	primarySince  atomic.Int64
	idleG, inUseG prometheus.Gauge
	checkoutsC    map[string]prometheus.Counter // by kind, set with the gauges
}

// poolWaiter is a checkout waiting for a connection of its node: woken
// (ch) when a connection of its key comes back or a slot frees up.
type poolWaiter struct {
	ch       chan struct{}
	key      poolKey
	noSchema bool // the session has no default schema
	woken    bool // told to try again; still queued (newcomers wait behind it) until it does
}

// Checkout kinds (switchyard_backend_pool_checkouts_total).
const (
	checkoutSame  = "same"
	checkoutClean = "clean"
	checkoutReset = "reset"
)

// poolKey returns the session's pool key.
func (s *session) poolKey() poolKey {
	return poolKey{user: s.user, caps: s.caps & relayCaps, ext: s.ext, charset: s.charset}
}

// gauges returns the pool's state gauges (created on first use).
func (p *backendCounter) gauges(m *metrics) {
	if p.idleG == nil {
		p.idleG = m.poolConns.WithLabelValues(p.cluster, p.node, "idle")
		p.inUseG = m.poolConns.WithLabelValues(p.cluster, p.node, "in_use")
		p.checkoutsC = make(map[string]prometheus.Counter, 3)
		for _, k := range []string{checkoutSame, checkoutClean, checkoutReset} {
			p.checkoutsC[k] = m.poolCheckouts.WithLabelValues(p.cluster, p.node, k)
		}
	}
}

// usable reports whether an idle connection may serve a session under snap.
func (p *backendCounter) usable(be *backend, snap *routeSnapshot) bool {
	if snap == nil || snap.primary == nil || !snap.primary.same(be.t) {
		return true
	}
	return be.gen == snap.gen && be.epoch >= p.primarySince.Load()
}

// reserve, under p.mu, finds an idle connection for s (its own previous one
// first, then, by pooling mode, the newest or the oldest with the same key
// whose schema suits the session), or reserves a slot for a dial when the
// node is below the cap limit, or queues a waiter. Idle connections that
// must not be used any more, and, at the cap, the oldest idle connection
// of another key, are returned to be closed by the caller. A checkout
// that has not waited yet (w nil) queues behind the waiters of its key
// instead of taking what came back for them; a woken one (w) keeps its
// place at the head of the queue.
func (p *backendCounter) reserve(s *session, snap *routeSnapshot, rc *runtimeConfig, w *poolWaiter) (be *backend, dial bool, wait *poolWaiter, drop []*backend, evicted bool) {
	key := s.poolKey()
	p.mu.Lock()
	defer p.mu.Unlock()
	limit := p.connLimit(rc.maxPerBackend, rc.serverReserve)
	if w != nil {
		if i := slices.Index(p.waiters, w); i >= 0 {
			p.waiters = slices.Delete(p.waiters, i, i+1)
		}
		// A waiter may come back without having read its wake-up (it
		// woke for a new snapshot of the same primary): drop it with the
		// flag, or the next wake-up would find the channel full.
		select {
		case <-w.ch:
		default:
		}
		w.woken = false
	} else if slices.ContainsFunc(p.waiters, func(o *poolWaiter) bool { return o.key == key }) {
		wait = &poolWaiter{ch: make(chan struct{}, 1), key: key, noSchema: s.schema == ""}
		p.waiters = append(p.waiters, wait)
		return nil, false, wait, nil, false
	}
	for i := len(p.idle) - 1; i >= 0; i-- {
		c := p.idle[i]
		if !p.usable(c, snap) {
			drop = append(drop, c)
			continue
		}
		if c.key != key || (s.schema == "" && c.schema != "") {
			continue
		}
		if c == s.lastBe && c.owner == s.id {
			be = c
			break
		}
		if be == nil || s.txPool {
			// Session pooling keeps a hot set (the newest); transaction
			// pooling takes the least recently used, whose session is the
			// least likely to want it back (txpool.go).
			be = c
		}
	}
	for _, c := range drop {
		p.take(c)
	}
	if be != nil {
		p.take(be)
		return be, false, nil, drop, false
	}
	if limit <= 0 || p.total < limit {
		p.total++
		return nil, true, nil, drop, false
	}
	if len(drop) == 0 && len(p.idle) > 0 {
		// At the ceiling with idle connections nobody of this key can
		// use: close the least recently used one of another key (else
		// one of this key whose schema the session cannot use) to make
		// room, never opening past the ceiling.
		i := slices.IndexFunc(p.idle, func(c *backend) bool { return c.key != key })
		if i < 0 {
			i = 0
		}
		victim := p.idle[i]
		p.take(victim)
		return nil, false, nil, []*backend{victim}, true
	}
	if len(drop) > 0 {
		return nil, false, nil, drop, false // closing them frees slots: try again
	}
	if p.limitProbe(limit, rc, time.Now()) {
		p.total++
		return nil, true, nil, nil, false
	}
	if w == nil {
		// A new waiter queues at the tail.
		w = &poolWaiter{ch: make(chan struct{}, 1), key: key, noSchema: s.schema == ""}
		p.waiters = append(p.waiters, w)
	} else {
		// A woken one that found nothing goes back to the head.
		p.waiters = slices.Insert(p.waiters, 0, w)
	}
	return nil, false, w, nil, false
}

// countCheckout counts a checkout of kind.
func (p *backendCounter) countCheckout(kind string) {
	p.mu.Lock()
	c := p.checkoutsC[kind]
	p.mu.Unlock()
	if c != nil {
		c.Inc()
	}
}

// take removes be from the idle list (p.mu held): it is in use again, by
// a session or by whoever closes it.
func (p *backendCounter) take(be *backend) {
	if i := slices.Index(p.idle, be); i >= 0 {
		p.idle = slices.Delete(p.idle, i, i+1)
	}
	be.inPool = false
	p.idleG.Dec()
	p.inUseG.Inc()
}

// wakeOne tells the first waiting checkout to try again (p.mu held): a
// slot came free.
func (p *backendCounter) wakeOne() {
	p.wake(func(*poolWaiter) bool { return true })
}

// wakeFor tells the first checkout that can use be, back in the pool, to
// try again (p.mu held); without one, the first of any key (at the cap it
// closes an idle connection of another key to make room).
func (p *backendCounter) wakeFor(be *backend) {
	if !p.wake(func(w *poolWaiter) bool { return w.key == be.key && (!w.noSchema || be.schema == "") }) {
		p.wakeOne()
	}
}

func (p *backendCounter) wake(match func(*poolWaiter) bool) bool {
	for _, w := range p.waiters {
		if w.woken || !match(w) {
			continue
		}
		w.woken = true
		select {
		case w.ch <- struct{}{}: // buffered; a waiter is woken once per queueing
		default: // a wake-up is pending already: never block with p.mu held
		}
		return true
	}
	return false
}

// cancelWait removes a waiter that gave up, passing on a wake-up it got.
func (p *backendCounter) cancelWait(w *poolWaiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.waiters, w); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
	}
	if w.woken {
		p.wakeOne() // pass the wake-up on
	}
}

// maxServerRefusals bounds how many idle connections one checkout closes
// when the server refuses new ones with error 1040 (its max_connections
// reached) before the refusal is passed on to the client.
const maxServerRefusals = 8

// oldestIdle takes the least recently returned idle connection (of user
// when it is not empty) out of the pool for the caller to close, or
// returns nil when there is none.
func (p *backendCounter) oldestIdle(user string) *backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.idle, func(c *backend) bool { return user == "" || c.key.user == user })
	if i < 0 {
		return nil
	}
	victim := p.idle[i]
	p.take(victim)
	return victim
}

// dialFailed gives back the slot reserved for a dial that failed.
func (p *backendCounter) dialFailed() {
	p.mu.Lock()
	p.total--
	p.wakeOne()
	p.mu.Unlock()
}

// dialed counts a new connection in the pool's gauges.
func (p *backendCounter) dialed(m *metrics) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gauges(m)
	p.inUseG.Inc()
	m.poolConnects.WithLabelValues(p.cluster, p.node).Inc()
}

// closed accounts for a connection that was closed, idle or in use.
func (p *backendCounter) closed(be *backend) {
	p.mu.Lock()
	if be.inPool {
		p.take(be)
	}
	if p.inUseG != nil {
		p.inUseG.Dec()
	}
	p.total--
	p.wakeOne()
	p.mu.Unlock()
}

// putIdle gives be back to its pool.
func (p *backendCounter) putIdle(be *backend, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if be.closed.Load() || be.inPool {
		return
	}
	be.inPool, be.idleAt = true, now
	p.idle = append(p.idle, be)
	p.idleG.Inc()
	p.inUseG.Dec()
	p.wakeFor(be)
}

// connect returns a backend connection to t for the session, logged in as
// its user with its capabilities and charset, its default schema selected
// and session tracking on, from t's pool or newly opened (dialAndLogin);
// with restore the session's variables and prepared statements are
// re-created on it (their new ids in be.restored; be.sameState when it is
// the session's own previous connection, whose state is the session's).
// At the node's connection limit it waits up to proxy.pool.wait_timeout,
// then returns error 1040 — on a primary listener whose primary this proxy's
// check or the controller reports unreachable, or that is no longer the
// primary, a connect-lost error instead (the caller holds for the
// failover); for a move or a checkout (restore) a route change that
// leaves t no longer the primary (a failover, a switchover's hold) ends
// the wait with errRouteChanged. When the server itself refuses the dial
// with 1040 (ER_CON_COUNT_ERROR: its max_connections system variable), it
// closes the node's oldest idle connection and dials again, at most
// maxServerRefusals times, before returning the server's error. It returns the login OK payload to relay (the
// server's for a new connection, one built by the proxy for a pooled
// one).
func (s *session) connect(t *target, snap *routeSnapshot, rc *runtimeConfig, restore bool) (*backend, []byte, *mysql.MyError) {
	p := s.srv.backendCounter(t)
	m := s.srv.metrics
	var waitStart time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if !waitStart.IsZero() {
			m.poolWaitSecs.WithLabelValues(t.cluster, t.node).Observe(time.Since(waitStart).Seconds())
		}
	}()
	learning := false
	if !p.limitsKnown() {
		// Nothing known of the server's limits yet: the first dial reads
		// them while the others wait (servermax.go).
		p.learnMu.Lock()
		if !p.limitsKnown() {
			learning = true
		} else {
			p.learnMu.Unlock()
		}
	}
	defer func() {
		if learning {
			p.learnMu.Unlock()
		}
	}()
	var w *poolWaiter
	refusals := 0
	for {
		be, dial, wait, drop, evicted := p.reserve(s, snap, rc, w)
		if learning && !dial {
			// Only a dial reads the limits: the others need not wait
			// for this checkout.
			learning = false
			p.learnMu.Unlock()
		}
		if evicted {
			m.poolServerEvictions.WithLabelValues(t.cluster, t.node).Inc()
		}
		for _, c := range drop {
			c.close(true)
		}
		switch {
		case be != nil:
			okp, merr := s.preparePooled(be, snap, rc, restore)
			if merr == nil {
				return be, okp, nil
			}
			be.close(false)
			if !connectLost(merr) {
				return nil, nil, merr
			}
			continue // a connection the server closed meanwhile: the next one
		case dial:
			okp, be, merr := s.dialAndLogin(t, snap, rc, restore)
			if learning {
				learning = false
				p.learnMu.Unlock()
			}
			if p.endProbe() && merr != nil && merr.Code == mysql.ER_CON_COUNT_ERROR {
				// A dial past the ceiling to read the server's limits
				// again (limitProbe), and the server is indeed full:
				// this checkout waits like the others.
				p.dialFailed()
				continue
			}
			if merr != nil && (merr.Code == mysql.ER_CON_COUNT_ERROR || merr.Code == mysql.ER_TOO_MANY_USER_CONNECTIONS) && refusals < maxServerRefusals {
				// The server is at its max_connections (or the user at
				// its max_user_connections), and idle pooled
				// connections (of other users, capabilities or
				// charsets; of the same user) may be what holds its
				// slots: give one back to the server and dial again.
				user := ""
				if merr.Code == mysql.ER_TOO_MANY_USER_CONNECTIONS {
					user = s.user
				}
				if victim := p.oldestIdle(user); victim != nil {
					refusals++
					p.dialFailed()
					victim.close(true)
					m.poolServerEvictions.WithLabelValues(t.cluster, t.node).Inc()
					s.log.Info("server refused a connection at its connection limit; closed an idle pooled connection to make room",
						"node", t.node, "addr", t.addr, "code", merr.Code, "attempt", refusals)
					time.Sleep(time.Duration(refusals) * 5 * time.Millisecond) // the server frees the slot when its thread ends
					continue
				}
			}
			if merr != nil {
				p.dialFailed()
				if merr.Code != mysql.ER_CON_COUNT_ERROR {
					// Not this host's own limits (localres.go): check the node.
					s.srv.backendTrouble()
				}
				m.backendErrors.WithLabelValues(t.cluster, t.node, s.connectReason(merr)).Inc()
				s.log.Repeated(slog.LevelWarn, "backend connection failed|"+t.cluster+"|"+t.node, "backend connection failed",
					"cluster", t.cluster, "node", t.node, "addr", t.addr, "user", s.user, "code", merr.Code, "err", merr.Message)
				return nil, nil, merr
			}
			be.counter = p
			be.key = s.poolKey()
			be.schema = s.schema
			be.owner = s.id
			be.gauge = m.backendConns.WithLabelValues(t.cluster, t.node)
			be.gauge.Inc()
			p.open.Add(1)
			p.dialed(m)
			if snap != nil {
				be.gen, be.epoch = snap.gen, snap.stateEpoch()
			}
			return be, okp, nil
		case wait != nil:
			if waitStart.IsZero() {
				waitStart = time.Now()
				timer = time.NewTimer(rc.poolWait)
				m.poolWaits.WithLabelValues(t.cluster, t.node).Inc()
			}
			w = wait
			var replaced chan struct{} // nil: a route change does not end the wait
			if restore && snap != nil && s.l.role == rolePrimary && snap.primary.same(t) {
				// A move or a checkout between transactions (a login or a
				// change of user is answered at the timeout below).
				replaced = snap.replaced
			}
			select {
			case <-wait.ch:
			case <-replaced:
				if now := s.l.route.snap.Load(); now != nil && now.hold == nil && now.primary.same(t) {
					snap = now // the same primary (a new epoch): wait on
					continue
				}
				// The primary changed, is lost or a switchover holds:
				// the session routes again (migrate.go reroute) instead
				// of waiting out a node that is no longer its route.
				p.cancelWait(wait)
				return nil, nil, errRouteChanged
			case <-timer.C:
				p.cancelWait(wait)
				if now := s.l.route.snap.Load(); s.l.role == rolePrimary && now != nil && now.lossCheck &&
					(!now.primary.same(t) || primaryInTrouble(&now.state) || !s.srv.reachable(t)) {
					// The node is no longer the primary, or its connections
					// are held by commands on a primary that stopped
					// answering (frozen, partitioned): the session holds
					// for the failover like one whose connect timed out
					// (migrate.go moveTo, session.go loginConnect), not
					// 1040 for that node.
					return nil, nil, errUnknown(fmt.Sprintf(
						"switchyard: no connection to %s (%s) came free within %s (proxy.pool.wait_timeout) and it is no longer the primary or is reported unreachable",
						t.node, t.addr, rc.poolWait))
				}
				m.backendErrors.WithLabelValues(t.cluster, t.node, connPoolLimit).Inc()
				limit := p.limitNow(rc)
				if ok, suppressed := s.srv.limit.poolLimitLog.allow(time.Now()); ok {
					s.log.Warn("backend connection limit reached", "node", t.node, "addr", t.addr, "limit", limit,
						"max_connections_per_backend", rc.maxPerBackend, "waited", rc.poolWait, "suppressed", suppressed)
				}
				if !restore {
					// A login (or a change of user): answered as a server at
					// its max_connections answers one after the handshake
					// (MariaDB 10.11: ERR 1040, SQLSTATE 08004, "Too many
					// connections"); the limit and the wait are in the log.
					return nil, nil, mysqlproto.NewError(mysql.ER_CON_COUNT_ERROR, "Too many connections")
				}
				return nil, nil, mysqlproto.NewError(mysql.ER_CON_COUNT_ERROR, fmt.Sprintf(
					"switchyard: too many connections to backend %s (%s): %d open or opening, the limit (proxy.max_connections_per_backend, or the server's max_connections less proxy.pool.server_reserve_percent and the connections of other clients); none came free within %s (proxy.pool.wait_timeout)",
					t.node, t.addr, limit, rc.poolWait))
			}
		}
	}
}

// errRouteChanged is what connect returns when, on a primary listener,
// the cluster's route changed while the session waited for a connection
// of its primary's pool: the caller routes again (reroute) with the new
// snapshot, following a failover hold or a switchover's. Never sent to a
// client.
var errRouteChanged = &mysql.MyError{Code: mysql.ER_UNKNOWN_ERROR, State: "HY000",
	Message: "switchyard: the route changed while waiting for a backend connection"}

// preparePooled readies an idle connection taken from the pool for the
// session: nothing when it is the session's own previous connection; else
// a reset unless it is clean, its schema and, with restore, the session's
// variables and prepared statements — one pipelined round trip. A
// connection the server closed while idle gives a connect-lost error (the
// caller takes another).
func (s *session) preparePooled(be *backend, snap *routeSnapshot, rc *runtimeConfig, restore bool) ([]byte, *mysql.MyError) {
	t := be.t
	if s.peerGone(be) {
		return nil, dialError(t, snap, rc.connectTimeout, fmt.Errorf("pooled connection closed by the server"))
	}
	be.restored, be.resend, be.sameState = nil, nil, false
	kind := checkoutClean
	switch {
	case be == s.lastBe && be.owner == s.id:
		be.sameState = true
		kind = checkoutSame
	default:
		// A clean connection took its session variables from the global
		// values at its login or last reset; a SET GLOBAL relayed since
		// (noteQuery) makes it reset, as a new connection to the server
		// would start from the new global values.
		reset := !be.clean || be.globals != s.srv.globalsGen.Load()
		if reset {
			kind = checkoutReset
		}
		rebuild := restore && (reset || s.hasState() || s.insertIDSQL() != "")
		// COM_RESET_CONNECTION keeps the default schema but takes
		// character_set_database and collation_database from their
		// global values, not from the schema's options as selecting it
		// does (and as a login with the schema does): a reset connection
		// selects its schema again.
		var initDB string
		reselect := false
		switch {
		case s.schema != be.schema:
			initDB = s.schema
		case reset && s.schema != "":
			initDB, reselect = s.schema, true
		}
		if reset || rebuild || initDB != "" {
			_ = be.conn.SetDeadline(time.Now().Add(max(rc.connectTimeout, restoreTimeout)))
			br := s.srv.readers.Get().(*bufio.Reader)
			br.Reset(be.reader())
			merr := s.setupBackend(be, br, setupOpts{reset: reset, initDB: initDB, reselect: reselect, restore: rebuild, tracking: reset})
			left := br.Buffered()
			br.Reset(nil)
			s.srv.readers.Put(br)
			_ = be.conn.SetDeadline(time.Time{})
			if merr != nil {
				return nil, merr
			}
			if left > 0 {
				return nil, errUnknown(fmt.Sprintf("switchyard: backend %s (%s) sent unexpected data on a pooled connection", t.node, t.addr))
			}
			be.schema = s.schema
		}
	}
	be.clean, be.owner = false, s.id
	if snap != nil {
		be.epoch = max(be.epoch, snap.stateEpoch())
	}
	be.counter.countCheckout(kind)
	if restore {
		return nil, nil // a move or a checkout between transactions relays no login OK
	}
	caps := s.caps
	if be.tracked {
		caps |= mysql.CLIENT_SESSION_TRACK
	}
	ok := mysqlproto.OK{Status: be.status &^ mysql.SERVER_SESSION_STATE_CHANGED}
	return mysqlproto.AppendOK(nil, caps, &ok), nil
}

// hasState reports whether the session has state a connection must be
// given: changed variables, user variables or prepared statements.
func (s *session) hasState() bool {
	return len(s.st.vars) > 0 || len(s.st.userVars) > 0 || len(s.stmts) > 0
}

// giveBack returns the session's backend connection at logout: reset
// (COM_RESET_CONNECTION, then session tracking again) and put back in its
// pool as a clean connection; closed when that fails or the session did
// not end between commands.
func (s *session) giveBack(be *backend, reusable bool) {
	s.giveBackIn(be, reusable, s.schema)
}

// giveBackIn is giveBack for a connection whose default schema is schema
// (COM_CHANGE_USER gives back the connection of the previous login).
func (s *session) giveBackIn(be *backend, reusable bool, schema string) {
	if !reusable || be.counter == nil || be.closed.Load() || be.broken() {
		be.close(true)
		return
	}
	_ = be.conn.SetDeadline(time.Now().Add(s.srv.rc.Load().connectTimeout))
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(be.reader())
	// The schema is selected again after the reset, which takes
	// character_set_database from its global value (preparePooled).
	merr := s.setupBackend(be, br, setupOpts{reset: true, initDB: schema, reselect: true, tracking: true})
	left := br.Buffered()
	br.Reset(nil)
	s.srv.readers.Put(br)
	_ = be.conn.SetDeadline(time.Time{})
	if merr != nil || left > 0 {
		s.log.Debug("pooled connection could not be reset; closing it", "node", be.t.node)
		be.close(false)
		return
	}
	be.clean, be.owner = true, 0
	be.schema = schema
	be.counter.putIdle(be, time.Now())
}

// broken reports whether the connection cannot be reused: its reader
// recorded an error.
func (b *backend) broken() bool { return b.rd.err != nil }

// reapIdle closes idle connections unused for idle_timeout, every second,
// until the server closes; then it closes every idle connection.
func (s *Server) reapIdle() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.closing:
			s.closeIdle(func(*backend) bool { return true })
			return
		case <-tick.C:
			rc := s.rc.Load()
			now := time.Now()
			cutoff := now.Add(-rc.poolIdle)
			s.closeIdle(func(be *backend) bool { return be.idleAt.Before(cutoff) })
			s.trimIdle(rc, now.Add(-trimIdleAge))
		}
	}
}

// trimIdle closes, per node whose server is within its reserve
// (servermax.go), the oldest idle connections above trimFloor that came
// back before cutoff: after a burst the server's connections are free
// again within seconds for other clients, not after idle_timeout.
func (s *Server) trimIdle(rc *runtimeConfig, cutoff time.Time) {
	s.mu.Lock()
	pools := make([]*backendCounter, 0, len(s.backends))
	for _, p := range s.backends {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	for _, p := range pools {
		var out []*backend
		p.mu.Lock()
		if p.withinReserve(rc.serverReserve) {
			for i := 0; i < len(p.idle)-trimFloor && p.idle[i].idleAt.Before(cutoff); i++ {
				out = append(out, p.idle[i])
			}
		}
		for _, be := range out {
			p.take(be)
		}
		p.mu.Unlock()
		if len(out) > 0 {
			s.log.Debug("server within its connection reserve: closing idle pooled connections", "node", p.node, "addr", p.addr, "closed", len(out))
		}
		for _, be := range out {
			be.close(true)
		}
	}
}

// closeIdle closes the idle connections for which drop is true.
func (s *Server) closeIdle(drop func(*backend) bool) {
	s.mu.Lock()
	pools := make([]*backendCounter, 0, len(s.backends))
	for _, p := range s.backends {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	for _, p := range pools {
		var out []*backend
		p.mu.Lock()
		for _, be := range p.idle {
			if drop(be) {
				out = append(out, be)
			}
		}
		for _, be := range out {
			p.take(be)
		}
		p.mu.Unlock()
		for _, be := range out {
			be.close(true)
		}
	}
}

// purgePools closes the idle connections of cluster's nodes that snap does
// not route to any more or whose role changed since old (the old and the
// new primary), and those of its primary that predate its current spell
// as primary or generation.
func (s *Server) purgePools(cluster string, old, snap *routeSnapshot) {
	inRoute := map[string]bool{}
	changed := map[string]bool{}
	if old != nil && !old.primary.same(snap.primary) {
		if old.primary != nil {
			changed[old.primary.addr] = true
		}
		if snap.primary != nil {
			changed[snap.primary.addr] = true
		}
	}
	if snap.primary != nil {
		inRoute[snap.primary.addr] = true
	}
	for _, r := range snap.replicas {
		inRoute[r.addr] = true
	}
	s.mu.Lock()
	var pools []*backendCounter
	for _, p := range s.backends {
		if p.cluster == cluster {
			pools = append(pools, p)
		}
	}
	s.mu.Unlock()
	for _, p := range pools {
		all := !inRoute[p.addr] || changed[p.addr]
		var out []*backend
		p.mu.Lock()
		for _, be := range p.idle {
			if all || !p.usable(be, snap) {
				out = append(out, be)
			}
		}
		for _, be := range out {
			p.take(be)
		}
		p.mu.Unlock()
		for _, be := range out {
			be.close(true)
		}
	}
}

// notePrimary records, before snap is installed, the epoch from which its
// primary is primary (old is the snapshot it replaces).
func (s *Server) notePrimary(old, snap *routeSnapshot) {
	if snap.primary == nil || (old != nil && old.primary != nil && old.primary.same(snap.primary)) {
		return
	}
	s.backendCounter(snap.primary).primarySince.Store(snap.state.Epoch)
}
