package config

import (
	"testing"
	"time"
)

func TestEffectiveMaxHold(t *testing.T) {
	cases := []struct {
		f        FailoverConfig
		interval time.Duration
		want     time.Duration
	}{
		{FailoverConfig{ConfirmRounds: 2}, time.Second, 5 * time.Second},
		{FailoverConfig{ConfirmRounds: 2}, 3 * time.Second, 15 * time.Second},
		{FailoverConfig{ConfirmRounds: 2}, 0, 5 * time.Second},
		{FailoverConfig{ConfirmRounds: 2, MaxHold: Duration(8 * time.Second)}, 3 * time.Second, 8 * time.Second},
	}
	for _, c := range cases {
		if got := c.f.EffectiveMaxHold(c.interval); got != c.want {
			t.Errorf("%+v at probe.interval %s: %s, want %s", c.f, c.interval, got, c.want)
		}
	}
	// An unset max_hold never fails validation when probe.interval grows.
	c := &Config{Clusters: []Cluster{{Name: "main", Nodes: []Node{{Name: "a", Address: "127.0.0.1:3306"}}}}}
	c.ApplyDefaults()
	c.Probe.Interval = Duration(3 * time.Second)
	v := &validator{}
	validateFailover(v, "clusters[0].failover", c.Clusters[0].Failover, c.Probe.Interval.D())
	if len(v.errs) > 0 {
		t.Fatalf("unset max_hold refused: %v", v.errs)
	}
}
