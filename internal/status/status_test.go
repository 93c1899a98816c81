package status

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func put(t *testing.T, st topo.Store, key string, v []byte) {
	t.Helper()
	if _, err := st.Create(context.Background(), key, v); err != nil {
		t.Fatal(err)
	}
}

// An invalid cluster state is reported, not an error; a proxy's state
// alarm and an epoch below what a proxy acknowledged are shown.
func TestCollectFlagsInvalidState(t *testing.T) {
	ctx := context.Background()
	keys := topo.Keys{Prefix: "/sy"}
	for _, c := range []struct {
		name, state, want string
	}{
		{"garbage", "{nope", "does not decode"},
		{"a primary-dropping write", `{"cluster":"main","primary":"","epoch":8,"phase":"stable","nodes":[]}`, "no nodes"},
		{"epoch below a proxy's", `{"cluster":"main","primary":"n1","epoch":3,"phase":"stable","nodes":[{"name":"n1"}]}`, "lower than epoch 7 acknowledged by proxy p1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := topo.NewMemory()
			put(t, st, keys.ClusterState("main"), []byte(c.state))
			reg, _ := json.Marshal(topo.ProxyRegistration{ID: "p1", Epochs: map[string]int64{"main": 7},
				StateAlarms: map[string]string{"main": "invalid cluster state: something"},
				Failsafe: map[string]topo.FailsafePeriod{"main": {Primary: "n1", Epoch: 7, Since: time.Date(2026, 1, 1, 11, 48, 24, 0, time.UTC),
					Until: time.Date(2026, 1, 1, 11, 48, 31, 0, time.UTC), Ended: "registered again and re-read the topology"}}})
			put(t, st, keys.Proxy("p1"), reg)
			r, err := Collect(ctx, st, keys, time.Now())
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			if !strings.Contains(r.StateProblems["main"], c.want) {
				t.Fatalf("StateProblems = %v, want %q", r.StateProblems, c.want)
			}
			var b bytes.Buffer
			if err := WriteTable(&b, r); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"STATE INVALID: ", "STATE ALARM main: invalid cluster state: something",
				"failsafe main 11:48:24–11:48:31 (7s) on n1: registered again and re-read the topology"} {
				if !strings.Contains(b.String(), w) {
					t.Fatalf("table lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
	// A valid state has no problem.
	st := topo.NewMemory()
	put(t, st, keys.ClusterState("main"), []byte(`{"cluster":"main","primary":"n1","epoch":7,"phase":"stable","nodes":[{"name":"n1"}]}`))
	r, err := Collect(ctx, st, keys, time.Now())
	if err != nil || len(r.StateProblems) != 0 {
		t.Fatalf("valid state: problems %v, err %v", r.StateProblems, err)
	}
}

// After refused failovers the plan is printed once (the newest), the other
// alarms and events on one line each, and identical events folded into one
// line with their count.
func TestWritePolicyPlanOnce(t *testing.T) {
	plan := "candidates: " + strings.Repeat("node2 rejected: behind the promotion floor; ", 10) + "floor 0-1-100"
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cs := topo.ClusterState{Cluster: "main", Alarms: []topo.Alarm{
		{Code: topo.AlarmRecoveryFailed, Message: "auto failover of node1 refused at x: " + plan, Since: at}}}
	r := &Report{CollectedAt: at.Add(time.Minute), Events: map[string][]topo.Event{}}
	for i := 0; i < 8; i++ {
		r.Events["main"] = append(r.Events["main"], topo.Event{Kind: topo.EventRecovery, Code: "failover_refused",
			Message: "auto failover refused: " + plan, At: at.Add(time.Duration(i) * time.Second)})
	}
	r.Events["main"] = append(r.Events["main"], topo.Event{Kind: topo.EventAlarm, Code: "x", Message: "short", At: at.Add(9 * time.Second)})
	var b bytes.Buffer
	writePolicy(&b, r, cs)
	out := b.String()
	if n := strings.Count(out, plan); n != 1 {
		t.Fatalf("plan printed %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "(8 times, first at 12:00:00.000)") || !strings.Contains(out, "12:00:07.000") {
		t.Fatalf("repeated events not folded into their newest:\n%s", out)
	}
	if lines := strings.Count(out, "\n"); lines != 4 {
		t.Fatalf("%d lines, want 4 (alarm, header, 2 events):\n%s", lines, out)
	}
	if !strings.Contains(out, "ALARM recovery_failed") || !strings.Contains(out, "shortened") {
		t.Fatalf("alarm not shortened:\n%s", out)
	}
	// Alone, a long alarm is printed in full.
	b.Reset()
	writePolicy(&b, &Report{CollectedAt: at}, cs)
	if !strings.Contains(b.String(), plan) {
		t.Fatalf("a lone alarm lost its plan:\n%s", b.String())
	}
}
