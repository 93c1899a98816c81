// Package config owns switchyard.yaml: its schema, defaults, strict parsing
// (unknown keys are errors) and validation. Every role (proxy, controller, up,
// operator commands) validates with the same code. It does no I/O beyond
// reading the file and resolving secrets from the environment or files.
package config
