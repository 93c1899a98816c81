package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// netLab puts every sandbox node in its own network namespace, joined by a
// bridge in the host namespace:
//
//	host (controller, proxies, etcd, test) 10.213.N.1 on bridge sy<id>b
//	node i  in netns sy<id>n<i>            10.213.N.(i+2) on veth sy<id>p<i>
//
// The subnet is private (10.213.N.0/24, N chosen so that no address of the
// host is in it) and every link, namespace and address is created here and
// removed at cleanup. Partitions are made inside a node's namespace only:
// a blackhole route to the host address cuts it off from the controller and
// the proxies (which share the host address) but not from the other nodes;
// taking its veth down cuts it off from everything.
type netLab struct {
	t      *testing.T
	sb     *sandbox.Cluster
	id     string
	subnet string // "10.213.N"
	bridge string
}

// netnsUnavailable says why network namespaces cannot be used here ("" when
// they can): root, the ip tool (iproute2) and a namespace that can actually
// be created.
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the ip tool (iproute2) is not installed"
	}
	name := "sycheck" + randHex(3)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

func (l *netLab) ns(i int) string   { return fmt.Sprintf("sy%sn%d", l.id, i) }
func (l *netLab) peer(i int) string { return fmt.Sprintf("sy%sp%d", l.id, i) }
func (l *netLab) host(i int) string { return fmt.Sprintf("sy%sv%d", l.id, i) }
func (l *netLab) hostIP() string    { return l.subnet + ".1" }
func (l *netLab) nodeIP(i int) string {
	return l.subnet + "." + strconv.Itoa(i+2)
}

// addr is node i's address in the lab.
func (l *netLab) addr(i int) string {
	return net.JoinHostPort(l.nodeIP(i), strconv.Itoa(l.sb.Nodes[i].Port))
}

// newNetLab builds the namespaces, moves every node of sb into its
// namespace (restarting it there, listening on every address of the
// namespace) and re-points the replicas at node1's lab address.
func newNetLab(t *testing.T, sb *sandbox.Cluster) *netLab {
	t.Helper()
	if why := netnsUnavailable(); why != "" {
		if os.Getenv("SWITCHYARD_REQUIRE_NETNS") == "1" {
			t.Fatalf("netns: %s (SWITCHYARD_REQUIRE_NETNS=1 requires it)", why)
		}
		t.Skipf("skipping: %s; this scenario needs root and iproute2 (ip netns)", why)
	}
	l := &netLab{t: t, sb: sb, id: randHex(2)}
	l.subnet = freeSubnet(t)
	l.bridge = "sy" + l.id + "b"
	t.Cleanup(l.teardown)
	l.ip("link", "add", l.bridge, "type", "bridge")
	l.ip("addr", "add", l.hostIP()+"/24", "dev", l.bridge)
	l.ip("link", "set", l.bridge, "up")
	for i := range sb.Nodes {
		l.ip("netns", "add", l.ns(i))
		l.ip("-n", l.ns(i), "link", "set", "lo", "up")
		l.ip("link", "add", l.host(i), "type", "veth", "peer", "name", l.peer(i))
		l.ip("link", "set", l.peer(i), "netns", l.ns(i))
		l.ip("link", "set", l.host(i), "master", l.bridge)
		l.ip("link", "set", l.host(i), "up")
		l.ip("-n", l.ns(i), "addr", "add", l.nodeIP(i)+"/24", "dev", l.peer(i))
		l.ip("-n", l.ns(i), "link", "set", l.peer(i), "up")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range sb.Nodes {
		if err := sb.StopNode(ctx, i); err != nil {
			t.Fatal(err)
		}
		l.rewriteDefaults(i)
		l.start(i)
	}
	// Every sandbox node restarts read-only; node1 is the primary again.
	primary := l.rootDB(0)
	_, err := primary.ExecContext(ctx, "SET GLOBAL read_only=0")
	primary.Close()
	if err != nil {
		t.Fatalf("make node1 writable: %v", err)
	}
	for i := 1; i < len(sb.Nodes); i++ {
		db := l.rootDB(i)
		for _, q := range []string{"STOP SLAVE",
			fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_HEARTBEAT_PERIOD=1", l.nodeIP(0), sb.Nodes[0].Port),
			"START SLAVE"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s on %s: %v", q, sb.Nodes[i].Name, err)
			}
		}
		db.Close()
	}
	t.Logf("netns lab: host %s, nodes %s, %s, %s", l.hostIP(), l.addr(0), l.addr(1), l.addr(2))
	return l
}

// freeSubnet picks 10.213.N.0/24 with no host address in it.
func freeSubnet(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for tries := 0; tries < 50; tries++ {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		n := 1 + int(b[0])%250
		subnet := fmt.Sprintf("10.213.%d", n)
		used := false
		for _, a := range addrs {
			if strings.HasPrefix(a.String(), subnet+".") {
				used = true
			}
		}
		if !used {
			return subnet
		}
	}
	t.Fatal("no free 10.213.N.0/24 subnet")
	return ""
}

// rewriteDefaults makes node i listen on every address of its namespace and
// never block the host (max_connect_errors: probes cut by a partition must
// not lock the controller out afterwards).
func (l *netLab) rewriteDefaults(i int) {
	p := l.sb.Nodes[i].DefaultsFile
	b, err := os.ReadFile(p)
	if err != nil {
		l.t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "bind-address="):
			line = "bind-address=0.0.0.0"
		case strings.HasPrefix(line, "report-host="):
			line = "report-host=" + l.nodeIP(i)
		}
		out = append(out, line)
	}
	out = append(out, "max-connect-errors=1000000")
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		l.t.Fatal(err)
	}
}

// start starts node i's mariadbd inside its namespace (ip netns exec execs
// it in place, so the sandbox still recognises and stops the process) and
// waits until it answers over its unix socket.
func (l *netLab) start(i int) {
	l.t.Helper()
	n := l.sb.Nodes[i]
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
	}
	out, err := os.OpenFile(filepath.Join(filepath.Dir(n.DefaultsFile), "mariadbd.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		l.t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("ip", "netns", "exec", l.ns(i), bin, "--defaults-file="+n.DefaultsFile)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = filepath.Dir(n.DefaultsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("start %s in %s: %v", n.Name, l.ns(i), err)
	}
	go func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		db := l.rootDB(i)
		err := db.Ping()
		db.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("%s did not start in %s: %v", n.Name, l.ns(i), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *netLab) rootDB(i int) *sql.DB {
	db, err := sql.Open("mysql", l.sb.RootDSN(i))
	if err != nil {
		l.t.Fatal(err)
	}
	return db
}

// cutFromHost drops every packet node i sends to the host address (the
// controller and the proxies): connections from the host time out, the
// other nodes are unaffected.
func (l *netLab) cutFromHost(i int) {
	l.ip("-n", l.ns(i), "route", "add", "blackhole", l.hostIP()+"/32")
}

// isolate takes node i's link down: it reaches nobody and nobody reaches it.
func (l *netLab) isolate(i int) {
	l.ip("-n", l.ns(i), "link", "set", l.peer(i), "down")
}

// heal undoes cutFromHost and isolate for node i.
func (l *netLab) heal(i int) {
	_ = exec.Command("ip", "-n", l.ns(i), "route", "del", "blackhole", l.hostIP()+"/32").Run()
	l.ip("-n", l.ns(i), "link", "set", l.peer(i), "up")
}

// teardown stops the nodes (they live in the namespaces) and removes every
// link and namespace the lab created.
func (l *netLab) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range l.sb.Nodes {
		_ = l.sb.StopNode(ctx, i)
	}
	for i := range l.sb.Nodes {
		_ = exec.Command("ip", "link", "del", l.host(i)).Run()
		_ = exec.Command("ip", "netns", "del", l.ns(i)).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge).Run()
}
