package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

func TestUpBasic(t *testing.T) {
	start := time.Now()
	c := sandboxtest.Start(t, sandbox.Options{})
	t.Logf("3-node sandbox up in %s", time.Since(start))
	for _, st := range c.Status(context.Background()) {
		t.Logf("%+v", st)
	}
}
