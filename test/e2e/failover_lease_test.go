package e2e

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// cutRelay forwards TCP to a target until cut: then nothing moves in either
// direction (a partition: no refusal, no reset; TCP windows fill up) until
// restored, when the stalled bytes flow again as retransmissions would.
type cutRelay struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutRelay(t *testing.T, target string) *cutRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &cutRelay{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
	})
	return r
}

func (r *cutRelay) serve(c net.Conn) {
	u, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	r.conns = append(r.conns, c, u)
	r.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			for r.cut.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			n, err := src.Read(buf)
			for n > 0 && r.cut.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(u, c)
	pipe(c, u)
}

// TestProxyLeaseLossStopsWrites (S14, one proxy cut off from the store): a
// proxy cut off from etcd loses its registration lease after
// proxy.RegistrationTTL and then routes writes on its failsafe checks: its
// writes continue with no error while every node confirms the primary.
// When the primary dies its checks fail and its primary listener refuses
// writes with error 1290 saying why, while its replica listener keeps
// serving reads; the controller does not wait for it (its lease is gone)
// beyond the failsafe window, and at most one node is writable at every
// sample. Once etcd is reachable again the proxy registers, re-reads the
// topology and routes writes to the new primary.
func TestProxyLeaseLossStopsWrites(t *testing.T) {
	var relay *cutRelay
	s := startFO(t, foOpts{Proxies: 2, SemiSync: true, ProxyEtcd: func(i int, eps []string) []string {
		if i != 1 {
			return eps
		}
		u, err := url.Parse(eps[0])
		if err != nil {
			t.Fatal(err)
		}
		relay = newCutRelay(t, u.Host)
		return []string{"http://" + relay.ln.Addr().String()}
	}})
	p2 := s.proxies[1]
	ww := watchWritableEvery(s, 100*time.Millisecond)
	defer ww.stop()
	start := time.Now()
	// An idle pooled session on proxy-2's primary listener.
	rw := openOne(t, s.dsn(1, "primary"))
	var sid int
	if err := rw.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid != 1 {
		t.Fatalf("proxy-2 rw before the cut: server_id %d, %v", sid, err)
	}
	load := startProxyLoad(t, s, 4, 4)

	cutAt := time.Now()
	relay.cut.Store(true)
	deadline := time.Now().Add(proxy.RegistrationTTL + 10*time.Second)
	var goneAt, failsafeAt time.Time
	for failsafeAt.IsZero() || goneAt.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("proxy-2 %s after losing etcd: in failsafe %v, registration gone %v (%+v)", time.Since(cutAt), !failsafeAt.IsZero(), !goneAt.IsZero(), p2.Failsafe())
		}
		if failsafeAt.IsZero() && inFailsafe(p2) {
			failsafeAt = time.Now()
		}
		if goneAt.IsZero() {
			if _, err := s.store.Get(context.Background(), s.keys.Proxy("proxy-2")); errors.Is(err, topo.ErrNotFound) {
				goneAt = time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("proxy-2 cut off from etcd: registration expired in etcd after %s, failsafe after %s (registration TTL %s)",
		goneAt.Sub(cutAt).Round(time.Millisecond), failsafeAt.Sub(cutAt).Round(time.Millisecond), proxy.RegistrationTTL)
	time.Sleep(2 * time.Second)
	if err := rw.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid != 1 {
		t.Fatalf("existing rw session on proxy-2 in failsafe: server_id %d, %v; want node1", sid, err)
	}
	res := load.stop(t, s, 0)
	for p, r := range res {
		if r.Errors() != 0 {
			t.Errorf("proxy-%d: %d write errors, %d read errors with proxy-2 cut off from the store; want 0 (%v)", p+1, r.WriteErrors, r.ReadErrors, r.FirstErrors)
		}
	}

	// The primary dies: proxy-2's checks fail and it refuses writes; the
	// controller does not wait for proxy-2 (its lease is gone).
	killAt := time.Now()
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	st, _ := s.waitState("failover", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("kill -9 node1 with proxy-2 cut off → %s published %s later", st.Primary, time.Since(killAt).Round(time.Millisecond))
	// The publication can come before proxy-2's next direct check of the
	// primary (its failsafe checks run on their own period): allow it that
	// check, bounded.
	for fenceBy := time.Now().Add(3 * time.Second); inFailsafe(p2) || p2.WritesFenced() == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(fenceBy) {
			t.Fatalf("proxy-2 routes writes to the dead primary while cut off, %s after the kill: fenced %q, failsafe %+v",
				time.Since(killAt).Round(time.Millisecond), p2.WritesFenced(), p2.Failsafe())
		}
	}
	t.Logf("proxy-2 refuses writes %s after the kill", time.Since(killAt).Round(time.Millisecond))
	err := rw.QueryRow("SELECT @@server_id").Scan(&sid)
	if code := mysqlErrNo(err); code != mysql.ER_OPTION_PREVENTS_STATEMENT || !strings.Contains(err.Error(), "lost its registration") {
		t.Fatalf("existing rw session on a fenced proxy: %v, want error 1290 saying why", err)
	}
	fresh := openOne(t, s.dsn(1, "primary"))
	if err := fresh.Ping(); mysqlErrNo(err) != mysql.ER_OPTION_PREVENTS_STATEMENT {
		t.Fatalf("new rw session on a fenced proxy: %v, want error 1290", err)
	}
	ro := openOne(t, s.dsn(1, "replica"))
	if err := ro.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid == 1 {
		t.Fatalf("ro on a fenced proxy: server_id %d, %v; want a replica", sid, err)
	}
	t.Logf("proxy-2 cut off, primary dead: rw refused with 1290 (%s), ro still served by server_id %d", p2.Failsafe()["main"].Ended, sid)

	// Restore: proxy-2 registers again, re-reads the topology, routes
	// writes to the new primary.
	relay.cut.Store(false)
	deadline = time.Now().Add(30 * time.Second)
	for p2.WritesFenced() != "" || p2.Epochs()["main"] != st.Epoch {
		if time.Now().After(deadline) {
			t.Fatalf("proxy-2 not back after etcd returned: fenced %q, epoch %d", p2.WritesFenced(), p2.Epochs()["main"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The epoch is first applied with the failover phase (no primary routed),
	// then with the new primary: allow the second document to arrive.
	back := openOne(t, s.dsn(1, "primary"))
	for {
		err := back.QueryRow("SELECT @@server_id").Scan(&sid)
		if err == nil && sid == nodeIdx(st.Primary)+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy-2 rw after etcd returned: server_id %d, %v; want %s", sid, err, st.Primary)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("etcd reachable again: proxy-2 registered, on epoch %d, writes go to %s", st.Epoch, st.Primary)
	ww.checkOneWritable(t, "whole run", start, time.Now())
}

func openOne(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}
