// Package admin serves Switchyard's HTTP admin endpoint: /healthz for
// liveness, /readyz for readiness (per listener and per cluster too),
// /primary and /replica for load balancers (health.go), /metrics for
// Prometheus, and the admin API v1 under /api/v1 (api.go; described in
// api/openapi.yaml): status, events and their stream, switchover,
// failover, drain, maintenance, ack, the config kept in etcd and the
// proxy's sessions, behind bearer tokens with roles, over HTTPS when
// admin.tls is set. The API's actions call the same functions as the
// command line.
package admin
