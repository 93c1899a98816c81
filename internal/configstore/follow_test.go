package configstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// consumer records what a Follower hands it.
type consumer struct {
	mu      sync.Mutex
	applied []int64
	cfg     *config.Config
	refuse  error
}

func (c *consumer) onApply(cfg *config.Config, rev int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse != nil {
		return c.refuse
	}
	c.applied = append(c.applied, rev)
	c.cfg = cfg
	return nil
}

func (c *consumer) last() (int64, *config.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.applied) == 0 {
		return 0, nil
	}
	return c.applied[len(c.applied)-1], c.cfg
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// put writes value to the current key, bypassing Apply (what a buggy tool
// or an operator with etcdctl would do).
func put(t *testing.T, st topo.Store, value []byte) topo.Version {
	t.Helper()
	c := ctx(t)
	kv, err := st.Get(c, keys.Config())
	var v topo.Version
	switch {
	case errors.Is(err, topo.ErrNotFound):
		v, err = st.Create(c, keys.Config(), value)
	case err == nil:
		v, err = st.Update(c, keys.Config(), value, kv.Version)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func revisionDoc(t *testing.T, rev int64, cfg *config.Config, overridden bool) []byte {
	t.Helper()
	y, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(Revision{Rev: rev, SHA256: Hash(y), YAML: string(y), GuardOverridden: overridden, Author: "direct@etcd", Reason: "written by hand"})
	return b
}

// TestFollowKeepsLastKnownGood runs a Follower against a real embedded etcd
// through the sequence of scenario S8: good, empty, garbage, schema-valid
// without listeners, destructive, then good again.
func TestFollowKeepsLastKnownGood(t *testing.T) {
	st := topotest.NewStore(t)
	base := baseConfig(t, 8)
	res, err := Bootstrap(ctx(t), st, keys, base, "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	cons := &consumer{}
	reg := prometheus.NewRegistry()
	fctx, cancel := context.WithCancel(context.Background())
	f, err := Follow(fctx, st, keys, FollowOptions{
		Name: "proxy", ID: "proxy-a", OnApply: cons.onApply, Log: topotest.Logger(t), Registry: reg,
		Initial: base, InitialRev: res.Revision.Rev, Report: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-f.Done()
	})
	if f.AppliedRev() != 1 || f.Alarm() != nil {
		t.Fatalf("initial: applied %d alarm %v", f.AppliedRev(), f.Alarm())
	}
	if rev, _ := cons.last(); rev != 0 {
		t.Fatalf("the initial revision was handed over again (rev %d)", rev)
	}

	// A good, non-destructive change is applied.
	next := clone(t, base)
	next.Clusters[0].ReadRouting.MaxLag = config.Duration(2 * time.Second)
	start := time.Now()
	mustApply(t, st, Change{Config: next, Reason: "lag 2s"})
	eventually(t, "revision 2 applied", func() bool { r, _ := cons.last(); return r == 2 })
	t.Logf("revision 2 reached the consumer %s after the apply", time.Since(start).Round(time.Millisecond))
	if f.AppliedRev() != 2 || f.Config().Clusters[0].ReadRouting.MaxLag.D() != 2*time.Second {
		t.Fatalf("after good change: applied %d", f.AppliedRev())
	}

	bad := []struct {
		name   string
		value  func() []byte
		rev    int64
		reason string
	}{
		{"empty value", func() []byte { return nil }, 0, "the stored value is empty"},
		{"garbage", func() []byte { return []byte("\x89PNG\r\n\x1a\n\x00garbage") }, 0, "not a config revision document"},
		{"schema-valid config without listeners", func() []byte {
			c := clone(t, next)
			c.Listeners = nil
			return revisionDoc(t, 3, c, false)
		}, 3, "listeners: at least one listener is required"},
		{"bare YAML", func() []byte { y, _ := next.Marshal(); return y }, 0, "a bare YAML config"},
		{"destructive, not overridden", func() []byte {
			c := clone(t, next)
			c.Listeners = c.Listeners[:1]
			return revisionDoc(t, 4, c, false)
		}, 4, "routes-removed: 27 of 30 routes"},
		{"deleted key", nil, 0, "the current config key was deleted"},
	}
	var rejected float64
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			var v topo.Version
			var prev topo.Version
			if a := f.Alarm(); a != nil {
				prev = a.Version
			}
			if b.value == nil {
				kv, err := st.Get(ctx(t), keys.Config())
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Delete(ctx(t), keys.Config(), kv.Version); err != nil {
					t.Fatal(err)
				}
				v = -1
			} else {
				v = put(t, st, b.value())
			}
			eventually(t, "alarm", func() bool { a := f.Alarm(); return a != nil && (v < 0 && a.Version > prev || a.Version == v) })
			a := f.Alarm()
			if a.Rev != b.rev || !strings.Contains(a.Reason, b.reason) {
				t.Fatalf("alarm %+v, want rev %d and reason containing %q", a, b.rev, b.reason)
			}
			rejected++
			if f.AppliedRev() != 2 || f.Config().Clusters[0].ReadRouting.MaxLag.D() != 2*time.Second {
				t.Fatalf("last-known-good lost: applied %d", f.AppliedRev())
			}
			if r, _ := cons.last(); r != 2 {
				t.Fatalf("the consumer was handed revision %d", r)
			}
			if g := gauge(t, reg, "switchyard_config_alarm"); g != 1 {
				t.Errorf("switchyard_config_alarm = %v, want 1", g)
			}
			if g := gauge(t, reg, "switchyard_config_rejected_revisions_total"); g != rejected {
				t.Errorf("rejected counter = %v, want %v", g, rejected)
			}
			t.Logf("alarm: %s", a)
		})
	}

	// The consumer's report shows the alarm to status.
	eventually(t, "report shows the alarm", func() bool {
		s, err := ReadSummary(ctx(t), st, keys)
		return err == nil && len(s.Consumers) == 1 && s.Consumers[0].Alarm != nil && s.Consumers[0].AppliedRev == 2
	})

	// An overridden destructive revision is applied: the override is the
	// operator's decision, recorded in the revision.
	over := clone(t, next)
	over.Listeners = over.Listeners[:2]
	ores := mustApply(t, st, Change{Config: over, Reason: "drop tenant listeners", AllowDestructive: true})
	if !ores.Revision.GuardOverridden || ores.Repaired == "" {
		t.Fatalf("override over a deleted key: %+v", ores)
	}
	eventually(t, "overridden revision applied", func() bool { return f.AppliedRev() == ores.Revision.Rev })
	if f.Alarm() != nil || len(f.Config().Listeners) != 2 {
		t.Fatalf("after override: alarm %v listeners %d", f.Alarm(), len(f.Config().Listeners))
	}

	// A hand-written document that claims an override is believed too (its
	// hash must match): the guard protects against accidents, not forgery.
	forged := clone(t, over)
	forged.Listeners = forged.Listeners[:1]
	put(t, st, revisionDoc(t, 50, forged, true))
	eventually(t, "forged override applied", func() bool { return f.AppliedRev() == 50 })
	mustApply(t, st, Change{Config: over, Reason: "restore ro"})
	eventually(t, "ro restored", func() bool { return len(f.Config().Listeners) == 2 })

	// Garbage again, then a good revision through Apply clears the alarm.
	put(t, st, []byte("{}"))
	eventually(t, "alarm again", func() bool { return f.Alarm() != nil })
	good := clone(t, over)
	good.Clusters[0].ReadRouting.MaxLag = config.Duration(4 * time.Second)
	res2 := mustApply(t, st, Change{Config: good, Reason: "recover"})
	if res2.Repaired == "" {
		t.Error("apply over garbage did not say it repaired the current key")
	}
	eventually(t, "alarm cleared", func() bool { return f.Alarm() == nil && f.AppliedRev() == res2.Revision.Rev })
	if g := gauge(t, reg, "switchyard_config_alarm"); g != 0 {
		t.Errorf("switchyard_config_alarm = %v after recovery, want 0", g)
	}
	if g := gauge(t, reg, "switchyard_config_applied_revision"); g != float64(res2.Revision.Rev) {
		t.Errorf("switchyard_config_applied_revision = %v, want %d", g, res2.Revision.Rev)
	}
	eventually(t, "report converged", func() bool {
		s, err := ReadSummary(ctx(t), st, keys)
		return err == nil && s.Converged()
	})
	var sb strings.Builder
	s, _ := ReadSummary(ctx(t), st, keys)
	s.WriteTable(&sb, time.Now())
	t.Logf("status:\n%s", sb.String())
	if !strings.Contains(sb.String(), "proxy-a") || !strings.Contains(sb.String(), fmt.Sprintf("revision %d", res2.Revision.Rev)) {
		t.Errorf("summary table:\n%s", sb.String())
	}

	// The report disappears with the follower.
	cancel()
	<-f.Done()
	s, err = ReadSummary(ctx(t), st, keys)
	if err != nil || len(s.Consumers) != 0 {
		t.Errorf("report left behind after stop: %+v %v", s, err)
	}
}

// TestFollowConsumerRefusal: an OnApply error is an alarm like any other,
// and the consumer keeps its config.
func TestFollowConsumerRefusal(t *testing.T) {
	st := topotest.NewStore(t)
	base := baseConfig(t, 0)
	mustApply(t, st, Change{Config: base})
	cons := &consumer{}
	fctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// No initial config: the store's revision is applied at once.
	f, err := Follow(fctx, st, keys, FollowOptions{Name: "controller", OnApply: cons.onApply, Log: topotest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := cons.last(); r != 1 || f.AppliedRev() != 1 {
		t.Fatalf("initial apply: consumer %d follower %d", r, f.AppliedRev())
	}
	cons.mu.Lock()
	cons.refuse = errors.New("users[0]: cannot derive the password hash")
	cons.mu.Unlock()
	next := clone(t, base)
	next.Users = append(next.Users, config.User{Name: "report", Password: "x"})
	mustApply(t, st, Change{Config: next, Reason: "add user"})
	eventually(t, "alarm", func() bool { return f.Alarm() != nil })
	if a := f.Alarm(); a.Rev != 2 || !strings.Contains(a.Reason, "the consumer refused it: users[0]") || f.AppliedRev() != 1 {
		t.Fatalf("alarm %+v applied %d", a, f.AppliedRev())
	}
	cancel()
	<-f.Done()
}

func TestFollowOptions(t *testing.T) {
	if _, err := Follow(context.Background(), topo.NewMemory(), keys, FollowOptions{Name: "x"}); err == nil {
		t.Error("Follow without OnApply accepted")
	}
	// Two followers may share a registry under different names.
	reg := prometheus.NewRegistry()
	st := topo.NewMemory()
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range []string{"proxy", "controller"} {
		f, err := Follow(c, st, keys, FollowOptions{Name: name, OnApply: func(*config.Config, int64) error { return nil }, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); <-f.Done() }()
	}
}

// TestReportsOfOneProcess: a process running both roles (switchyard up)
// reports each under its own key.
func TestReportsOfOneProcess(t *testing.T) {
	st := topo.NewMemory()
	mustApply(t, st, Change{Config: baseConfig(t, 0)})
	c, cancel := context.WithCancel(context.Background())
	var fs []*Follower
	for _, name := range []string{"proxy", "controller"} {
		f, err := Follow(c, st, keys, FollowOptions{Name: name, ID: "host-42", Report: true, OnApply: func(*config.Config, int64) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	eventually(t, "two reports", func() bool {
		s, err := ReadSummary(ctx(t), st, keys)
		return err == nil && len(s.Consumers) == 2 && s.Converged() && s.Consumers[0].Name == "controller"
	})
	cancel()
	for _, f := range fs {
		<-f.Done()
	}
}
