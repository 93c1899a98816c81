package proxy

import (
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

func unitPool(t *testing.T) (*backendCounter, *metrics) {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &backendCounter{cluster: "c", node: "n1", addr: "127.0.0.1:1"}
	p.gauges(m)
	return p, m
}

// The cap counts connections being dialed; a connection given back goes
// to the first waiter of its key, and a newcomer queues behind it.
func TestPoolReserveOrder(t *testing.T) {
	p, _ := unitPool(t)
	a := &session{id: 1, user: "app", schema: "db"}
	b := &session{id: 2, user: "app", schema: "db"}
	c := &session{id: 3, user: "app", schema: "db"}
	be, dial, w, _, _ := p.reserve(a, nil, &runtimeConfig{maxPerBackend: 1, serverReserve: 10}, nil)
	if be != nil || !dial || w != nil || p.total != 1 {
		t.Fatalf("first checkout: be %v dial %v wait %v total %d; want a dial", be, dial, w, p.total)
	}
	// The dial is in progress: the cap is reached.
	_, dial, wb, _, _ := p.reserve(b, nil, &runtimeConfig{maxPerBackend: 1, serverReserve: 10}, nil)
	if dial || wb == nil {
		t.Fatalf("second checkout at the cap: dial %v wait %v; want to wait", dial, wb)
	}
	conn := &backend{key: a.poolKey(), schema: "db", counter: p, t: &target{node: "n1", addr: p.addr}}
	p.inUseG.Inc()
	p.putIdle(conn, time.Now())
	select {
	case <-wb.ch:
	default:
		t.Fatal("the waiter was not woken when a connection came back")
	}
	// A newcomer must not take it in front of the woken waiter.
	_, dial, wc, _, _ := p.reserve(c, nil, &runtimeConfig{maxPerBackend: 1, serverReserve: 10}, nil)
	if dial || wc == nil {
		t.Fatalf("newcomer: dial %v wait %v; want to queue behind the woken waiter", dial, wc)
	}
	got, _, _, _, _ := p.reserve(b, nil, &runtimeConfig{maxPerBackend: 1, serverReserve: 10}, wb)
	if got != conn {
		t.Fatalf("woken waiter got %v, want the connection given back", got)
	}
	// Closing it frees the slot: the newcomer is woken and may dial.
	conn.closed.Store(true)
	p.closed(conn)
	select {
	case <-wc.ch:
	default:
		t.Fatal("the newcomer was not woken when the slot came free")
	}
	if _, dial, _, _, _ := p.reserve(c, nil, &runtimeConfig{maxPerBackend: 1, serverReserve: 10}, wc); !dial || p.total != 1 {
		t.Fatalf("after the close: dial %v total %d; want a dial", dial, p.total)
	}
}

// A session without a schema never gets a connection that has one; a
// session gets its own previous connection before others.
func TestPoolReservePrefers(t *testing.T) {
	p, _ := unitPool(t)
	s := &session{id: 7, user: "app", txPool: true}
	mk := func(schema string, owner uint32) *backend {
		be := &backend{key: s.poolKey(), schema: schema, owner: owner, counter: p, t: &target{node: "n1", addr: p.addr}}
		p.total++
		p.inUseG.Inc()
		p.putIdle(be, time.Now())
		return be
	}
	withDB := mk("db", 1)
	if be, dial, _, _, _ := p.reserve(s, nil, &runtimeConfig{maxPerBackend: 10, serverReserve: 10}, nil); be != nil || !dial {
		t.Fatalf("no-schema session got %v (dial %v); want a new connection", be, dial)
	}
	p.total--
	plain1 := mk("", 2)
	own := mk("", 7)
	plain2 := mk("", 3)
	s.lastBe = own
	if be, _, _, _, _ := p.reserve(s, nil, &runtimeConfig{maxPerBackend: 10, serverReserve: 10}, nil); be != own {
		t.Fatalf("got %p, want the session's own previous connection %p", be, own)
	}
	s.lastBe = nil
	if be, _, _, _, _ := p.reserve(s, nil, &runtimeConfig{maxPerBackend: 10, serverReserve: 10}, nil); be != plain1 {
		t.Fatalf("transaction pooling got %p, want the least recently used %p", be, plain1)
	}
	_ = plain2
	_ = withDB
}

func TestOKFields(t *testing.T) {
	ok := mysqlproto.AppendOK(nil, mysql.CLIENT_PROTOCOL_41, &mysqlproto.OK{AffectedRows: 300, LastInsertID: 70000, Status: 2, Warnings: 3})
	if w := okWarnings(ok); w != 3 {
		t.Fatalf("warnings %d", w)
	}
	if id := okInsertID(ok); id != 70000 {
		t.Fatalf("insert id %d", id)
	}
	if okWarnings([]byte{0}) != 0 || okInsertID(nil) != 0 {
		t.Fatal("malformed OK packets must read as 0")
	}
	for q, want := range map[string]bool{
		"SELECT LAST_INSERT_ID()":       true,
		"select last_insert_id() + 1":   true,
		"SELECT LAST_INSERT":            false,
		"SELECT SQL_CALC_FOUND_ROWS 1":  false,
		"INSERT INTO last_insert_id_t ": true, // conservative: a restore costs one statement
	} {
		if got := mentions([]byte(q), "last_insert_id"); got != want {
			t.Errorf("mentions(%q) = %v, want %v", q, got, want)
		}
	}
	if !readsDiagnostics([]byte("SELECT Row_Count()")) || !readsDiagnostics([]byte("SELECT FOUND_ROWS()")) || readsDiagnostics([]byte("SELECT 1")) {
		t.Fatal("readsDiagnostics")
	}
}

// The server's limits lower the node's ceiling below
// proxy.max_connections_per_backend: max_connections less the reserve and
// the others' connections. At the ceiling the least recently used idle
// connection of another key is closed, not one of the session's own key,
// and the estimate says when the server is within its reserve.
func TestPoolServerCeiling(t *testing.T) {
	p, _ := unitPool(t)
	rc := &runtimeConfig{maxPerBackend: 2000, serverReserve: 10}
	p.noteLimits(100, 0, 12, 2) // 10 others: 100 − 10 − 10
	if got := p.limitNow(rc); got != 80 {
		t.Fatalf("ceiling %d, want 80 (max_connections 100, reserve 10, others 10)", got)
	}
	if got := serverReserve(1000, 10); got != 100 {
		t.Fatalf("reserve of 1000 at 10%%: %d", got)
	}
	if got := serverReserve(9, 10); got != 1 {
		t.Fatalf("reserve of 9 at 10%%: %d, want 1", got)
	}
	rc.maxPerBackend = 50
	if got := p.limitNow(rc); got != 50 {
		t.Fatalf("ceiling %d, want the configured 50", got)
	}
	rc.maxPerBackend = 2000
	p.noteLimits(10, 0, 9, 0) // others hold more than max_connections less the reserve
	if got := p.limitNow(rc); got != 1 {
		t.Fatalf("ceiling %d, want at least 1", got)
	}

	p.noteLimits(13, 0, 9, 0) // 13 − 2 − 9: a ceiling of 2
	own := &session{id: 1, user: "app", schema: "db"}
	other := &session{id: 2, user: "other", schema: "db"}
	mk := func(s *session) *backend {
		be := &backend{key: s.poolKey(), schema: "db", counter: p, t: &target{node: "n1", addr: p.addr}}
		p.total++
		p.inUseG.Inc()
		return be
	}
	now := time.Now()
	mine := mk(own)
	p.putIdle(mine, now.Add(-2*time.Second)) // the least recently used
	theirs := mk(other)
	p.putIdle(theirs, now.Add(-time.Second))
	p.mu.Lock()
	within := p.withinReserve(rc.serverReserve)
	p.mu.Unlock()
	if !within {
		t.Fatal("9 others + 2 pooled of max_connections 13 (reserve 2): not within the reserve")
	}
	third := &session{id: 3, user: "third", schema: "db"}
	be, dial, w, drop, evicted := p.reserve(third, nil, rc, nil)
	if be != nil || dial || w != nil || !evicted || len(drop) != 1 || drop[0] != mine {
		t.Fatalf("at the ceiling: be %v dial %v wait %v evicted %v drop %v; want the oldest idle connection closed", be, dial, w, evicted, drop)
	}
	mine.closed.Store(true)
	p.closed(mine)
	// The other user's connection is its own key's; app finds none and
	// the ceiling is reached again: theirs is the one closed.
	p.total++ // a dial of third
	be, dial, _, drop, evicted = p.reserve(own, nil, rc, nil)
	if be != nil || dial || !evicted || len(drop) != 1 || drop[0] != theirs {
		t.Fatalf("at the ceiling: be %v dial %v drop %v evicted %v; want the other key's idle connection closed", be, dial, drop, evicted)
	}
}

// A waiter that tries again without reading its wake-up (it woke for a new
// snapshot of the same primary instead) and queues again must be woken
// again later: the wake-up, sent with the pool's lock held, must never
// block on the waiter's channel (it did, and every checkout of the node
// hung behind the lock).
func TestPoolWaiterRequeuedUnreadWakeup(t *testing.T) {
	p, _ := unitPool(t)
	rc := &runtimeConfig{maxPerBackend: 1, serverReserve: 10}
	a := &session{id: 1, user: "app", schema: "db"}
	b := &session{id: 2, user: "app", schema: "db"}
	other := &session{id: 3, user: "report", schema: "db"}
	if _, dial, _, _, _ := p.reserve(a, nil, rc, nil); !dial {
		t.Fatal("first checkout: want a dial")
	}
	_, _, wb, _, _ := p.reserve(b, nil, rc, nil)
	if wb == nil {
		t.Fatal("second checkout at the cap: want to wait")
	}
	conn := &backend{key: a.poolKey(), schema: "db", counter: p, t: &target{node: "n1", addr: p.addr}}
	p.inUseG.Inc()
	p.putIdle(conn, time.Now()) // wakes b; b does not read it
	// Another user's checkout at the cap evicts the idle connection.
	if _, _, _, drop, evicted := p.reserve(other, nil, rc, nil); !evicted || len(drop) != 1 {
		t.Fatalf("other user's checkout: evicted %v drop %d; want the idle connection evicted", evicted, len(drop))
	}
	// b tries again (its wake-up still unread), finds nothing, queues again.
	if be, dial, w, _, _ := p.reserve(b, nil, rc, wb); be != nil || dial || w != wb {
		t.Fatalf("woken waiter after the eviction: be %v dial %v wait %v; want to queue again", be, dial, w)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn.closed.Store(true)
		p.closed(conn) // the slot comes free: wakes b again
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("giving the slot back blocked on the waiter's wake-up channel with the pool's lock held")
	}
	select {
	case <-wb.ch:
	default:
		t.Fatal("the queued waiter was not woken when the slot came free")
	}
}

// TestPoolCeilingProbe: a ceiling set low by the server's limits as read
// once (others' connections still closing) does not stay: once the limits
// are serverLimitsRefresh old, one checkout at the ceiling may dial past
// it to read them again (only one at a time, and not again within
// serverLimitsRefresh); when the new limits raise the ceiling, the
// waiters are woken to use it.
func TestPoolCeilingProbe(t *testing.T) {
	p, _ := unitPool(t)
	rc := &runtimeConfig{maxPerBackend: 2000, serverReserve: 10}
	p.noteLimits(60, 0, 61, 0) // a moment's crowd: a ceiling of 1
	p.srv.at = time.Now()
	a, b, c := &session{id: 1, user: "app"}, &session{id: 2, user: "app"}, &session{id: 3, user: "app"}
	if _, dial, _, _, _ := p.reserve(a, nil, rc, nil); !dial {
		t.Fatal("first checkout: want a dial")
	}
	_, dial, wb, _, _ := p.reserve(b, nil, rc, nil)
	if dial || wb == nil {
		t.Fatalf("at the ceiling with fresh limits: dial %v, waiter %v; want a wait", dial, wb != nil)
	}
	p.mu.Lock()
	p.srv.at = time.Now().Add(-serverLimitsRefresh - time.Second)
	p.mu.Unlock()
	_, dial, w, _, _ := p.reserve(b, nil, rc, wb)
	if !dial || w != nil || p.total != 2 {
		t.Fatalf("at the ceiling with old limits: dial %v, waiter %v, total %d; want one dial past the ceiling", dial, w != nil, p.total)
	}
	if _, dial, wc, _, _ := p.reserve(c, nil, rc, nil); dial || wc == nil {
		t.Fatalf("a second checkout while the probe runs: dial %v; want a wait", dial)
	} else {
		p.noteLimits(1000, 0, 9, 2) // read by the probe: a ceiling of 893
		select {
		case <-wc.ch:
		default:
			t.Fatal("the waiter was not woken when the ceiling rose")
		}
		if !p.endProbe() || p.endProbe() {
			t.Fatal("endProbe: want true once")
		}
		if _, dial, _, _, _ := p.reserve(c, nil, rc, wc); !dial {
			t.Fatal("the woken waiter: want a dial under the raised ceiling")
		}
	}
	p.noteLimits(60, 0, 61, 0)
	p.mu.Lock()
	p.srv.at = time.Now().Add(-serverLimitsRefresh - time.Second)
	p.mu.Unlock()
	if _, dial, w, _, _ := p.reserve(&session{id: 4, user: "app"}, nil, rc, nil); dial || w == nil {
		t.Fatalf("a probe again within serverLimitsRefresh of the last: dial %v; want a wait", dial)
	}
}
