package proxy

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// TestPoolCeilingRisesAfterCrowd: the proxy reads a node's connection
// limits while other clients crowd the server (max_connections 60, 55
// of them held by others, room for a few more): its ceiling for the node
// drops to 1. The crowd goes
// and max_connections is raised to 1000; more than serverLimitsRefresh
// later, new sessions through the proxy must log in at once (a checkout at
// the ceiling dials past it and reads the limits again), not wait out
// proxy.pool.wait_timeout for the one slot and get 1040.
func TestPoolCeilingRisesAfterCrowd(t *testing.T) {
	h := newHarness(t, nil)
	root := h.direct(0)
	var orig string
	if err := root.QueryRow("SELECT @@global.max_connections").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = root.Exec("SET GLOBAL max_connections=" + orig) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keep, err := root.Conn(ctx) // root's own connection stays usable
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	mustExec(t, keep, "SET GLOBAL max_connections = 60")
	crowdDB, err := sql.Open("mysql", h.c.RootDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	defer crowdDB.Close()
	var crowd []*sql.Conn
	for range 55 { // room left for the proxy's dial
		c, err := crowdDB.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err != nil {
			break // 1040: the server is full
		}
		crowd = append(crowd, c)
	}
	var threads int
	var name string
	if err := keep.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &threads); err != nil {
		t.Fatal(err)
	}
	t.Logf("crowd: %d connections, Threads_connected %d", len(crowd), threads)
	time.Sleep(serverLimitsRefresh + 200*time.Millisecond) // the next dial reads the limits
	rw := h.db("rw", "sbtest", nil)
	first, err := rw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	p := h.srv.backendCounter(h.srv.route("main").snap.Load().primary)
	rc := h.srv.rc.Load()
	if got := p.limitNow(rc); got > 2 {
		t.Fatalf("ceiling with the server crowded: %d, want 1 or 2 (the test did not crowd the server)", got)
	}
	for _, c := range crowd {
		_ = c.Close()
	}
	crowdDB.Close()
	mustExec(t, keep, "SET GLOBAL max_connections = 1000")
	time.Sleep(serverLimitsRefresh + 200*time.Millisecond)
	type res struct {
		err  error
		took time.Duration
	}
	out := make(chan res, 5)
	for range 5 {
		go func() {
			start := time.Now()
			c, err := rw.Conn(ctx)
			if err == nil {
				err = c.PingContext(ctx)
				if err == nil {
					_, err = c.ExecContext(ctx, "DO SLEEP(0.2)") // held while the others log in
				}
				c.Close()
			}
			out <- res{err, time.Since(start)}
		}()
	}
	for range 5 {
		r := <-out
		if r.err != nil {
			t.Fatalf("a session after the crowd left: %v (ceiling %d)", r.err, p.limitNow(rc))
		}
		if r.took > 2*time.Second {
			t.Errorf("a session after the crowd left took %s to log in and run (ceiling %d)", r.took, p.limitNow(rc))
		}
	}
	if got := p.limitNow(rc); got < 100 {
		t.Fatalf("ceiling after the crowd left: %d, want the server's room again", got)
	}
}
