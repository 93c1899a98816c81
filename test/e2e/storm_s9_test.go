package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// s9Cap is proxy.max_connections_per_backend in TestS9ConnectionStorm;
// s9RSSGrowth bounds the growth of the proxy process's resident size during
// the storm: 40 KB per storm client, about ten times what it grows by on
// this machine.
const (
	s9Cap       = 200
	s9RSSGrowth = 200 << 20
)

// TestS9ConnectionStorm (SCENARIOS.md S9), session pooling: 5,000
// clients connect to the rw listener within about 2 s, each runs SELECT 1
// and disconnects at once, while 8 ledger writers run through the same
// listener. With proxy.max_connections_per_backend at 200 the storm clients
// share the pooled backend connections the ones before them gave back
// (reset with COM_RESET_CONNECTION), and a login that finds the cap reached
// waits for one within proxy.pool.wait_timeout. Asserted: every storm client
// logs in and gets its row (no 1040, no timeout, no reset); the 8 writers
// see no error and every acknowledged write is on the primary; no node ever
// has more connections than the cap plus the controller's and replication's
// own (Threads_connected sampled every 20 ms); the proxy process's resident
// size grows by less than s9RSSGrowth; and after the storm the pooled
// connections are closed within proxy.pool.idle_timeout (2 s here).
func TestS9ConnectionStorm(t *testing.T) {
	s9Storm(t, config.PoolingSession, false)
}

// TestS9ConnectionStormTransactionPooling (SCENARIOS.md S9), transaction
// pooling: as TestS9ConnectionStorm, but the rw listener multiplexes
// (listeners[].pooling: transaction) and every storm client holds its
// session until all 5,000 have logged in and run SELECT 1, so 5,000 client
// sessions are open at once on at most 200 backend connections. Asserted:
// the same as TestS9ConnectionStorm.
func TestS9ConnectionStormTransactionPooling(t *testing.T) {
	s9Storm(t, config.PoolingTransaction, true)
}

// s9Storm runs the S9 storm through an rw listener with the given pooling;
// hold keeps every storm session open until all have run their statement.
func s9Storm(t *testing.T, pooling string, hold bool) {
	raiseNoFile(t)
	// The proxy runs as its own process (`switchyard up`, built without
	// the race detector) so that its resident size is its own.
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 3})
	dir := t.TempDir()
	cfg := sb.Config()
	cfg.Etcd.Embedded = config.EmbeddedEtcd{DataDir: filepath.Join(dir, "etcd"),
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t)}
	cfg.Admin.Address = "off"
	cfg.Proxy.MaxConnectionsPerBackend = s9Cap
	cfg.Proxy.Pool.IdleTimeout = config.Duration(2 * time.Second)
	var rwAddr string
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = sandboxtest.FreeAddr(t)
		if cfg.Listeners[i].Role == "primary" {
			rwAddr = cfg.Listeners[i].Address
			cfg.Listeners[i].Pooling = pooling
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, logPath := filepath.Join(dir, "switchyard.yaml"), filepath.Join(dir, "up.log")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	up := startUp(t, cfgPath, logPath)
	ctx := context.Background()
	rw := fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=2s&readTimeout=30s&writeTimeout=30s", sb.AppUser, sb.AppPassword, rwAddr)
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		err := loadgen.Setup(ctx, rw, "")
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("the rw listener takes no writes 30 s after switchyard up started: %v\n%s", err, tailText(string(out), 3000))
		}
	}
	direct := func(i int) *sql.DB {
		db, err := sql.Open("mysql", sb.RootDSN(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	resc := make(chan *loadgen.Result, 1)
	go func() {
		r, err := loadgen.Run(lctx, loadgen.Options{RW: rw, Writers: 8, Interval: 5 * time.Millisecond})
		if err != nil {
			t.Error(err)
		}
		resc <- r
	}()
	time.Sleep(time.Second) // the writers hold their sessions before the storm

	// Threads_connected on every node, sampled every 20 ms.
	var peak [3]atomic.Int64
	sctx, scancel := context.WithCancel(ctx)
	var swg sync.WaitGroup
	base := make([]int64, len(sb.Nodes))
	dbs := make([]*sql.DB, len(sb.Nodes))
	for i := range sb.Nodes {
		db := direct(i)
		dbs[i] = db
		db.SetMaxOpenConns(1)
		base[i] = threadsConnected(t, db)
		swg.Add(1)
		go func() {
			defer swg.Done()
			for sctx.Err() == nil {
				var name, v string
				if err := db.QueryRowContext(sctx, "SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &v); err == nil {
					n, _ := strconv.ParseInt(v, 10, 64)
					if n > peak[i].Load() {
						peak[i].Store(n)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	pid := up.cmd.Process.Pid
	rss0 := procRSS(t, pid)
	var peakRSS atomic.Int64
	swg.Add(1)
	go func() {
		defer swg.Done()
		for sctx.Err() == nil {
			if r := procRSS(t, pid); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// The storm: 5,000 clients, started over 2 s.
	const clients = 5000
	ccfg := mysql.NewConfig()
	ccfg.User, ccfg.Passwd, ccfg.Net, ccfg.Addr = sb.AppUser, sb.AppPassword, "tcp", rwAddr
	ccfg.Timeout, ccfg.ReadTimeout, ccfg.WriteTimeout = 20*time.Second, 20*time.Second, 20*time.Second
	connector, err := mysql.NewConnector(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	var loggedIn, refused atomic.Int64
	var failMu sync.Mutex
	var failures []string
	codes := map[uint16]int{}
	var wg, connected sync.WaitGroup
	release := make(chan struct{})
	start := time.Now()
	wg.Add(clients)
	connected.Add(clients)
	for i := range clients {
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 2 * time.Second / clients)
			db := sql.OpenDB(connector)
			defer db.Close()
			var one int
			err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
			var me *mysql.MySQLError
			switch {
			case err == nil:
				loggedIn.Add(1)
			case errors.As(err, &me):
				refused.Add(1)
				failMu.Lock()
				codes[me.Number]++
				failMu.Unlock()
			default:
				failMu.Lock()
				failures = append(failures, err.Error())
				failMu.Unlock()
			}
			if !hold {
				db.Close()
			}
			connected.Done()
			<-release
		}()
	}
	connected.Wait()
	all := time.Since(start)
	close(release)
	wg.Wait()
	t.Logf("storm (%s pooling, hold %v): %d clients in %s: %d logged in and ran SELECT 1, %d refused with a MySQL error %v, %d other failures",
		pooling, hold, clients, all.Round(time.Millisecond), loggedIn.Load(), refused.Load(), codes, len(failures))

	// After the storm the pooled connections are closed once idle for
	// proxy.pool.idle_timeout.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := threadsConnected(t, dbs[0])
		if n <= base[0]+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the storm node1 has %d connections, %d before it", n, base[0])
		}
	}
	lcancel()
	r := <-resc
	scancel()
	swg.Wait()

	for i := range sb.Nodes {
		t.Logf("%s: Threads_connected %d before the storm, peak %d", sb.Nodes[i].Name, base[i], peak[i].Load())
	}
	t.Logf("proxy process (switchyard up) RSS %.0f MB before, peak %.0f MB", mb(rss0), mb(peakRSS.Load()))
	t.Logf("writers: %d writes, %d errors %v", r.Writes, r.Errors(), r.FirstErrors)

	if len(failures) > 0 {
		t.Errorf("%d storm clients got no MySQL answer (a hang, a reset, a dead connection); first: %s", len(failures), failures[0])
	}
	if refused.Load() > 0 {
		t.Errorf("%d storm clients refused with a MySQL error %v, want none", refused.Load(), codes)
	}
	if loggedIn.Load() != clients {
		t.Errorf("%d of %d storm clients logged in and ran SELECT 1, want all", loggedIn.Load(), clients)
	}
	// A node's own connections besides the proxy's: the controller's
	// probes, replication, and this test's samplers. The primary's
	// connections from the proxy can exceed the cap by none.
	if limit := base[0] + s9Cap; peak[0].Load() > limit {
		t.Errorf("node1: Threads_connected peaked at %d, above its %d before the storm plus the cap %d", peak[0].Load(), base[0], s9Cap)
	}
	for i := 1; i < len(sb.Nodes); i++ {
		if peak[i].Load() > base[i]+10 {
			t.Errorf("%s (a replica, not routed by rw): Threads_connected peaked at %d, %d before the storm", sb.Nodes[i].Name, peak[i].Load(), base[i])
		}
	}
	if grew := peakRSS.Load() - rss0; grew > s9RSSGrowth {
		t.Errorf("proxy process RSS grew by %.0f MB during the storm, want < %.0f MB", mb(grew), mb(s9RSSGrowth))
	}
	if r.Errors() != 0 {
		t.Errorf("the 8 ledger writers saw %d errors during the storm: %v", r.Errors(), r.FirstErrors)
	}
	if r.Writes == 0 {
		t.Errorf("the ledger writers made no write")
	}
	missing, err := loadgen.Check(ctx, rw, "", r.Acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("%d acknowledged writes missing (first %d)", len(missing), missing[0])
	}
}

// raiseNoFile raises the test process's RLIMIT_NOFILE soft limit to its
// hard limit; it skips the test when that is too low for S9 (the proxy and
// its clients are in this process: two descriptors per storm client).
func raiseNoFile(t *testing.T) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < 12000 {
		t.Skipf("RLIMIT_NOFILE hard limit %d: S9 needs 12000 descriptors (raise it with ulimit -Hn or limits.conf)", lim.Max)
	}
	old := lim.Cur
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lim.Cur = old
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	})
}

func threadsConnected(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// procRSS is process pid's resident set size in bytes.
func procRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0 // exited: the test sees it elsewhere
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &kb); err == nil {
				return kb << 10
			}
		}
	}
	t.Errorf("/proc/%d/status has no VmRSS", pid)
	return 0
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
