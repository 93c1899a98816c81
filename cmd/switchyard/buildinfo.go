package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is switchyard_build_info: always 1, with the binary's version
// (set with -ldflags "-X main.version=...", else "dev") and the Go version
// it was built with, after the <name>_build_info convention of Prometheus
// exporters.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_build_info",
		Help: "Always 1; the labels say which build runs: version (switchyard version) and goversion (the Go release it was built with).",
	}, []string{"version", "goversion"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return g
}
