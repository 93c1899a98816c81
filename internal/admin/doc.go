// Package admin serves Switchyard's HTTP admin endpoint: /healthz for
// liveness, /readyz for readiness (per listener and per cluster too),
// /primary and /replica for load balancers (health.go), /metrics for
// Prometheus, and /api/status with what the topology store holds. It reads state; it never changes
// topology.
package admin
