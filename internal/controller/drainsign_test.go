package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestControllerIgnoresForgedDrain: with an integrity keyring the drained
// nodes are written signed (setDrained) and the controller's view keeps
// the last verified document when one without a valid MAC replaces it
// (a forged undrain, a forged drain), counting each once; the next signed
// write replaces the forgery.
func TestControllerIgnoresForgedDrain(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("drain-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	st := topotest.NewStore(t)
	c, err := New(Options{Config: unreachableConfig(t), Store: st, Keys: testKeys, ID: "ctl-a", Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := setDrained(ctx, st, testKeys, "main", "node2", &topo.DrainRecord{Since: time.Now().UTC(), By: "op"}); err != nil {
		t.Fatal(err)
	}
	kv, err := st.Get(ctx, testKeys.Drained("main"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Verify(topo.IntegrityDrainedNodes, kv.Value); err != nil {
		t.Fatalf("the drained nodes document is not signed: %v", err)
	}
	d, _, err := c.drained(ctx, "main")
	if err != nil || len(d.Nodes) != 1 || d.Nodes["node2"].By != "op" {
		t.Fatalf("signed drain: %+v %v", d, err)
	}
	for i, forged := range []topo.DrainedNodes{
		{Cluster: "main"}, // undrain
		{Cluster: "main", Nodes: map[string]topo.DrainRecord{"node1": {}, "node2": {}, "node3": {}}},
	} {
		raw, _ := json.Marshal(forged)
		kv, err := st.Get(ctx, testKeys.Drained("main"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Update(ctx, testKeys.Drained("main"), raw, kv.Version); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			d, _, err := c.drained(ctx, "main")
			if err != nil || len(d.Nodes) != 1 || d.Nodes["node2"].By != "op" {
				t.Fatalf("forgery %d: the controller sees %+v %v; want the signed drain of node2", i, d, err)
			}
		}
		var m dto.Metric
		if err := c.metrics.drainedRejected.WithLabelValues("main").Write(&m); err != nil {
			t.Fatal(err)
		}
		if n := m.GetCounter().GetValue(); n != float64(i+1) {
			t.Fatalf("forgery %d: drained_rejected %v; want %d (once per document)", i, n, i+1)
		}
	}
	// An undrain replaces the forgery with a signed document.
	if err := setDrained(ctx, st, testKeys, "main", "node2", nil); err != nil {
		t.Fatal(err)
	}
	d, _, err = c.drained(ctx, "main")
	if err != nil || len(d.Nodes) != 0 {
		t.Fatalf("after a signed undrain: %+v %v", d, err)
	}
}
