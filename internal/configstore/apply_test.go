package configstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

var keys = topo.Keys{Prefix: "/sy"}

// baseConfig is a valid config: one cluster of three nodes, listeners rw
// and ro (six routes), plus extra replica listeners t0..t(extra-1).
func baseConfig(t testing.TB, extra int) *config.Config {
	t.Helper()
	c := &config.Config{
		Credentials: config.Credentials{
			Monitor:     config.Credential{User: "monitor", Password: "m-secret"},
			Replication: config.Credential{User: "repl", Password: "r-secret"},
		},
		Users: []config.User{{Name: "app", Password: "app-secret"}},
		Clusters: []config.Cluster{{Name: "main", Nodes: []config.Node{
			{Name: "db1", Address: "127.0.0.1:3306"},
			{Name: "db2", Address: "127.0.0.1:3307"},
			{Name: "db3", Address: "127.0.0.1:3308"},
		}}},
		Listeners: []config.Listener{
			{Name: "rw", Address: "127.0.0.1:6446", Cluster: "main", Role: config.RolePrimary},
			{Name: "ro", Address: "127.0.0.1:6447", Cluster: "main", Role: config.RoleReplica},
		},
	}
	for i := range extra {
		c.Listeners = append(c.Listeners, config.Listener{Name: fmt.Sprintf("t%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 7000+i), Cluster: "main", Role: config.RoleReplica})
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func clone(t testing.TB, c *config.Config) *config.Config {
	t.Helper()
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out, err := config.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustApply(t *testing.T, st topo.Store, ch Change) *Result {
	t.Helper()
	if ch.Reason == "" {
		ch.Reason = "test"
	}
	if ch.Author == "" {
		ch.Author = "tester@test"
	}
	res, err := Apply(ctx(t), st, keys, ch)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

func TestApplyRevisionsAndHistory(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 0)
	res, err := Bootstrap(c, st, keys, cfg, "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	if res.Unchanged || res.Revision.Rev != 1 || res.Revision.Parent != 0 || res.Revision.Source != SourceBootstrap || res.Previous != nil {
		t.Fatalf("bootstrap result %+v", res)
	}
	// Starting again with the same file writes nothing.
	res, err = Bootstrap(c, st, keys, clone(t, cfg), "boot@host")
	if err != nil || !res.Unchanged || res.Revision.Rev != 1 {
		t.Fatalf("second bootstrap: %+v, %v", res, err)
	}

	next := clone(t, cfg)
	next.Clusters[0].Nodes = append(next.Clusters[0].Nodes, config.Node{Name: "db4", Address: "127.0.0.1:3309", Promotion: config.PromotionNeutral})
	next.Clusters[0].ReadRouting.MaxLag = config.Duration(3 * time.Second)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	res = mustApply(t, st, Change{Config: next, Reason: "add db4, tighten lag", Now: func() time.Time { return now }})
	r := res.Revision
	if r.Rev != 2 || r.Parent != 1 || r.Author != "tester@test" || r.Reason != "add db4, tighten lag" || r.Source != SourceApply || !r.Time.Equal(now) || r.GuardOverridden {
		t.Fatalf("revision 2: %+v", r.Meta())
	}
	if len(res.Diff.Nodes) != 1 || len(res.Diff.Policies) != 1 || len(res.Violations) != 0 {
		t.Fatalf("diff %+v violations %v", res.Diff, res.Violations)
	}

	s, err := Load(c, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	if s.Current == nil || s.Current.Rev != 2 || s.NextRev != 3 || len(s.History) != 2 || s.History[0].Rev != 1 || s.History[1].Rev != 2 {
		t.Fatalf("state: current %+v next %d history %+v", s.Current, s.NextRev, s.History)
	}
	if got := Hash([]byte(s.Current.YAML)); got != s.Current.SHA256 {
		t.Fatalf("hash %s != %s", got, s.Current.SHA256)
	}
	if s.CurrentConfig.Cluster("main").Node("db4") == nil {
		t.Fatal("stored config lacks db4")
	}
	// The stored document is JSON with the documented fields.
	kv, _ := st.Get(c, keys.Config())
	var raw map[string]any
	if err := json.Unmarshal(kv.Value, &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rev", "author", "time", "reason", "sha256", "guard_overridden", "yaml"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("revision document lacks %q: %s", f, kv.Value)
		}
	}
}

func TestApplyRefusesDestructiveUnlessOverridden(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 8) // 10 listeners, 30 routes
	mustApply(t, st, Change{Config: cfg})
	// The primary is db1; the proxies report no sessions anywhere.
	if _, err := topo.PutJSON(c, st, keys.ClusterState("main"), topo.ClusterState{Cluster: "main", Primary: "db1", Nodes: []topo.NodeState{
		{Name: "db1", Role: topo.RolePrimary}, {Name: "db2", Role: topo.RoleReplica, Serving: true}, {Name: "db3", Role: topo.RoleReplica},
	}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.PutJSON(c, st, keys.Proxy("p1"), topo.ProxyRegistration{ID: "p1", Sessions: map[string]int{"rw": 3}}, 0); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		mutate func(c *config.Config)
		rules  string
	}{
		{"90% of routes dropped", func(c *config.Config) { c.Listeners = c.Listeners[:1] }, "[routes-removed]"},
		{"primary removed", func(c *config.Config) { c.Clusters[0].Nodes = c.Clusters[0].Nodes[1:] }, "[node-in-use routes-removed]"},
		{"listener with sessions removed", func(c *config.Config) { c.Listeners = c.Listeners[1:] }, "[listener-in-use]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := st.Get(c, keys.Config())
			next := clone(t, cfg)
			tt.mutate(next)
			res, err := Apply(c, st, keys, Change{Config: next, Reason: "oops", Author: "a@b"})
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("err %v, want *RefusedError", err)
			}
			var ge *config.GuardError
			if !errors.As(err, &ge) || fmt.Sprint(rulesOf(ge.Violations)) != tt.rules {
				t.Fatalf("violations %v, want %s", ge, tt.rules)
			}
			msg := err.Error()
			for _, want := range []string{"change refused against revision 1", "the refused change:", "--allow-destructive"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q:\n%s", want, msg)
				}
			}
			if res == nil || res.Diff.Empty() {
				t.Errorf("refusal carries no diff: %+v", res)
			}
			after, _ := st.Get(c, keys.Config())
			if after.Version != before.Version {
				t.Fatal("a refused change was written")
			}
		})
	}

	// With the override it goes through and the history records it.
	next := clone(t, cfg)
	next.Listeners = next.Listeners[:1]
	res := mustApply(t, st, Change{Config: next, Reason: "decommission tenants", AllowDestructive: true})
	if !res.Revision.GuardOverridden || len(res.Revision.GuardViolations) != 1 || !strings.Contains(res.Revision.GuardViolations[0], "27 of 30 routes") {
		t.Fatalf("override not recorded: %+v", res.Revision.Meta())
	}
	r, _, err := Get(c, st, keys, res.Revision.Rev)
	if err != nil || !r.GuardOverridden || r.Reason != "decommission tenants" {
		t.Fatalf("history entry %+v, %v", r, err)
	}
}

func rulesOf(vs []config.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Rule)
	}
	return out
}

func TestApplyArguments(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 0)
	if _, err := Apply(c, st, keys, Change{Config: cfg}); err == nil || !strings.Contains(err.Error(), "reason is required") {
		t.Errorf("no reason: %v", err)
	}
	bad := clone(t, cfg)
	bad.Listeners = nil
	if _, err := Apply(c, st, keys, Change{Config: bad, Reason: "x"}); err == nil || !strings.Contains(err.Error(), "listeners: at least one listener is required") {
		t.Errorf("invalid config: %v", err)
	}
	mustApply(t, st, Change{Config: cfg})
	next := clone(t, cfg)
	next.Probe.Interval = config.Duration(2 * time.Second)
	if _, err := Apply(c, st, keys, Change{Config: next, Reason: "x", ExpectRev: 7}); !errors.Is(err, ErrConflict) {
		t.Errorf("stale ExpectRev: %v, want ErrConflict", err)
	}
	res, err := Apply(c, st, keys, Change{Config: next, Reason: "x", ExpectRev: 1})
	if err != nil || res.Revision.Rev != 2 {
		t.Errorf("ExpectRev 1: %+v %v", res, err)
	}
}

func TestHistoryTrimmingAndRollback(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 0)
	cfg.Versioning.HistoryLimit = 5
	for i := 1; i <= 8; i++ {
		next := clone(t, cfg)
		next.Probe.Interval = config.Duration(time.Duration(i) * time.Second)
		next.Probe.Timeout = config.Duration(100 * time.Millisecond)
		res := mustApply(t, st, Change{Config: next, Reason: fmt.Sprintf("step %d", i)})
		if res.Revision.Rev != int64(i) || len(res.Warnings) > 0 {
			t.Fatalf("step %d: rev %d warnings %v", i, res.Revision.Rev, res.Warnings)
		}
	}
	kvs, err := st.List(c, keys.ConfigHistory())
	if err != nil {
		t.Fatal(err)
	}
	var revs []string
	for _, kv := range kvs {
		revs = append(revs, strings.TrimPrefix(kv.Key, keys.ConfigHistory()))
	}
	if want := "[000000000004 000000000005 000000000006 000000000007 000000000008]"; fmt.Sprint(revs) != want {
		t.Fatalf("history keys %v, want %s", revs, want)
	}

	_, err = Rollback(c, st, keys, 2, Change{Reason: "back"})
	if !errors.Is(err, topo.ErrNotFound) || !strings.Contains(err.Error(), "revision 2 is not in the history (kept: 4..8)") {
		t.Fatalf("rollback to a trimmed revision: %v", err)
	}
	res, err := Rollback(c, st, keys, 5, Change{Reason: "step 6 was wrong", Author: "ops@host"})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Revision
	if r.Rev != 9 || r.Parent != 8 || r.Source != SourceRollback || r.RollbackOf != 5 {
		t.Fatalf("rollback revision %+v", r.Meta())
	}
	five, _, err := Get(c, st, keys, 5)
	if err != nil || five.SHA256 != r.SHA256 {
		t.Fatalf("rollback content %s differs from revision 5 (%+v, %v)", r.SHA256, five, err)
	}
	if len(res.Diff.Policies) != 1 || res.Diff.Policies[0].Name != "probe.interval" {
		t.Errorf("rollback diff %+v", res.Diff)
	}
	// Rolling back to what is current already writes nothing.
	res, err = Rollback(c, st, keys, 9, Change{Reason: "again"})
	if err != nil || !res.Unchanged {
		t.Fatalf("rollback to the current content: %+v %v", res, err)
	}
	if kvs, _ := st.List(c, keys.ConfigHistory()); len(kvs) != 5 {
		t.Errorf("history holds %d entries, want 5", len(kvs))
	}
}

func TestApplyOverGarbageRepairs(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 0)
	mustApply(t, st, Change{Config: cfg})
	next := clone(t, cfg)
	next.Proxy.ConnectTimeout = config.Duration(2 * time.Second)
	mustApply(t, st, Change{Config: next})
	kv, _ := st.Get(c, keys.Config())
	if _, err := st.Update(c, keys.Config(), []byte("\x00\x01garbage"), kv.Version); err != nil {
		t.Fatal(err)
	}
	s, err := Load(c, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	if s.Current != nil || s.CurrentErr == nil || s.Base == nil || s.Base.Rev != 2 || s.NextRev != 3 {
		t.Fatalf("state over garbage: current %v err %v base %+v next %d", s.Current, s.CurrentErr, s.Base, s.NextRev)
	}
	rev, cfgNow, _, err := Current(c, st, keys)
	if err != nil || rev.Rev != 2 || cfgNow.Proxy.ConnectTimeout.D() != 2*time.Second {
		t.Fatalf("Current over garbage: %+v %v", rev, err)
	}
	res, err := Rollback(c, st, keys, 2, Change{Reason: "restore after a bad write", Author: "ops@host"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Unchanged || res.Revision.Rev != 3 || res.Repaired == "" || !res.Diff.Empty() {
		t.Fatalf("rollback over garbage: %+v", res)
	}
	if s, _ := Load(c, st, keys); s.Current == nil || s.Current.Rev != 3 {
		t.Fatalf("current after repair: %+v", s.Current)
	}
}

func TestReloadFile(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 0)
	mustApply(t, st, Change{Config: cfg})
	dir := t.TempDir()
	path := filepath.Join(dir, "switchyard.yaml")
	write := func(cfg *config.Config) {
		t.Helper()
		data, err := cfg.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cfg)
	last, err := LoadedFile(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	var rr *ReloadRefusedError
	if _, got, err := ReloadFile(c, st, keys, last, "hup@host"); !errors.As(err, &rr) || rr.Kind != ReloadUnchanged || got != last {
		t.Fatalf("unchanged file: %v", err)
	}

	os.WriteFile(path, []byte("listeners: [}\n"), 0o600)
	if _, _, err := ReloadFile(c, st, keys, last, "hup@host"); err == nil || !strings.Contains(err.Error(), "nothing changed") || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad file: %v", err)
	}
	dropped := clone(t, cfg)
	dropped.Listeners = dropped.Listeners[:1]
	write(dropped)
	var re *RefusedError
	if _, _, err := ReloadFile(c, st, keys, last, "hup@host"); !errors.As(err, &re) || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("destructive file: %v", err)
	}
	if s, _ := Load(c, st, keys); s.Current.Rev != 1 {
		t.Fatalf("a refused reload changed the store: rev %d", s.Current.Rev)
	}
	good := clone(t, cfg)
	good.Clusters[0].ReadRouting.MaxLag = config.Duration(time.Second)
	write(good)
	res, last, err := ReloadFile(c, st, keys, last, "hup@host")
	if err != nil || res.Revision.Rev != 2 || res.Revision.Source != SourceReload || res.Revision.Author != "hup@host" || last.Rev != 2 {
		t.Fatalf("good reload: %+v %+v %v", res, last, err)
	}

	// Another operator applies revision 3; the file (based on 2) must not
	// undo it, whether it was edited or not.
	other := clone(t, good)
	other.Clusters[0].ReadRouting.MaxLag = config.Duration(7 * time.Second)
	mustApply(t, st, Change{Config: other})
	if _, _, err := ReloadFile(c, st, keys, last, "hup@host"); !errors.As(err, &rr) || rr.Kind != ReloadUnchanged || !strings.Contains(err.Error(), "which this file would undo") ||
		!strings.Contains(err.Error(), "max_lag  7s -> 1s") {
		t.Fatalf("unchanged file after another apply: %v", err)
	}
	edited := clone(t, good)
	edited.Clusters[0].ReadRouting.MaxLag = config.Duration(2 * time.Second)
	write(edited)
	if _, _, err := ReloadFile(c, st, keys, last, "hup@host"); !errors.As(err, &rr) || rr.Kind != ReloadStale ||
		!strings.Contains(err.Error(), "revision 3") || !strings.Contains(err.Error(), "not revision 2") || !strings.Contains(err.Error(), "max_lag  7s -> 2s") ||
		!strings.Contains(err.Error(), "switchyard config apply "+path) {
		t.Fatalf("edited file based on an old revision: %v", err)
	}
	if s, _ := Load(c, st, keys); s.Current.Rev != 3 {
		t.Fatalf("a stale reload changed the store: rev %d", s.Current.Rev)
	}
	// Based on the current revision, an edit applies.
	if res, _, err := ReloadFile(c, st, keys, FileLoad{Path: path, SHA256: "old", Rev: 3}, "hup@host"); err != nil || res.Revision.Rev != 4 {
		t.Fatalf("edited file based on the current revision: %+v %v", res, err)
	}
}

// TestReadLiveDrained: the guard's live view carries drained nodes and the
// sessions per node, so removing a drained node without sessions passes.
func TestReadLiveDrained(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	cfg := baseConfig(t, 0)
	mustApply(t, st, Change{Config: cfg})
	cs := topo.ClusterState{Cluster: "main", Primary: "db1", Nodes: []topo.NodeState{{Name: "db1", Serving: true}, {Name: "db2", Serving: true}, {Name: "db3"}}}
	if _, err := topo.PutJSON(c, st, keys.ClusterState("main"), cs, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.PutJSON(c, st, keys.Drained("main"), topo.DrainedNodes{Cluster: "main", Nodes: map[string]topo.DrainRecord{"db3": {}}}, 0); err != nil {
		t.Fatal(err)
	}
	reg := topo.ProxyRegistration{ID: "p1", Sessions: map[string]int{"rw": 2},
		BackendSessions: []topo.BackendSessions{{Cluster: "main", Node: "db1", Sessions: 2}}}
	if _, err := topo.PutJSON(c, st, keys.Proxies()+"p1", reg, 0); err != nil {
		t.Fatal(err)
	}
	live, err := ReadLive(c, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	lc := live.Clusters["main"]
	if len(lc.Drained) != 1 || lc.Drained[0] != "db3" || lc.NodeSessions["db1"] != 2 || lc.NodeSessions["db3"] != 0 {
		t.Fatalf("live %+v", lc)
	}
	two := clone(t, cfg)
	two.Clusters[0].Nodes = two.Clusters[0].Nodes[:2]
	if _, err := Apply(c, st, keys, Change{Config: two, Reason: "db3 retired"}); err != nil {
		t.Fatalf("removing the drained, sessionless db3: %v", err)
	}
}

func TestDecode(t *testing.T) {
	cfg := baseConfig(t, 0)
	good, _ := cfg.Marshal()
	doc := func(r Revision) []byte {
		b, _ := json.Marshal(r)
		return b
	}
	noListeners := clone(t, cfg)
	noListeners.Listeners = nil
	nl, _ := noListeners.Marshal()
	tests := []struct {
		name  string
		value []byte
		want  string // "" = valid
	}{
		{"good", doc(Revision{Rev: 3, SHA256: Hash(good), YAML: string(good)}), ""},
		{"empty", nil, "the stored value is empty"},
		{"blank", []byte(" \n\t"), "the stored value is empty"},
		{"garbage", []byte("\x00\xffxyz"), "not a config revision document (configs are written by `switchyard config apply`): 5 bytes of unrecognised content"},
		{"broken JSON", []byte(`{"rev": 3, "yaml": `), "malformed JSON"},
		{"bare valid YAML", good, "a bare YAML config"},
		{"bare YAML without listeners", nl, "and an invalid one: listeners: at least one listener is required"},
		{"no revision number", doc(Revision{SHA256: Hash(good), YAML: string(good)}), "no revision number"},
		{"hash mismatch", doc(Revision{Rev: 4, SHA256: Hash(nl), YAML: string(good)}), "revision 4: content hash mismatch"},
		{"empty YAML", doc(Revision{Rev: 5, SHA256: Hash(nil)}), "revision 5: the config is empty"},
		{"schema-valid, no listeners", doc(Revision{Rev: 6, SHA256: Hash(nl), YAML: string(nl)}), "revision 6: invalid config: listeners: at least one listener is required"},
		{"unknown key", doc(Revision{Rev: 7, SHA256: Hash([]byte("bogus: 1\n")), YAML: "bogus: 1\n"}), "revision 7: config: line 1: bogus: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, c, err := Decode(tt.value)
			if tt.want == "" {
				if err != nil || c == nil || r.Rev != 3 {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows a secret: %v", err)
			}
		})
	}
}

// TestBootstrapKeepsNewerRevision: restarting `up` with an older file does not
// undo a revision applied with the CLI; the file's difference is reported, and
// BootstrapFromFile makes the file win.
func TestBootstrapKeepsNewerRevision(t *testing.T) {
	st := topo.NewMemory()
	c := ctx(t)
	file := baseConfig(t, 0)
	if _, err := Bootstrap(c, st, keys, file, "boot@host"); err != nil {
		t.Fatal(err)
	}
	next := clone(t, file)
	next.Clusters[0].ReadRouting.MaxLag = config.Duration(3 * time.Second)
	mustApply(t, st, Change{Config: next, Reason: "tighten lag"})

	res, err := Bootstrap(c, st, keys, clone(t, file), "boot@host")
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision.Rev != 2 || !res.Unchanged || !res.FileDiffers || res.Running == nil ||
		res.Running.Cluster("main").ReadRouting.MaxLag.D() != 3*time.Second {
		t.Fatalf("restart with the older file: rev %d unchanged %v differs %v running %+v", res.Revision.Rev, res.Unchanged, res.FileDiffers, res.Running)
	}
	if len(res.Diff.Policies) == 0 {
		t.Fatalf("diff does not show the lag change: %+v", res.Diff)
	}
	res, err = BootstrapFromFile(c, st, keys, clone(t, file), "boot@host")
	if err != nil || res.Revision.Rev != 3 || res.Unchanged {
		t.Fatalf("BootstrapFromFile: %+v, %v", res, err)
	}
}
