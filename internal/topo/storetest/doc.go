// Package storetest is the conformance suite every topo.Store
// implementation must pass: versioned reads and compare-and-swap writes,
// ordered watches, leader election with leader-conditioned writes, and
// leased registrations. It owns no production code and must not be
// imported outside tests.
package storetest
