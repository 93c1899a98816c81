package configstore

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// followMetrics are one Follower's collectors (its `consumer` label). They
// always exist; they are registered only when a registry is given.
type followMetrics struct {
	alarm    prometheus.Gauge
	rejected prometheus.Counter
	applied  prometheus.Gauge
	// integrity counts values refused by their integrity check (also
	// counted in rejected).
	integrity prometheus.Counter
}

func newFollowMetrics(reg prometheus.Registerer, consumer string) (*followMetrics, error) {
	alarm := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_config_alarm",
		Help: "1 while the consumer refuses the current config revision and serves its last-known-good config, else 0.",
	}, []string{"consumer"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_config_rejected_revisions_total",
		Help: "Config values refused by the consumer (empty, unparsable, invalid, destructive, deleted).",
	}, []string{"consumer"})
	applied := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_config_applied_revision",
		Help: "Config revision the consumer serves (0: its initial config, of unknown revision).",
	}, []string{"consumer"})
	integrity := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_config_integrity_failures_total",
		Help: "Config values refused because their MAC did not verify with the integrity keyring (etcd.integrity_key_env/_file): missing, malformed or wrong.",
	}, []string{"consumer"})
	if reg != nil {
		var err error
		if integrity, err = register(reg, integrity); err != nil {
			return nil, err
		}
		if alarm, err = register(reg, alarm); err != nil {
			return nil, err
		}
		if rejected, err = register(reg, rejected); err != nil {
			return nil, err
		}
		if applied, err = register(reg, applied); err != nil {
			return nil, err
		}
	}
	return &followMetrics{
		alarm:     alarm.WithLabelValues(consumer),
		rejected:  rejected.WithLabelValues(consumer),
		applied:   applied.WithLabelValues(consumer),
		integrity: integrity.WithLabelValues(consumer),
	}, nil
}

// register registers c, or returns the collector already registered under
// the same description so several Followers can share a registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("configstore: register metrics: %w", err)
	}
	return c, nil
}
