// Package controller owns the controller role: it registers itself in the
// topology store, campaigns for leadership, and while it is the leader probes
// every node of every cluster, builds each cluster's topology (BuildState, a
// pure function), publishes the cluster state with leader-conditioned
// compare-and-swap writes, and executes operator requests such as a planned
// switchover (fence, catch up, promote, repoint, bump the epoch — or roll
// back so a writable primary always exists).
//
// It must not act without leadership: every store write goes through the
// Leader, and all leader work stops when leadership is lost. It never fails
// over on its own (failover and analysis come later), never routes client
// traffic, and never logs secrets. SQL is spoken only through package probe.
package controller
