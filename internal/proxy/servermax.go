package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// The server's own connection limit. A pool that may open
// proxy.max_connections_per_backend connections to a server whose
// max_connections is lower would, after a burst of logins, hold every
// connection the server allows for proxy.pool.idle_timeout and lock
// everyone else (admins, replication, monitoring, other proxies) out with
// error 1040. As ProxySQL's per-server max_connections and PgBouncer's
// max_db_connections do, each node's pool therefore has a ceiling below
// the server's limit: on a new connection to the node (the first one, with
// the other first dials waiting for it, then at most every
// serverLimitsRefresh) the proxy reads @@max_connections,
// @@max_user_connections (the session value: the account's own limit when
// it has one) and Threads_connected, and keeps its connections there at
//
//	max_connections − reserve − others
//
// where reserve is proxy.pool.server_reserve_percent of max_connections
// (rounded up, at least 1) and others the server's connections that are
// not this proxy's to the node (Threads_connected less the proxy's open
// connections when it was read), when that is below
// proxy.max_connections_per_backend. At the ceiling a checkout closes the
// least recently used idle connection of another key, else waits (pool.go
// reserve). While the server is within its reserve (the proxy's
// connections plus the others reach max_connections − reserve), idle
// connections above trimFloor per node are closed once idle for
// trimIdleAge (trimIdle), not after proxy.pool.idle_timeout. MariaDB's
// extra_port and extra_max_connections are a separate limit the ceiling
// does not touch (the proxy never dials that port); a user with SUPER or
// CONNECTION ADMIN gets one connection past max_connections anyway.

// serverLimitsRefresh is how often a node's limits are read again while
// the proxy opens new connections to it.
const serverLimitsRefresh = 2 * time.Second

// trimFloor is how many idle connections per node the trim keeps while
// the server is within its reserve; trimIdleAge how long a connection
// must have been idle to be trimmed.
const (
	trimFloor   = 4
	trimIdleAge = time.Second
)

// serverLimits is what the proxy last read of a node's connection limits
// (under the nodePool's mu).
type serverLimits struct {
	maxConns int // @@max_connections; 0: not known
	userMax  int // session @@max_user_connections; 0: none
	// others is Threads_connected less the proxy's open connections to
	// the node when it was read.
	others int
	at     time.Time // when it was read or last tried
	// probeAt is when a checkout at the ceiling was last let dial past
	// it to read the limits again (limitProbe); probing while that dial
	// runs.
	probeAt time.Time
	probing bool
	// known: read once, or the server would not tell (an ERR); until
	// then the first dials wait for the one that reads them.
	known bool
}

// serverReserve returns how many of maxConns connections the proxy leaves
// to other clients at pct percent: rounded up, at least 1.
func serverReserve(maxConns, pct int) int {
	return max((maxConns*pct+99)/100, 1)
}

// connLimit returns the node's ceiling (p.mu held): configured
// (proxy.max_connections_per_backend; <= 0 means none), or the server's
// max_connections less the reserve and the others' connections when that
// is known and lower (at least 1).
func (p *backendCounter) connLimit(configured, pct int) int {
	l := p.srv
	if l.maxConns <= 0 {
		return configured
	}
	c := max(l.maxConns-serverReserve(l.maxConns, pct)-l.others, 1)
	if configured <= 0 || c < configured {
		return c
	}
	return configured
}

// withinReserve reports whether the server is estimated to be within its
// reserve (p.mu held): the others' connections as last read plus the
// proxy's own now reach max_connections less the reserve.
func (p *backendCounter) withinReserve(pct int) bool {
	l := p.srv
	return l.maxConns > 0 && l.others+p.total >= l.maxConns-serverReserve(l.maxConns, pct)
}

// limitProbe reports whether a checkout that found the pool at limit,
// a ceiling set by the server's limits as last read, may dial one
// connection past it to read them again (p.mu held): at most once per
// serverLimitsRefresh, and only when they were read that long ago. New
// connections are the only place the limits are read, and at the ceiling
// none is opened: a ceiling set low by a moment's crowd on the server
// (other clients' connections still closing when they were read) would
// otherwise stay until idle connections time out, with every checkout
// waiting or failing with 1040 while the server has room. A probe the
// server refuses with 1040 makes its checkout wait like the others
// (endProbe).
func (p *backendCounter) limitProbe(limit int, rc *runtimeConfig, now time.Time) bool {
	l := &p.srv
	if l.maxConns <= 0 || (rc.maxPerBackend > 0 && limit >= rc.maxPerBackend) || l.probing ||
		now.Sub(l.at) < serverLimitsRefresh || now.Sub(l.probeAt) < serverLimitsRefresh {
		return false
	}
	l.probeAt, l.probing = now, true
	return true
}

// endProbe ends a limitProbe dial and reports whether one was running.
func (p *backendCounter) endProbe() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.srv.probing
	p.srv.probing = false
	return was
}

// wantLimits reports whether the next new connection to the node should
// read the server's limits, and if so marks them as being read now.
func (p *backendCounter) wantLimits(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv.known && now.Sub(p.srv.at) < serverLimitsRefresh {
		return false
	}
	p.srv.at = now
	return true
}

// limitsKnown reports whether the node's limits were read once, or the
// server would not tell.
func (p *backendCounter) limitsKnown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.srv.known
}

// limitsUnreadable records that the server answered the limits' queries
// with an error: the pool has only proxy.max_connections_per_backend.
func (p *backendCounter) limitsUnreadable() {
	p.mu.Lock()
	p.srv.known = true
	p.mu.Unlock()
}

// noteLimits records what readLimits read; open is the proxy's open
// connections to the node, the one that read them included.
func (p *backendCounter) noteLimits(maxConns, userMax, threads, open int) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed = p.srv.maxConns != maxConns || p.srv.userMax != userMax
	p.srv.maxConns, p.srv.userMax, p.srv.known = maxConns, userMax, true
	p.srv.others = max(threads-open, 0)
	// The ceiling may have risen: every waiter tries again (one that
	// still finds no room queues at the head again).
	for p.wake(func(*poolWaiter) bool { return true }) {
	}
	return changed
}

// limitsQueries are pipelined on a freshly logged-in connection, before
// its session setup.
var limitsQueries = []string{
	"SELECT @@max_connections, @@max_user_connections",
	"SHOW GLOBAL STATUS LIKE 'Threads_connected'",
}

// readLimits sends limitsQueries on a freshly logged-in connection (br
// reads it) and returns max_connections, the session's
// max_user_connections and Threads_connected. An ERR answer leaves the
// connection usable and returns ok false; a broken exchange returns an
// error (the connection must be closed).
func readLimits(conn net.Conn, br *bufio.Reader) (maxConns, userMax, threads int, ok bool, err error) {
	var out []byte
	for _, q := range limitsQueries {
		out = appendPacket(out, 0, append([]byte{mysql.COM_QUERY}, q...))
	}
	if _, err := conn.Write(out); err != nil {
		return 0, 0, 0, false, err
	}
	ok = true
	var rows [][]string
	for range limitsQueries {
		row, rok, err := readOneRow(br)
		if err != nil {
			return 0, 0, 0, false, err
		}
		ok = ok && rok
		rows = append(rows, row)
	}
	if !ok || len(rows[0]) != 2 || len(rows[1]) != 2 {
		return 0, 0, 0, false, nil
	}
	vals := []string{rows[0][0], rows[0][1], rows[1][1]}
	n := make([]int, len(vals))
	for i, v := range vals {
		if n[i], err = strconv.Atoi(v); err != nil {
			return 0, 0, 0, false, nil
		}
	}
	return n[0], n[1], n[2], true, nil
}

// appendPacket appends payload as one protocol packet with sequence seq.
func appendPacket(b []byte, seq byte, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n), byte(n>>8), byte(n>>16), seq)
	return append(b, payload...)
}

// readOneRow reads the text result set of a statement returning one row
// (its columns' definitions skipped): its values, or ok false after an
// ERR or an empty result.
func readOneRow(br *bufio.Reader) (row []string, ok bool, err error) {
	p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	if err != nil {
		return nil, false, err
	}
	if len(p) == 0 {
		return nil, false, fmt.Errorf("empty packet")
	}
	if p[0] == mysql.ERR_HEADER || p[0] == mysql.OK_HEADER {
		return nil, false, nil // one packet, nothing else follows
	}
	cols, w, cok := mysqlproto.ReadLenEnc(p)
	if !cok || cols == 0 || cols > 16 {
		return nil, false, fmt.Errorf("unexpected column count packet % x", p)
	}
	// With MariaDB's cached metadata (MARIADB_CLIENT_CACHE_METADATA) a
	// byte after the count says whether the definitions follow.
	if len(p) == w || p[w] != 0 {
		for range cols {
			if _, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax); err != nil {
				return nil, false, err
			}
		}
	}
	defsEnded := false
	for {
		r, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
		if err != nil {
			return nil, false, err
		}
		if len(r) > 0 && r[0] == mysql.EOF_HEADER && len(r) < 9 {
			if row == nil && !defsEnded && len(r) == 5 {
				// The EOF after the definitions (no CLIENT_DEPRECATE_EOF;
				// the OK that ends the rows with it has 7 bytes or more).
				defsEnded = true
				continue
			}
			return row, row != nil, nil // the end of the rows
		}
		if len(r) > 0 && r[0] == mysql.ERR_HEADER {
			return nil, false, nil
		}
		if row != nil {
			continue // more rows than expected: skipped
		}
		row = []string{}
		for off := 0; off < len(r); {
			if r[off] == 0xfb { // NULL
				row = append(row, "")
				off++
				continue
			}
			n, w, vok := mysqlproto.ReadLenEnc(r[off:])
			if !vok || off+w+int(n) > len(r) {
				return nil, false, fmt.Errorf("unreadable row % x", r)
			}
			row = append(row, string(r[off+w:off+w+int(n)]))
			off += w + int(n)
		}
	}
}

// limitNow is connLimit under p.mu.
func (p *backendCounter) limitNow(rc *runtimeConfig) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connLimit(rc.maxPerBackend, rc.serverReserve)
}
