package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// S14: the topology store loses quorum, or single components lose it, while
// ledger writers and readers run through every proxy
// (internal/topo/FAILSAFE.md has the table these tests replay).

// s14Outage is how long the CI scenarios keep the store without quorum:
// longer than proxy.RegistrationTTL, so every proxy loses its lease and
// runs on its failsafe checks (bench/failsafe runs a minute).
const s14Outage = 15 * time.Second

// proxyLoad is loadgen through each proxy of a stack (writers per proxy, 2
// readers), every run with its own id range.
type proxyLoad struct {
	cancel context.CancelFunc
	res    []chan *loadgen.Result
}

func startProxyLoad(t *testing.T, s *foStack, writers int, phase int64) *proxyLoad {
	t.Helper()
	if err := loadgen.Setup(context.Background(), s.dsn(0, "primary"), ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &proxyLoad{cancel: cancel}
	for p := range s.proxies {
		ch := make(chan *loadgen.Result, 1)
		l.res = append(l.res, ch)
		go func() {
			r, err := loadgen.Run(ctx, loadgen.Options{RW: s.dsn(p, "primary"), RO: s.dsn(p, "replica"), Writers: writers, Readers: 2,
				Interval: 5 * time.Millisecond, IDBase: phase*1_000_000_000_000 + int64(p+1)*100_000_000_000})
			if err != nil {
				t.Error(err)
			}
			ch <- r
		}()
	}
	return l
}

// stop ends the load, logs each proxy's figures and checks on node final
// that every acknowledged write is there; it returns the results.
func (l *proxyLoad) stop(t *testing.T, s *foStack, final int) []*loadgen.Result {
	t.Helper()
	l.cancel()
	var out []*loadgen.Result
	for p, ch := range l.res {
		r := <-ch
		if r == nil {
			t.Fatalf("proxy-%d load returned no result", p+1)
		}
		var b strings.Builder
		r.Print(&b, fmt.Sprintf("proxy-%d", p+1), map[int64]string{1: "node1", 2: "node2", 3: "node3"})
		t.Log("\n" + b.String())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		missing, err := loadgen.Check(ctx, s.rootDSN(final, "sbtest"), "", r.Acked)
		cancel()
		if err != nil {
			t.Fatalf("ledger check: %v", err)
		}
		t.Logf("proxy-%d: %d acknowledged writes, %d missing on %s", p+1, len(r.Acked), len(missing), s.sb.Nodes[final].Name)
		if len(missing) > 0 {
			t.Errorf("proxy-%d: %d acknowledged writes lost (first id %d)", p+1, len(missing), missing[0])
		}
		if r.Writes == 0 {
			t.Errorf("proxy-%d: no write acknowledged", p+1)
		}
		out = append(out, r)
	}
	return out
}

// writableLog samples every node's read_only as the application user every
// interval, with the time of each sample (unreachable counts as not
// writable: no client can write there).
type writableLog struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples []writableSample
}

type writableSample struct {
	at       time.Time
	writable []string
}

func watchWritableEvery(s *foStack, every time.Duration) *writableLog {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writableLog{cancel: cancel, done: make(chan struct{})}
	dbs := make([]*sql.DB, len(s.sb.Nodes))
	for i := range dbs {
		dbs[i], _ = sql.Open("mysql", s.appDirect(i, 300*time.Millisecond))
		dbs[i].SetMaxOpenConns(1)
		dbs[i].SetConnMaxLifetime(time.Second)
	}
	go func() {
		defer close(w.done)
		defer func() {
			for _, db := range dbs {
				db.Close()
			}
		}()
		t := time.NewTicker(every)
		defer t.Stop()
		for ctx.Err() == nil {
			at := time.Now()
			var mu sync.Mutex
			var writable []string
			var wg sync.WaitGroup
			for i := range s.sb.Nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					defer cancel()
					db := dbs[i]
					var ro int
					if err := db.QueryRowContext(pctx, "SELECT @@global.read_only").Scan(&ro); err == nil && ro == 0 {
						mu.Lock()
						writable = append(writable, s.sb.Nodes[i].Name)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			w.samples = append(w.samples, writableSample{at: at, writable: writable})
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	return w
}

// between returns the samples taken in [from, to), the most writable nodes
// in one of them and the samples with more than one.
func (w *writableLog) between(from, to time.Time) (n, most int, over []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		n++
		most = max(most, len(s.writable))
		if len(s.writable) > 1 {
			over = append(over, s.at.Format("15:04:05.000")+" "+strings.Join(s.writable, ","))
		}
	}
	return n, most, over
}

func (w *writableLog) stop() {
	w.cancel()
	<-w.done
}

// checkOneWritable fails the test if any sample in [from, to) saw more than
// one writable node, and logs the count.
func (w *writableLog) checkOneWritable(t *testing.T, what string, from, to time.Time) {
	t.Helper()
	n, most, over := w.between(from, to)
	t.Logf("%s: %d samples of read_only every 100 ms, at most %d writable node(s) at once", what, n, most)
	if len(over) > 0 {
		t.Errorf("%s: more than one writable node in %d samples: %v", what, len(over), over)
	}
	if n == 0 {
		t.Errorf("%s: no read_only sample taken", what)
	}
}

// waitCond polls cond every 20 ms until it holds, failing the test after
// timeout; it returns how long it took.
func waitCond(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not reached within %s (%s)", what, timeout, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inFailsafe reports whether proxy p has lost its lease and routes writes
// on its failsafe checks.
func inFailsafe(p *proxy.Server) bool {
	fs, ok := p.Failsafe()["main"]
	return ok && p.WritesFenced() != "" && !fs.Since.IsZero() && fs.Until.IsZero()
}

// leading reports whether ctrl-1 holds the election and has written the
// cluster state after since.
func (s *foStack) leading(since time.Time) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	id, err := s.store.Leader(ctx, s.keys.Election())
	if err != nil || id != "ctrl-1" {
		return false, fmt.Sprintf("leader %q, %v", id, err)
	}
	var st topo.ClusterState
	if _, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st); err != nil {
		return false, err.Error()
	}
	return st.UpdatedAt.After(since), fmt.Sprintf("state updated at %s", st.UpdatedAt.Format("15:04:05.000"))
}

// TestS14StoreQuorumLoss: a 3-member etcd cluster loses one member (nothing
// happens), then a second (no quorum) for s14Outage while 4 ledger writers
// and 2 readers run through each of 2 proxies on a semi-sync cluster in
// auto mode. Every proxy loses its registration and keeps routing writes on
// its failsafe checks: 0 write errors, 0 read errors, 0 acknowledged writes
// missing, at most one writable node at every 100 ms sample, no failover.
// When quorum returns the proxies register again (failsafe ends, and their
// registration says when it ran) and the controller leads again.
func TestS14StoreQuorumLoss(t *testing.T) {
	ec := startEtcdCluster(t, 3)
	s := startFO(t, foOpts{SemiSync: true, Proxies: 2, Endpoints: ec.endpoints()})
	before := s.state()
	ww := watchWritableEvery(s, 100*time.Millisecond)
	defer ww.stop()
	start := time.Now()
	load := startProxyLoad(t, s, 4, 1)
	time.Sleep(time.Second)

	ec.kill(2)
	t.Log("etcd member m3 killed (2 of 3 left)")
	time.Sleep(time.Second)
	ec.kill(1)
	lostAt := time.Now()
	t.Log("etcd member m2 killed: no quorum")
	for i, p := range s.proxies {
		waitCond(t, fmt.Sprintf("proxy-%d in failsafe", i+1), proxy.RegistrationTTL+10*time.Second, func() (bool, string) {
			return inFailsafe(p), fmt.Sprintf("fenced %q, failsafe %+v", p.WritesFenced(), p.Failsafe())
		})
		t.Logf("proxy-%d lost its registration and runs in failsafe %s after quorum was lost", i+1, time.Since(lostAt).Round(100*time.Millisecond))
	}
	time.Sleep(time.Until(lostAt.Add(s14Outage)))
	for i, p := range s.proxies {
		if !inFailsafe(p) {
			t.Errorf("proxy-%d left failsafe while the store had no quorum: %+v", i+1, p.Failsafe())
		}
	}
	ec.start(1)
	ec.start(2)
	backAt := time.Now()
	t.Logf("etcd members m2, m3 restarted after %s without quorum", backAt.Sub(lostAt).Round(100*time.Millisecond))
	for i, p := range s.proxies {
		took := waitCond(t, fmt.Sprintf("proxy-%d registered again", i+1), 30*time.Second, func() (bool, string) {
			fs := p.Failsafe()["main"]
			return p.WritesFenced() == "" && !fs.Until.IsZero(), fmt.Sprintf("fenced %q, failsafe %+v", p.WritesFenced(), fs)
		})
		t.Logf("proxy-%d registered again %s after quorum returned; failsafe ran %s", i+1, took.Round(100*time.Millisecond),
			p.Failsafe()["main"].Until.Sub(p.Failsafe()["main"].Since).Round(100*time.Millisecond))
	}
	took := waitCond(t, "controller leading again", 30*time.Second, func() (bool, string) { return s.leading(backAt) })
	t.Logf("controller leading and publishing again %s after quorum returned", took.Round(100*time.Millisecond))
	time.Sleep(time.Second)
	res := load.stop(t, s, 0)
	ww.checkOneWritable(t, "whole run", start, time.Now())
	for p, r := range res {
		if r.Errors() != 0 {
			t.Errorf("proxy-%d: %d write errors, %d read errors during the store outage; want 0 (%v)", p+1, r.WriteErrors, r.ReadErrors, r.FirstErrors)
		}
	}
	after := s.state()
	if after.Primary != before.Primary || after.Epoch != before.Epoch {
		t.Errorf("primary %s epoch %d after the outage, was %s epoch %d: nothing should have changed", after.Primary, after.Epoch, before.Primary, before.Epoch)
	}
	for i := range s.proxies {
		ev := s.waitEvent(fmt.Sprintf("proxy proxy-%d routed writes to node1", i+1), 10*time.Second)
		if ev.Code != topo.AlarmProxyFailsafe || ev.Kind != topo.EventAlarm {
			t.Errorf("failsafe event %+v, want an alarm %s", ev, topo.AlarmProxyFailsafe)
		}
		t.Logf("event: %s", ev.Message)
		var reg topo.ProxyRegistration
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := topo.GetJSON(ctx, s.store, s.keys.Proxy(fmt.Sprintf("proxy-%d", i+1)), &reg)
		cancel()
		fs := reg.Failsafe["main"]
		if err != nil || fs.Since.IsZero() || fs.Until.IsZero() || fs.Primary != "node1" {
			t.Errorf("proxy-%d registration after the outage does not show the failsafe period: %+v, %v", i+1, reg.Failsafe, err)
		}
	}
}

// TestS14StoreDownPrimaryKilled: with the store without quorum and every
// proxy in failsafe, a replica's IO thread is stopped (writes are refused
// until it replicates again, then resume), then the primary is killed. No node can be promoted (a
// promotion needs the store), the proxies' checks fail, so writes are
// refused by design (the primary is gone) while reads continue; at most one
// writable node at every sample. When quorum returns the failover that was
// pending runs with no operator action, the proxies route writes to the new
// primary, and no acknowledged write is missing there (semi-sync).
func TestS14StoreDownPrimaryKilled(t *testing.T) {
	ec := startEtcdCluster(t, 3)
	s := startFO(t, foOpts{SemiSync: true, Proxies: 2, Endpoints: ec.endpoints()})
	before := s.state()
	ww := watchWritableEvery(s, 100*time.Millisecond)
	defer ww.stop()
	start := time.Now()
	load := startProxyLoad(t, s, 4, 2)
	time.Sleep(500 * time.Millisecond)
	ec.kill(2)
	ec.kill(1)
	lostAt := time.Now()
	for i, p := range s.proxies {
		waitCond(t, fmt.Sprintf("proxy-%d in failsafe", i+1), proxy.RegistrationTTL+10*time.Second, func() (bool, string) {
			return inFailsafe(p), fmt.Sprintf("fenced %q, failsafe %+v", p.WritesFenced(), p.Failsafe())
		})
	}
	t.Logf("store without quorum; both proxies in failsafe after %s", time.Since(lostAt).Round(100*time.Millisecond))
	// A replica that stops replicating cannot be ruled out as a new
	// primary: writes are refused until it replicates again.
	s.exec(2, "STOP SLAVE IO_THREAD")
	stoppedAt := time.Now()
	for i, p := range s.proxies {
		waitCond(t, fmt.Sprintf("proxy-%d refuses writes with node3's IO thread stopped", i+1), 5*time.Second, func() (bool, string) {
			return !inFailsafe(p), fmt.Sprintf("failsafe %+v", p.Failsafe())
		})
	}
	t.Logf("node3's IO thread stopped: both proxies refuse writes %s later: %s", time.Since(stoppedAt).Round(10*time.Millisecond), s.proxies[0].Failsafe()["main"].Ended)
	if err := openOne(t, s.dsn(1, "primary")).Ping(); mysqlErrNo(err) != 1290 {
		t.Errorf("new rw session on proxy-2 with node3 not replicating: %v, want error 1290", err)
	}
	s.exec(2, "START SLAVE IO_THREAD")
	for i, p := range s.proxies {
		waitCond(t, fmt.Sprintf("proxy-%d back in failsafe", i+1), 10*time.Second, func() (bool, string) {
			return inFailsafe(p), fmt.Sprintf("failsafe %+v", p.Failsafe())
		})
	}
	t.Log("node3 replicating again: both proxies route writes on their checks again")
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	for i, p := range s.proxies {
		took := waitCond(t, fmt.Sprintf("proxy-%d refuses writes", i+1), 5*time.Second, func() (bool, string) {
			return !inFailsafe(p), fmt.Sprintf("failsafe %+v", p.Failsafe())
		})
		t.Logf("primary killed: proxy-%d left failsafe after %s: %s", i+1, took.Round(10*time.Millisecond), p.Failsafe()["main"].Ended)
	}
	ro := openOne(t, s.dsn(1, "replica"))
	var sid int
	if err := ro.QueryRow("SELECT @@server_id").Scan(&sid); err != nil || sid == 1 {
		t.Errorf("reads on proxy-2 with the store down and the primary dead: server_id %d, %v; want a replica", sid, err)
	}
	time.Sleep(3 * time.Second)
	if n, most, _ := ww.between(killedAt.Add(200*time.Millisecond), time.Now()); most != 0 || n == 0 {
		t.Errorf("a node became writable without the store: %d samples, at most %d writable", n, most)
	}
	ec.start(1)
	ec.start(2)
	backAt := time.Now()
	st, took := s.waitState("failover after quorum returned", 40*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1" && st.Phase == topo.PhaseStable && st.Epoch > before.Epoch
	})
	t.Logf("quorum back after %s without it: %s published as primary (epoch %d) %s later", backAt.Sub(lostAt).Round(100*time.Millisecond),
		st.Primary, st.Epoch, took.Round(100*time.Millisecond))
	for i := range s.proxies {
		rw := openOne(t, s.dsn(i, "primary"))
		waitCond(t, fmt.Sprintf("proxy-%d writes to %s", i+1, st.Primary), 20*time.Second, func() (bool, string) {
			var id int
			err := rw.QueryRow("SELECT @@server_id").Scan(&id)
			return err == nil && id == nodeIdx(st.Primary)+1, fmt.Sprintf("server_id %d, %v", id, err)
		})
	}
	time.Sleep(500 * time.Millisecond)
	res := load.stop(t, s, nodeIdx(st.Primary))
	for p, r := range res {
		t.Logf("proxy-%d: %d write errors (the primary was dead and nothing could be promoted), %d read errors", p+1, r.WriteErrors, r.ReadErrors)
	}
	ww.checkOneWritable(t, "whole run", start, time.Now())
	var evs []string
	for _, e := range s.events() {
		if e.Kind == topo.EventRecovery || e.Kind == topo.EventDecision {
			evs = append(evs, e.Code)
		}
	}
	t.Logf("events: %v", evs)
}

// TestS14ControllerCutOffFromStore: the controller alone loses the store
// (a relay that stops forwarding). It loses its leadership and acts on
// nothing; the proxies stay registered and writes continue with 0 errors;
// when the store is reachable again it leads again with no operator
// action.
func TestS14ControllerCutOffFromStore(t *testing.T) {
	var relay *cutRelay
	s := startFO(t, foOpts{Proxies: 1, ControllerEtcd: func(eps []string) []string {
		relay = newCutRelay(t, strings.TrimPrefix(eps[0], "http://"))
		return []string{"http://" + relay.ln.Addr().String()}
	}})
	before := s.state()
	ww := watchWritableEvery(s, 100*time.Millisecond)
	defer ww.stop()
	start := time.Now()
	load := startProxyLoad(t, s, 4, 3)
	time.Sleep(500 * time.Millisecond)
	relay.cut.Store(true)
	cutAt := time.Now()
	took := waitCond(t, "controller without leadership", 15*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.store.Leader(ctx, s.keys.Election())
		return errors.Is(err, topo.ErrNotFound), fmt.Sprintf("%v", err)
	})
	t.Logf("controller cut off from the store: its election key expired %s later", took.Round(10*time.Millisecond))
	time.Sleep(time.Until(cutAt.Add(6 * time.Second)))
	if s.proxies[0].WritesFenced() != "" {
		t.Errorf("proxy fenced while only the controller was cut off: %s", s.proxies[0].WritesFenced())
	}
	relay.cut.Store(false)
	backAt := time.Now()
	took = waitCond(t, "controller leading again", 30*time.Second, func() (bool, string) { return s.leading(backAt) })
	t.Logf("controller reachable again: leading and publishing %s later", took.Round(10*time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	res := load.stop(t, s, 0)
	ww.checkOneWritable(t, "whole run", start, time.Now())
	if res[0].Errors() != 0 {
		t.Errorf("%d write errors, %d read errors while the controller was cut off; want 0 (%v)", res[0].WriteErrors, res[0].ReadErrors, res[0].FirstErrors)
	}
	if after := s.state(); after.Primary != before.Primary || after.Epoch != before.Epoch {
		t.Errorf("primary %s epoch %d after the cut, was %s epoch %d", after.Primary, after.Epoch, before.Primary, before.Epoch)
	}
}

// TestS14SwitchoverWhileProxyCutOff: a switchover happens while one proxy
// is cut off from the store and routes writes on its failsafe checks. The
// controller does not wait for that proxy (its registration is gone); it
// fences the old primary (read_only=ON, sessions killed), so the cut-off
// proxy's next check refuses and the old primary refuses anyway: every
// write acknowledged through either proxy is on the new primary, and at
// most one node is writable at every 100 ms sample. When the proxy reaches
// the store again it routes to the new primary.
func TestS14SwitchoverWhileProxyCutOff(t *testing.T) {
	var relay *cutRelay
	s := startFO(t, foOpts{Proxies: 2, SemiSync: true, ProxyEtcd: func(i int, eps []string) []string {
		if i != 1 {
			return eps
		}
		relay = newCutRelay(t, strings.TrimPrefix(eps[0], "http://"))
		return []string{"http://" + relay.ln.Addr().String()}
	}})
	p2 := s.proxies[1]
	ww := watchWritableEvery(s, 100*time.Millisecond)
	defer ww.stop()
	start := time.Now()
	load := startProxyLoad(t, s, 4, 5)
	relay.cut.Store(true)
	cutAt := time.Now()
	waitCond(t, "proxy-2 in failsafe", proxy.RegistrationTTL+10*time.Second, func() (bool, string) {
		return inFailsafe(p2), fmt.Sprintf("fenced %q, failsafe %+v", p2.WritesFenced(), p2.Failsafe())
	})
	t.Logf("proxy-2 cut off from the store: in failsafe %s later", time.Since(cutAt).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	swAt := time.Now()
	out := s.cli("switchover", "--cluster", "main", "--to", "node2")
	st, _ := s.waitState("switchover to node2", 30*time.Second, func(st topo.ClusterState) bool {
		return st.Primary == "node2" && st.Phase == topo.PhaseStable
	})
	t.Logf("switchover to node2 with proxy-2 cut off: epoch %d, %s\n%s", st.Epoch, time.Since(swAt).Round(time.Millisecond), out)
	took := waitCond(t, "proxy-2 leaves failsafe", 5*time.Second, func() (bool, string) {
		return !inFailsafe(p2), fmt.Sprintf("failsafe %+v", p2.Failsafe())
	})
	t.Logf("proxy-2 left failsafe %s after the switchover returned: %s", took.Round(10*time.Millisecond), p2.Failsafe()["main"].Ended)
	rw := openOne(t, s.dsn(1, "primary"))
	var sid int
	if err := rw.QueryRow("SELECT @@server_id").Scan(&sid); mysqlErrNo(err) != 1290 {
		t.Errorf("rw on the cut-off proxy after the switchover: server_id %d, %v; want error 1290", sid, err)
	}
	relay.cut.Store(false)
	waitCond(t, "proxy-2 back on the new primary", 30*time.Second, func() (bool, string) {
		var id int
		err := openOne(t, s.dsn(1, "primary")).QueryRow("SELECT @@server_id").Scan(&id)
		return err == nil && id == 2, fmt.Sprintf("server_id %d, %v", id, err)
	})
	time.Sleep(500 * time.Millisecond)
	res := load.stop(t, s, 1)
	for p, r := range res {
		t.Logf("proxy-%d: %d write errors, %d read errors", p+1, r.WriteErrors, r.ReadErrors)
	}
	ww.checkOneWritable(t, "whole run", start, time.Now())
}
