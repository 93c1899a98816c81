package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// LeaseExpirer is implemented by stores (or test wrappers around them) that
// can make every lease of the store's backend expire at once, as a process
// death or a long partition would. The lease-loss tests skip without it.
type LeaseExpirer interface {
	ExpireLeases()
}

// wait bounds every wait for something that should happen (a watch event,
// leadership, a closed Done channel). Generous: the etcd store's session
// TTL is seconds.
const wait = 15 * time.Second

// notYet is how long a test watches for something that must not happen.
const notYet = 300 * time.Millisecond

// Run runs the conformance suite. newStore is called once per subtest and
// must return a store that sees no other subtest's writes under the
// subtest's prefix ("/storetest/<subtest>/"); the stores of one Run may
// share a backend as long as subtests run one at a time. newStore owns
// closing the store at cleanup; the suite may close it earlier.
func Run(t *testing.T, newStore func(t *testing.T) topo.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s topo.Store, p string)
	}{
		{"CreateGet", testCreateGet},
		{"UpdateCAS", testUpdateCAS},
		{"Delete", testDelete},
		{"GlobalVersion", testGlobalVersion},
		{"List", testList},
		{"ConcurrentCAS", testConcurrentCAS},
		{"WatchEvents", testWatchEvents},
		{"WatchCancel", testWatchCancel},
		{"CampaignExclusive", testCampaignExclusive},
		{"CampaignCancel", testCampaignCancel},
		{"LeaderWrites", testLeaderWrites},
		{"LeaderLostOnExpiry", testLeaderLostOnExpiry},
		{"LeaderLostOnKeyDelete", testLeaderLostOnKeyDelete},
		{"Register", testRegister},
		{"RegisterExpiry", testRegisterExpiry},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tc.fn(t, s, "/storetest/"+tc.name+"/")
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, s topo.Store, key, value string) topo.Version {
	t.Helper()
	v, err := s.Create(ctxT(t), key, []byte(value))
	if err != nil {
		t.Fatalf("create %s: %v", key, err)
	}
	if v <= 0 {
		t.Fatalf("create %s: version %d, want > 0", key, v)
	}
	return v
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func testCreateGet(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	_, err := s.Get(ctx, p+"a")
	wantErr(t, "get before create", err, topo.ErrNotFound)

	v := mustCreate(t, s, p+"a", "one")
	kv, err := s.Get(ctx, p+"a")
	if err != nil {
		t.Fatal(err)
	}
	if kv.Key != p+"a" || string(kv.Value) != "one" || kv.Version != v {
		t.Fatalf("get = %q %q v%d, want %q %q v%d", kv.Key, kv.Value, kv.Version, p+"a", "one", v)
	}
	_, err = s.Create(ctx, p+"a", []byte("two"))
	wantErr(t, "second create", err, topo.ErrExists)
	kv, _ = s.Get(ctx, p+"a")
	if string(kv.Value) != "one" {
		t.Fatalf("failed create changed the value to %q", kv.Value)
	}
	// An empty value is a value.
	mustCreate(t, s, p+"empty", "")
	if kv, err := s.Get(ctx, p+"empty"); err != nil || len(kv.Value) != 0 {
		t.Fatalf("get empty = %q, %v", kv.Value, err)
	}
}

func testUpdateCAS(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	_, err := s.Update(ctx, p+"missing", []byte("x"), 1)
	wantErr(t, "update missing", err, topo.ErrNotFound)
	_, err = s.Update(ctx, p+"missing", []byte("x"), 0)
	wantErr(t, "update missing at version 0", err, topo.ErrNotFound)
	if _, err := s.Get(ctx, p+"missing"); !errors.Is(err, topo.ErrNotFound) {
		t.Fatalf("failed update created the key: %v", err)
	}

	v1 := mustCreate(t, s, p+"k", "1")
	v2, err := s.Update(ctx, p+"k", []byte("2"), v1)
	if err != nil {
		t.Fatalf("update at current version: %v", err)
	}
	if v2 <= v1 {
		t.Fatalf("update version %d, want > %d", v2, v1)
	}
	_, err = s.Update(ctx, p+"k", []byte("stale"), v1)
	wantErr(t, "update at stale version", err, topo.ErrBadVersion)
	_, err = s.Update(ctx, p+"k", []byte("zero"), 0)
	wantErr(t, "update existing at version 0", err, topo.ErrBadVersion)
	kv, err := s.Get(ctx, p+"k")
	if err != nil || string(kv.Value) != "2" || kv.Version != v2 {
		t.Fatalf("get = %q v%d %v, want \"2\" v%d", kv.Value, kv.Version, err, v2)
	}
}

func testDelete(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	wantErr(t, "delete missing", s.Delete(ctx, p+"missing", 0), topo.ErrNotFound)
	wantErr(t, "delete missing at version", s.Delete(ctx, p+"missing", 5), topo.ErrNotFound)

	v := mustCreate(t, s, p+"k", "1")
	wantErr(t, "delete at wrong version", s.Delete(ctx, p+"k", v+1000), topo.ErrBadVersion)
	if _, err := s.Get(ctx, p+"k"); err != nil {
		t.Fatalf("failed delete removed the key: %v", err)
	}
	if err := s.Delete(ctx, p+"k", v); err != nil {
		t.Fatalf("delete at version: %v", err)
	}
	_, err := s.Get(ctx, p+"k")
	wantErr(t, "get after delete", err, topo.ErrNotFound)

	mustCreate(t, s, p+"any", "1")
	if err := s.Delete(ctx, p+"any", 0); err != nil {
		t.Fatalf("delete any version: %v", err)
	}
	// A deleted key can be created again.
	mustCreate(t, s, p+"k", "again")
}

func testGlobalVersion(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	va := mustCreate(t, s, p+"a", "1")
	vb := mustCreate(t, s, p+"b", "1")
	if vb <= va {
		t.Fatalf("version of a later write to another key %d, want > %d", vb, va)
	}
	va2, err := s.Update(ctx, p+"a", []byte("2"), va)
	if err != nil {
		t.Fatal(err)
	}
	if va2 <= vb {
		t.Fatalf("version %d after writing b at %d: versions must increase across keys", va2, vb)
	}
}

func testList(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	kvs, err := s.List(ctx, p+"dir/")
	if err != nil || len(kvs) != 0 {
		t.Fatalf("list empty = %v, %v; want nothing", kvs, err)
	}
	for _, k := range []string{"dir/c", "dir/a", "dir/b/x", "dir/b", "dirx", "other/a"} {
		mustCreate(t, s, p+k, "v-"+k)
	}
	kvs, err = s.List(ctx, p+"dir/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, strings.TrimPrefix(kv.Key, p))
		if string(kv.Value) != "v-"+strings.TrimPrefix(kv.Key, p) || kv.Version <= 0 {
			t.Errorf("list entry %s = %q v%d", kv.Key, kv.Value, kv.Version)
		}
	}
	want := "dir/a dir/b dir/b/x dir/c"
	if strings.Join(got, " ") != want {
		t.Fatalf("list = %v, want %s (sorted, prefix only)", got, want)
	}
}

func testConcurrentCAS(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	key := p + "counter"
	mustCreate(t, s, key, "0")
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				kv, err := s.Get(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				var n int
				fmt.Sscan(string(kv.Value), &n)
				_, err = s.Update(ctx, key, []byte(fmt.Sprint(n+1)), kv.Version)
				switch {
				case err == nil:
					done++
				case errors.Is(err, topo.ErrBadVersion):
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != fmt.Sprint(workers*each) {
		t.Fatalf("counter = %s after %d successful CAS increments: an update was lost", kv.Value, workers*each)
	}
}

// next returns the next watch event or fails the test.
func next(t *testing.T, ch <-chan topo.WatchEvent) topo.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed early")
		}
		if ev.Err != nil {
			t.Fatalf("watch failed: %v", ev.Err)
		}
		return ev
	case <-time.After(wait):
		t.Fatalf("no watch event within %s", wait)
	}
	return topo.WatchEvent{}
}

func testWatchEvents(t *testing.T, s topo.Store, p string) {
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	va := mustCreate(t, s, p+"w/a", "a1")
	mustCreate(t, s, p+"w/0", "zero")
	mustCreate(t, s, p+"wx", "sibling")

	initial, ch, err := s.Watch(ctx, p+"w/")
	if err != nil {
		t.Fatal(err)
	}
	if len(initial) != 2 || initial[0].Key != p+"w/0" || initial[1].Key != p+"w/a" ||
		string(initial[1].Value) != "a1" || initial[1].Version != va {
		t.Fatalf("initial = %+v, want w/0 and w/a (sorted, with values and versions)", initial)
	}

	vb := mustCreate(t, s, p+"w/b", "b1")
	mustCreate(t, s, p+"wx2", "outside") // same string prefix without the slash
	mustCreate(t, s, p+"other", "outside")
	va2, err := s.Update(ctx, p+"w/a", []byte("a2"), va)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, p+"w/b", 0); err != nil {
		t.Fatal(err)
	}
	var last topo.Version
	for i := range 50 {
		mustCreate(t, s, fmt.Sprintf("%sw/n%02d", p, i), fmt.Sprint(i))
	}

	ev := next(t, ch)
	if ev.Type != topo.EventPut || ev.KV.Key != p+"w/b" || string(ev.KV.Value) != "b1" || ev.KV.Version != vb {
		t.Fatalf("event 1 = %+v, want put w/b b1 v%d", ev, vb)
	}
	last = ev.KV.Version
	ev = next(t, ch)
	if ev.Type != topo.EventPut || ev.KV.Key != p+"w/a" || string(ev.KV.Value) != "a2" || ev.KV.Version != va2 {
		t.Fatalf("event 2 = %+v, want put w/a a2 v%d (writes outside the prefix must not appear)", ev, va2)
	}
	ev = next(t, ch)
	if ev.Type != topo.EventDelete || ev.KV.Key != p+"w/b" || ev.KV.Value != nil || ev.KV.Version <= va2 {
		t.Fatalf("event 3 = %+v, want delete w/b with a later version and no value", ev)
	}
	last = ev.KV.Version
	for i := range 50 {
		ev = next(t, ch)
		if ev.KV.Key != fmt.Sprintf("%sw/n%02d", p, i) || ev.KV.Version <= last {
			t.Fatalf("event %d = %s v%d, want w/n%02d after v%d (in order)", 4+i, ev.KV.Key, ev.KV.Version, i, last)
		}
		last = ev.KV.Version
	}
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(notYet):
	}
}

func testWatchCancel(t *testing.T, s topo.Store, p string) {
	ctx, cancel := context.WithCancel(ctxT(t))
	_, ch, err := s.Watch(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, p+"a", "1")
	next(t, ch)
	cancel()
	deadline := time.After(wait)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Err != nil {
				t.Fatalf("cancelled watch delivered an error instead of closing: %v", ev.Err)
			}
		case <-deadline:
			t.Fatalf("watch channel not closed within %s of cancel", wait)
		}
	}
}

// campaign runs Campaign in the background.
func campaign(ctx context.Context, s topo.Store, election, id string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := s.Campaign(ctx, election, id)
		ch <- campaignResult{l, err}
	}()
	return ch
}

type campaignResult struct {
	l   topo.Leader
	err error
}

func won(t *testing.T, ch <-chan campaignResult, id string) topo.Leader {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("campaign %s: %v", id, r.err)
		}
		if r.l.ID() != id {
			t.Fatalf("leader ID %q, want %q", r.l.ID(), id)
		}
		return r.l
	case <-time.After(wait):
		t.Fatalf("campaign %s not won within %s", id, wait)
	}
	return nil
}

func blocked(t *testing.T, ch <-chan campaignResult, id string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("campaign %s returned (%v, %v) while another leader holds the election", id, r.l, r.err)
	case <-time.After(notYet):
	}
}

func closed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s not closed within %s", what, wait)
	}
}

func open(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s closed", what)
	default:
	}
}

func wantLeader(t *testing.T, s topo.Store, election, id string) {
	t.Helper()
	got, err := s.Leader(ctxT(t), election)
	if err != nil || got != id {
		t.Fatalf("Leader(%s) = %q, %v; want %q", election, got, err, id)
	}
}

// waitCampaigners waits until n campaigners have joined election (each
// campaigner is one key under "<election>/").
func waitCampaigners(t *testing.T, s topo.Store, election string, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		kvs, err := s.List(ctxT(t), election+"/")
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d campaigners in %s after %s, want %d", len(kvs), election, wait, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testCampaignExclusive(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	el := p + "election"
	_, err := s.Leader(ctx, el)
	wantErr(t, "leader of empty election", err, topo.ErrNotFound)

	a := won(t, campaign(ctx, s, el, "ctl-a"), "ctl-a")
	wantLeader(t, s, el, "ctl-a")
	open(t, a.Done(), "Done of the current leader")

	bch := campaign(ctx, s, el, "ctl-b")
	waitCampaigners(t, s, el, 2)
	cch := campaign(ctx, s, el, "ctl-c")
	waitCampaigners(t, s, el, 3)
	blocked(t, bch, "ctl-b")
	blocked(t, cch, "ctl-c")
	wantLeader(t, s, el, "ctl-a")

	if err := a.Resign(ctx); err != nil {
		t.Fatalf("resign: %v", err)
	}
	closed(t, a.Done(), "Done after Resign")
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("second resign: %v", err)
	}
	// b campaigned first, so b is next; c still waits.
	b := won(t, bch, "ctl-b")
	blocked(t, cch, "ctl-c")
	wantLeader(t, s, el, "ctl-b")
	_, err = a.Create(ctx, p+"from-a", []byte("x"))
	wantErr(t, "create by resigned leader", err, topo.ErrNotLeader)
	if _, err := b.Create(ctx, p+"from-b", []byte("x")); err != nil {
		t.Fatalf("create by new leader: %v", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	c := won(t, cch, "ctl-c")
	wantLeader(t, s, el, "ctl-c")
	if err := c.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = s.Leader(ctx, el)
	wantErr(t, "leader after everyone resigned", err, topo.ErrNotFound)
}

func testCampaignCancel(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	el := p + "election"
	a := won(t, campaign(ctx, s, el, "ctl-a"), "ctl-a")
	cctx, cancel := context.WithCancel(ctx)
	bch := campaign(cctx, s, el, "ctl-b")
	blocked(t, bch, "ctl-b")
	cancel()
	select {
	case r := <-bch:
		if r.err == nil {
			t.Fatal("cancelled campaign returned a leader")
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled campaign: %v, want context.Canceled", r.err)
		}
	case <-time.After(wait):
		t.Fatalf("campaign did not return within %s of cancel", wait)
	}
	// The cancelled campaigner left the queue: after a resigns, a new
	// campaigner wins and nobody else claims the election.
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := s.Leader(ctx, el)
	wantErr(t, "leader after cancel and resign", err, topo.ErrNotFound)
	d := won(t, campaign(ctx, s, el, "ctl-d"), "ctl-d")
	wantLeader(t, s, el, "ctl-d")
	d.Resign(ctx)
}

func testLeaderWrites(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	l := won(t, campaign(ctx, s, p+"election", "ctl-a"), "ctl-a")
	defer l.Resign(ctx)
	key := p + "state"
	v1, err := l.Create(ctx, key, []byte("1"))
	if err != nil {
		t.Fatalf("leader create: %v", err)
	}
	_, err = l.Create(ctx, key, []byte("again"))
	wantErr(t, "leader create existing", err, topo.ErrExists)
	v2, err := l.Update(ctx, key, []byte("2"), v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("leader update = v%d, %v; want > v%d", v2, err, v1)
	}
	_, err = l.Update(ctx, key, []byte("stale"), v1)
	wantErr(t, "leader update at stale version", err, topo.ErrBadVersion)
	_, err = l.Update(ctx, p+"missing", []byte("x"), v1)
	wantErr(t, "leader update missing", err, topo.ErrNotFound)
	open(t, l.Done(), "Done after failed compare-and-swap (leadership is not lost by it)")
	kv, err := s.Get(ctx, key)
	if err != nil || string(kv.Value) != "2" || kv.Version != v2 {
		t.Fatalf("get = %q v%d %v", kv.Value, kv.Version, err)
	}
}

func expirer(t *testing.T, s topo.Store) LeaseExpirer {
	e, ok := s.(LeaseExpirer)
	if !ok {
		t.Skipf("%T cannot expire leases (implement storetest.LeaseExpirer)", s)
	}
	return e
}

func testLeaderLostOnExpiry(t *testing.T, s topo.Store, p string) {
	exp := expirer(t, s)
	ctx := ctxT(t)
	el := p + "election"
	key := p + "state"
	a := won(t, campaign(ctx, s, el, "ctl-a"), "ctl-a")
	v, err := a.Create(ctx, key, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	bch := campaign(ctx, s, el, "ctl-b")
	blocked(t, bch, "ctl-b")

	// Every lease expires, including b's while it waits: a loses
	// leadership and b, campaigning again, wins.
	exp.ExpireLeases()
	closed(t, a.Done(), "Done after the leader's lease expired")
	_, err = a.Update(ctx, key, []byte("a2"), v)
	wantErr(t, "update by leader whose lease expired", err, topo.ErrNotLeader)
	_, err = a.Create(ctx, p+"other", []byte("a"))
	wantErr(t, "create by leader whose lease expired", err, topo.ErrNotLeader)
	kv, err := s.Get(ctx, key)
	if err != nil || string(kv.Value) != "a" {
		t.Fatalf("state after failed leader writes = %q, %v; want unchanged", kv.Value, err)
	}
	b := won(t, bch, "ctl-b")
	wantLeader(t, s, el, "ctl-b")
	if _, err := b.Update(ctx, key, []byte("b"), v); err != nil {
		t.Fatalf("update by new leader: %v", err)
	}
	b.Resign(ctx)
}

func testLeaderLostOnKeyDelete(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	el := p + "election"
	a := won(t, campaign(ctx, s, el, "ctl-a"), "ctl-a")
	// An operator deletes the election key by hand to force a new election.
	kvs, err := s.List(ctx, el+"/")
	if err != nil || len(kvs) != 1 {
		t.Fatalf("election keys = %v, %v; want one", kvs, err)
	}
	if err := s.Delete(ctx, kvs[0].Key, 0); err != nil {
		t.Fatal(err)
	}
	closed(t, a.Done(), "Done after the election key was deleted")
	_, err = a.Create(ctx, p+"state", []byte("a"))
	wantErr(t, "create after the election key was deleted", err, topo.ErrNotLeader)
	b := won(t, campaign(ctx, s, el, "ctl-b"), "ctl-b")
	b.Resign(ctx)
}

func testRegister(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	key := p + "proxies/p1"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, ch, err := s.Watch(wctx, p+"proxies/")
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Register(ctx, key, []byte("v1"), 2*time.Second)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if ev := next(t, ch); ev.Type != topo.EventPut || string(ev.KV.Value) != "v1" {
		t.Fatalf("event = %+v, want put v1", ev)
	}
	if err := l.Update(ctx, []byte("v2")); err != nil {
		t.Fatalf("lease update: %v", err)
	}
	if ev := next(t, ch); ev.Type != topo.EventPut || string(ev.KV.Value) != "v2" {
		t.Fatalf("event = %+v, want put v2", ev)
	}
	kv, err := s.Get(ctx, key)
	if err != nil || string(kv.Value) != "v2" {
		t.Fatalf("get = %q, %v; want v2", kv.Value, err)
	}
	// The key outlives its TTL while the lease is kept alive.
	select {
	case <-l.Done():
		t.Fatal("lease lost while kept alive")
	case <-time.After(3 * time.Second):
	}
	if _, err := s.Get(ctx, key); err != nil {
		t.Fatalf("registration gone after 1.5×TTL although kept alive: %v", err)
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	closed(t, l.Done(), "lease Done after Revoke")
	if ev := next(t, ch); ev.Type != topo.EventDelete || ev.KV.Key != key {
		t.Fatalf("event = %+v, want delete of %s", ev, key)
	}
	_, err = s.Get(ctx, key)
	wantErr(t, "get after revoke", err, topo.ErrNotFound)
	if err := l.Revoke(ctx); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
}

func testRegisterExpiry(t *testing.T, s topo.Store, p string) {
	exp := expirer(t, s)
	ctx := ctxT(t)
	key := p + "proxies/p1"
	l, err := s.Register(ctx, key, []byte("v1"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := mustCreate(t, s, p+"plain", "kept")
	exp.ExpireLeases()
	closed(t, l.Done(), "lease Done after expiry")
	_, err = s.Get(ctx, key)
	wantErr(t, "get after lease expiry", err, topo.ErrNotFound)
	if kv, err := s.Get(ctx, p+"plain"); err != nil || kv.Version != other {
		t.Fatalf("unleased key after lease expiry: %+v, %v; want untouched", kv, err)
	}
	err = l.Update(ctx, []byte("v2"))
	wantErr(t, "update of expired registration", err, topo.ErrNotFound)
	if _, err := s.Get(ctx, key); !errors.Is(err, topo.ErrNotFound) {
		t.Fatalf("update of expired registration recreated the key: %v", err)
	}
	// Registering again works.
	l2, err := s.Register(ctx, key, []byte("v3"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := s.Get(ctx, key); err != nil || string(kv.Value) != "v3" {
		t.Fatalf("re-registered = %q, %v", kv.Value, err)
	}
	l2.Revoke(ctx)
}

func testClose(t *testing.T, s topo.Store, p string) {
	ctx := ctxT(t)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, ch, err := s.Watch(wctx, p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Campaign(ctx, p+"election", "ctl-a")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := s.Register(ctx, p+"reg", []byte("x"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bch := campaign(ctx, s, p+"election", "ctl-b")
	waitCampaigners(t, s, p+"election", 2)
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	closed(t, l.Done(), "leader Done after Close")
	closed(t, reg.Done(), "lease Done after Close")
	select {
	case r := <-bch:
		if r.err == nil {
			t.Fatal("campaign blocked at Close won leadership of a closed store")
		}
	case <-time.After(wait):
		t.Fatalf("campaign blocked at Close did not return within %s", wait)
	}
	_, err = s.Get(ctx, p+"reg")
	wantErr(t, "get after close", err, topo.ErrClosed)
	_, err = s.Create(ctx, p+"x", nil)
	wantErr(t, "create after close", err, topo.ErrClosed)
	_, err = l.Update(ctx, p+"x", nil, 1)
	if err == nil {
		t.Fatal("leader update after close succeeded")
	}
	// The watch ends: it may deliver events and an error first, then closes.
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				if err := s.Close(); err != nil {
					t.Fatalf("second close: %v", err)
				}
				return
			}
		case <-deadline:
			t.Fatalf("watch not closed within %s of Close", wait)
		}
	}
}
