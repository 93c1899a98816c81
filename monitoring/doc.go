// Package monitoring holds what operators load into their monitoring:
// switchyard.rules.yml (Prometheus alerting rules), tests/ (promtool unit
// tests of the rules on series recorded from a real primary kill) and
// grafana-dashboard.json. The package has no code; its tests run promtool
// on the rules and check that the test input is the recorded series.
package monitoring
