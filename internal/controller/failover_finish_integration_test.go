package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// replStatus is node i's default replication connection as SHOW ALL
// SLAVES STATUS shows it; ok is false when it has none.
func replStatus(t *testing.T, c *sandbox.Cluster, i int) (ok bool, port, io, sqlRunning string) {
	t.Helper()
	got := slaveStatus(t, rootDB(t, c, i))
	if got == nil {
		return false, "", "", ""
	}
	return true, got["Master_Port"], got["Slave_IO_Running"], got["Slave_SQL_Running"]
}

// TestLeaderLostMidFailoverFinishes: the leader dies at a step of an
// automatic failover, before the promotion or at or after it — for a killed
// asynchronous primary and for a frozen semi-sync one (its replicas' IO
// threads are cut, the candidate is made writable before its replication
// is reset). Another controller takes over and the cluster ends as a finished
// failover leaves it: one writable, published primary with no
// replication left from the old one, the other replica replicating from
// it (IO and SQL threads running, a new write arrives), the repoint list
// cleared and the failover recorded as automatic.
func TestLeaderLostMidFailoverFinishes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		freeze bool   // SIGSTOP the primary (semi-sync sandbox) instead of SIGKILL
		atStep string // the leader stops when this step starts
		// partial: the other replica was pointed at the candidate but
		// not started when the leader stopped (CHANGE MASTER done, START
		// SLAVE not).
		partial bool
		// stopCand: the promotion stopped right after the candidate's
		// STOP SLAVE (before RESET SLAVE ALL): not promoted, the old
		// primary is published again and failure detection decides again.
		stopCand bool
	}{
		{"killed primary, before promotion", false, "apply relay log on ", false, false},
		{"killed primary, after promotion", false, "verify ", false, false},
		{"frozen semi-sync primary, at verify", true, "verify ", false, false},
		{"frozen semi-sync primary, at repoint", true, "repoint replicas", false, false},
		{"frozen semi-sync primary, at replication reset", true, "reset replication on ", false, false},
		{"killed primary, in the middle of repointing", false, "repoint replicas", true, false},
		{"killed primary, promotion after STOP SLAVE", false, "promote ", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sandboxtest.Start(t, sandbox.Options{Nodes: 3, SemiSync: tc.freeze})
			endpoints := topotest.StartEtcd(t)
			st1 := topotest.Connect(t, endpoints)
			cfg := autoConfig(c)
			ctl1, err := New(Options{Config: cfg, Store: st1, Keys: testKeys, ID: "ctl-1", Log: testLogger(t).With("ctl", "ctl-1")})
			if err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			var cancel1 func()
			var steps []string
			var mu sync.Mutex
			stoppedAt := make(chan string, 1)
			ctl1.stepHook = func(ctx context.Context, step string) {
				mu.Lock()
				steps = append(steps, step)
				mu.Unlock()
				if strings.HasPrefix(step, tc.atStep) {
					once.Do(func() {
						if tc.partial {
							pointStopped(t, c, cfg, steps)
						}
						if tc.stopCand {
							stopReplica(t, c, strings.TrimPrefix(step, "promote "))
						}
						stoppedAt <- step
						cancel1() // leadership ends; the step then runs with a cancelled context
						<-ctx.Done()
					})
				}
			}
			cancel1, _ = runControllerCancel(t, ctl1)
			waitState(t, st1, 15*time.Second, "discovery", discovered)
			st2 := topotest.Connect(t, endpoints)
			runController(t, cfg, st2, "ctl-2")

			var frozen int
			if tc.freeze {
				frozen = c.PID(0)
				if err := syscall.Kill(frozen, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = syscall.Kill(frozen, syscall.SIGCONT) })
			} else if err := c.KillNode(0); err != nil {
				t.Fatal(err)
			}
			select {
			case step := <-stoppedAt:
				mu.Lock()
				t.Logf("leader ctl-1 stopped at step %q after: %s", step, strings.Join(steps, " | "))
				mu.Unlock()
			case <-time.After(30 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the leader never reached step %q; steps: %s", tc.atStep, strings.Join(steps, " | "))
			}
			s := waitState(t, st2, 30*time.Second, "a primary published by ctl-2", func(s topo.ClusterState) bool {
				return s.Leader == "ctl-2" && s.Primary != "" && s.Primary != "node1" && s.Phase == topo.PhaseStable
			})
			pi := 1
			if s.Primary == "node3" {
				pi = 2
			}
			ri := 3 - pi // the other surviving node
			t.Logf("published: primary %s epoch %d", s.Primary, s.Epoch)
			// Finished: within a few rounds the primary has no replication
			// left and the other replica replicates from it.
			deadline := time.Now().Add(30 * time.Second)
			for {
				has, _, _, _ := replStatus(t, c, pi)
				ok, port, io, sqlRunning := replStatus(t, c, ri)
				cur := stateOf(t, st2)
				if !has && ok && port == fmt.Sprint(c.Nodes[pi].Port) && io == "Yes" && sqlRunning == "Yes" && len(cur.Repoint) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not finished: primary %s has replication %v; %s replicates %v from port %s (IO %s, SQL %s; primary's port %d); repoint list %v\nevents:\n%s",
						s.Primary, has, c.Nodes[ri].Name, ok, port, io, sqlRunning, c.Nodes[pi].Port, cur.Repoint, eventText(t, st2))
				}
				time.Sleep(100 * time.Millisecond)
			}
			writable := 0
			for i := 1; i < 3; i++ {
				if queryInt(t, rootDB(t, c, i), "SELECT @@read_only") == 0 {
					writable++
					if i != pi {
						t.Fatalf("%s is writable but %s is published primary", c.Nodes[i].Name, s.Primary)
					}
				}
			}
			if writable != 1 {
				t.Fatalf("%d writable nodes, want exactly 1", writable)
			}
			cur := stateOf(t, st2)
			if lf := cur.LastFailover; lf == nil || !lf.Auto || lf.To != s.Primary {
				t.Fatalf("last failover %+v, want the automatic one to %s", lf, s.Primary)
			}
			p := rootDB(t, c, pi)
			mustExec(t, p, "CREATE TABLE IF NOT EXISTS sbtest.ctl_t (id INT PRIMARY KEY)")
			mustExec(t, p, "INSERT INTO sbtest.ctl_t VALUES (77)")
			waitRow(t, c, ri, 77)
			if frozen != 0 {
				// The leader that took over keeps a fence pending on the
				// frozen old primary, as the dead one did: fenced the
				// moment it wakes, not a probe round later.
				if err := syscall.Kill(frozen, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				ev := waitEvent(t, st2, 10*time.Second, "fenced old primary node1 the moment it answered again")
				t.Logf("woken old primary: %s", ev.Message)
			}
			t.Logf("events:\n%s", eventText(t, st2))
		})
	}
}

// pointStopped points the replica that is neither node1 nor the candidate
// (the node of the "promote X" step in steps) at the candidate without
// starting replication: what a leader that died between repointAll's
// CHANGE MASTER and START SLAVE leaves. Runs in the controller's goroutine.
func pointStopped(t *testing.T, c *sandbox.Cluster, cfg *config.Config, steps []string) {
	cand := -1
	for _, s := range steps {
		if name, ok := strings.CutPrefix(s, "promote "); ok {
			for i, n := range c.Nodes {
				if n.Name == name {
					cand = i
				}
			}
		}
	}
	if cand < 1 {
		t.Errorf("no promote step before the repointing: %v", steps)
		return
	}
	other := 3 - cand
	pw, err := cfg.Credentials.Replication.Resolve()
	if err != nil {
		t.Error(err)
		return
	}
	db := rootDB(t, c, other)
	for _, q := range []string{"STOP SLAVE", fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos",
		c.Nodes[cand].Port, cfg.Credentials.Replication.User, pw)} {
		if _, err := db.Exec(q); err != nil {
			t.Errorf("%s on %s: %v", q, c.Nodes[other].Name, err)
		}
	}
}

// stopReplica runs STOP SLAVE on the node named name (in the controller's
// goroutine).
func stopReplica(t *testing.T, c *sandbox.Cluster, name string) {
	for i, n := range c.Nodes {
		if n.Name == name {
			if _, err := rootDB(t, c, i).Exec("STOP SLAVE"); err != nil {
				t.Errorf("STOP SLAVE on %s: %v", name, err)
			}
			return
		}
	}
	t.Errorf("no node %q", name)
}

// stateOf reads the cluster's state.
func stateOf(t *testing.T, st topo.Store) topo.ClusterState {
	t.Helper()
	var s topo.ClusterState
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := topo.GetJSON(ctx, st, testKeys.ClusterState(sandbox.ClusterName), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// eventText is the cluster's event log, a line each.
func eventText(t *testing.T, st topo.Store) string {
	var b strings.Builder
	for _, ev := range events(t, st) {
		fmt.Fprintf(&b, "  %s %-9s %s\n", ev.At.Format("15:04:05.000"), ev.Kind, ev.Message)
	}
	return b.String()
}

// TestLeaderLostMidSwitchover: the leader dies at a step of a planned
// switchover (right after the candidate's STOP SLAVE in the promotion,
// after the promotion before the publication, and after the publication
// before the repointing); another controller takes over and the cluster
// ends with one writable, published primary and both other nodes
// replicating from it (IO and SQL threads running, a new write arrives).
func TestLeaderLostMidSwitchover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		atStep   string
		stopCand bool // STOP SLAVE on the candidate before stopping the leader
		want     string
	}{
		{"promotion after STOP SLAVE", "promote ", true, "node1"},
		{"after the promotion", "publish primary ", false, "node2"},
		{"after the publication", "repoint ", false, "node2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
			endpoints := topotest.StartEtcd(t)
			st1 := topotest.Connect(t, endpoints)
			cfg := testConfig(c)
			ctl1, err := New(Options{Config: cfg, Store: st1, Keys: testKeys, ID: "ctl-1", Log: testLogger(t).With("ctl", "ctl-1")})
			if err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			var cancel1 func()
			stoppedAt := make(chan string, 1)
			ctl1.stepHook = func(ctx context.Context, step string) {
				if strings.HasPrefix(step, tc.atStep) {
					once.Do(func() {
						if tc.stopCand {
							stopReplica(t, c, strings.TrimPrefix(step, "promote "))
						}
						stoppedAt <- step
						cancel1()
						<-ctx.Done()
					})
				}
			}
			cancel1, _ = runControllerCancel(t, ctl1)
			waitState(t, st1, 15*time.Second, "discovery", discovered)
			st2 := topotest.Connect(t, endpoints)
			runController(t, cfg, st2, "ctl-2")
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, _ = RequestSwitchover(ctx, st1, testKeys, sandbox.ClusterName, "node2")
			}()
			select {
			case step := <-stoppedAt:
				t.Logf("leader ctl-1 stopped at step %q", step)
			case <-time.After(30 * time.Second):
				t.Fatalf("the leader never reached step %q", tc.atStep)
			}
			s := waitState(t, st2, 30*time.Second, "a stable state written by ctl-2", func(s topo.ClusterState) bool {
				return s.Leader == "ctl-2" && s.Primary != "" && s.Phase == topo.PhaseStable
			})
			if s.Primary != tc.want {
				t.Fatalf("primary %s after the takeover, want %s\nevents:\n%s", s.Primary, tc.want, eventText(t, st2))
			}
			pi := 0
			if s.Primary == "node2" {
				pi = 1
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				done := true
				var why []string
				for i := range 3 {
					ok, port, io, sqlRunning := replStatus(t, c, i)
					switch {
					case i == pi && ok:
						done = false
						why = append(why, fmt.Sprintf("primary %s still has replication", c.Nodes[i].Name))
					case i != pi && (!ok || port != fmt.Sprint(c.Nodes[pi].Port) || io != "Yes" || sqlRunning != "Yes"):
						done = false
						why = append(why, fmt.Sprintf("%s: replicating %v from port %s IO %s SQL %s", c.Nodes[i].Name, ok, port, io, sqlRunning))
					}
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not settled (primary %s, port %d): %s\nevents:\n%s", s.Primary, c.Nodes[pi].Port, strings.Join(why, "; "), eventText(t, st2))
				}
				time.Sleep(100 * time.Millisecond)
			}
			for i := range 3 {
				ro := queryInt(t, rootDB(t, c, i), "SELECT @@read_only")
				if (i == pi) != (ro == 0) {
					t.Fatalf("%s read_only=%d with %s published primary", c.Nodes[i].Name, ro, s.Primary)
				}
			}
			p := rootDB(t, c, pi)
			mustExec(t, p, "CREATE TABLE IF NOT EXISTS sbtest.ctl_t (id INT PRIMARY KEY)")
			mustExec(t, p, "INSERT INTO sbtest.ctl_t VALUES (78)")
			for i := range 3 {
				if i != pi {
					waitRow(t, c, i, 78)
				}
			}
		})
	}
}

// TestRegistrationComesBack: a controller's registration deleted by hand
// (or with the whole store) while its lease lives is written again within
// registrationTTL, so that status keeps showing it — a standby too.
func TestRegistrationComesBack(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
	endpoints := topotest.StartEtcd(t)
	st := topotest.Connect(t, endpoints)
	cfg := testConfig(c)
	runController(t, cfg, st, "ctl-a")
	runController(t, cfg, topotest.Connect(t, endpoints), "ctl-b")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	ctx := context.Background()
	for _, id := range []string{"ctl-a", "ctl-b"} {
		key := testKeys.Controller(id)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := st.Get(ctx, key); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never registered", id)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := st.Delete(ctx, key, 0); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for _, id := range []string{"ctl-a", "ctl-b"} {
		for {
			if _, err := st.Get(ctx, testKeys.Controller(id)); err == nil {
				break
			}
			if time.Since(start) > registrationTTL+5*time.Second {
				t.Fatalf("registration of %s not back %s after its deletion", id, time.Since(start).Round(time.Millisecond))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("both registrations back %s after their deletion", time.Since(start).Round(time.Millisecond))
}
