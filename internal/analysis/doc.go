// Package analysis names what is wrong with a replication cluster and what
// an emergency failover would do, as pure functions of a topology snapshot:
// Analyze turns the controller's last probes of every node, the
// controller's memory of each replica's IO-thread progress and every live
// proxy's reachability reports into typed codes (DeadPrimary,
// UnreachablePrimary, PrimaryOverloaded, PrimaryWritesBlocked,
// ApplicationLoginsRefused, ReplicaLagging, ...), and Plan
// orders and vets failover candidates (GTID position first, then promotion
// rule; must_not, errant GTIDs, stopped SQL threads, lag and staleness
// excluded) and estimates the data a failover would lose.
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
