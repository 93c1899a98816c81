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
)

// TestBadClusterStateWrites (issue 8, case 5): while clients write and read
// through two proxies, the cluster state key is overwritten directly (not
// by the controller) with an empty document, garbage, a state that drops
// the primary without a failover (the write) and one whose epoch
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
		// Last: the controller adopts what it reads back after a write
		// conflict, so the regressed epoch may stay in the store.
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
	last, _ := status.Collect(ctx, s.store, s.keys, time.Now())
	for _, p := range last.Proxies {
		t.Logf("at the end %s: epochs %v, state alarms %v", p.ID, p.Epochs, p.StateAlarms)
	}
	stopClients()
	errMu.Lock()
	defer errMu.Unlock()
	t.Logf("%d client operations, %d errors", ops.Load(), errs.Load())
	if errs.Load() > 0 {
		t.Errorf("clients saw %d errors while bad states were written (first: %s)", errs.Load(), errList[0])
	}
}
