// Package topotest starts real (embedded) etcd servers for tests and hands
// out topo.Store values connected to them. It owns nothing in production
// and must not be imported by non-test code.
package topotest
