package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestPreparedResultsThroughCrashFailover: sessions executing prepared
// statements with parameters (the driver sends their types only with the
// first execute) in a tight loop through a kill -9 failover get correct
// results on the new primary: the parameter types reach every statement
// prepared again there, whatever command was in flight at the kill.
func TestPreparedResultsThroughCrashFailover(t *testing.T) {
	for _, replay := range []bool{false, true} {
		for _, l := range []string{"rw", "rw-tx"} {
			t.Run(fmt.Sprintf("%s/replay=%v", l, replay), func(t *testing.T) { preparedThroughFailover(t, l, replay) })
		}
	}
}

func preparedThroughFailover(t *testing.T, listener string, replay bool) {
	h := newHarness(t, func(c *config.Config) {
		c.Clusters[0].Failover.Mode = config.FailoverAuto
		c.Clusters[0].Failover.MaxHold = config.Duration(10 * time.Second)
		c.Clusters[0].Failover.TransactionReplay = replay
		addTxListener(c)
	})
	st := sandboxState(h.c, 1, 0, 1, 2)
	st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "node2"}
	h.srv.SetClusterState(st)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := h.db(listener, "sbtest", nil)
	var (
		mu               sync.Mutex
		ok, wrong, errs  int
		firstWrong, fErr string
		wg               sync.WaitGroup
		stop             = make(chan struct{})
	)
	for w := 0; w < 4; w++ {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stmt, err := c.PrepareContext(ctx, "SELECT ? + 1 AS a, CONCAT('x', ?) AS b, ? AS c")
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(w * 1_000_000); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var a int64
				var b, cc []byte
				err := stmt.QueryRowContext(ctx, n, fmt.Sprintf("s%d", n), "plain").Scan(&a, &b, &cc)
				mu.Lock()
				switch {
				case err != nil && strings.Contains(err.Error(), "converting driver.Value"):
					wrong++ // a value of another type than the column definitions say
					if firstWrong == "" {
						firstWrong = fmt.Sprintf("n=%d: %v", n, err)
					}
				case err != nil:
					errs++
					if fErr == "" {
						fErr = err.Error()
					}
				case a != n+1 || string(b) != fmt.Sprintf("xs%d", n) || string(cc) != "plain":
					wrong++
					if firstWrong == "" {
						firstWrong = fmt.Sprintf("n=%d: a=%d b=%q c=%q", n, a, b, cc)
					}
				default:
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if err := h.c.KillNode(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	makeWritable(t, h.direct(1))
	failing, done := failoverStates(h)
	h.srv.SetClusterState(failing)
	h.srv.SetClusterState(done)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d right, %d wrong, %d errors (first error: %s)", ok, wrong, errs, fErr)
	if wrong > 0 {
		t.Fatalf("%d prepared results wrong after the failover (first: %s)", wrong, firstWrong)
	}
	if errs > 4 {
		t.Fatalf("%d errors, want at most one per session (a read in flight at the kill): %s", errs, fErr)
	}
}
