package proxy

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// With an integrity keyring, a drained nodes document written into etcd
// without the key (a forged drain, a forged undrain) or its deletion does
// not change the proxy's drained set and is counted; a signed one does.
func TestFollowIgnoresForgedDrain(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("drain-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	topo.SetIntegrity(kr)
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	cfg := &config.Config{
		Clusters: []config.Cluster{{Name: "c", Nodes: []config.Node{{Name: "n1", Address: "127.0.0.1:1"},
			{Name: "n2", Address: "127.0.0.1:2"}, {Name: "n3", Address: "127.0.0.1:3"}}}},
		Listeners: []config.Listener{{Name: "ro", Address: "127.0.0.1:0", Cluster: "c", Role: "replica"}},
	}
	cfg.ApplyDefaults()
	reg := prometheus.NewRegistry()
	srv, err := New(Options{Config: cfg, ID: "p1", Log: testLogger(t), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st := topotest.NewStore(t)
	keys := topo.Keys{Prefix: "/sy"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = Follow(ctx, st, keys, srv); close(done) }()
	defer func() { cancel(); <-done }()
	drained := func() []string {
		cr := srv.route("c")
		cr.mu.Lock()
		defer cr.mu.Unlock()
		return slices.Sorted(maps.Keys(cr.drained))
	}
	rejected := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "switchyard_drained_rejected_total" {
				var n float64
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
				return n
			}
		}
		return 0
	}
	key := keys.Drained("c")
	put := func(b []byte) {
		t.Helper()
		kv, err := st.Get(ctx, key)
		if err != nil {
			if _, err := st.Create(ctx, key, b); err != nil {
				t.Fatal(err)
			}
			return
		}
		if _, err := st.Update(ctx, key, b, kv.Version); err != nil {
			t.Fatal(err)
		}
	}
	doc := func(nodes ...string) topo.DrainedNodes {
		d := topo.DrainedNodes{Cluster: "c", Nodes: map[string]topo.DrainRecord{}}
		for _, n := range nodes {
			d.Nodes[n] = topo.DrainRecord{Since: time.Now().UTC(), By: "op"}
		}
		return d
	}
	signed := func(nodes ...string) []byte {
		d := doc(nodes...)
		b, err := topo.EncodeDrained(&d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unsigned := func(nodes ...string) []byte {
		b, _ := json.Marshal(doc(nodes...))
		return b
	}

	put(signed("n2"))
	waitFor(t, "signed drain of n2", func() bool { return slices.Equal(drained(), []string{"n2"}) })

	// Forged undrain, forged drain of every replica, deletion: none applies.
	for i, forge := range []func(){
		func() { put(unsigned()) },
		func() { put(unsigned("n2", "n3")) },
		func() {
			if err := st.Delete(ctx, key, 0); err != nil {
				t.Fatal(err)
			}
		},
	} {
		forge()
		waitFor(t, "forgery counted", func() bool { return rejected() >= float64(i+1) })
		if d := drained(); !slices.Equal(d, []string{"n2"}) {
			t.Fatalf("forgery %d changed the drained set to %v", i, d)
		}
	}

	// A signed undrain applies.
	put(signed())
	waitFor(t, "signed undrain", func() bool { return len(drained()) == 0 })
}
