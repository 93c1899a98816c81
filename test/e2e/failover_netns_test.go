package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// netLab is a sandbox.NetLab bound to a test: every sandbox node in its
// own network namespace, joined by a bridge in the host namespace, where
// the controller, the proxies, etcd and the test run (see sandbox.NetLab
// for the layout). Partitions are made inside a node's namespace only:
// cutFromHost cuts it off from the controller and the proxies (which share
// the host address) but not from the other nodes; isolate cuts it off from
// everything. Any failure fails the test; the lab is removed at cleanup.
type netLab struct {
	t *testing.T
	*sandbox.NetLab
}

// newNetLab builds the lab for sb (see sandbox.NewNetLab), or skips the
// test where network namespaces cannot be used (root and iproute2 needed),
// unless SWITCHYARD_REQUIRE_NETNS=1.
func newNetLab(t *testing.T, sb *sandbox.Cluster) *netLab {
	t.Helper()
	if why := sandbox.NetNSUnavailable(); why != "" {
		if os.Getenv("SWITCHYARD_REQUIRE_NETNS") == "1" {
			t.Fatalf("netns: %s (SWITCHYARD_REQUIRE_NETNS=1 requires it)", why)
		}
		t.Skipf("skipping: %s; this scenario needs root and iproute2 (ip netns)", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nl, err := sandbox.NewNetLab(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Teardown)
	t.Logf("netns lab: host %s, nodes %s, %s, %s", nl.HostIP(), nl.Addr(0), nl.Addr(1), nl.Addr(2))
	return &netLab{t: t, NetLab: nl}
}

// addr is node i's address in the lab.
func (l *netLab) addr(i int) string { return l.Addr(i) }

// cutFromHost drops every packet node i sends to the host address.
func (l *netLab) cutFromHost(i int) {
	l.t.Helper()
	if err := l.CutFromHost(i); err != nil {
		l.t.Fatal(err)
	}
}

// isolate takes node i's link down: it reaches nobody and nobody reaches it.
func (l *netLab) isolate(i int) {
	l.t.Helper()
	if err := l.Isolate(i); err != nil {
		l.t.Fatal(err)
	}
}

// heal undoes cutFromHost and isolate for node i.
func (l *netLab) heal(i int) {
	l.t.Helper()
	if err := l.Heal(i); err != nil {
		l.t.Fatal(err)
	}
}
