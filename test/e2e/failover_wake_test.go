package e2e

import (
	"context"
	"database/sql"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestWokenFrozenPrimaryFencedAtOnce: a
// primary frozen with SIGSTOP is failed over; when it wakes (SIGCONT) it is
// still read_only=OFF. The fence the controller kept pending on it (a TCP
// connect completes in the kernel while the server is frozen) runs the
// moment it wakes, not at the next repair round: the test measures how long
// the woken node stays writable, requires the fence_on_wake event and a
// window under 500 ms. The probe interval is 1 s here so that a fence left
// to the repair round would show as a window of up to a second.
//
// The semi-sync variant freezes the primary under writers: when it wakes,
// the commits that were running wait for a semi-sync acknowledgement no
// replica sends (the failover stopped their IO threads), and SET GLOBAL
// read_only=ON queues behind them; the fence must not wait for
// rpl_semi_sync_master_timeout.
func TestWokenFrozenPrimaryFencedAtOnce(t *testing.T) {
	t.Run("idle", func(t *testing.T) { wokenFrozenPrimaryFenced(t, false) })
	t.Run("semi-sync-writers", func(t *testing.T) { wokenFrozenPrimaryFenced(t, true) })
}

func wokenFrozenPrimaryFenced(t *testing.T, writers bool) {
	s := startFO(t, foOpts{SemiSync: writers, Mutate: func(c *config.Config) { c.Probe.Interval = config.Duration(time.Second) }})
	if writers {
		rw, err := sql.Open("mysql", s.dsn(0, "primary"))
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		if _, err := rw.Exec("CREATE TABLE wake_w (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)"); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					_, _ = rw.ExecContext(ctx, "INSERT INTO wake_w (v) VALUES (1)")
					cancel()
				}
			})
		}
		defer func() { close(stop); wg.Wait() }()
		time.Sleep(500 * time.Millisecond)
	}
	pid := s.sb.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	woken := false
	t.Cleanup(func() {
		if !woken {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	stopped := time.Now()
	st, _ := s.waitState("failover away from the frozen node1", 60*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("SIGSTOP node1 → %s published after %s", st.Primary, time.Since(stopped).Round(time.Millisecond))
	time.Sleep(2 * time.Second)

	db, err := sql.Open("mysql", s.sb.RootDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	cont := time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woken = true
	var first time.Duration = -1
	var fencedAt time.Duration = -1
	off := 0
	for time.Since(cont) < 20*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var ro int
		err := db.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&ro)
		cancel()
		if err != nil {
			continue // the fence kills root's sessions too
		}
		at := time.Since(cont)
		if first < 0 {
			first = at
		}
		if ro == 0 {
			off++
			continue
		}
		fencedAt = at
		break
	}
	if fencedAt < 0 {
		t.Fatalf("woken node1 not read-only within 20s\n%s", s.eventText())
	}
	ev := s.waitEvent("the moment it answered again", 5*time.Second)
	t.Logf("woken old primary: first answer %s after SIGCONT, read_only=ON seen %s after SIGCONT (%d samples saw read_only=OFF); %s",
		first.Round(100*time.Microsecond), fencedAt.Round(100*time.Microsecond), off, ev.Message)
	if fencedAt > 500*time.Millisecond {
		t.Errorf("woken old primary writable for %s after SIGCONT", fencedAt)
	}
	// Probes taken before the promotion show the new primary as the
	// read-only replica it was: they must not be reported as a read-only
	// primary (with the advice to make it writable).
	for _, ev := range s.events() {
		if ev.Node == st.Primary && strings.Contains(ev.Message, "has read_only=ON") {
			t.Errorf("new primary %s reported read-only after the failover: %s\n%s", st.Primary, ev.Message, s.eventText())
		}
	}
}

// TestWokenFrozenPrimaryFencedBeforeQueuedConnects: while a primary is
// frozen, connects that others make to it and give up on (the proxies'
// checks, monitoring) pile up in its accept queue, which the woken server
// works through in order. The controller's pending fence connection was
// made when the failover began, ahead of them, and is kept for as long as
// the fence waits: the woken node must turn read-only without first
// greeting the abandoned connections. The test freezes the primary, lets
// the failover run, makes 240 connects to the frozen node and closes them,
// waits past 20 s (an attempt renewed meanwhile would sit behind them) and
// wakes it; a connection opened before the freeze, whose server thread
// answers at once, samples read_only every millisecond. The woken node
// must be read-only within 100 ms of its first answer.
func TestWokenFrozenPrimaryFencedBeforeQueuedConnects(t *testing.T) {
	s := startFO(t, foOpts{Mutate: func(c *config.Config) { c.Probe.Interval = config.Duration(time.Second) }})
	db, err := sql.Open("mysql", s.sb.RootDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	mon, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	pid := s.sb.PID(0)
	if pid <= 0 {
		t.Fatal("no pid for node1")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	woken := false
	t.Cleanup(func() {
		if !woken {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	stopped := time.Now()
	st, _ := s.waitState("failover away from the frozen node1", 60*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable
	})
	t.Logf("SIGSTOP node1 → %s published after %s", st.Primary, time.Since(stopped).Round(time.Millisecond))
	time.Sleep(time.Second)
	queued := 0
	for range 240 {
		c, err := net.DialTimeout("tcp", s.sb.Nodes[0].Address, 200*time.Millisecond)
		if err != nil {
			continue // the queue is full (back_log): the SYN was dropped
		}
		queued++
		_ = c.Close()
	}
	t.Logf("%d connects to the frozen node1 made and closed", queued)
	if queued < 50 {
		t.Fatalf("only %d connects to the frozen node queued", queued)
	}
	time.Sleep(time.Until(stopped.Add(25 * time.Second)))
	cont := time.Now()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woken = true
	var first, lastOff time.Duration = -1, -1
	fenced := false
	for time.Since(cont) < 10*time.Second {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var ro int
		err := mon.QueryRowContext(qctx, "SELECT @@global.read_only").Scan(&ro)
		cancel()
		if err != nil {
			break // the fence killed this session: read_only is ON by then
		}
		at := time.Since(cont)
		if first < 0 {
			first = at
		}
		if ro != 0 {
			fenced = true
			break
		}
		lastOff = at
		time.Sleep(time.Millisecond)
	}
	if first < 0 {
		t.Fatal("the connection opened before the freeze got no answer after SIGCONT")
	}
	ev := s.waitEvent("the moment it answered again", 20*time.Second)
	t.Logf("woken old primary: first answer %s after SIGCONT, read_only=OFF last seen %s after SIGCONT (fenced seen: %v); %s",
		first.Round(100*time.Microsecond), lastOff.Round(100*time.Microsecond), fenced, ev.Message)
	if lastOff-first > 100*time.Millisecond {
		t.Errorf("woken old primary writable for %s after its first answer: the fence came behind the queued connects", lastOff-first)
	}
}
