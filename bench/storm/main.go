// Command storm measures connection storms, idle clients and connection
// churn through Switchyard's rw listener and through HAProxy in TCP mode
// (an L4 proxy, as bench/proxy.sh runs it) side by side, in one run on this
// machine: a 3-node MariaDB sandbox, `switchyard up` (embedded etcd,
// controller, proxy) in its own process, and haproxy in front of the
// primary.
//
//   - storm: -clients clients connect at once, run SELECT 1, hold until
//     all have connected, and disconnect: failures, time until every client
//     had its answer, peak RSS of the proxy process, and the most
//     connections the primary had (Threads_connected, sampled every 20 ms)
//     above its count before.
//   - idle: -idle clients log in, run SELECT 1 and stay idle: the proxy
//     process's RSS delta divided by the clients, after a settle of 3 s. Each
//     target is started afresh for it.
//   - churn: -rate new connections per second for -seconds, each logging in,
//     running SELECT 1 and closing: errors, client connects against the
//     backend connects they cost (the primary's Connections status counter),
//     and the TIME_WAIT sockets on the machine (ss -tan state time-wait)
//     before and after.
//   - lockout: the primary's max_connections is lowered to -max-connections
//     and -clients clients connect at once, run SELECT 1 and hold; a user
//     without SUPER (which MariaDB lets past max_connections once) logs in
//     directly to the primary every 20 ms during the flood and for 5 s
//     after it: the flood's outcomes by kind, the direct logins that
//     failed during and after, the primary's peak Threads_connected, and
//     how long after the flood its connections were back within 10 of
//     their count before.
//
// -pooling sets listeners[].pooling of Switchyard's rw listener. With
// session (the default) every client holds a backend connection, and
// proxy.max_connections_per_backend and the primary's max_connections are
// raised above the clients so that both proxies are measured without
// refusals. With transaction a client holds one only within a statement or
// transaction and proxy.max_connections_per_backend is txCap (1,000).
//
// The process raises RLIMIT_NOFILE to its hard limit (children inherit it);
// -idle is lowered to the proxy.max_client_connections `switchyard up`
// derives from that limit and the pools' caps (with session pooling two
// descriptors per idle client: 9,744 under 20,000).
//
// The storm with -pooling session is also the backend-connect storm: every
// held client needs its own backend connection, so 5,000 connects hit the
// primary at once and its listen queue (back_log 250 in the sandbox) drops
// SYNs, which Linux resends only after 1 s. -rounds repeats it (the proxy
// started afresh each round) and -connect-timeout sets Switchyard's
// proxy.connect_timeout; the storm's failures are counted by kind
// (failureKind).
//
// Usage: go run ./bench/storm [-pooling session|transaction] [-clients 5000]
// [-idle 10000] [-rate 1000] [-seconds 60] [-phases idle,storm,churn]
// [-targets switchyard,haproxy] [-rounds 1] [-connect-timeout 1s]
// [-max-connections 200]
package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/bench/internal/benchkit"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// txCap is proxy.max_connections_per_backend with -pooling transaction.
const txCap = 1000

type options struct {
	pooling                      string
	rounds                       int
	connectTimeout               time.Duration
	clients, idle, rate, seconds int
	maxConnections               int
	settle                       time.Duration
	phases, targets              []string
}

func main() {
	var o options
	var phases, targets string
	flag.StringVar(&o.pooling, "pooling", "session", "listeners[].pooling of Switchyard's rw listener: session or transaction")
	flag.IntVar(&o.clients, "clients", 5000, "storm: clients that connect at once")
	flag.IntVar(&o.rounds, "rounds", 1, "storm: rounds per proxy, each with the proxy started afresh")
	flag.DurationVar(&o.connectTimeout, "connect-timeout", 0, "Switchyard's proxy.connect_timeout (0: its default, 1s)")
	flag.IntVar(&o.idle, "idle", 10000, "idle: clients held idle (lowered to what RLIMIT_NOFILE allows)")
	flag.IntVar(&o.rate, "rate", 1000, "churn: new connections per second")
	flag.IntVar(&o.seconds, "seconds", 60, "churn: length of the run in seconds")
	flag.DurationVar(&o.settle, "settle", 15*time.Second, "idle: wait between the last login and the RSS reading")
	flag.IntVar(&o.maxConnections, "max-connections", 200, "lockout: the primary's max_connections during the phase")
	flag.StringVar(&phases, "phases", "idle,storm,churn", "phases to run, comma separated (idle, storm, churn, lockout)")
	flag.StringVar(&targets, "targets", "switchyard,haproxy", "proxies to measure, comma separated")
	flag.Parse()
	o.phases, o.targets = strings.Split(phases, ","), strings.Split(targets, ",")
	if o.pooling != config.PoolingSession && o.pooling != config.PoolingTransaction {
		fmt.Fprintf(os.Stderr, "storm: -pooling %q: use session or transaction\n", o.pooling)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

// row is one result line of the table.
type row struct {
	phase, target, figures string
}

func run(o options) error {
	if _, err := exec.LookPath("haproxy"); err != nil && contains(o.targets, "haproxy") {
		return fmt.Errorf("haproxy not found: ./scripts/deps.sh installs it")
	}
	nofile, err := benchkit.RaiseNoFile()
	if err != nil {
		return err
	}
	// The primary's max_connections: above every client, so that both
	// proxies are measured without refusals. Switchyard's
	// proxy.max_connections_per_backend is that too with session pooling
	// (a backend connection per client); with transaction pooling, where
	// clients hold one only within a statement or transaction, it is
	// txCap, so that the pools' caps leave the descriptors to the clients.
	limit := max(o.idle, o.clients) + 1000
	backendCap := limit
	if o.pooling == config.PoolingTransaction {
		backendCap = txCap
	}
	// At most what `up` derives for proxy.max_client_connections from the
	// budget (the reserve with the embedded etcd is 512, README "Limits
	// and connection storms"), the sandbox having 3 nodes.
	if most := proxy.DefaultMaxClientConnections(int(nofile), 512, 3*backendCap); o.idle > most {
		fmt.Printf("RLIMIT_NOFILE %d: -idle lowered from %d to %d\n", nofile, o.idle, most)
		o.idle = most
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sy-bench-storm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "switchyard")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/switchyard").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/switchyard (run from the repository root): %v\n%s", err, out)
	}
	sb, err := benchkit.Sandbox(ctx, dir, 3, false)
	if err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		_ = sandbox.Down(dctx, sb.Dir, true)
	}()
	root, err := sql.Open("mysql", sb.RootDSN(0))
	if err != nil {
		return err
	}
	defer root.Close()
	root.SetMaxOpenConns(2)
	for i := range sb.Nodes {
		db, err := sql.Open("mysql", sb.RootDSN(i))
		if err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, fmt.Sprintf("SET GLOBAL max_connections = %d", limit))
		db.Close()
		if err != nil {
			return fmt.Errorf("%s: raise max_connections: %w", sb.Nodes[i].Name, err)
		}
	}
	var ofl int
	_ = root.QueryRowContext(ctx, "SELECT @@open_files_limit").Scan(&ofl)
	fmt.Printf("storm: %d clients at once; idle: %d clients; churn: %d/s for %d s. primary max_connections %d, open_files_limit %d; RLIMIT_NOFILE %d; switchyard rw pooling %s, max_connections_per_backend %d\n",
		o.clients, o.idle, o.rate, o.seconds, limit, ofl, nofile, o.pooling, backendCap)

	var rows []row
	for _, phase := range o.phases {
		rounds := 1
		if phase == "storm" {
			rounds = max(o.rounds, 1)
		}
		for _, target := range o.targets {
			for range rounds {
				p, err := startTarget(ctx, target, dir, bin, sb, o, backendCap, int(nofile))
				if err != nil {
					return err
				}
				var figures string
				switch phase {
				case "idle":
					idleOpts := o
					if most := haproxyMaxconn(int(nofile)); target == "haproxy" && idleOpts.idle > most {
						// HAProxy holds two descriptors per connection and
						// queues the ones past its maxconn.
						fmt.Printf("  haproxy maxconn %d: -idle lowered from %d for it\n", most, idleOpts.idle)
						idleOpts.idle = most
					}
					figures, err = idlePhase(ctx, idleOpts, p, sb)
				case "storm":
					figures, err = stormPhase(ctx, o, p, sb, root)
				case "churn":
					figures, err = churnPhase(ctx, o, p, sb, root)
				case "lockout":
					figures, err = lockoutPhase(ctx, o, p, sb, root, limit)
				default:
					err = fmt.Errorf("unknown phase %q (idle, storm, churn, lockout)", phase)
				}
				p.stop()
				if err != nil {
					return fmt.Errorf("%s through %s: %w", phase, target, err)
				}
				fmt.Printf("  %-6s %-10s %s\n", phase, target, figures)
				rows = append(rows, row{phase, target, figures})
				time.Sleep(2 * time.Second) // let the servers close what the phase left
			}
		}
	}
	fmt.Println()
	fmt.Println("| phase | proxy | figures |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s |\n", r.phase, r.target, r.figures)
	}
	return nil
}

// proc is a proxy process under test.
type proc struct {
	name, addr string
	cmd        *exec.Cmd
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// startTarget starts target ("switchyard" or "haproxy") in front of the
// sandbox's primary and waits until a client can log in through it.
func startTarget(ctx context.Context, target, dir, bin string, sb *sandbox.Cluster, o options, backendCap, nofile int) (*proc, error) {
	addrs, err := benchkit.FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	p := &proc{name: target}
	switch target {
	case "switchyard":
		cfg := sb.Config()
		cfg.Listeners[0].Address, cfg.Listeners[1].Address = addrs[0], addrs[1]
		cfg.Admin.Address = "off"
		cfg.Proxy.MaxConnectionsPerBackend = backendCap
		cfg.Listeners[0].Pooling = o.pooling
		if o.connectTimeout > 0 {
			cfg.Proxy.ConnectTimeout = config.Duration(o.connectTimeout)
		}
		_ = os.RemoveAll(cfg.Etcd.Embedded.DataDir) // a fresh store each start: the file's config applies
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		data, err := cfg.Marshal()
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "switchyard.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
		p.addr = addrs[0]
		p.cmd = exec.Command(bin, "up", "--config", path, "--log-level", "error")
	case "haproxy":
		path := filepath.Join(dir, "haproxy.cfg")
		// Two descriptors per connection, within the inherited limit.
		maxconn := haproxyMaxconn(nofile)
		hcfg := fmt.Sprintf("global\n  maxconn %d\ndefaults\n  mode tcp\n  maxconn %d\n  timeout connect 1s\n  timeout client 1h\n  timeout server 1h\n"+
			"listen mysql\n  bind %s\n  server primary %s check\n", maxconn, maxconn, addrs[0], sb.Nodes[0].Address)
		if err := os.WriteFile(path, []byte(hcfg), 0o600); err != nil {
			return nil, err
		}
		p.addr = addrs[0]
		p.cmd = exec.Command("haproxy", "-f", path, "-db")
	default:
		return nil, fmt.Errorf("unknown target %q (switchyard, haproxy)", target)
	}
	logf, err := os.Create(filepath.Join(dir, target+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", target, err)
	}
	c := newClient(sb, p.addr, 2*time.Second)
	if err := benchkit.WaitFor(ctx, 60*time.Second, func() bool {
		conn, err := c.connect(ctx)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}); err != nil {
		p.stop()
		log, _ := os.ReadFile(filepath.Join(dir, target+".log"))
		return nil, fmt.Errorf("%s does not serve logins on %s: %w\n%s", target, p.addr, err, log)
	}
	time.Sleep(time.Second)
	return p, nil
}

// haproxyMaxconn is HAProxy's maxconn under RLIMIT_NOFILE nofile: two
// descriptors per connection, 200 kept for its own.
func haproxyMaxconn(nofile int) int { return (nofile - 200) / 2 }

// client opens connections as the sandbox's application user.
type client struct {
	conn driver.Connector
}

func newClient(sb *sandbox.Cluster, addr string, timeout time.Duration) *client {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = sb.AppUser, sb.AppPassword, "tcp", addr
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = timeout, 30*time.Second, 30*time.Second
	cn, err := mysql.NewConnector(cfg)
	if err != nil {
		panic(err) // the config is built here: a bug
	}
	return &client{conn: cn}
}

func (c *client) connect(ctx context.Context) (driver.Conn, error) { return c.conn.Connect(ctx) }

// selectOne runs SELECT 1 on conn and reads its row.
func selectOne(ctx context.Context, conn driver.Conn) error {
	rows, err := conn.(driver.QueryerContext).QueryContext(ctx, "SELECT 1", nil)
	if err != nil {
		return err
	}
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

// sampler records the peak of a value sampled every 20 ms.
type sampler struct {
	peak   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func sample(ctx context.Context, f func(context.Context) (int64, error)) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := f(ctx); err == nil && v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() int64 { s.cancel(); <-s.done; return s.peak.Load() }

func statusVar(ctx context.Context, root *sql.DB, name string) (int64, error) {
	var n string
	var v int64
	err := root.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&n, &v)
	return v, err
}

func stormPhase(ctx context.Context, o options, p *proc, sb *sandbox.Cluster, root *sql.DB) (string, error) {
	base, err := statusVar(ctx, root, "Threads_connected")
	if err != nil {
		return "", err
	}
	rss0, _ := benchkit.RSS(p.pid())
	threads := sample(ctx, func(ctx context.Context) (int64, error) { return statusVar(ctx, root, "Threads_connected") })
	rss := sample(ctx, func(context.Context) (int64, error) { return benchkit.RSS(p.pid()) })
	c := newClient(sb, p.addr, 30*time.Second)
	var failures atomic.Int64
	var firstErr atomic.Value
	var kindMu sync.Mutex
	kinds := map[string]int{}
	var ready, wg sync.WaitGroup
	ready.Add(o.clients)
	wg.Add(o.clients)
	release := make(chan struct{})
	start := time.Now()
	var lastAnswer atomic.Int64
	for range o.clients {
		go func() {
			defer wg.Done()
			conn, err := c.connect(ctx)
			if err == nil {
				err = selectOne(ctx, conn)
			}
			if err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				kindMu.Lock()
				kinds[failureKind(err)]++
				kindMu.Unlock()
			} else {
				for {
					at, now := lastAnswer.Load(), int64(time.Since(start))
					if now <= at || lastAnswer.CompareAndSwap(at, now) {
						break
					}
				}
			}
			ready.Done()
			<-release
			if conn != nil {
				conn.Close()
			}
		}()
	}
	ready.Wait()
	close(release)
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	peakThreads, peakRSS := threads.stop(), rss.stop()
	f := fmt.Sprintf("%d clients: failures %d %s, all answered in %s, peak RSS %.1f MB (%.1f MB before), backend connections peak %d (+%d)",
		o.clients, failures.Load(), kindList(kinds), time.Duration(lastAnswer.Load()).Round(time.Millisecond), mb(peakRSS), mb(rss0), peakThreads, peakThreads-base)
	if e := firstErr.Load(); e != nil {
		f += fmt.Sprintf("; first error: %v", e)
	}
	return f, nil
}

func idlePhase(ctx context.Context, o options, p *proc, sb *sandbox.Cluster) (string, error) {
	rss0, err := benchkit.RSS(p.pid())
	if err != nil {
		return "", err
	}
	c := newClient(sb, p.addr, 30*time.Second)
	conns := make([]driver.Conn, o.idle)
	var failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32) // open them at a steady pace, not as a storm
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, err := c.connect(ctx)
			if err == nil {
				err = selectOne(ctx, conn)
			}
			if err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			conns[i] = conn
		}()
	}
	wg.Wait()
	var trace []string
	for waited := time.Duration(0); waited < o.settle; waited += time.Second {
		time.Sleep(time.Second)
		if r, err := benchkit.RSS(p.pid()); err == nil {
			trace = append(trace, fmt.Sprintf("%.0f", mb(r)))
		}
	}
	fmt.Printf("    RSS MB each second after the last login: %s\n", strings.Join(trace, " "))
	rss1, err := benchkit.RSS(p.pid())
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	if err != nil {
		return "", err
	}
	n := int64(o.idle) - failures.Load()
	f := fmt.Sprintf("%d idle clients (%d failed): RSS %.1f MB → %.1f MB, %.2f KB per idle client",
		n, failures.Load(), mb(rss0), mb(rss1), float64(rss1-rss0)/1024/float64(max(n, 1)))
	if e := firstErr.Load(); e != nil {
		f += fmt.Sprintf("; first error: %v", e)
	}
	return f, nil
}

func churnPhase(ctx context.Context, o options, p *proc, sb *sandbox.Cluster, root *sql.DB) (string, error) {
	// Start from a quiet machine: the sockets earlier phases left in
	// TIME_WAIT expire within 60 s (Linux's fixed TCP_TIMEWAIT_LEN).
	_ = benchkit.WaitFor(ctx, 70*time.Second, func() bool { return timeWait() < 1000 })
	tw0 := timeWait()
	conns0, err := statusVar(ctx, root, "Connections")
	if err != nil {
		return "", err
	}
	c := newClient(sb, p.addr, 10*time.Second)
	var errs, done atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	total := o.rate * o.seconds
	interval := time.Second / time.Duration(o.rate)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := c.connect(ctx)
			if err == nil {
				err = selectOne(ctx, conn)
				conn.Close()
			}
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			done.Add(1)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	conns1, err := statusVar(ctx, root, "Connections")
	if err != nil {
		return "", err
	}
	tw1 := timeWait()
	// The sampling connection of root may have been reopened; a few
	// connects are the bench's own.
	f := fmt.Sprintf("%d connects in %s (%.0f/s): errors %d, backend connects %d, TIME_WAIT %d → %d",
		done.Load(), elapsed.Round(time.Millisecond), float64(done.Load())/elapsed.Seconds(), errs.Load(), conns1-conns0, tw0, tw1)
	if e := firstErr.Load(); e != nil {
		f += fmt.Sprintf("; first error: %v", e)
	}
	return f, nil
}

// failureKind names a storm client's failure: "connect timeout" (the
// proxy's backend connect got no SYN-ACK within proxy.connect_timeout: the
// server's listen queue, back_log, dropped its SYNs), "login timeout" (the
// server's greeting or login did not come within it), a MySQL error
// number, or "other: " and the driver's error.
func failureKind(err error) string {
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && strings.Contains(me.Message, "connect timeout"):
		return "connect timeout"
	case errors.As(err, &me) && strings.Contains(me.Message, "i/o timeout"):
		return "login timeout"
	case errors.As(err, &me):
		return strconv.Itoa(int(me.Number))
	}
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return "other: " + msg
}

// kindList formats failures by kind as {kind: n, ...}, sorted.
func kindList(kinds map[string]int) string {
	var out []string
	for k, n := range kinds {
		out = append(out, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(out)
	return "{" + strings.Join(out, ", ") + "}"
}

// timeWait counts the machine's TCP sockets in TIME_WAIT (ss -tan state
// time-wait, without its header line); -1 when ss fails.
func timeWait() int {
	out, err := exec.Command("ss", "-Htan", "state", "time-wait").Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "\n")
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lockoutPhase floods the primary through p with -clients held
// connections while its max_connections is -max-connections, and logs in
// directly as a user without SUPER throughout (see the package comment).
// normal is the max_connections restored afterwards.
func lockoutPhase(ctx context.Context, o options, p *proc, sb *sandbox.Cluster, root *sql.DB, normal int) (string, error) {
	const user, pw = "bench_dba", "bench-dba-pw"
	if _, err := root.ExecContext(ctx, "CREATE USER IF NOT EXISTS '"+user+"'@'%' IDENTIFIED BY '"+pw+"'"); err != nil {
		return "", err
	}
	if _, err := root.ExecContext(ctx, "GRANT SELECT ON *.* TO '"+user+"'@'%'"); err != nil {
		return "", err
	}
	if _, err := root.ExecContext(ctx, fmt.Sprintf("SET GLOBAL max_connections = %d", o.maxConnections)); err != nil {
		return "", err
	}
	defer func() {
		_, _ = root.ExecContext(context.Background(), fmt.Sprintf("SET GLOBAL max_connections = %d", normal))
	}()
	base, err := statusVar(ctx, root, "Threads_connected")
	if err != nil {
		return "", err
	}
	dcfg := mysql.NewConfig()
	dcfg.User, dcfg.Passwd, dcfg.Net, dcfg.Addr = user, pw, "tcp", sb.Nodes[0].Address
	dcfg.Timeout, dcfg.ReadTimeout = 5*time.Second, 5*time.Second
	direct, err := mysql.NewConnector(dcfg)
	if err != nil {
		return "", err
	}
	var phase atomic.Int32 // 0 during the flood, 1 after it
	var dOK, dFail [2]atomic.Int64
	var dErr atomic.Value
	dctx, dstop := context.WithCancel(ctx)
	ddone := make(chan struct{})
	go func() {
		defer close(ddone)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-dctx.Done():
				return
			case <-t.C:
			}
			i := phase.Load()
			conn, err := direct.Connect(dctx)
			if err == nil {
				err = selectOne(dctx, conn)
				conn.Close()
			}
			if dctx.Err() != nil {
				return
			}
			if err != nil {
				dFail[i].Add(1)
				dErr.CompareAndSwap(nil, err.Error())
			} else {
				dOK[i].Add(1)
			}
		}
	}()
	threads := sample(ctx, func(ctx context.Context) (int64, error) { return statusVar(ctx, root, "Threads_connected") })
	c := newClient(sb, p.addr, 30*time.Second)
	var kindMu sync.Mutex
	kinds := map[string]int{}
	var held atomic.Int64
	var ready, wg sync.WaitGroup
	ready.Add(o.clients)
	wg.Add(o.clients)
	release := make(chan struct{})
	for range o.clients {
		go func() {
			defer wg.Done()
			conn, err := c.connect(ctx)
			if err == nil {
				err = selectOne(ctx, conn)
			}
			if err != nil {
				kindMu.Lock()
				kinds[failureKind(err)]++
				kindMu.Unlock()
			} else {
				held.Add(1)
			}
			ready.Done()
			<-release
			if conn != nil {
				conn.Close()
			}
		}()
	}
	ready.Wait()
	close(release)
	wg.Wait()
	phase.Store(1)
	end := time.Now()
	var back time.Duration = -1
	for time.Since(end) < 5*time.Second {
		if n, err := statusVar(ctx, root, "Threads_connected"); err == nil && n <= base+10 && back < 0 {
			back = time.Since(end)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if back < 0 {
		_ = benchkit.WaitFor(ctx, 70*time.Second, func() bool {
			n, err := statusVar(ctx, root, "Threads_connected")
			return err == nil && n <= base+10
		})
		back = time.Since(end)
	}
	dstop()
	<-ddone
	peak := threads.stop()
	f := fmt.Sprintf("%d clients, max_connections %d (%d connected before): held %d, failed %s; direct logins during the flood %d ok / %d failed, 5 s after %d ok / %d failed; primary connections peak %d, back within %d after %s",
		o.clients, o.maxConnections, base, held.Load(), kindList(kinds), dOK[0].Load(), dFail[0].Load(), dOK[1].Load(), dFail[1].Load(),
		peak, base+10, back.Round(10*time.Millisecond))
	if e := dErr.Load(); e != nil {
		f += fmt.Sprintf("; first direct error: %v", e)
	}
	return f, nil
}
