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
