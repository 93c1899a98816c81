// Package status collects what the topology store says about every cluster,
// proxy and controller into one report, and renders it as a table for people
// or JSON for machines. It only reads the store.
package status
