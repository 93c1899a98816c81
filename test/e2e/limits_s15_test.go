package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// s15Descriptors is RLIMIT_NOFILE (soft and hard) of the `up` process in
// TestS15DescriptorExhaustion.
const s15Descriptors = 2048

// TestS15DescriptorExhaustion replays S15: `switchyard up` (embedded etcd,
// controller, proxy) runs with RLIMIT_NOFILE 2048 and clients open
// connections past its descriptor budget (1,100 sessions of two
// descriptors each would need 2,200), then 200 more. Expected: the logins
// past proxy.max_client_connections (derived: (2048 - 512) / 2 = 768) get
// MySQL error 1040 "Too many connections" and nothing else fails; every
// session already open keeps running statements; the embedded etcd keeps
// working (a write and a read through it, /readyz ready); the process never
// exits. Without the limit the budget runs out: backend connects and
// accepts fail with EMFILE and clients get other errors, and the embedded
// etcd can exit the whole process when it cannot purge its WAL.
func TestS15DescriptorExhaustion(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 2})
	dir := t.TempDir()
	cfg := sb.Config()
	cfg.Etcd.Embedded = config.EmbeddedEtcd{DataDir: filepath.Join(dir, "etcd"),
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t)}
	cfg.Admin.Address = sandboxtest.FreeAddr(t)
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = sandboxtest.FreeAddr(t)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "up.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lim := strconv.Itoa(s15Descriptors)
	cmd := exec.Command(prlimit, "--nofile="+lim+":"+lim, binPath, "up", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := &upProcess{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(up.exited) }()
	t.Cleanup(func() { up.kill(syscall.SIGTERM) })
	failf := func(format string, args ...any) {
		t.Helper()
		out, _ := os.ReadFile(logPath)
		t.Fatalf(format+"\n--- up log (tail) ---\n%s", append(args, tailText(string(out), 4000))...)
	}
	exited := func() bool {
		select {
		case <-up.exited:
			return true
		default:
			return false
		}
	}

	admin := "http://" + cfg.Admin.Address
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := httpGet(admin + "/readyz"); code != 200; code, _ = httpGet(admin + "/readyz") {
		if exited() || time.Now().After(deadline) {
			failf("up not ready (readyz %d, exited %v)", code, exited())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, metrics := httpGet(admin + "/metrics")
	m := regexp.MustCompile(`(?m)^switchyard_client_connections_max (\d+)`).FindStringSubmatch(metrics)
	if m == nil {
		failf("no switchyard_client_connections_max in /metrics")
	}
	limit, _ := strconv.Atoi(m[1])
	if want := (s15Descriptors - 512) / 2; limit != want {
		failf("derived max_client_connections %d, want %d", limit, want)
	}

	var rw string
	for _, l := range cfg.Listeners {
		if l.Role == "primary" {
			rw = l.Address
		}
	}
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=5s&readTimeout=10s&writeTimeout=10s", sb.AppUser, sb.AppPassword, rw)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(2000)
	db.SetConnMaxLifetime(0)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS s15 (id INT PRIMARY KEY AUTO_INCREMENT, at DATETIME(6))"); err != nil {
		failf("create table: %v", err)
	}

	// open logs in n clients, 32 at a time, and returns the sessions that
	// logged in and the number refused with 1040; any other error fails.
	open := func(n int) ([]*sql.Conn, int) {
		var mu sync.Mutex
		var conns []*sql.Conn
		refused := 0
		var other []error
		work := make(chan struct{})
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					c, err := db.Conn(ctx)
					if err == nil {
						err = c.PingContext(ctx)
					}
					mu.Lock()
					var me *mysql.MySQLError
					switch {
					case err == nil:
						conns = append(conns, c)
					case errors.As(err, &me) && me.Number == 1040:
						refused++
					default:
						other = append(other, err)
					}
					mu.Unlock()
				}
			}()
		}
		for range n {
			work <- struct{}{}
		}
		close(work)
		wg.Wait()
		if len(other) > 0 {
			failf("%d of %d logins failed with something else than 1040, first: %v", len(other), n, other[0])
		}
		return conns, refused
	}
	start := time.Now()
	held, refused := open(1100)
	t.Logf("1,100 clients: %d sessions, %d refused with 1040 (%s)", len(held), refused, time.Since(start).Round(time.Millisecond))
	if len(held) != limit-1 && len(held) != limit {
		// The pool's own connection from CREATE TABLE may hold one slot.
		failf("%d sessions logged in, want the limit %d", len(held), limit)
	}
	more, refusedMore := open(200)
	if len(more) != 0 || refusedMore != 200 {
		failf("200 more clients: %d logged in, %d refused; want all refused with 1040", len(more), refusedMore)
	}

	// Every session already open keeps running statements.
	var failed int
	var first error
	for i, c := range held {
		q := "SELECT 1"
		if i%50 == 0 {
			q = "INSERT INTO s15 (at) VALUES (NOW(6))"
		}
		if _, err := c.ExecContext(ctx, q); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		failf("%d of %d open sessions failed a statement after the refusals, first: %v", failed, len(held), first)
	}

	// The embedded etcd keeps working: a write and a read through it.
	st, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{"http://" + cfg.Etcd.Embedded.ClientAddress}, DialTimeout: 2 * time.Second})
	if err != nil {
		failf("etcd client: %v", err)
	}
	defer st.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := st.Create(sctx, cfg.Etcd.Prefix+"/s15-probe", []byte(time.Now().String())); err != nil {
		failf("write to the embedded etcd under exhaustion: %v", err)
	}
	if _, err := st.Get(sctx, topo.Keys{Prefix: cfg.Etcd.Prefix}.Config()); err != nil {
		failf("read from the embedded etcd under exhaustion: %v", err)
	}
	if code, body := httpGet(admin + "/readyz"); code != 200 {
		failf("readyz under exhaustion: %d %s", code, body)
	}
	_, metrics = httpGet(admin + "/metrics")
	t.Logf("refused (by /metrics): %s", regexp.MustCompile(`(?m)^switchyard_client_connections_refused_total\{.*$`).FindAllString(metrics, -1))

	for _, c := range held {
		_ = c.Close()
	}
	// Slots free again: a new client logs in.
	deadline = time.Now().Add(10 * time.Second)
	for {
		c, err := db.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
			c.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			failf("no login after the sessions closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if exited() {
		failf("up exited: %v", cmd.ProcessState)
	}
}

// httpGet returns the status code and body of a GET (0 on a transport error).
func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
