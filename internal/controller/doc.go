// Package controller owns the controller role: it registers itself in the
// topology store, campaigns for leadership, and while it is the leader probes
// every node of every cluster, builds each cluster's topology (BuildState, a
// pure function), publishes the cluster state with leader-conditioned
// compare-and-swap writes, and executes operator requests: planned
// switchover (fence, catch up, promote, repoint, bump the epoch — or roll
// back so a writable primary always exists), emergency failover,
// maintenance mode and acknowledgements.
//
// Planned switchover (switchover.go, handoff.go, warm.go) is coordinated
// with every live proxy through the store: the leader announces it
// (topo.SwitchoverProgress, phase switching), waits until every proxy holds
// new statements and no session is busy on the old primary (bounded by
// switchover.drain_timeout, then abort or fail), fences, catches up,
// promotes and publishes the new primary, which releases the held
// statements on it; the candidate's buffer-pool warmth is measured and can
// be raised first by replaying the proxies' hot read sets. Drained nodes
// (drain.go) are never candidates.
//
// Failure handling (observe.go, progress.go, policy.go, failover.go, repair.go): after
// each probe round the leader runs package analysis on the probes, what it
// remembers between rounds (each replica's IO-thread progress, last lag,
// last complete probes) and the proxies' reachability reports, publishes
// the analysis codes, and applies the policy. The first sign of trouble
// starts an extra round at once, and rounds start every
// min(probe.interval, 100ms) while the primary cannot be reached and every
// replica has been quiet for a quarter of failover.silence_bound. A replica's progress is dated
// by its own probe, and between rounds by a read of its replication status
// alone every failover.silence_bound/6 (progress.go; a read that finds every
// replica quiet for a quarter of the bound starts a round), so its silence
// is measured between reads of it, never to the end of a round, and does
// not depend on probe.interval. DeadPrimary is the only code that can lead to a
// failover, and only in failover.mode auto, confirmed over confirm_rounds
// consecutive rounds (rounds at least 150ms apart when the verdict rests on
// a replica's silence, so a pause shorter than failover.silence_bound plus
// that spacing never confirms), outside maintenance, while no block
// (set by any failover for block_period, lifted by ack) or disabled
// automation (set by a failed recovery) applies. Every decision and
// non-decision is written to the cluster's bounded event log (events.go).
// The replicas of the published primary are kept on the heartbeat period
// and slave_net_timeout of failover.silence_bound: every CHANGE MASTER the
// controller issues carries them, and a healthy replica found with other
// values is aligned once, one per round (replicasettings.go).
// A failover refreshes and plans, fences a reachable old primary
// (read_only=ON, sessions killed) or waits until every proxy applied the new
// epoch or lost its lease, stops replication IO threads (without a fence it
// then waits until no proxy in failsafe can still confirm the old primary:
// topo.FailsafeWindow after the stop, or less when every replica's progress
// mark proves it received nothing for long enough before the stop,
// failsafe.go), re-plans, applies
// the candidate's relay log, promotes, proves an application write,
// repoints the replicas (a replica whose replication was stopped before
// the failover is repointed but left stopped) and publishes; a failure
// rolls back and disables automation with an alarm. With an unreachable old
// primary the IO threads of semi-sync replicas are cut by KILL rather than
// stopped (their exit waits for a dump-thread kill on the old primary,
// failover_cut.go), and a new primary that needs no replica attached first
// (asynchronous, or its replicas' cut threads still exiting) is published
// before the replicas are repointed. A manual failover of a
// healthy, reachable primary is refused (a switchover is the tool) unless
// forced with a reason. When the old primary could not be fenced, a fence
// stays pending on it (wakefence.go) and runs the moment a frozen server
// wakes.
//
// The promotion floor (floor.go, topo.PromotionFloor) is the highest GTID
// position the leader ever saw on a cluster's primary, kept in the store
// and raised at most once per probe round: no candidate behind it is
// promoted without --force-stale and a reason, whatever else is down (a
// forced failover resets it and records what was given up). Repair runs in every mode, maintenance
// included: a stray writable node is fenced, a returning old primary is
// rejoined or quarantined, a replica with the wrong source is repointed.
//
// Write-path health and durability (health.go, durability.go): every round
// the leader writes a bounded heartbeat row on the published primary and
// logs in as the application accounts, which give PrimaryWritesBlocked and
// ApplicationLoginsRefused (events when they start and end, gauges; never
// a failover, and never seen by failure detection), and it enforces
// clusters[].durability: semi-sync settings checked every round, re-applied
// with a durability_drift alarm when they drift, applied after every
// promotion.
//
// Hooks (hooks.go, package hooks): each term of leadership holds one
// hooks.Dispatcher, so only the leader notifies the configured commands
// and URLs — failover and switchover start and end, a dead primary left to
// an operator (with the plan `switchyard failover` would run), alarms
// raised and cleared (from the difference between two written states),
// quarantined nodes. Notifying never blocks; only a veto hook, run after a
// failover's plan or a switchover's checks and bounded by its timeout, can
// refuse the action before it changes anything.
//
// It must not act without leadership: every store write goes through the
// Leader, and all leader work stops when leadership is lost (a failover
// stops at the next step; a leader-conditioned write precedes promotion;
// the next leader finishes or undoes a failover left half-done). It never
// makes a node writable except the one it promotes, never resets a replica
// that holds transactions the primary lacks, never routes client traffic,
// and never logs secrets. SQL is spoken only through package probe, except
// in warm.go: reading buffer-pool status (monitor account) and replaying
// sampled read statements on a candidate (as the application user that ran
// them, read-only statements only).
package controller
