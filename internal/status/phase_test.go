package status

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// The JSON phase says what the text says: no primary, primary dead; the
// stored phase stays readable as state_phase.
func TestStatusJSONPhaseAgreesWithText(t *testing.T) {
	ctx := context.Background()
	keys := topo.Keys{Prefix: "/sy"}
	for _, c := range []struct {
		name, state, phase, text string
		absent                   string // a line the table must not have
	}{
		{"no primary", `{"cluster":"main","primary":"","epoch":4,"phase":"stable","nodes":[{"name":"n1"}]}`, PhaseNoPrimary, "NO PRIMARY (writes refused)", ""},
		{"primary dead", `{"cluster":"main","primary":"n1","epoch":4,"phase":"stable","nodes":[{"name":"n1"}],"analysis":[{"code":"DeadPrimary","node":"n1"}]}`,
			PhasePrimaryDead, "PRIMARY DEAD (writes refused until a failover", ""},
		{"all read_only", `{"cluster":"main","primary":"","epoch":4,"phase":"stable","nodes":[{"name":"n1"}],"analysis":[{"code":"NoPrimary"},{"code":"NoWritablePrimary","node":"n1","detail":"every reachable node is read_only; n1 is the replication source"}]}`,
			PhaseNoPrimary, "NO WRITABLE PRIMARY: every reachable node is read_only; n1 is the replication source", ""},
		{"primary read-only", `{"cluster":"main","primary":"n1","epoch":4,"phase":"stable","nodes":[{"name":"n1"}],"analysis":[{"code":"PrimaryReadOnly","node":"n1"}]}`,
			PhasePrimaryReadOnly, "PRIMARY READ-ONLY (writes fail with error 1290", ""},
		{"stable", `{"cluster":"main","primary":"n1","epoch":4,"phase":"stable","nodes":[{"name":"n1"}]}`, topo.PhaseStable, "phase: stable", ""},
		{"primary lost, manual mode", `{"cluster":"main","primary":"n1","epoch":4,"phase":"stable","nodes":[{"name":"n1"},{"name":"n2"}],"analysis":[{"code":"DeadPrimary","node":"n1"}],` +
			`"auto_failover":{"ready":false,"candidate":"n2","class":"manual","reason":"failover.mode is manual: run switchyard failover --cluster main"},` +
			`"primary_lost":{"node":"n1","epoch":4,"since":"2026-01-02T03:04:05Z","rounds":3,"class":"manual","reason":"failover.mode is manual: run switchyard failover --cluster main","detail":"connect refused"}}`,
			PhasePrimaryDead, "PRIMARY LOST: n1 dead since 2026-01-02T03:04:05Z", ""},
		{"auto failover not ready", `{"cluster":"main","primary":"n1","epoch":4,"phase":"stable","nodes":[{"name":"n1"}],` +
			`"auto_failover":{"ready":false,"class":"no_candidate","reason":"no replica could be promoted: n2 lags"}}`,
			topo.PhaseStable, "automatic failover: NOT READY (no_candidate): no replica could be promoted: n2 lags", ""},
		{"auto failover ready", `{"cluster":"main","primary":"n1","epoch":4,"phase":"stable","nodes":[{"name":"n1"},{"name":"n2"}],"auto_failover":{"ready":true,"candidate":"n2"}}`,
			topo.PhaseStable, "automatic failover: ready (candidate n2)", ""},
		{"primary lost of an older epoch", `{"cluster":"main","primary":"n2","epoch":5,"phase":"stable","nodes":[{"name":"n1"},{"name":"n2"}],` +
			`"primary_lost":{"node":"n1","epoch":4,"since":"2026-01-02T03:04:05Z","rounds":3,"class":"manual","reason":"x"}}`,
			topo.PhaseStable, "phase: stable", "PRIMARY LOST"},
		{"failover", `{"cluster":"main","primary":"","old_primary":"n1","target":"n2","epoch":5,"phase":"failover","nodes":[{"name":"n1"},{"name":"n2"}]}`,
			topo.PhaseFailover, "phase: failover", ""},
		// An analysis written before a failover's publication, with no
		// round since (the leader died): the old primary's DeadPrimary
		// does not make the new primary look dead.
		{"old primary's finding after a failover", `{"cluster":"main","primary":"n2","epoch":5,"phase":"stable","nodes":[{"name":"n1"},{"name":"n2"}],"analysis":[{"code":"DeadPrimary","node":"n1"}]}`,
			topo.PhaseStable, "phase: stable", "PRIMARY DEAD"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := topo.NewMemory()
			put(t, st, keys.ClusterState("main"), []byte(c.state))
			r, err := Collect(ctx, st, keys, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := WriteJSON(&b, r); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Clusters []struct {
					Phase      string `json:"phase"`
					StatePhase string `json:"state_phase"`
					Epoch      int64  `json:"epoch"`
				} `json:"clusters"`
				CollectedAt time.Time `json:"collected_at"`
			}
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatalf("%v\n%s", err, b.String())
			}
			var stored topo.ClusterState
			_ = json.Unmarshal([]byte(c.state), &stored)
			if len(doc.Clusters) != 1 || doc.Clusters[0].Phase != c.phase || doc.Clusters[0].StatePhase != stored.Phase ||
				doc.Clusters[0].Epoch != stored.Epoch || doc.CollectedAt.IsZero() {
				t.Fatalf("JSON clusters %+v collected_at %v, want phase %q, state_phase %q, epoch %d:\n%s",
					doc.Clusters, doc.CollectedAt, c.phase, stored.Phase, stored.Epoch, b.String())
			}
			// The JSON decodes back into a Report.
			var back Report
			if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Clusters) != 1 || back.Clusters[0].Phase != c.phase {
				t.Fatalf("decode back: %v %+v", err, back.Clusters)
			}
			b.Reset()
			if err := WriteTable(&b, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), c.text) {
				t.Fatalf("table lacks %q:\n%s", c.text, b.String())
			}
			if c.absent != "" && strings.Contains(b.String(), c.absent) {
				t.Fatalf("table has %q:\n%s", c.absent, b.String())
			}
		})
	}
}

// Cluster and node maintenance show with their reason and expiry; config
// changes waiting for a restart show per process and on the proxy's row.
func TestStatusMaintenanceAndPendingRestart(t *testing.T) {
	ctx := context.Background()
	keys := topo.Keys{Prefix: "/sy"}
	now := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	until := now.Add(30 * time.Minute)
	expired := now.Add(-time.Minute)
	st := topo.NewMemory()
	cs := topo.ClusterState{Cluster: "main", Primary: "n1", Epoch: 2, Phase: topo.PhaseStable,
		Maintenance: &topo.Maintenance{Reason: "kernel upgrade", Since: now.Add(-time.Hour), By: "ops@h", Until: &until},
		Nodes:       []topo.NodeState{{Name: "n1", Role: topo.RolePrimary}, {Name: "n2", Role: topo.RoleReplica}, {Name: "n3", Role: topo.RoleReplica}}}
	b, _ := json.Marshal(cs)
	put(t, st, keys.ClusterState("main"), b)
	b, _ = json.Marshal(topo.DrainedNodes{Cluster: "main", Nodes: map[string]topo.DrainRecord{
		"n2": {Since: now.Add(-10 * time.Minute), By: "ops@h", Reason: "disk swap", Maintenance: true, Until: &expired},
		"n3": {Since: now.Add(-5 * time.Minute), Reason: "memory test", Maintenance: true},
	}})
	put(t, st, keys.Drained("main"), b)
	b, _ = json.Marshal(configstore.Status{ID: "p1", Name: "proxy", AppliedRev: 4, PendingRestart: []string{"listener main-rw changed", "admin.address"}})
	put(t, st, keys.ConfigConsumer("proxy", "p1"), b)
	b, _ = json.Marshal(configstore.Status{ID: "p1", Name: "controller", AppliedRev: 4, PendingRestart: []string{"admin.address"}})
	put(t, st, keys.ConfigConsumer("controller", "p1"), b)
	b, _ = json.Marshal(topo.ProxyRegistration{ID: "p1", Listeners: []string{"main-rw"}, Epochs: map[string]int64{"main": 2}})
	put(t, st, keys.Proxy("p1"), b)
	r, err := Collect(ctx, st, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"MAINTENANCE on since 2026-03-04T09:00:00Z by ops@h, until 2026-03-04T10:30:00Z (30m0s left): kernel upgrade",
		"MAINTENANCE node n2 since 2026-03-04T09:50:00Z (10m0s ago), expired at 2026-03-04T09:59:00Z",
		"disk swap",
		"MAINTENANCE node n3 since 2026-03-04T09:55:00Z (5m0s ago), until turned off",
		"memory test",
		"no: maintenance",
		"PENDING RESTART proxy p1 (rev 4 applied): listener main-rw changed, admin.address; these take effect only when this process restarts",
		"PENDING RESTART controller p1 (rev 4 applied): admin.address",
		"PENDING RESTART: listener main-rw changed, admin.address",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := WriteJSON(&out, r); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Clusters []struct {
			Maintenance *topo.Maintenance `json:"maintenance"`
		} `json:"clusters"`
		Drained map[string]map[string]topo.DrainRecord `json:"drained"`
		Config  struct {
			Consumers []configstore.Status `json:"consumers"`
		} `json:"config"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if m := doc.Clusters[0].Maintenance; m == nil || m.Until == nil || !m.Until.Equal(until) || m.Reason != "kernel upgrade" {
		t.Errorf("JSON cluster maintenance = %+v", m)
	}
	if n := doc.Drained["main"]["n2"]; !n.Maintenance || n.Until == nil || n.Reason != "disk swap" {
		t.Errorf("JSON node maintenance = %+v", n)
	}
	pending := 0
	for _, c := range doc.Config.Consumers {
		pending += len(c.PendingRestart)
	}
	if pending != 3 {
		t.Errorf("JSON consumers' pending_restart = %+v, want 3 entries", doc.Config.Consumers)
	}
}
