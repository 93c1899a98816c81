package topo_test

import (
	"testing"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/storetest"
)

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) topo.Store {
		s := topo.NewMemory()
		t.Cleanup(func() { s.Close() })
		return s
	})
}
