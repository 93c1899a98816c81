// Package topo owns the topology store: a small versioned key-value interface
// (get, compare-and-swap, watch, leader election, leased registrations) with an
// etcd implementation for production, an in-memory one for unit tests, and the
// typed documents stored in it (cluster state, proxy registrations, operator
// requests). It knows nothing of MySQL and makes no routing decisions.
package topo
