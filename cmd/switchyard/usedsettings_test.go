package main

import (
	"slices"
	"testing"
)

// TestUsedSettings: a process on etcd.endpoints (no embedded etcd) is not
// told that an etcd.embedded change waits for its restart; one running the
// embedded etcd is.
func TestUsedSettings(t *testing.T) {
	pending := []string{"etcd.embedded.data_dir", "etcd.endpoints", "listener rw changed", "etcd.embedded.client_address"}
	if got := usedSettings(slices.Clone(pending), true); !slices.Equal(got, pending) {
		t.Fatalf("with the embedded etcd: %v, want %v", got, pending)
	}
	if got, want := usedSettings(slices.Clone(pending), false), []string{"etcd.endpoints", "listener rw changed"}; !slices.Equal(got, want) {
		t.Fatalf("without the embedded etcd: %v, want %v", got, want)
	}
}
