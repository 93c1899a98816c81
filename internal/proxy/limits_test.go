package proxy

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/sys/unix"

	"github.com/switchyard-db/switchyard/internal/config"
)

func TestDefaultMaxClientConnections(t *testing.T) {
	etcd := DefaultReservedDescriptors + EmbeddedEtcdDescriptors
	for _, tc := range []struct{ budget, reserve, backend, want int }{
		{20000, DefaultReservedDescriptors, 0, 9872},
		{20000, etcd, 3 * 11000, 9744}, // caps above the budget: two per client
		{20000, etcd, 3 * 2000, 13488}, // the default cap on 3 nodes
		{20000, etcd, 3 * 200, 18888},
		{2048, etcd, 3 * 2000, 768},
		{1024, DefaultReservedDescriptors, 0, 384},
		{300, 512, 600, 1}, // a budget below the reserve still admits one
		{0, 256, 600, 0},   // unknown budget: no limit
	} {
		if got := DefaultMaxClientConnections(tc.budget, tc.reserve, tc.backend); got != tc.want {
			t.Errorf("DefaultMaxClientConnections(%d, %d, %d) = %d, want %d", tc.budget, tc.reserve, tc.backend, got, tc.want)
		}
	}
	c := &config.Config{Clusters: []config.Cluster{{Nodes: make([]config.Node, 3)}, {Nodes: make([]config.Node, 2)}}}
	c.Proxy.MaxConnectionsPerBackend = 100
	if got := BackendDescriptors(c); got != 500 {
		t.Errorf("BackendDescriptors: 5 nodes with a cap of 100 = %d, want 500", got)
	}
}

// TestMaxClientConnections: past proxy.max_client_connections a client gets
// the greeting and then MySQL error 1040 "Too many connections" (what
// go-sql-driver reports as a server error), sessions already open keep
// running statements, the refusal is counted, a closed session frees its
// slot and a raised limit applies at once.
func TestMaxClientConnections(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Proxy.MaxClientConnections = 3 })
	if lim, _ := h.srv.MaxClientConnections(); lim != 3 {
		t.Fatalf("limit %d, want 3", lim)
	}
	var open []*sql.Conn
	db := h.db("rw", "", nil)
	db.SetMaxIdleConns(10)
	ctx := context.Background()
	for range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	extra, err := sql.Open("mysql", h.dsn("ro", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	err = extra.PingContext(ctx)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 || me.Message != "Too many connections" || string(me.SQLState[:]) != "08004" {
		t.Fatalf("fourth client (other listener): %v, want error 1040 (08004) Too many connections", err)
	}
	for i, c := range open {
		var one int
		if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("open session %d after the refusal: %v", i, err)
		}
	}
	if n := counterValue(t, h, "switchyard_client_connections_refused_total"); n != 1 {
		t.Fatalf("refused counter %v, want 1", n)
	}
	_ = open[0].Close()
	db.SetMaxIdleConns(0) // close the returned connection
	deadline := time.Now().Add(5 * time.Second)
	for extra.PingContext(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a closed session did not free its slot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg := *h.cfg
	cfg.Proxy.MaxClientConnections = 10
	if err := h.srv.SetConfig(&cfg); err != nil {
		t.Fatal(err)
	}
	if lim, _ := h.srv.MaxClientConnections(); lim != 10 {
		t.Fatalf("limit after SetConfig %d, want 10", lim)
	}
	for _, c := range open[1:] {
		_ = c.Close()
	}
}

// TestAcceptSurvivesEMFILE: with the process out of descriptors accept(2)
// fails with EMFILE; the listener backs off, counts and keeps serving, and
// accepts the waiting client once a descriptor is free.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	orig := rl
	t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &orig) })
	// Fill the descriptor table, free one for the client's socket: the
	// proxy's accept then has none.
	var fillers []int
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open descriptors: %v", err)
	}
	low := rl
	low.Cur = min(uint64(len(fds)+64), rl.Max)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		fillers = append(fillers, fd)
	}
	if len(fillers) == 0 {
		t.Fatal("no descriptor left to free for the client")
	}
	_ = unix.Close(fillers[len(fillers)-1])
	fillers = fillers[:len(fillers)-1]
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	release := func() {
		for _, fd := range fillers {
			_ = unix.Close(fd)
		}
		fillers = nil
	}
	defer release()
	deadline := time.Now().Add(10 * time.Second)
	for counterValue(t, h, "switchyard_accept_errors_total") < 2 {
		if time.Now().After(deadline) {
			release()
			t.Fatal("accept never failed with the descriptor table full")
		}
		time.Sleep(10 * time.Millisecond)
	}
	errs := counterValue(t, h, "switchyard_accept_errors_total")
	release()
	// The waiting client gets its greeting (the loop backs off at most 1 s).
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [4]byte
	if _, err := client.Read(b[:]); err != nil {
		t.Fatalf("client waiting through EMFILE got no greeting: %v", err)
	}
	// Backoff, not a spin: 5 ms doubling to 1 s is at most ~12 failures in
	// the first 2 s.
	if errs > 50 {
		t.Fatalf("%v accept errors: the loop spins instead of backing off", errs)
	}
	db := h.db("rw", "", nil)
	if err := db.Ping(); err != nil {
		t.Fatalf("new client after EMFILE: %v", err)
	}
}

// fullBacklog returns the address of a listener whose accept queue is full
// (listen backlog 0, one connection queued, nothing accepting): the kernel
// drops further SYNs without an answer, as a busy server's full back_log
// does. accept takes one queued connection, freeing a slot.
func fullBacklog(t *testing.T) (addr string, accept func()) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr = (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}).String()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			break // the SYN was dropped: the queue is full
		}
		held = append(held, c)
		if i > 16 {
			t.Fatal("listen queue never filled")
		}
	}
	return addr, func() {
		nfd, _, err := unix.Accept(fd)
		if err == nil {
			t.Cleanup(func() { _ = unix.Close(nfd) })
		}
	}
}

// TestDialBackendRetriesDroppedSYN: a connect whose first SYN is dropped by
// a full listen queue succeeds within the connect timeout through the
// second SYN; the plain dial of the same timeout fails (Linux resends a
// SYN only after 1 s).
func TestDialBackendRetriesDroppedSYN(t *testing.T) {
	b := newBackendTCP(time.Second, time.Second)
	for _, retry := range []bool{false, true} {
		addr, accept := fullBacklog(t)
		time.AfterFunc(100*time.Millisecond, accept) // a slot frees up after the first SYN
		start := time.Now()
		var c net.Conn
		var err error
		if retry {
			c, err = b.dialBackend(time.Second, addr)
		} else {
			c, err = b.dialer(time.Second).Dial("tcp", addr)
		}
		took := time.Since(start)
		if c != nil {
			_ = c.Close()
		}
		var ne net.Error
		switch {
		case retry && err != nil:
			t.Fatalf("dialBackend: %v after %v, want a connection through the second SYN", err, took)
		case !retry && !(errors.As(err, &ne) && ne.Timeout()):
			t.Fatalf("plain dial: %v after %v, want a timeout (the dropped SYN is resent only after 1 s)", err, took)
		}
		t.Logf("retry=%v: err=%v after %v", retry, err, took)
	}
}

// TestDialBackendRefusedAtOnce: a refused connect is not retried.
func TestDialBackendRefusedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	start := time.Now()
	_, err = newBackendTCP(time.Second, time.Second).dialBackend(time.Second, addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v, want ECONNREFUSED", err)
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("refused connect took %v, want it at once", took)
	}
}

// TestDialBackendTimeout: a connect that never gets an answer fails after
// the timeout with a timeout error, having raced its attempts.
func TestDialBackendTimeout(t *testing.T) {
	addr, _ := fullBacklog(t)
	start := time.Now()
	_, err := newBackendTCP(time.Second, time.Second).dialBackend(600*time.Millisecond, addr)
	took := time.Since(start)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err %v, want a timeout", err)
	}
	if took < 550*time.Millisecond || took > 6*time.Second {
		t.Fatalf("took %v, want about the 600ms timeout", took)
	}
}

// TestRefusalsInProgressBounded: while maxRefusing refused clients have
// not answered the greeting, the next client gets ERR 1040 as its first
// packet (no greeting, no goroutine held), as MariaDB answers past its
// extra connection; go-sql-driver reports it as error 1040.
func TestRefusalsInProgressBounded(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Proxy.MaxClientConnections = 1 })
	db := h.db("rw", "", nil)
	held, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := h.srv.ListenerAddr("rw")
	for range maxRefusing {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var b [4]byte
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(b[:]); err != nil { // the greeting: a refusal in progress
			t.Fatal(err)
		}
	}
	extra, err := sql.Open("mysql", h.dsn("rw", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	err = extra.Ping()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 {
		t.Fatalf("client past %d refusals in progress: %v, want error 1040", maxRefusing, err)
	}
	var one int
	if err := held.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the open session: %v", err)
	}
}
