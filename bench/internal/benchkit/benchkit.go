// Package benchkit holds the setup the benchmarks under bench/ share: free
// loopback addresses, polling for a condition, a sandbox for one run, the
// descriptor limit and a process's resident memory. It starts nothing it
// does not stop and reads no flags.
package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// FreeAddrs returns n distinct free 127.0.0.1:port addresses (listened on
// and closed again, so another process may take one meanwhile).
func FreeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// WaitFor polls ok every 20 ms until it returns true, timeout passes (an
// error saying so) or ctx ends (ctx.Err()).
func WaitFor(ctx context.Context, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not reached within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Sandbox starts a sandbox of nodes mariadbd servers (node1 primary) in
// dir/sb, with free addresses for every listener and the embedded etcd,
// the shared datadir template of this user, and servers that die with the
// calling process. Stop it with sandbox.Down(ctx, sb.Dir, true).
func Sandbox(ctx context.Context, dir string, nodes int, semiSync bool) (*sandbox.Cluster, error) {
	addrs, err := FreeAddrs(5)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: filepath.Join(dir, "sb"), Nodes: nodes, SemiSync: semiSync, StopWithParent: true,
		TemplateDir: filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid())),
		ListenerRW:  addrs[0], ListenerRO: addrs[1], AdminAddress: addrs[2], EtcdClientAddress: addrs[3], EtcdPeerAddress: addrs[4]})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return sb, nil
}

// RaiseNoFile raises this process's RLIMIT_NOFILE soft limit to its hard
// limit (children inherit it) and returns the new soft limit.
func RaiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", lim.Max, err)
	}
	return lim.Cur, nil
}

// RSS returns process pid's resident set size in bytes (VmRSS in
// /proc/pid/status).
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS %q: %w", pid, v, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}
