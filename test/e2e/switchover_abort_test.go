package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestSwitchoverAbortRunsHeldOnOldPrimary: the candidate
// cannot catch up (root takes LOCK TABLES ... WRITE on the table the writers
// use as the hold is prepared — after the pre-catch-up, which refuses a
// candidate that already applies nothing — so its SQL thread waits at the
// writes made until the hold),
// switchover.catchup_timeout 3s passes after the old primary was fenced
// (read_only, client sessions killed) and the switchover rolls back. The statements held meanwhile must run on the old
// primary once it is writable again — not fail on the backend connections
// the fence killed.
func TestSwitchoverAbortRunsHeldOnOldPrimary(t *testing.T) {
	s := startSwitchStack(t, 1, func(c *config.Config) {
		c.Switchover.CatchupTimeout = config.Duration(3 * time.Second)
		c.Switchover.MaxHold = config.Duration(15 * time.Second)
		c.Switchover.MaxDuration = config.Duration(25 * time.Second)
	})
	ctx := context.Background()
	db := s.open("primary", "sbtest")
	db.SetMaxOpenConns(8)
	writers := startWriters(t, db, "abort_w", 4)
	defer writers.end()
	time.Sleep(500 * time.Millisecond)

	lock, err := s.direct(1).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	locked := make(chan error, 1)
	var once sync.Once
	hook := func(hctx context.Context, step string) {
		if step == "prepare" {
			once.Do(func() {
				_, err := lock.ExecContext(hctx, "LOCK TABLES sbtest.abort_w WRITE")
				locked <- err
			})
		}
	}
	s.stepHook.Store(&hook)
	errsBefore := writers.errs.Load()
	start := time.Now()
	out, err := s.switchover("node2")
	took := time.Since(start)
	select {
	case err := <-locked:
		if err != nil {
			t.Fatalf("LOCK TABLES at the prepare step: %v", err)
		}
	default:
		t.Fatalf("the switchover never reached the prepare step\n%s", out)
	}
	_, _ = lock.ExecContext(ctx, "UNLOCK TABLES")
	if err == nil || !strings.Contains(out, "rolled back") || !strings.Contains(out, "catchup_timeout") {
		t.Fatalf("switchover to a blocked candidate: err %v, want a rollback at the catch-up bound\n%s", err, out)
	}
	t.Logf("switchover aborted after %s:\n%s", took.Round(time.Millisecond), out)
	st := s.state()
	if st.Primary != "node1" || st.Phase != topo.PhaseStable {
		t.Fatalf("after the abort: primary %s phase %s", st.Primary, st.Phase)
	}
	okBefore := writers.ok.Load()
	time.Sleep(time.Second)
	if writers.ok.Load() == okBefore {
		t.Fatal("writers do not continue after the abort")
	}
	if n := writers.errs.Load() - errsBefore; n > 0 {
		first, _ := writers.first.Load().(string)
		t.Fatalf("%d writes failed across the aborted switchover (first: %s); held statements must run on the old primary", n, first)
	}
	t.Logf("0 write errors across the aborted switchover; %d writes acknowledged", writers.ok.Load())
}
