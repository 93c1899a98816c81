// Package configstore keeps switchyard.yaml in the topology store as
// numbered revisions and makes every consumer follow them safely.
//
// Layout (topo.Keys): the current revision at <prefix>/config/current, the
// last config.history_limit revisions at <prefix>/config/history/<rev>, and
// each consumer's report (applied revision, alarm) at
// <prefix>/config/consumers/<id> under a lease. A revision (Revision) records
// who applied it, when, why, the SHA-256 of its YAML and whether the
// destructive-change guard was overridden.
//
// Writers (Apply, Rollback, Bootstrap, ReloadFile) validate the config,
// compute the diff against the current revision, run config.Guard against the
// live state (ReadLive) and update the current key only by compare-and-swap
// on the version they read. Readers (Follow) check every value they see —
// document, hash, parse, Validate, guard against the last-known-good — and
// apply only what passes; anything else raises an alarm while the consumer
// keeps serving its last-known-good config.
//
// It does not parse or validate configs itself (package config does), does
// not decide what a consumer does with a config (OnApply does), never logs a
// config's YAML (it may hold secrets), and never writes the current key
// without a compare-and-swap.
package configstore
