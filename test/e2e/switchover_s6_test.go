package e2e

import (
	"context"
	"database/sql"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/loadgen"
)

// connOpener opens a new connection every interval through the listeners
// (alternating rw and ro), runs one query on it and closes it, recording how
// long each took and every error.
type connOpener struct {
	mu    sync.Mutex
	took  []time.Duration
	errs  []string
	stop  chan struct{}
	done  chan struct{}
	count int
}

func startOpener(dsns []string, interval time.Duration) *connOpener {
	o := &connOpener{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for i := 0; ; i++ {
			select {
			case <-o.stop:
				return
			case <-time.After(interval):
			}
			start := time.Now()
			err := func() error {
				db, err := sql.Open("mysql", dsns[i%len(dsns)])
				if err != nil {
					return err
				}
				defer db.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var one int
				return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
			}()
			o.mu.Lock()
			o.count++
			o.took = append(o.took, time.Since(start))
			if err != nil {
				o.errs = append(o.errs, err.Error())
			}
			o.mu.Unlock()
		}
	}()
	return o
}

func (o *connOpener) end() {
	close(o.stop)
	<-o.done
}

// TestDrainPrimaryThenShutdownS6 is scenario S6: while a pool of 30
// connections is in use and new connections keep opening, `switchyard drain
// node1 --wait` (node1 is the primary) switches over and empties node1,
// then node1 is shut down with mariadb-admin. No client sees an error,
// every new connection completes in under a second, and every acknowledged
// write is on the new primary (node2 or node3, whichever the controller
// chose).
func TestDrainPrimaryThenShutdownS6(t *testing.T) {
	admin, err := exec.LookPath("mariadb-admin")
	if err != nil {
		t.Skip("mariadb-admin not found (Debian package mariadb-client)")
	}
	s := startSwitchStack(t, 1, nil)
	ctx := context.Background()
	if err := loadgen.Setup(ctx, s.appDSN("primary", "sbtest"), ""); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	resc := make(chan *loadgen.Result, 1)
	go func() {
		r, err := loadgen.Run(lctx, loadgen.Options{RW: s.appDSN("primary", "sbtest"), RO: s.appDSN("replica", "sbtest"),
			Writers: 24, Readers: 6, Interval: 5 * time.Millisecond})
		if err != nil {
			t.Error(err)
		}
		resc <- r
	}()
	opener := startOpener([]string{s.appDSN("primary", "sbtest"), s.appDSN("replica", "sbtest")}, 25*time.Millisecond)
	time.Sleep(time.Second)

	cctx, ccancel := context.WithTimeout(ctx, 90*time.Second)
	defer ccancel()
	start := time.Now()
	out, err := s.cli(cctx, "drain", "node1", "--cluster", "main", "--wait", "--reason", "S6 planned shutdown")
	drained := time.Since(start)
	if err != nil || !strings.Contains(out, "safe to stop") {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	t.Logf("drain node1 took %s:\n%s", drained.Round(time.Millisecond), out)
	if st, _ := s.cli(cctx, "status"); !strings.Contains(st, "drained: node1") {
		t.Fatalf("status does not show node1 drained:\n%s", st)
	}

	n1 := s.sb.Nodes[0]
	if out, err := exec.CommandContext(cctx, admin, "--no-defaults", "--socket="+n1.Socket, "--user=root",
		"--password="+s.sb.RootPassword, "shutdown").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-admin shutdown node1: %v\n%s", err, out)
	}
	t.Log("node1 shut down with mariadb-admin")
	time.Sleep(2 * time.Second) // keep the load on while the controller sees node1 gone

	opener.end()
	lcancel()
	r := <-resc
	var sb strings.Builder
	r.Print(&sb, "pool", map[int64]string{1: "node1", 2: "node2", 3: "node3"})
	t.Log("\n" + sb.String())
	opener.mu.Lock()
	t.Logf("new connections: %d opened, connect+first query %s, errors %d", opener.count, durations(opener.took), len(opener.errs))
	if len(opener.errs) > 0 {
		t.Errorf("new connections failed: %d, first: %s", len(opener.errs), opener.errs[0])
	}
	for _, d := range opener.took {
		if d >= time.Second {
			t.Errorf("a new connection took %s (must be under 1 s)", d)
			break
		}
	}
	opener.mu.Unlock()
	if r.Errors() != 0 {
		t.Fatalf("pool clients saw %d errors: %v %v", r.Errors(), r.ErrorsByCode, r.FirstErrors)
	}
	st := s.state()
	newPrimary := -1
	for i, n := range s.sb.Nodes {
		if n.Name == st.Primary {
			newPrimary = i
		}
	}
	if st.Primary == "node1" || newPrimary < 0 || r.WritesByServer[int64(newPrimary+1)] == 0 {
		t.Fatalf("primary %s after the drain, writes by server %v", st.Primary, r.WritesByServer)
	}
	missing, err := loadgen.Check(ctx, s.sb.RootDSN(newPrimary), "sbtest.ledger", r.Acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("%d acknowledged writes missing on %s (first %d)", len(missing), st.Primary, missing[0])
	}
	if out, err := s.cli(cctx, "undrain", "node1", "--cluster", "main"); err != nil || !strings.Contains(out, "undrained") {
		t.Fatalf("undrain: %v\n%s", err, out)
	}
}
