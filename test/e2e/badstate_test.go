package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/status"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestBadClusterStateWrites: while clients write and read
// through two proxies, the cluster state key is overwritten directly (not
// by the controller) with an empty document, garbage, a state that drops
// the primary without a failover (a primary-dropping write) and one whose epoch
// goes back. No client sees an error; every proxy refuses each document,
// keeps routing by the last valid state and shows the alarm in its
// registration, which `switchyard status --json` reports (status.Collect),
// and status flags the invalid state itself.
func TestBadClusterStateWrites(t *testing.T) {
	s := startFO(t, foOpts{Proxies: 2})
	var ops, errs atomic.Int64
	var errMu sync.Mutex
	var errList []string
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for p := range s.proxies {
		rw, err := sql.Open("mysql", s.dsn(p, "primary"))
		if err != nil {
			t.Fatal(err)
		}
		ro, err := sql.Open("mysql", s.dsn(p, "replica"))
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		defer ro.Close()
		if p == 0 {
			if _, err := rw.Exec("CREATE TABLE bs (id BIGINT AUTO_INCREMENT PRIMARY KEY, p INT)"); err != nil {
				t.Fatal(err)
			}
			// Readers start once the table has reached both replicas.
			for i := 1; i < 3; i++ {
				deadline := time.Now().Add(10 * time.Second)
				for s.rootInt(i, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'sbtest' AND TABLE_NAME = 'bs'") == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("table bs not replicated to %s within 10s", s.sb.Nodes[i].Name)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		for _, c := range []struct {
			db *sql.DB
			q  string
		}{{rw, "INSERT INTO bs (p) VALUES (1)"}, {ro, "SELECT COUNT(*) FROM bs"}, {rw, "SELECT @@server_id"}} {
			wg.Go(func() {
				for ctx.Err() == nil {
					_, err := c.db.ExecContext(ctx, c.q)
					if ctx.Err() != nil {
						return
					}
					ops.Add(1)
					if err != nil {
						errs.Add(1)
						errMu.Lock()
						errList = append(errList, err.Error())
						errMu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	stopClients := func() { cancel(); wg.Wait() }
	defer stopClients()
	time.Sleep(time.Second)

	key := s.keys.ClusterState("main")
	write := func(b []byte) {
		t.Helper()
		for range 10 {
			kv, err := s.store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err = s.store.Update(ctx, key, b, kv.Version); err == nil {
				return
			}
		}
		t.Fatal("could not overwrite the state key")
	}
	cur := s.state()
	drop, _ := json.Marshal(map[string]any{"cluster": "main", "primary": "", "epoch": cur.Epoch + 1, "phase": "stable", "nodes": []any{}})
	regress := cur
	regress.Epoch = cur.Epoch - 1
	regressRaw, _ := json.Marshal(regress)
	cases := []struct {
		name, want string
		raw        []byte
	}{
		{"empty document", "empty", []byte{}},
		{"garbage", "does not decode", []byte("\x00\x01 this is not a cluster state")},
		{"primary dropped without failover, no nodes", "no nodes", drop},
		{"epoch going back", "lower than the applied epoch", regressRaw},
	}
	for _, c := range cases {
		before := ops.Load()
		wrote := time.Now()
		write(c.raw)
		seen := map[string]bool{}
		problem := ""
		deadline := time.Now().Add(10 * time.Second)
		for len(seen) < len(s.proxies) && time.Now().Before(deadline) {
			r, err := status.Collect(ctx, s.store, s.keys, time.Now())
			if err != nil {
				t.Fatalf("%s: status: %v", c.name, err)
			}
			for _, p := range r.Proxies {
				if strings.Contains(p.StateAlarms["main"], c.want) && !seen[p.ID] {
					seen[p.ID] = true
					t.Logf("%s: %s raised the alarm %s after the write: %s", c.name, p.ID, time.Since(wrote).Round(time.Millisecond), p.StateAlarms["main"])
				}
			}
			if why := r.StateProblems["main"]; why != "" && problem == "" {
				problem = why
			}
			time.Sleep(5 * time.Millisecond)
		}
		if len(seen) < len(s.proxies) {
			t.Errorf("%s: alarm seen on %d of %d proxies within 10s", c.name, len(seen), len(s.proxies))
		}
		if problem != "" {
			t.Logf("%s: status flagged the state: %s", c.name, problem)
		} else {
			t.Logf("%s: the controller replaced the document before status could read it", c.name)
		}
		for _, p := range s.proxies {
			if e := p.Epochs()["main"]; e < cur.Epoch {
				t.Errorf("%s: a proxy routes with epoch %d, below %d", c.name, e, cur.Epoch)
			}
		}
		// Let the controller republish (it replaces the document on its
		// next write) before the next case.
		time.Sleep(time.Second)
		t.Logf("%s: %d client operations meanwhile, %d errors so far", c.name, ops.Load()-before, errs.Load())
	}
	// Everything converges: the controller never adopts a bad document,
	// overwrites it with its last good state, and every proxy applies
	// that and clears its alarm.
	var last *status.Report
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := status.Collect(ctx, s.store, s.keys, time.Now())
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		last = r
		clean := r.StateProblems["main"] == ""
		for _, p := range r.Proxies {
			a := p.StateAlarms["main"]
			clean = clean && (a == "" || strings.Contains(a, "a valid state has been applied since")) && p.Epochs["main"] >= cur.Epoch
		}
		if clean || time.Now().After(deadline) {
			if !clean {
				t.Errorf("not converged 15s after the last bad write: state problem %q", r.StateProblems["main"])
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range last.Proxies {
		t.Logf("at the end %s: epochs %v, state alarms %v", p.ID, p.Epochs, p.StateAlarms)
	}
	if st := last.Clusters; len(st) > 0 {
		t.Logf("at the end the store holds primary %s epoch %d", st[0].Primary, st[0].Epoch)
	}
	if !strings.Contains(s.eventText(), "not written by a controller") {
		t.Errorf("no controller event about the invalid state")
	}
	stopClients()
	errMu.Lock()
	defer errMu.Unlock()
	t.Logf("%d client operations, %d errors", ops.Load(), errs.Load())
	if errs.Load() > 0 {
		t.Errorf("clients saw %d errors while bad states were written (first: %s)", errs.Load(), errList[0])
	}
}

// TestForgedClusterStateOverwritten: a well-formed state written straight
// into etcd that names a replica as primary at a higher epoch (what a
// controller could have written, so proxies apply it) is never adopted by
// the controller: it overwrites it at once, with an epoch above the forged
// one so that proxies move back, and the real primary is never fenced.
// Plain deletion of the key is undone the same way.
func TestForgedClusterStateOverwritten(t *testing.T) {
	s := startFO(t, foOpts{})
	ctx := context.Background()
	key := s.keys.ClusterState("main")
	ww := s.watchWritable()
	for _, c := range []string{"forged primary", "deleted key"} {
		cur := s.state()
		if cur.Primary != "node1" {
			t.Fatalf("%s: primary %q before the write, want node1", c, cur.Primary)
		}
		forgedEpoch := cur.Epoch - 1 // deletion: the state comes back at the same epoch
		var wrote time.Time
		// The controller rewrites the state every round: retry the
		// compare-and-swap when it wrote in between.
		for attempt := 0; ; attempt++ {
			kv, err := s.store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			wrote = time.Now()
			if c == "forged primary" {
				forged := cur
				forged.Primary, forged.Epoch, forged.Leader = "node3", cur.Epoch+1, "someone"
				forgedEpoch = forged.Epoch
				raw, _ := json.Marshal(forged)
				_, err = s.store.Update(ctx, key, raw, kv.Version)
			} else {
				err = s.store.Delete(ctx, key, kv.Version)
			}
			if err == nil {
				break
			}
			if attempt == 20 {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		st, took := s.waitState(c+": overwritten", 10*time.Second, func(st topo.ClusterState) bool {
			// (the state comes back at an epoch above the forged one)
			return st.Primary == "node1" && st.Epoch > forgedEpoch && st.Leader != "someone"
		})
		t.Logf("%s: overwritten after %s (written %s ago): primary %s epoch %d", c, took, time.Since(wrote).Round(time.Millisecond), st.Primary, st.Epoch)
		deadline := time.Now().Add(10 * time.Second)
		for s.proxies[0].Epochs()["main"] < st.Epoch {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the proxy still routes by epoch %d, want %d", c, s.proxies[0].Epochs()["main"], st.Epoch)
			}
			time.Sleep(10 * time.Millisecond)
		}
		db, err := sql.Open("mysql", s.dsn(0, "primary"))
		if err != nil {
			t.Fatal(err)
		}
		var sid int
		if err := db.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid != 1 {
			t.Fatalf("%s: rw reaches server_id %d (%v), want node1", c, sid, err)
		}
		db.Close()
		if ro := s.rootInt(0, "SELECT @@read_only"); ro != 0 {
			t.Fatalf("%s: node1 was fenced (read_only=%d) because of a forged state", c, ro)
		}
	}
	if samples, most, over := ww.stop(); most != 1 {
		t.Errorf("%d nodes writable at one probe (of %d), want exactly 1: %v", most, samples, over)
	}
	if !strings.Contains(s.eventText(), "not written by a controller") {
		t.Errorf("no controller event about the state written outside it:\n%s", s.eventText())
	}
}
