package sandbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NetLab puts every node of a sandbox in its own network namespace, joined
// by a bridge in the host namespace, so that partitions can be made with
// real dropped packets (no RST, no refusal):
//
//	host (controller, proxies, etcd, clients) 10.213.N.1 on bridge sy<id>b
//	node i  in netns sy<id>n<i>               10.213.N.(i+2) on veth sy<id>p<i>
//
// The subnet is private (10.213.N.0/24, N chosen so that no address of the
// host is in it) and every link, namespace and address is created by
// NewNetLab and removed by Teardown. Partitions are made inside a node's
// namespace only: a blackhole route to the host address cuts it off from
// whatever runs on the host but not from the other nodes (CutFromHost);
// taking its veth down cuts it off from everything (Isolate). It needs root
// and the ip tool (iproute2); NetNSUnavailable says why not.
type NetLab struct {
	sb     *Cluster
	id     string
	subnet string // "10.213.N"
	bridge string
}

// NetNSUnavailable says why network namespaces cannot be used here ("" when
// they can): root, the ip tool (iproute2) and a namespace that can actually
// be created.
func NetNSUnavailable() string {
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

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox: netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *NetLab) ns(i int) string   { return fmt.Sprintf("sy%sn%d", l.id, i) }
func (l *NetLab) peer(i int) string { return fmt.Sprintf("sy%sp%d", l.id, i) }
func (l *NetLab) host(i int) string { return fmt.Sprintf("sy%sv%d", l.id, i) }

// HostIP is the host side's address in the lab.
func (l *NetLab) HostIP() string { return l.subnet + ".1" }

// NodeIP is node i's (0-based) address in the lab.
func (l *NetLab) NodeIP(i int) string { return l.subnet + "." + strconv.Itoa(i+2) }

// Addr is node i's host:port in the lab, the address to configure.
func (l *NetLab) Addr(i int) string {
	return net.JoinHostPort(l.NodeIP(i), strconv.Itoa(l.sb.Nodes[i].Port))
}

// NewNetLab builds the namespaces, moves every node of sb into its
// namespace (restarting it there, listening on every address of the
// namespace, never blocking the host: max_connect_errors) and re-points the
// replicas at node1's lab address (MASTER_HEARTBEAT_PERIOD=1, as a cluster
// set up by hand might have; the controller aligns it). node1 is made
// writable again. On error what was built is removed.
func NewNetLab(ctx context.Context, sb *Cluster) (_ *NetLab, err error) {
	l := &NetLab{sb: sb, id: randHex(2)}
	if l.subnet, err = freeLabSubnet(); err != nil {
		return nil, err
	}
	l.bridge = "sy" + l.id + "b"
	defer func() {
		if err != nil {
			l.Teardown()
		}
	}()
	steps := [][]string{{"link", "add", l.bridge, "type", "bridge"}, {"addr", "add", l.HostIP() + "/24", "dev", l.bridge}, {"link", "set", l.bridge, "up"}}
	for i := range sb.Nodes {
		steps = append(steps, []string{"netns", "add", l.ns(i)}, []string{"-n", l.ns(i), "link", "set", "lo", "up"},
			[]string{"link", "add", l.host(i), "type", "veth", "peer", "name", l.peer(i)}, []string{"link", "set", l.peer(i), "netns", l.ns(i)},
			[]string{"link", "set", l.host(i), "master", l.bridge}, []string{"link", "set", l.host(i), "up"},
			[]string{"-n", l.ns(i), "addr", "add", l.NodeIP(i) + "/24", "dev", l.peer(i)}, []string{"-n", l.ns(i), "link", "set", l.peer(i), "up"})
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return nil, err
		}
	}
	for i := range sb.Nodes {
		if err := sb.StopNode(ctx, i); err != nil {
			return nil, err
		}
		if err := l.rewriteDefaults(i); err != nil {
			return nil, err
		}
		if err := l.start(i); err != nil {
			return nil, err
		}
	}
	// Every sandbox node restarts read-only; node1 is the primary again.
	if err := l.rootExec(ctx, 0, "SET GLOBAL read_only=0"); err != nil {
		return nil, err
	}
	for i := 1; i < len(sb.Nodes); i++ {
		if err := l.rootExec(ctx, i, "STOP SLAVE",
			fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_HEARTBEAT_PERIOD=1", l.NodeIP(0), sb.Nodes[0].Port),
			"START SLAVE"); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// freeLabSubnet picks 10.213.N.0/24 with no host address in it.
func freeLabSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for range 50 {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		subnet := fmt.Sprintf("10.213.%d", 1+int(b[0])%250)
		used := false
		for _, a := range addrs {
			used = used || strings.HasPrefix(a.String(), subnet+".")
		}
		if !used {
			return subnet, nil
		}
	}
	return "", errors.New("sandbox: netns: no free 10.213.N.0/24 subnet")
}

// rewriteDefaults makes node i listen on every address of its namespace
// and never block the host (probes cut by a partition must not lock the
// controller out afterwards: max_connect_errors).
func (l *NetLab) rewriteDefaults(i int) error {
	p := l.sb.Nodes[i].DefaultsFile
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "bind-address="):
			line = "bind-address=0.0.0.0"
		case strings.HasPrefix(line, "report-host="):
			line = "report-host=" + l.NodeIP(i)
		}
		out = append(out, line)
	}
	out = append(out, "max-connect-errors=1000000")
	return os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o600)
}

// start starts node i's mariadbd inside its namespace (ip netns exec execs
// it in place, so the sandbox still finds and stops it by its pid file) and
// waits until it answers over its unix socket.
func (l *NetLab) start(i int) error {
	n := l.sb.Nodes[i]
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
	}
	out, err := os.OpenFile(filepath.Join(filepath.Dir(n.DefaultsFile), "mariadbd.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("ip", "netns", "exec", l.ns(i), bin, "--defaults-file="+n.DefaultsFile)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = filepath.Dir(n.DefaultsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sandbox: netns: start %s in %s: %w", n.Name, l.ns(i), err)
	}
	go func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(readyTimeout)
	for {
		db, err := sql.Open("mysql", l.sb.RootDSN(i))
		if err == nil {
			err = db.Ping()
			db.Close()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: netns: %s did not start in %s: %w", n.Name, l.ns(i), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *NetLab) rootExec(ctx context.Context, i int, stmts ...string) error {
	db, err := sql.Open("mysql", l.sb.RootDSN(i))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sandbox: netns: %s on %s: %w", q, l.sb.Nodes[i].Name, err)
		}
	}
	return nil
}

// CutFromHost drops every packet node i sends to the host address
// (whatever runs on the host: controller, proxies): connections from the
// host time out, the other nodes are unaffected.
func (l *NetLab) CutFromHost(i int) error {
	return ipCmd("-n", l.ns(i), "route", "add", "blackhole", l.HostIP()+"/32")
}

// Isolate takes node i's link down: it reaches nobody and nobody reaches
// it, and nothing answers (the packets are dropped).
func (l *NetLab) Isolate(i int) error {
	return ipCmd("-n", l.ns(i), "link", "set", l.peer(i), "down")
}

// Heal undoes CutFromHost and Isolate for node i.
func (l *NetLab) Heal(i int) error {
	_ = exec.Command("ip", "-n", l.ns(i), "route", "del", "blackhole", l.HostIP()+"/32").Run()
	return ipCmd("-n", l.ns(i), "link", "set", l.peer(i), "up")
}

// Teardown stops the nodes (they live in the namespaces; a frozen one is
// woken first) and removes every link and namespace the lab created.
func (l *NetLab) Teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range l.sb.Nodes {
		if pid := l.sb.PID(i); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = l.sb.StopNode(ctx, i)
	}
	for i := range l.sb.Nodes {
		_ = exec.Command("ip", "link", "del", l.host(i)).Run()
		_ = exec.Command("ip", "netns", "del", l.ns(i)).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge).Run()
}
