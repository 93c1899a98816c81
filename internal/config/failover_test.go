package config

import (
	"testing"
	"time"
)

func TestFailoverDefaults(t *testing.T) {
	c, err := Parse([]byte(`
clusters:
  - name: main
    nodes: [{name: db1, address: "127.0.0.1:3306"}]
  - name: other
    failover: {mode: auto, rejoin_old_primary: false, block_period: 5m}
    nodes: [{name: db2, address: "127.0.0.1:3307"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Clusters[0].Failover
	if f.Mode != FailoverManual || f.ConfirmRounds != 2 || f.BlockPeriod.D() != time.Hour ||
		f.MaxLag.D() != 10*time.Second || f.RecoveryTimeout.D() != 30*time.Second || !f.Rejoin() {
		t.Errorf("failover defaults = %+v (rejoin %v), want manual, 2 rounds, 1h block, 10s max lag, 30s recovery, rejoin", f, f.Rejoin())
	}
	g := c.Clusters[1].Failover
	if g.Mode != FailoverAuto || g.Rejoin() || g.BlockPeriod.D() != 5*time.Minute || g.ConfirmRounds != 2 {
		t.Errorf("set failover values not kept: %+v (rejoin %v)", g, g.Rejoin())
	}
}

func TestFailoverDiff(t *testing.T) {
	old, err := Parse([]byte(`
clusters:
  - name: main
    nodes: [{name: db1, address: "127.0.0.1:3306"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	nw, _ := Parse([]byte(`
clusters:
  - name: main
    failover: {mode: auto}
    nodes: [{name: db1, address: "127.0.0.1:3306"}]
`))
	d := ComputeDiff(old, nw)
	found := false
	for _, p := range d.Policies {
		if p.Name == "clusters[main].failover.mode" {
			found = true
		}
	}
	if !found {
		t.Errorf("diff does not report the failover mode change: %+v", d.Policies)
	}
}

func TestDurabilityDefaultAndDiff(t *testing.T) {
	old, err := Parse([]byte(`
clusters:
  - name: main
    nodes: [{name: db1, address: "127.0.0.1:3306"}, {name: db2, address: "127.0.0.1:3307"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := old.Clusters[0].Durability; d != DurabilityAsync {
		t.Errorf("default durability = %q, want %q", d, DurabilityAsync)
	}
	nw, err := Parse([]byte(`
clusters:
  - name: main
    durability: semi_sync_durable
    nodes: [{name: db1, address: "127.0.0.1:3306"}, {name: db2, address: "127.0.0.1:3307"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := nw.Clusters[0].Durability; d != DurabilitySemiSyncDurable {
		t.Errorf("durability = %q, want %q", d, DurabilitySemiSyncDurable)
	}
	found := false
	for _, p := range ComputeDiff(old, nw).Policies {
		if p.Name == "clusters[main].durability" {
			found = true
		}
	}
	if !found {
		t.Errorf("diff does not report the durability change: %+v", ComputeDiff(old, nw).Policies)
	}
}
