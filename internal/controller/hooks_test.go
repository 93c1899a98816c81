package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// TestStateHooks: alarms appearing in and leaving the written state, and a
// newly quarantined node, run the hooks that fire on them — once per
// change, nothing for what the term's first state already carried — and
// each run is a hook_ok event in the cluster's log.
func TestStateHooks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := filepath.Join(t.TempDir(), "calls")
	cfg := unreachableConfig(t)
	cfg.Hooks = []config.Hook{{Name: "log", Events: []string{config.HookAlarmRaised, config.HookAlarmCleared, config.HookNodeQuarantined},
		Command: []string{"/bin/sh", "-c", `echo "$SWITCHYARD_EVENT $SWITCHYARD_NODE" >> "$1"`, "sh", out}}}
	cfg.ApplyDefaults()
	st := topo.NewMemory()
	keys := topo.Keys{Prefix: "/t"}
	c, err := New(Options{Config: cfg, Store: st, Keys: keys, ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	leader, err := st.Campaign(ctx, keys.Election(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	tm := newTerm(c, leader)
	tm.hooks = tm.startHooks(ctx)
	defer tm.hooks.close()

	a1 := topo.Alarm{Code: topo.AlarmMissingPrivileges, Node: "node2", Message: "monitor lacks SUPER"}
	a2 := topo.Alarm{Code: topo.AlarmRecoveryFailed, Message: "failover failed"}
	s0 := &topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Alarms: []topo.Alarm{a1}}
	tm.stateHooks(nil, s0) // first state of the term: nothing
	s1 := &topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Alarms: []topo.Alarm{a1, a2}}
	tm.stateHooks(s0, s1)
	a1b := a1
	a1b.Message = "monitor lacks SUPER (refreshed)"
	s2 := &topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Alarms: []topo.Alarm{a1b},
		Quarantined: map[string]string{"node3": "errant GTIDs"}}
	tm.stateHooks(s1, s2) // a1 refreshed: not raised again
	want := "alarm_raised \nalarm_cleared \nnode_quarantined node3\n"
	deadline := time.Now().Add(20 * time.Second)
	var got []byte
	for time.Now().Before(deadline) {
		got, _ = os.ReadFile(out)
		if len(got) >= len(want) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	got, _ = os.ReadFile(out)
	if string(got) != want {
		t.Fatalf("hook calls:\n%s\nwant:\n%s", got, want)
	}
	var evs []topo.Event
	for time.Now().Before(deadline) {
		evs, err = ListEvents(ctx, st, keys, "main", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	ok := 0
	for _, ev := range evs {
		if ev.Kind == topo.EventHook && ev.Code == "hook_ok" && strings.HasPrefix(ev.Message, `hook "log" on `) {
			ok++
		}
	}
	if ok != 3 {
		t.Errorf("%d hook_ok events, want 3: %+v", ok, evs)
	}

	// A new config revision's hooks apply from the next event.
	out2 := out + "2"
	cfg2 := *cfg
	cfg2.Hooks = []config.Hook{{Name: "log2", Events: []string{config.HookAlarmRaised},
		Command: []string{"/bin/sh", "-c", `echo "$SWITCHYARD_EVENT $SWITCHYARD_NODE" >> "$1"`, "sh", out2}}}
	cfg2.ApplyDefaults()
	c.SetConfig(&cfg2)
	s3 := &topo.ClusterState{Cluster: "main", Primary: "node1", Epoch: 3, Alarms: []topo.Alarm{a1b, {Code: topo.AlarmAheadOfPrimary, Node: "node2"}}}
	tm.stateHooks(s2, s3)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(out2); len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b, _ := os.ReadFile(out2); string(b) != "alarm_raised node2\n" {
		t.Errorf("hook of the new config: %q", b)
	}
	if b, _ := os.ReadFile(out); string(b) != want {
		t.Errorf("hook removed by the new config ran again:\n%s", b)
	}
}
