// Package analysis names what is wrong with a replication cluster and what
// an emergency failover would do, as pure functions of a topology snapshot:
// Analyze turns the controller's last probes of every node, the
// controller's memory of each replica's IO-thread progress and every live
// proxy's reachability reports into typed codes (DeadPrimary,
// UnreachablePrimary, PrimaryOverloaded, PrimaryWritesBlocked,
// ApplicationLoginsRefused, ReplicaLagging, ...), and Plan
// orders and vets failover candidates (GTID position first, then promotion
// rule; must_not, errant GTIDs, stopped SQL threads, a position behind the
// promotion floor, lag and staleness excluded) and estimates the data a
// failover would lose. Once the primary is unreachable, a replica's lag is
// its relay backlog (received, not applied), never the
// Seconds_Behind_Master measured before the death. Errant GTIDs are also
// found per (domain, server_id) against the primary's gtid_binlog_state, so
// a write hidden behind the primary's higher seqnos is seen, and a
// gtid_strict_mode SQL-thread error counts as one.
//
// The rules follow the incidents the project was started from: a busy
// primary is not a dead one, a stopped SQL thread is not evidence of a dead
// primary, and a node that is behind is never promoted without an explicit,
// recorded override.
//
// It must not do I/O, read clocks (Snapshot.Now is given), keep state
// between calls, or decide policy (modes, blocks, maintenance): package
// controller does that with the codes this package returns.
package analysis
