package proxy

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func nodeSessions(h *harness, node string) int {
	for _, b := range h.srv.backendSessions() {
		if b.Node == node {
			return b.Sessions
		}
	}
	return 0
}

// A drained replica leaves the ro route at once: idle sessions' connections
// to it are closed without waiting for their next command, their next
// query runs on another replica, and undrain brings it back.
func TestDrainedReplicaLeavesRoute(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	db := h.db("ro", "", nil)
	db.SetMaxOpenConns(6)
	db.SetMaxIdleConns(6)
	var conns []*sql.Conn
	seen := map[int]int{}
	for range 6 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		seen[serverID(t, c)]++
	}
	if seen[2] == 0 || seen[3] == 0 {
		t.Fatalf("ro sessions by server_id %v, want both replicas", seen)
	}
	h.srv.SetDrained(topo.DrainedNodes{Cluster: "main", Nodes: map[string]topo.DrainRecord{"node2": {Since: time.Now()}}})
	deadline := time.Now().Add(5 * time.Second)
	for nodeSessions(h, "node2") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still connected to drained node2", nodeSessions(h, "node2"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range conns {
		if id := serverID(t, c); id != 3 {
			t.Fatalf("ro session on server_id %d after node2 was drained", id)
		}
	}
	for range 4 {
		if id := newSessionServerID(t, h, "ro"); id != 3 {
			t.Fatalf("new ro session on server_id %d while node2 is drained", id)
		}
	}
	h.srv.SetDrained(topo.DrainedNodes{Cluster: "main"})
	seen = map[int]int{}
	for range 4 {
		seen[newSessionServerID(t, h, "ro")]++
	}
	if seen[2] == 0 {
		t.Fatalf("node2 not used again after undrain: %v", seen)
	}
}

// A replica that went away (stopped) while the state still lists it as
// serving costs new sessions one refused connect: they land on the other
// replica at once, without an error.
func TestReplicaGoneNewSessionsFast(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.c.StopNode(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		start := time.Now()
		if id := newSessionServerID(t, h, "ro"); id != 3 {
			t.Fatalf("new ro session on server_id %d with node2 down", id)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("new ro session took %s with node2 down", d)
		}
	}
}
