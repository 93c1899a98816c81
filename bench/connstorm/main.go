// Command connstorm measures what a connection storm does to backend
// connects: a 1-node MariaDB sandbox (back_log 250: the server's listen
// queue; max_connections raised above -clients at run time, so that the
// listen queue is the only limit) behind one proxy, and -clients clients
// that all connect through the rw listener at once, log in (the proxy then
// opens a backend connection), run SELECT 1 and disconnect. The server's
// listen queue overflows and the kernel drops SYNs; Linux resends a
// dropped SYN only after 1 s, which is proxy.connect_timeout's default.
// Per round it prints the logins that succeeded and the failures by kind:
// "connect timeout" (the proxy's backend connect got no answer within
// proxy.connect_timeout), 1040 (the server's max_connections), other.
// Figures depend on the machine's load: run it on a quiet machine and on
// a busy one.
//
// Usage: go run ./bench/connstorm [-clients 5000] [-rounds 5] [-connect-timeout 1s]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func main() {
	clients := flag.Int("clients", 5000, "clients connecting at once per round")
	rounds := flag.Int("rounds", 5, "rounds")
	connectTimeout := flag.Duration("connect-timeout", time.Second, "proxy.connect_timeout")
	flag.Parse()
	if err := run(*clients, *rounds, *connectTimeout); err != nil {
		fmt.Fprintln(os.Stderr, "connstorm:", err)
		os.Exit(1)
	}
}

func run(clients, rounds int, connectTimeout time.Duration) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sy-bench-connstorm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addrs, err := freeAddrs(2)
	if err != nil {
		return err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: filepath.Join(dir, "sb"), Nodes: 1, StopWithParent: true,
		TemplateDir: filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid())),
		ListenerRW:  addrs[0], ListenerRO: addrs[1]})
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sandbox.Down(dctx, sb.Dir, true)
	}()
	// max_connections above the storm, so that the only limit left is the
	// listen queue (back_log stays 250: it is read at start only).
	root, err := sql.Open("mysql", sb.RootDSN(0))
	if err != nil {
		return err
	}
	_, err = root.Exec(fmt.Sprintf("SET GLOBAL max_connections = %d", clients+100))
	var backLog, maxConns int
	if err == nil {
		err = root.QueryRow("SELECT @@back_log, @@max_connections").Scan(&backLog, &maxConns)
	}
	root.Close()
	if err != nil {
		return fmt.Errorf("raise max_connections: %w", err)
	}
	cfg := sb.Config()
	cfg.Proxy.ConnectTimeout = config.Duration(connectTimeout)
	cfg.Proxy.MaxConnectionsPerBackend = 100000
	cfg.Listeners[0].Address, cfg.Listeners[1].Address = addrs[0], addrs[1]
	srv, err := proxy.New(proxy.Options{Config: cfg, ID: "bench-proxy", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Close()
	n := sb.Nodes[0]
	srv.SetClusterState(topo.ClusterState{Cluster: sandbox.ClusterName, Epoch: 1, Phase: topo.PhaseStable, Primary: n.Name,
		Leader: "bench", UpdatedAt: time.Now(), Nodes: []topo.NodeState{{Name: n.Name, Address: n.Address, Role: topo.RolePrimary}}})
	fmt.Printf("connection storm: %d clients at once through the rw listener, 1 MariaDB node (max_connections %d, back_log %d), proxy.connect_timeout %s, %d round(s)\n",
		clients, maxConns, backLog, connectTimeout, rounds)
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/?timeout=30s&readTimeout=30s", sb.AppUser, sb.AppPassword, addrs[0])
	for r := 1; r <= rounds; r++ {
		ok, fails, took := storm(dsn, clients)
		var kinds []string
		for k, v := range fails {
			kinds = append(kinds, fmt.Sprintf("%s: %d", k, v))
		}
		sort.Strings(kinds)
		fmt.Printf("round %d: %d ok, failures {%s} in %s\n", r, ok, strings.Join(kinds, ", "), took.Round(time.Millisecond))
		time.Sleep(2 * time.Second) // let TIME_WAIT and the server's threads settle
	}
	return nil
}

// storm connects clients at once and returns the successes and the
// failures by kind.
func storm(dsn string, clients int) (int, map[string]int, time.Duration) {
	var mu sync.Mutex
	ok := 0
	fails := map[string]int{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				panic(err)
			}
			defer db.Close()
			<-start
			var one int
			err = db.QueryRow("SELECT 1").Scan(&one)
			mu.Lock()
			defer mu.Unlock()
			var me *mysql.MySQLError
			switch {
			case err == nil:
				ok++
			case errors.As(err, &me) && strings.Contains(me.Message, "connect timeout"):
				fails["connect timeout"]++
			case errors.As(err, &me):
				k := strconv.Itoa(int(me.Number))
				if os.Getenv("CONNSTORM_DETAIL") != "" {
					k += " " + me.Message
				}
				fails[k]++
			default:
				msg := err.Error()
				if len(msg) > 70 {
					msg = msg[:70]
				}
				fails["other: "+msg]++
			}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return ok, fails, time.Since(t0)
}

func freeAddrs(n int) ([]string, error) {
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out, nil
}
