package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdCluster is a cluster of real etcd members (Debian's etcd-server
// binary) on loopback ports, each with its own data directory; members are
// killed (SIGKILL, by pid) and restarted on the same data to take quorum
// away and give it back.
type etcdCluster struct {
	t       *testing.T
	bin     string
	initial string
	members []*etcdMember
}

type etcdMember struct {
	name, dir, client, peer string
	mu                      sync.Mutex
	cmd                     *exec.Cmd
	exited                  chan struct{}
}

// startEtcdCluster starts n members and waits until the cluster answers.
// It skips the test when the etcd binary is missing.
func startEtcdCluster(t *testing.T, n int) *etcdCluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd binary not found (Debian: apt-get install -y etcd-server etcd-client): the store-outage scenarios need a real etcd cluster")
	}
	dir := t.TempDir()
	c := &etcdCluster{t: t, bin: bin}
	var lns []net.Listener
	var initial []string
	for i := range n {
		var addrs [2]string
		for j := range addrs {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lns = append(lns, ln)
			addrs[j] = ln.Addr().String()
		}
		m := &etcdMember{name: fmt.Sprintf("m%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("m%d", i+1)), client: addrs[0], peer: addrs[1]}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	for _, ln := range lns {
		ln.Close()
	}
	c.initial = strings.Join(initial, ",")
	t.Cleanup(func() {
		for i := range c.members {
			c.kill(i)
		}
	})
	for i := range c.members {
		c.start(i)
	}
	c.waitHealthy(30 * time.Second)
	return c
}

// endpoints are every member's client URL.
func (c *etcdCluster) endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = "http://" + m.client
	}
	return out
}

// start runs member i (again) on its data directory.
func (c *etcdCluster) start(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return
	}
	logf, err := os.OpenFile(m.dir+".log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
		"--listen-peer-urls", "http://"+m.peer, "--initial-advertise-peer-urls", "http://"+m.peer,
		"--initial-cluster", c.initial, "--initial-cluster-state", "new", "--initial-cluster-token", "switchyard-e2e",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("start etcd member %s: %v", m.name, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	exited := m.exited
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
}

// kill stops member i with SIGKILL (by its pid) and waits for it to exit.
func (c *etcdCluster) kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = syscall.Kill(m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
}

// waitHealthy waits until a linearizable read succeeds (a quorum is up).
func (c *etcdCluster) waitHealthy(timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "/health-check")
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("etcd cluster not healthy after %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
