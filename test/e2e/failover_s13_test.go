package e2e

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// inFlight is one client statement started before a fault.
type inFlight struct {
	node string // server that runs it
	done chan error
	at   time.Time // when it returned
}

// startInFlight opens n single-connection sessions through addr's DSN and
// starts q on each; it returns them once every statement is running.
func startInFlight(t *testing.T, dsn string, n int, q string) []*inFlight {
	t.Helper()
	var out []*inFlight
	for range n {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var node string
		if err := c.QueryRowContext(context.Background(), "SELECT CONCAT('node', @@server_id)").Scan(&node); err != nil {
			t.Fatal(err)
		}
		f := &inFlight{node: node, done: make(chan error, 1)}
		go func() {
			_, err := c.ExecContext(context.Background(), q)
			f.at = time.Now()
			f.done <- err
			c.Close()
		}()
		out = append(out, f)
	}
	time.Sleep(300 * time.Millisecond) // every statement forwarded and running
	return out
}

// TestS13BlackholedBackends: a replica, then the primary, has its packets
// to the host (controller and proxies) dropped (a blackhole route in its
// network namespace: nothing is refused, nothing answers). Every statement
// that was in flight on it gets an error within connect_timeout + 2 probe
// intervals (asserted with a 10× margin; the figures are printed), the
// statements on the other replica finish, and new reads keep being served
// by the other replica.
func TestS13BlackholedBackends(t *testing.T) {
	s := startFO(t, foOpts{NetNS: true, Mode: config.FailoverManual})
	bound := s.cfg.Proxy.ConnectTimeout.D() + 2*s.cfg.Probe.Interval.D()
	margin := 10 * bound
	t.Logf("bound: connect_timeout %s + 2 × probe.interval %s = %s (asserted < %s)",
		s.cfg.Proxy.ConnectTimeout, s.cfg.Probe.Interval, bound, margin)

	// Reads through the replica listener all along.
	ro, err := sql.Open("mysql", s.dsn(0, "replica"))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ro.SetMaxOpenConns(4)
	var reads, readErrs atomic.Int64
	var lastErr atomic.Value
	var lastOK atomic.Int64
	rctx, rcancel := context.WithCancel(context.Background())
	var rwg sync.WaitGroup
	for range 3 {
		rwg.Go(func() {
			for rctx.Err() == nil {
				qctx, cancel := context.WithTimeout(rctx, 10*time.Second)
				var x int
				err := ro.QueryRowContext(qctx, "SELECT 1").Scan(&x)
				cancel()
				if rctx.Err() != nil {
					return
				}
				reads.Add(1)
				if err != nil {
					readErrs.Add(1)
					lastErr.Store(err.Error())
				} else {
					lastOK.Store(time.Now().UnixNano())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	defer func() { rcancel(); rwg.Wait() }()

	// 1. A replica.
	flights := startInFlight(t, s.dsn(0, "replica"), 6, "SELECT SLEEP(6)")
	victim := flights[0].node
	vi := nodeIdx(victim)
	readsBefore, errsBefore := reads.Load(), readErrs.Load()
	s.lab.cutFromHost(vi)
	cutAt := time.Now()
	for _, f := range flights {
		select {
		case err := <-f.done:
			took := f.at.Sub(cutAt)
			if f.node == victim {
				t.Logf("blackholed replica %s: in-flight read got %q after %s", victim, errLine(err), took.Round(time.Millisecond))
				if err == nil {
					t.Errorf("in-flight read on blackholed %s succeeded", victim)
				} else if took > margin {
					t.Errorf("in-flight read on blackholed %s waited %s (> %s)", victim, took, margin)
				}
			} else if err != nil {
				t.Errorf("in-flight read on healthy %s failed: %v", f.node, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("in-flight read on %s still waiting 60s after %s was blackholed", f.node, victim)
		}
	}
	s.waitState(victim+" out of the read pool", 10*time.Second, func(st topo.ClusterState) bool {
		return !st.Node(victim).Serving
	})
	time.Sleep(2 * time.Second)
	since := time.Since(time.Unix(0, lastOK.Load()))
	t.Logf("reads during the replica blackhole: %d, errors %d (last: %v); last success %s ago",
		reads.Load()-readsBefore, readErrs.Load()-errsBefore, lastErr.Load(), since.Round(time.Millisecond))
	if since > time.Second {
		t.Errorf("reads stopped being served while %s was blackholed (last success %s ago)", victim, since)
	}
	s.lab.heal(vi)
	s.waitState(victim+" serving again", 30*time.Second, func(st topo.ClusterState) bool {
		return st.Node(victim).Serving
	})

	// 2. The primary (manual mode: no failover; writes wait for it).
	flights = startInFlight(t, s.dsn(0, "primary"), 3, "SELECT SLEEP(20)")
	s.lab.cutFromHost(0)
	cutAt = time.Now()
	for _, f := range flights {
		select {
		case err := <-f.done:
			took := f.at.Sub(cutAt)
			t.Logf("blackholed primary node1: in-flight statement got %q after %s", errLine(err), took.Round(time.Millisecond))
			if err == nil {
				t.Errorf("in-flight statement on the blackholed primary succeeded")
			} else if took > margin {
				t.Errorf("in-flight statement on the blackholed primary waited %s (> %s)", took, margin)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("in-flight statement still waiting 60s after the primary was blackholed")
		}
	}
	time.Sleep(time.Second)
	since = time.Since(time.Unix(0, lastOK.Load()))
	t.Logf("reads during the primary blackhole: last success %s ago", since.Round(time.Millisecond))
	if since > time.Second {
		t.Errorf("reads stopped being served while the primary was blackholed (last success %s ago)", since)
	}
	s.lab.heal(0)
}

func errLine(err error) string {
	if err == nil {
		return "success"
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return msg
}
