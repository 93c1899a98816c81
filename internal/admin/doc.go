// Package admin serves Switchyard's HTTP admin endpoint: /healthz for
// liveness, /readyz for readiness, /metrics for Prometheus, and /api/status
// with what the topology store holds. It reads state; it never changes
// topology.
package admin
