package sandboxtest_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// TestStartAndCleanup starts a 2-node sandbox in a subtest, uses it, and
// checks that the subtest's cleanup stopped every mariadbd and removed the
// sockets.
func TestStartAndCleanup(t *testing.T) {
	var pids []int
	var sockets []string
	skipped := true
	t.Run("inner", func(t *testing.T) {
		c := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
		skipped = false
		for i, n := range c.Nodes {
			if len(n.Socket) > 107 {
				t.Errorf("%s socket path is %d bytes, over the unix limit", n.Name, len(n.Socket))
			}
			db := sandboxtest.DB(t, c, i, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
			var id int
			if err := db.QueryRow("SELECT @@server_id").Scan(&id); err != nil {
				t.Fatal(err)
			}
			if id != i+1 {
				t.Errorf("%s: server_id %d, want %d", n.Name, id, i+1)
			}
			pids = append(pids, c.PID(i))
			sockets = append(sockets, n.Socket)
		}
		for _, a := range []string{c.ListenerRW, c.ListenerRO, c.AdminAddress, c.EtcdClientAddress, c.EtcdPeerAddress} {
			for _, n := range c.Nodes {
				if a == n.Address || a == "" {
					t.Errorf("config address %q empty or equal to a node's", a)
				}
			}
			if strings.HasSuffix(a, ":6446") || strings.HasSuffix(a, ":2379") {
				t.Errorf("address %s is a well-known default; tests must use free ports", a)
			}
		}
	})
	if skipped {
		t.Skip("mariadbd not available")
	}
	for _, p := range pids {
		if p == 0 {
			t.Fatal("a node had no pid while running")
		}
		if data, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline"); err == nil && len(data) > 0 {
			t.Errorf("pid %d still running after cleanup: %q", p, data)
		}
	}
	for _, s := range sockets {
		if _, err := os.Stat(s); err == nil {
			t.Errorf("socket %s left behind", s)
		}
	}
}

func TestFreeAddr(t *testing.T) {
	a := sandboxtest.FreeAddr(t)
	if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
		t.Fatalf("FreeAddr = %q", a)
	}
}
