package configstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// syncBuffer is a log sink safe for the Follower's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFollowRefusesForgedRevision: with an integrity keyring, a revision
// written straight into etcd with guard_overridden: true (and one signed
// with a key the consumer does not hold) is not applied, is counted and
// logged once at ERROR; a revision applied through Apply is.
func TestFollowRefusesForgedRevision(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("config-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })

	st := topotest.NewStore(t)
	base := baseConfig(t, 8)
	res, err := Bootstrap(ctx(t), st, keys, base, "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	cons := &consumer{}
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	fctx, cancel := context.WithCancel(context.Background())
	f, err := Follow(fctx, st, keys, FollowOptions{
		Name: "proxy", ID: "proxy-a", OnApply: cons.onApply, Registry: reg,
		Log:     slog.New(slog.NewTextHandler(logs, nil)),
		Initial: base, InitialRev: res.Revision.Rev,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-f.Done()
	})
	if f.AppliedRev() != 1 || f.Alarm() != nil {
		t.Fatalf("initial: applied %d alarm %v (the bootstrap revision is signed)", f.AppliedRev(), f.Alarm())
	}

	// A forged revision: every listener gone, guard override claimed.
	shrunk := clone(t, base)
	shrunk.Listeners = shrunk.Listeners[:1]
	v := put(t, st, revisionDoc(t, 2, shrunk, true))
	eventually(t, "forged revision refused", func() bool { a := f.Alarm(); return a != nil && a.Version == v })
	if a := f.Alarm(); !strings.Contains(a.Reason, "integrity check failed") || a.Rev != 2 {
		t.Fatalf("alarm %v: want the integrity failure of revision 2", a)
	}
	if rev, _ := cons.last(); rev != 0 || f.AppliedRev() != 1 {
		t.Fatalf("forged revision applied: consumer got %d, follower serves %d", rev, f.AppliedRev())
	}
	if n := gauge(t, reg, "switchyard_config_integrity_failures_total"); n != 1 {
		t.Fatalf("switchyard_config_integrity_failures_total = %v, want 1", n)
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"config revision in the store fails its integrity check"); n != 1 {
		t.Fatalf("%d ERROR lines for one forged value, want 1:\n%s", n, logs.String())
	}
	if s, err := Load(ctx(t), st, keys); err != nil || s.CurrentErr == nil || !errors.Is(s.CurrentErr, topo.ErrIntegrity) || s.Base == nil || s.Base.Rev != 1 {
		t.Fatalf("Load: %v; current err %v; base %+v: want the forged current refused and revision 1 served", err, s.CurrentErr, s.Base)
	}

	// Signed with someone else's key.
	other, _ := topo.NewKeyring([]byte("attacker-key-0123456789abc"))
	doc, _ := other.Sign(topo.IntegrityConfigRevision, revisionDoc(t, 3, shrunk, true))
	v = put(t, st, doc)
	eventually(t, "foreign-key revision refused", func() bool { a := f.Alarm(); return a != nil && a.Version == v })
	if n := gauge(t, reg, "switchyard_config_integrity_failures_total"); n != 2 || f.AppliedRev() != 1 {
		t.Fatalf("after the foreign-key revision: failures %v, applied %d", n, f.AppliedRev())
	}

	// A good revision through Apply is signed and applied; it clears the alarm.
	grown := clone(t, base)
	grown.Versioning.HistoryLimit = 50
	r := mustApply(t, st, Change{Config: grown, Reason: "signed change"})
	eventually(t, "signed revision applied", func() bool { return f.AppliedRev() == r.Revision.Rev })
	if f.Alarm() != nil {
		t.Fatalf("alarm not cleared: %v", f.Alarm())
	}
	kv, err := st.Get(ctx(t), keys.Config())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if json.Unmarshal(kv.Value, &m) != nil || !strings.HasPrefix(m["mac"].(string), "hmac-sha256:"+kr.SigningKeyID()+":") {
		t.Fatalf("stored revision carries no MAC of the signing key: %v", m["mac"])
	}
}

// TestBootstrapSignsUnsignedStore: a store written without a key, read by
// a process that now has one, holds no revision that verifies; `up`'s
// Bootstrap then writes the config file as a new, signed revision.
func TestBootstrapSignsUnsignedStore(t *testing.T) {
	st := topotest.NewStore(t)
	base := baseConfig(t, 2)
	if _, err := Bootstrap(ctx(t), st, keys, base, "boot@host"); err != nil {
		t.Fatal(err)
	}
	kr, err := topo.NewKeyring([]byte("config-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	if _, _, _, err := Current(ctx(t), st, keys); err == nil || !strings.Contains(err.Error(), "carries no MAC") {
		t.Fatalf("Current on an unsigned store with a keyring: %v", err)
	}
	res, err := Bootstrap(ctx(t), st, keys, base, "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision.Rev != 2 || res.Unchanged {
		t.Fatalf("bootstrap wrote revision %d (unchanged %v), want a new revision 2", res.Revision.Rev, res.Unchanged)
	}
	if r, _, _, err := Current(ctx(t), st, keys); err != nil || r.Rev != 2 {
		t.Fatalf("Current after the signed bootstrap: %+v %v", r, err)
	}
}

// TestFollowRefusesReplayedRevision: with an integrity keyring, an older
// signed revision written back under the current key (its MAC is valid) is
// not applied, is counted and logged once at ERROR; a rollback through
// Rollback (a new, higher number) is applied.
func TestFollowRefusesReplayedRevision(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("config-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })

	st := topotest.NewStore(t)
	base := baseConfig(t, 8)
	res, err := Bootstrap(ctx(t), st, keys, base, "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	old, err := st.Get(ctx(t), keys.Config())
	if err != nil {
		t.Fatal(err)
	}
	cons := &consumer{}
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	fctx, cancel := context.WithCancel(context.Background())
	f, err := Follow(fctx, st, keys, FollowOptions{
		Name: "proxy", ID: "proxy-a", OnApply: cons.onApply, Registry: reg,
		Log:     slog.New(slog.NewTextHandler(logs, nil)),
		Initial: base, InitialRev: res.Revision.Rev,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-f.Done()
	})
	grown := clone(t, base)
	grown.Versioning.HistoryLimit = 50
	r := mustApply(t, st, Change{Config: grown, Reason: "signed change"})
	eventually(t, "revision 2 applied", func() bool { return f.AppliedRev() == r.Revision.Rev })

	// Revision 1, signed, written back as current.
	v := put(t, st, old.Value)
	eventually(t, "replayed revision refused", func() bool { a := f.Alarm(); return a != nil && a.Version == v })
	if a := f.Alarm(); !strings.Contains(a.Reason, "not newer than the applied revision 2") || a.Rev != 1 {
		t.Fatalf("alarm %v: want the replay of revision 1 refused", a)
	}
	if f.AppliedRev() != 2 {
		t.Fatalf("replayed revision applied: follower serves %d", f.AppliedRev())
	}
	if n := gauge(t, reg, "switchyard_config_integrity_failures_total"); n != 1 {
		t.Fatalf("switchyard_config_integrity_failures_total = %v, want 1", n)
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"config revision in the store is not newer"); n != 1 {
		t.Fatalf("%d ERROR lines for one replay, want 1:\n%s", n, logs.String())
	}

	if s, err := Load(ctx(t), st, keys); err != nil || !errors.Is(s.CurrentErr, topo.ErrIntegrity) || s.Base == nil || s.Base.Rev != 2 || s.NextRev != 3 {
		t.Fatalf("Load: %v; state %+v: want the replay flagged, revision 2 served, next 3", err, s)
	}

	// A consumer that starts now (of unknown revision) does not apply it either.
	reg2 := prometheus.NewRegistry()
	f2ctx, cancel2 := context.WithCancel(context.Background())
	f2, err := Follow(f2ctx, st, keys, FollowOptions{
		Name: "proxy", ID: "proxy-b", OnApply: (&consumer{}).onApply, Registry: reg2, Initial: base,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel2()
		<-f2.Done()
	})
	if a := f2.Alarm(); a == nil || !strings.Contains(a.Reason, "older than revision 2 of the history") || f2.AppliedRev() != 0 {
		t.Fatalf("starting consumer: alarm %v applied %d: want the replay refused", a, f2.AppliedRev())
	}

	// A real rollback: old content, new number 3.
	rb, err := Rollback(ctx(t), st, keys, 1, Change{Reason: "back"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "rollback applied", func() bool { return f.AppliedRev() == rb.Revision.Rev })
	if f.Alarm() != nil || rb.Revision.Rev != 3 {
		t.Fatalf("rollback: rev %d alarm %v", rb.Revision.Rev, f.Alarm())
	}
}

// TestApplyAfterWipeNumbersAboveConsumers: the config keys are deleted
// (the store wiped, or restored from a backup without them) while a
// consumer serves signed revision 2. The next `config apply` numbers its
// revision above the one the consumer reports serving — numbering from 1
// again would be refused by it as a replayed revision — and the consumer
// applies it.
func TestApplyAfterWipeNumbersAboveConsumers(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("config-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })

	st := topotest.NewStore(t)
	base := baseConfig(t, 8)
	res, err := Bootstrap(ctx(t), st, keys, base, "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(context.Background())
	f, err := Follow(fctx, st, keys, FollowOptions{
		Name: "proxy", ID: "proxy-a", OnApply: (&consumer{}).onApply, Registry: prometheus.NewRegistry(),
		Initial: base, InitialRev: res.Revision.Rev, Report: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-f.Done()
	})
	grown := clone(t, base)
	grown.Versioning.HistoryLimit = 50
	r := mustApply(t, st, Change{Config: grown, Reason: "signed change"})
	eventually(t, "revision 2 applied", func() bool { return f.AppliedRev() == r.Revision.Rev })

	kvs, err := st.List(ctx(t), keys.ConfigHistory())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range append([]string{keys.Config()}, func() []string {
		var ks []string
		for _, kv := range kvs {
			ks = append(ks, kv.Key)
		}
		return ks
	}()...) {
		if err := st.Delete(ctx(t), key, 0); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
	}
	eventually(t, "the consumer reports the deletion", func() bool { return f.Alarm() != nil })
	again := clone(t, grown)
	again.Versioning.HistoryLimit = 40
	r3 := mustApply(t, st, Change{Config: again, Reason: "after the wipe"})
	if r3.Revision.Rev <= r.Revision.Rev {
		t.Fatalf("revision %d after the wipe, the consumer serves %d: it would be refused as a replay", r3.Revision.Rev, r.Revision.Rev)
	}
	eventually(t, "the new revision applied", func() bool { return f.AppliedRev() == r3.Revision.Rev && f.Alarm() == nil })
}
