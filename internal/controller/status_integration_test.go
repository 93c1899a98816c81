package controller

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/status"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// statusRow renders `switchyard status` from the store and returns the
// row of node and the whole table.
func statusRow(t *testing.T, st topo.Store, node string) (string, string) {
	t.Helper()
	r, err := status.Collect(context.Background(), st, testKeys, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := status.WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	// The SERVING column's reason has spaces ("no: replication IO thread
	// Connecting"): join its words with "_" so that the row's fields stay
	// the columns.
	from, to := -1, -1
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "NODE ") {
			from, to = strings.Index(l, "SERVING"), strings.Index(l, "READ_ONLY")
		}
		if strings.HasPrefix(l, node+" ") {
			if from > 0 && to > from && len(l) > to {
				l = l[:from] + strings.Join(strings.Fields(l[from:to]), "_") + " " + l[to:]
			}
			return strings.Join(strings.Fields(l), " "), b.String()
		}
	}
	t.Fatalf("no row for %s:\n%s", node, b.String())
	return "", ""
}

// Right after a switchover, status never shows the new primary with the
// read_only and replication source of its last probe as a replica; within
// a few probe rounds it shows it from a fresh probe as a writable primary.
func TestStatusAfterSwitchoverShowsFreshRoles(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	st := topotest.NewStore(t)
	runController(t, testConfig(c), st, "ctl-a")
	waitState(t, st, 15*time.Second, "discovery", discovered)
	// Before: node2 is a replica of node1, probed in that role.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, _ := statusRow(t, st, "node2")
		if strings.HasPrefix(r, "node2 "+c.Nodes[1].Address+" replica yes yes "+c.Nodes[0].Address) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node2 never shown as a serving replica of node1: %s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if req := doSwitchover(t, st, "node2"); req.State != topo.RequestDone {
		t.Fatalf("switchover: %s %s", req.State, req.Message)
	}
	sawFresh := false
	deadline = time.Now().Add(20 * time.Second)
	for !sawFresh {
		r, out := statusRow(t, st, "node2")
		if !strings.HasPrefix(r, "node2 "+c.Nodes[1].Address+" primary ") {
			t.Fatalf("after the switchover node2 is not shown as primary:\n%s", out)
		}
		f := strings.Fields(r)
		// NODE ADDRESS ROLE SERVING READ_ONLY SOURCE ...
		switch ro, src := f[4], f[5]; {
		case ro == "?" && src == "?":
			if !strings.Contains(r, "NOT PROBED since it became primary") {
				t.Fatalf("row hidden without saying why: %s", r)
			}
		case ro == "no" && src == "-" && strings.Contains(r, " ok "):
			sawFresh = true
		case ro == "-" && src == "-" && strings.Contains(r, "UNREACHABLE"):
			// A probe that timed out (a loaded machine): nothing shown.
		default:
			t.Fatalf("new primary shown with a probe of another role (read_only %s, source %s):\n%s", ro, src, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("node2 not shown from a fresh probe within 20s:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The old primary is a replica of node2 once probed.
	deadline = time.Now().Add(20 * time.Second)
	for {
		r, out := statusRow(t, st, "node1")
		f := strings.Fields(r)
		if f[2] == "replica" && f[4] == "yes" && f[5] == c.Nodes[1].Address {
			break
		}
		// A repoint in progress shows replication stopped (IO/SQL No/no)
		// with whatever source the server still has: not the old role.
		if f[4] == "no" || (f[5] != "?" && f[5] != "-" && f[5] != c.Nodes[1].Address && !strings.Contains(r, "No/no")) {
			t.Fatalf("old primary shown with a probe of its old role:\n%s", out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("node1 not shown as a replica of node2 within 20s:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
