package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// partitionResult is one -fault partition trial.
type partitionResult struct {
	decision   time.Duration // isolation → the controller's "failing over" decision
	published  time.Duration // isolation → new primary published in the store
	firstWrite time.Duration // isolation → first write acknowledged through rw
	failoverMS int64         // decision → published (the failover's own steps)
	newPrimary string
	acked      int
	lost       int
	errors     int64
	aligned    string // how the controller aligned the replicas' settings at start
}

// runPartition runs the -fault partition trials: every node runs in its own
// network namespace behind a bridge (the controller, the proxy, etcd and
// the writers share the host side), and under write load the primary's
// link is taken down: it reaches nobody and nobody reaches it, and since
// no packet comes back (no RST, no refusal) every connection to it just
// goes silent. The figures are the times from the isolation to the
// controller's decision, to the new primary published and to the first
// write acknowledged through the rw listener, and the acknowledged writes
// missing from the new primary. The replicas are attached with
// MASTER_HEARTBEAT_PERIOD=1 (as a hand-built cluster might be); the
// controller aligns them to failover.silence_bound's settings before the
// trial starts.
func runPartition(o options) error {
	if os.Geteuid() != 0 {
		return errors.New("-fault partition needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("-fault partition needs the ip tool (iproute2)")
	}
	var fo config.FailoverConfig
	fo.SilenceBound = config.Duration(config.DefaultSilenceBound)
	fmt.Printf("partitioned primary: node1's link taken down (network namespaces, packets dropped, no RST) under write load; %d trials, probe.interval %s, probe.timeout %s, proxy.connect_timeout %s, failover.silence_bound %s (heartbeat %s, slave_net_timeout %ds), semi-sync %v, durability %s, %d writers, failover.mode auto (confirm_rounds 2)\n",
		o.trials, o.interval, probeTimeout(o.interval), partitionConnectTimeout(o.interval), fo.SilenceBound, fo.HeartbeatPeriod(), fo.NetTimeout(),
		o.semiSync, durabilityName(o), o.writers)
	var dec, pub, first []time.Duration
	lost, acked := 0, 0
	for i := 1; i <= o.trials; i++ {
		r, err := partitionTrial(o)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i, err)
		}
		if i == 1 && r.aligned != "" {
			fmt.Printf("  replica settings at start: %s\n", r.aligned)
		}
		fmt.Printf("trial %2d: isolation → decision %5.0f ms  → new primary published %5.0f ms  → first write %5.0f ms  (failover %4d ms)  new primary %s  acknowledged %5d  lost %d  client errors %d\n",
			i, ms(r.decision), ms(r.published), ms(r.firstWrite), r.failoverMS, r.newPrimary, r.acked, r.lost, r.errors)
		dec, pub, first = append(dec, r.decision), append(pub, r.published), append(first, r.firstWrite)
		lost += r.lost
		acked += r.acked
	}
	for _, s := range [][]time.Duration{dec, pub, first} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	fmt.Printf("isolation → decision: median %.0f ms, max %.0f ms; → new primary published: median %.0f ms, min %.0f ms, max %.0f ms; → first write through rw: median %.0f ms, max %.0f ms; over %d trials; acknowledged writes lost: %d of %d\n",
		ms(percentile(dec, 50)), ms(dec[len(dec)-1]), ms(percentile(pub, 50)), ms(pub[0]), ms(pub[len(pub)-1]),
		ms(percentile(first, 50)), ms(first[len(first)-1]), len(pub), lost, acked)
	if lost > 0 && durabilityName(o) != config.DurabilityAsync {
		return errors.New("acknowledged writes lost (see above)")
	}
	if lost > 0 {
		fmt.Println("(durability async: a write acknowledged by node1 just before the isolation and not shipped yet is lost, as the async window allows)")
	}
	return nil
}

// partitionConnectTimeout is proxy.connect_timeout in the partition
// trials: the default (1s), or less at short probe intervals as in the
// scenario tests.
func partitionConnectTimeout(interval time.Duration) time.Duration {
	return min(time.Second, max(2*interval, 500*time.Millisecond))
}

func partitionTrial(o options) (r partitionResult, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := startStack(ctx, o)
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	// The controller aligns the replicas (attached with a 1s heartbeat) to
	// the silence bound's settings, one per round.
	var fo config.FailoverConfig
	fo.SilenceBound = config.Duration(config.DefaultSilenceBound)
	want := fo.HeartbeatPeriod().Seconds()
	var st0 topo.ClusterState
	if err := waitFor(ctx, 30*time.Second, func() bool {
		st, gerr := s.state(ctx)
		if gerr != nil {
			return false
		}
		st0 = st
		for _, n := range []string{"node2", "node3"} {
			p := st.Node(n).Probe
			if math.Abs(p.HeartbeatPeriod-want) > 0.0005 || p.IORunning != "Yes" || !st.Node(n).Serving {
				return false
			}
		}
		return st.Primary == "node1" && s.srv.Epochs()["main"] == st.Epoch
	}); err != nil {
		return r, fmt.Errorf("replicas not aligned to MASTER_HEARTBEAT_PERIOD %.3f: %w", want, err)
	}
	if evs, err := controller.ListEvents(ctx, s.store, s.keys, "main", 0); err == nil {
		var al []string
		for _, ev := range evs {
			if strings.HasPrefix(ev.Message, "aligned ") {
				al = append(al, ev.Message)
			}
		}
		r.aligned = strings.Join(al, "; ")
	}

	w := newWriters(s.rw, o.writers, false)
	wctx, wcancel := context.WithCancel(ctx)
	w.start(wctx)
	defer func() { wcancel(); w.wait() }()
	time.Sleep(2 * time.Second)

	// Timed from the moment the link is down (a write sent while the ip
	// command ran may still have been acknowledged by node1).
	if err := s.lab.isolate(0); err != nil {
		return r, err
	}
	isolatedAt := time.Now()
	var st topo.ClusterState
	if err := waitFor(ctx, 30*time.Second, func() bool {
		var gerr error
		st, gerr = s.state(ctx)
		return gerr == nil && st.Primary != "" && st.Primary != "node1" && st.Epoch > st0.Epoch && st.Phase == topo.PhaseStable
	}); err != nil {
		return r, fmt.Errorf("no new primary within 30s of the isolation: %w", err)
	}
	r.published = time.Since(isolatedAt)
	r.newPrimary = st.Primary
	if st.LastFailover != nil {
		r.failoverMS = st.LastFailover.DurationMS
	}
	firstAt, ok := w.firstAfter(ctx, isolatedAt, 30*time.Second)
	if !ok {
		return r, errors.New("no write succeeded within 30s of the failover")
	}
	r.firstWrite = firstAt.Sub(isolatedAt)
	if evs, err := controller.ListEvents(ctx, s.store, s.keys, "main", 0); err == nil {
		for _, ev := range evs {
			if ev.Kind == topo.EventDecision && strings.HasPrefix(ev.Message, "failing over") && ev.At.After(isolatedAt) {
				r.decision = ev.At.Sub(isolatedAt)
				break
			}
		}
		if o.verbose {
			for _, ev := range evs {
				if ev.At.After(isolatedAt.Add(-time.Second)) {
					fmt.Printf("  event +%6.0fms %-9s %s\n", ms(ev.At.Sub(isolatedAt)), ev.Kind, ev.Message)
				}
			}
		}
	}
	time.Sleep(time.Second)
	wcancel()
	w.wait()
	missing, err := loadgen.Check(ctx, withDB(s.sb.RootDSN(nodeIndex(st.Primary)), "sbtest"), "", w.acked())
	if err != nil {
		return r, err
	}
	r.acked, r.lost, r.errors = len(w.acked()), len(missing), w.errors()
	return r, nil
}

// netLab puts every sandbox node in its own network namespace, joined by a
// bridge in the host namespace (the same layout as the S5 scenario test):
//
//	host (controller, proxy, etcd, writers) 10.214.N.1 on bridge sy<id>b
//	node i  in netns sy<id>n<i>             10.214.N.(i+2) on veth sy<id>p<i>
//
// Every link, namespace and address is created here and removed by
// teardown.
type netLab struct {
	sb     *sandbox.Cluster
	id     string
	subnet string
	bridge string
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

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetLab builds the namespaces, moves every node of sb into its
// namespace (restarting it there, listening on every address) and
// re-points the replicas at node1's lab address with a 1s heartbeat. On
// error what was built is removed.
func newNetLab(ctx context.Context, sb *sandbox.Cluster) (_ *netLab, err error) {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	l := &netLab{sb: sb, id: hex.EncodeToString(b)}
	if l.subnet, err = freeLabSubnet(); err != nil {
		return nil, err
	}
	l.bridge = "sy" + l.id + "b"
	defer func() {
		if err != nil {
			l.teardown()
		}
	}()
	steps := [][]string{{"link", "add", l.bridge, "type", "bridge"}, {"addr", "add", l.hostIP() + "/24", "dev", l.bridge}, {"link", "set", l.bridge, "up"}}
	for i := range sb.Nodes {
		steps = append(steps, []string{"netns", "add", l.ns(i)}, []string{"-n", l.ns(i), "link", "set", "lo", "up"},
			[]string{"link", "add", l.host(i), "type", "veth", "peer", "name", l.peer(i)}, []string{"link", "set", l.peer(i), "netns", l.ns(i)},
			[]string{"link", "set", l.host(i), "master", l.bridge}, []string{"link", "set", l.host(i), "up"},
			[]string{"-n", l.ns(i), "addr", "add", l.nodeIP(i) + "/24", "dev", l.peer(i)}, []string{"-n", l.ns(i), "link", "set", l.peer(i), "up"})
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
			fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_HEARTBEAT_PERIOD=1", l.nodeIP(0), sb.Nodes[0].Port),
			"START SLAVE"); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// freeLabSubnet picks 10.214.N.0/24 with no host address in it.
func freeLabSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for range 50 {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		subnet := fmt.Sprintf("10.214.%d", 1+int(b[0])%250)
		used := false
		for _, a := range addrs {
			used = used || strings.HasPrefix(a.String(), subnet+".")
		}
		if !used {
			return subnet, nil
		}
	}
	return "", errors.New("no free 10.214.N.0/24 subnet")
}

// rewriteDefaults makes node i listen on every address of its namespace
// and never block the host (probes cut by the partition must not lock the
// controller out: max_connect_errors).
func (l *netLab) rewriteDefaults(i int) error {
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
			line = "report-host=" + l.nodeIP(i)
		}
		out = append(out, line)
	}
	out = append(out, "max-connect-errors=1000000")
	return os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o600)
}

// start starts node i's mariadbd inside its namespace (ip netns exec execs
// it in place, so the sandbox still finds and stops it by its pid file) and
// waits until it answers over its unix socket.
func (l *netLab) start(i int) error {
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
		return fmt.Errorf("start %s in %s: %w", n.Name, l.ns(i), err)
	}
	go func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
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
			return fmt.Errorf("%s did not start in %s: %w", n.Name, l.ns(i), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *netLab) rootExec(ctx context.Context, i int, stmts ...string) error {
	db, err := sql.Open("mysql", l.sb.RootDSN(i))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s on %s: %w", q, l.sb.Nodes[i].Name, err)
		}
	}
	return nil
}

// isolate takes node i's link down: it reaches nobody and nobody reaches
// it, and nothing answers (the packets are dropped).
func (l *netLab) isolate(i int) error {
	return ipCmd("-n", l.ns(i), "link", "set", l.peer(i), "down")
}

// teardown stops the nodes (they live in the namespaces) and removes every
// link and namespace the lab created.
func (l *netLab) teardown() {
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
