// Package config owns switchyard.yaml: its schema and documented defaults
// (config.go), strict parsing that rejects unknown keys and names the field
// and line of every YAML problem (parse.go), cross-field validation that names
// the field path of every problem (validate.go), resolving secrets from the
// environment or files (secrets.go), and comparing two configs: routes, the
// diff an operator reviews (diff.go) and the destructive-change guard
// (guard.go), both pure functions of the configs and the live state passed
// in. Every role (proxy, controller, up, operator commands such as
// `switchyard config validate`) parses and validates with this same code.
//
// It does no I/O beyond reading the config file and resolving secrets, starts
// nothing, connects to nothing, and never puts a secret into an error.
package config
