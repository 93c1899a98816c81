package sandbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// MySQL/MariaDB error numbers asserted below.
const (
	erSpecificAccessDenied = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
	erOptionPreventsStmt   = 1290 // ER_OPTION_PREVENTS_STATEMENT (read_only)
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mysqlErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func rootDB(t *testing.T, c *sandbox.Cluster, i int) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", c.RootDSN(i))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func queryString(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	var s string
	if err := db.QueryRow(q, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

// waitGTID waits until node i has applied pos.
func waitGTID(t *testing.T, c *sandbox.Cluster, i int, pos string) {
	t.Helper()
	var res sql.NullInt64
	if err := rootDB(t, c, i).QueryRow("SELECT MASTER_GTID_WAIT(?, 20)", pos).Scan(&res); err != nil {
		t.Fatalf("%s: MASTER_GTID_WAIT: %v", c.Nodes[i].Name, err)
	}
	if !res.Valid || res.Int64 != 0 {
		t.Fatalf("%s: did not apply %s within 20s (result %v)", c.Nodes[i].Name, pos, res)
	}
}

// serverIDsIn returns the server ids that appear in a MariaDB GTID position
// ("domain-server-seqno,...").
func serverIDsIn(t *testing.T, pos string) []int {
	t.Helper()
	var ids []int
	if pos == "" {
		return ids
	}
	for _, g := range strings.Split(pos, ",") {
		parts := strings.Split(strings.TrimSpace(g), "-")
		if len(parts) != 3 {
			t.Fatalf("bad GTID %q in %q", g, pos)
		}
		id, err := strconv.Atoi(parts[1])
		if err != nil {
			t.Fatalf("bad server id in %q: %v", g, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestCluster(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{})
	ctx := ctxT(t, 90*time.Second)

	if len(c.Nodes) != 3 {
		t.Fatalf("nodes = %d, want 3", len(c.Nodes))
	}
	t.Run("topology", func(t *testing.T) {
		st := c.Status(ctx)
		for i, s := range st {
			if !s.Running || !s.Reachable || s.PID == 0 {
				t.Fatalf("%s: running=%v reachable=%v pid=%d err=%q", s.Name, s.Running, s.Reachable, s.PID, s.Error)
			}
			if s.ServerID != uint32(i+1) {
				t.Errorf("%s: server_id %d, want %d", s.Name, s.ServerID, i+1)
			}
		}
		if st[0].ReadOnly || st[0].ReplicatingFrom != "" {
			t.Errorf("node1: read_only=%v replicating from %q; want writable primary", st[0].ReadOnly, st[0].ReplicatingFrom)
		}
		for _, s := range st[1:] {
			if !s.ReadOnly || s.SourceNode != "node1" || s.ReplicatingFrom != c.Nodes[0].Address || s.IORunning != "Yes" || s.SQLRunning != "Yes" {
				t.Errorf("%s: read_only=%v source=%q (%s) IO=%q SQL=%q; want read-only replica of node1 with both threads running",
					s.Name, s.ReadOnly, s.SourceNode, s.ReplicatingFrom, s.IORunning, s.SQLRunning)
			}
		}
	})

	t.Run("write replicates without errant GTIDs", func(t *testing.T) {
		app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
		for _, q := range []string{
			"CREATE TABLE t_repl (id INT PRIMARY KEY, v VARCHAR(20))",
			"INSERT INTO t_repl VALUES (1, 'hello'), (2, 'world')",
		} {
			if _, err := app.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		pos := queryString(t, rootDB(t, c, 0), "SELECT @@gtid_binlog_pos")
		for i := 1; i < len(c.Nodes); i++ {
			waitGTID(t, c, i, pos)
			db := sandboxtest.DB(t, c, i, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
			if got := queryString(t, db, "SELECT GROUP_CONCAT(v ORDER BY id) FROM t_repl"); got != "hello,world" {
				t.Errorf("%s: rows %q, want hello,world", c.Nodes[i].Name, got)
			}
		}
		for i := range c.Nodes {
			db := rootDB(t, c, i)
			cur := queryString(t, db, "SELECT @@gtid_current_pos")
			if cur != pos {
				t.Errorf("%s: gtid_current_pos %q, want %q", c.Nodes[i].Name, cur, pos)
			}
			for _, id := range serverIDsIn(t, queryString(t, db, "SELECT @@gtid_binlog_pos")) {
				if id != 1 {
					t.Errorf("%s: binlog holds GTIDs of server %d: errant transaction", c.Nodes[i].Name, id)
				}
			}
		}
	})

	t.Run("up again is idempotent", func(t *testing.T) {
		before := pids(c)
		again, err := sandbox.Up(ctx, sandbox.Options{Dir: c.Dir})
		if err != nil {
			t.Fatal(err)
		}
		if after := pids(again); !reflect.DeepEqual(before, after) {
			t.Fatalf("pids changed: before %v, after %v", before, after)
		}
		if again.AppPassword != c.AppPassword || again.RootPassword != c.RootPassword {
			t.Error("passwords changed on second up")
		}
		loaded, err := sandbox.Load(c.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(loaded.Nodes, c.Nodes) {
			t.Errorf("Load nodes differ:\n%+v\n%+v", loaded.Nodes, c.Nodes)
		}
		if _, err := sandbox.Up(ctx, sandbox.Options{Dir: c.Dir, Nodes: 2}); err == nil {
			t.Error("up with a different node count succeeded, want an error")
		}
	})

	t.Run("read_only fences the application user", func(t *testing.T) {
		app := sandboxtest.DB(t, c, 1, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
		_, err := app.Exec("INSERT INTO t_repl VALUES (3, 'fenced')")
		if mysqlErrNo(err) != erOptionPreventsStmt {
			t.Errorf("app insert on read-only replica: err %v, want error %d", err, erOptionPreventsStmt)
		}
		_, err = app.Exec("SET GLOBAL read_only=0")
		if mysqlErrNo(err) != erSpecificAccessDenied {
			t.Errorf("app SET GLOBAL read_only: err %v, want error %d", err, erSpecificAccessDenied)
		}
		if ro := queryString(t, rootDB(t, c, 1), "SELECT @@read_only"); ro != "1" {
			t.Errorf("node2 read_only = %s after app attempts, want 1", ro)
		}
	})

	t.Run("monitor user privileges", func(t *testing.T) {
		mon := sandboxtest.DB(t, c, 2, c.MonitorUser, c.MonitorPassword, "")
		for _, q := range []string{
			"SET GLOBAL read_only=0",
			"SET GLOBAL read_only=1",
			"STOP SLAVE",
			"SET GLOBAL slave_net_timeout=3",
			"CHANGE MASTER TO MASTER_HEARTBEAT_PERIOD=0.1",
			"START SLAVE",
			"SHOW SLAVE STATUS",
			"SHOW MASTER STATUS",
			"SHOW PROCESSLIST",
			"SELECT COUNT(*) FROM mysql.user",
		} {
			if _, err := mon.Exec(q); err != nil {
				t.Errorf("monitor: %s: %v", q, err)
			}
		}
		if _, err := sandboxtest.DB(t, c, 0, c.MonitorUser, c.MonitorPassword, "").Exec("SHOW SLAVE HOSTS"); err != nil {
			t.Errorf("monitor: SHOW SLAVE HOSTS on primary: %v", err)
		}
		// KILL another user's connection.
		app := sandboxtest.DB(t, c, 2, c.AppUser, c.AppPassword, "")
		app.SetMaxOpenConns(1)
		app.SetMaxIdleConns(1)
		id := queryString(t, app, "SELECT CONNECTION_ID()")
		if _, err := mon.Exec("KILL " + id); err != nil {
			t.Errorf("monitor: KILL app connection %s: %v", id, err)
		}
		// The killed thread leaves the processlist once it has ended: soon,
		// not at once on a loaded machine.
		var n int
		var err error
		for until := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err = rootDB(t, c, 2).QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?", id).Scan(&n)
			if (err == nil && n == 0) || time.Now().After(until) {
				break
			}
		}
		if err != nil || n != 0 {
			t.Errorf("app connection %s still listed 5s after KILL (count %d, err %v)", id, n, err)
		}
		st := c.Status(ctx)[2]
		if st.IORunning != "Yes" || st.SQLRunning != "Yes" || !st.ReadOnly {
			t.Errorf("node3 after monitor operations: IO=%q SQL=%q read_only=%v", st.IORunning, st.SQLRunning, st.ReadOnly)
		}
	})

	t.Run("stop and start a replica", func(t *testing.T) {
		oldPID := c.PID(2)
		if err := c.StopNode(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if st := c.Status(ctx)[2]; st.Running || st.Reachable {
			t.Fatalf("node3 after StopNode: running=%v reachable=%v", st.Running, st.Reachable)
		}
		if processAlive(oldPID) {
			t.Fatalf("pid %d still alive after StopNode", oldPID)
		}
		app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
		if _, err := app.Exec("INSERT INTO t_repl VALUES (10, 'while down')"); err != nil {
			t.Fatal(err)
		}
		if err := c.StartNode(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if c.PID(2) == 0 || c.PID(2) == oldPID {
			t.Errorf("pid after StartNode = %d (old %d)", c.PID(2), oldPID)
		}
		waitGTID(t, c, 2, queryString(t, rootDB(t, c, 0), "SELECT @@gtid_binlog_pos"))
		st := c.Status(ctx)[2]
		if !st.ReadOnly || st.IORunning != "Yes" || st.SQLRunning != "Yes" {
			t.Errorf("node3 after restart: read_only=%v IO=%q SQL=%q", st.ReadOnly, st.IORunning, st.SQLRunning)
		}
	})

	t.Run("killed node is restarted by up", func(t *testing.T) {
		before := pids(c)
		if err := c.KillNode(1); err != nil {
			t.Fatal(err)
		}
		if processAlive(before[1]) || c.PID(1) != 0 {
			t.Fatalf("node2 (pid %d) alive after KillNode", before[1])
		}
		again, err := sandbox.Up(ctx, sandbox.Options{Dir: c.Dir})
		if err != nil {
			t.Fatal(err)
		}
		after := pids(again)
		if after[0] != before[0] || after[2] != before[2] || after[1] == 0 || after[1] == before[1] {
			t.Errorf("pids before %v after %v: want node2 restarted, others untouched", before, after)
		}
		waitGTID(t, c, 1, queryString(t, rootDB(t, c, 0), "SELECT @@gtid_binlog_pos"))
	})

	t.Run("primary crash and restart", func(t *testing.T) {
		if err := c.KillNode(0); err != nil {
			t.Fatal(err)
		}
		// Replicas notice the dead primary (connection refused on loopback,
		// heartbeat 1 s otherwise) and keep retrying every second.
		deadline := time.Now().Add(20 * time.Second)
		for {
			st := c.Status(ctx)
			if st[1].IORunning == "Connecting" && st[2].IORunning == "Connecting" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica IO threads %q/%q 20s after the primary was killed, want Connecting", st[1].IORunning, st[2].IORunning)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := c.StartNode(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// Every node restarts read-only (its defaults file says so); making
		// the primary writable again is the controller's job, done here by hand.
		if ro := queryString(t, rootDB(t, c, 0), "SELECT @@read_only"); ro != "1" {
			t.Fatalf("restarted primary read_only=%s, want 1 (restart-safe default)", ro)
		}
		if _, err := rootDB(t, c, 0).Exec("SET GLOBAL read_only=0"); err != nil {
			t.Fatal(err)
		}
		app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
		if _, err := app.Exec("INSERT INTO t_repl VALUES (20, 'after crash')"); err != nil {
			t.Fatalf("write on restarted primary: %v", err)
		}
		pos := queryString(t, rootDB(t, c, 0), "SELECT @@gtid_binlog_pos")
		waitGTID(t, c, 1, pos)
		waitGTID(t, c, 2, pos)
	})

	t.Run("generated config loads", func(t *testing.T) {
		info, err := os.Stat(c.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", c.ConfigPath, info.Mode().Perm())
		}
		loaded, err := config.Load(c.ConfigPath)
		if err != nil {
			t.Fatalf("config.Load: %v", err)
		}
		got, err := loaded.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.Config().Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n"); len(gl) != len(wl) {
			t.Errorf("loaded config has %d lines, Config() %d", len(gl), len(wl))
		} else {
			for k := range gl {
				if gl[k] != wl[k] && !strings.Contains(wl[k], "password") {
					t.Errorf("loaded config line %d = %q, Config() has %q", k+1, gl[k], wl[k])
				} else if gl[k] != wl[k] {
					t.Errorf("loaded config line %d (a password) differs from Config()", k+1)
				}
			}
		}
		cl := loaded.Cluster(sandbox.ClusterName)
		if cl == nil || len(cl.Nodes) != 3 || cl.Nodes[1].Address != c.Nodes[1].Address {
			t.Fatalf("cluster %q in config: %+v", sandbox.ClusterName, cl)
		}
		if p, err := loaded.Credentials.Monitor.Resolve(); err != nil || p != c.MonitorPassword {
			t.Errorf("monitor password does not resolve to the sandbox's (err %v)", err)
		}
		if loaded.Etcd.Embedded.DataDir != filepath.Join(c.Dir, "etcd") {
			t.Errorf("etcd data dir %q", loaded.Etcd.Embedded.DataDir)
		}
		if loaded.Listeners[0].Address != c.ListenerRW || loaded.Listeners[1].Address != c.ListenerRO {
			t.Errorf("listeners %+v, want rw %s ro %s", loaded.Listeners, c.ListenerRW, c.ListenerRO)
		}
	})

	t.Run("up after the primary or every node stopped gives writes back to the primary", func(t *testing.T) {
		writable := func(what string, id int) {
			t.Helper()
			st := c.Status(ctx)
			if st[0].ReadOnly {
				t.Fatalf("%s: node1 read_only=ON: every write is refused", what)
			}
			for _, s := range st[1:] {
				if !s.ReadOnly || s.SourceNode != "node1" {
					t.Errorf("%s: %s read_only=%v source %q; want a read-only replica of node1", what, s.Name, s.ReadOnly, s.SourceNode)
				}
			}
			app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, sandbox.SysbenchDatabase)
			if _, err := app.Exec("INSERT INTO t_repl VALUES (?, ?)", id, what); err != nil {
				t.Fatalf("%s: write on node1: %v", what, err)
			}
		}
		if err := c.KillNode(0); err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.Up(ctx, sandbox.Options{Dir: c.Dir}); err != nil {
			t.Fatal(err)
		}
		writable("node1 killed", 30)
		if err := sandbox.Down(ctx, c.Dir, false); err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.Up(ctx, sandbox.Options{Dir: c.Dir}); err != nil {
			t.Fatal(err)
		}
		writable("all stopped", 31)
	})

	t.Run("down stops every process and removes data", func(t *testing.T) {
		before := pids(c)
		if err := sandbox.Down(ctx, c.Dir, false); err != nil {
			t.Fatal(err)
		}
		for i, p := range before {
			if processAlive(p) {
				t.Errorf("%s pid %d alive after Down", c.Nodes[i].Name, p)
			}
		}
		if _, err := os.Stat(c.Nodes[0].DataDir); err != nil {
			t.Errorf("datadir gone after Down without removal: %v", err)
		}
		if err := sandbox.Down(ctx, c.Dir, true); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Down with removal (err %v)", c.Dir, err)
		}
	})
}

func TestSemiSync(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 2, SemiSync: true})
	ctx := ctxT(t, 60*time.Second)
	app := sandboxtest.DB(t, c, 0, c.AppUser, c.AppPassword, sandbox.OtherDatabase)
	if _, err := app.Exec("CREATE TABLE t_semi (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec("INSERT INTO t_semi VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	root := rootDB(t, c, 0)
	var name, status, yes string
	if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'").Scan(&name, &status); err != nil {
		t.Fatal(err)
	}
	if status != "ON" {
		t.Errorf("Rpl_semi_sync_master_status = %q, want ON", status)
	}
	if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_yes_tx'").Scan(&name, &yes); err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(yes); n < 2 {
		t.Errorf("Rpl_semi_sync_master_yes_tx = %s, want >= 2 acknowledged transactions", yes)
	}
	if wp := queryString(t, root, "SELECT @@rpl_semi_sync_master_wait_point"); wp != "AFTER_SYNC" {
		t.Errorf("wait point %q, want AFTER_SYNC", wp)
	}
	st := c.Status(ctx)
	if !st[0].SemiSyncMaster || !st[1].SemiSyncSlave {
		t.Errorf("status semi-sync: primary master=%v replica slave=%v", st[0].SemiSyncMaster, st[1].SemiSyncSlave)
	}
}

// TestBasePortAndSingleNode also covers installing without a template
// (mariadb-install-db per node), which the CLI does.
func TestBasePortAndSingleNode(t *testing.T) {
	base := sandboxtest.FreeAddr(t)
	_, portStr, _ := strings.Cut(base, ":")
	port, _ := strconv.Atoi(portStr)
	if err := sandbox.CheckBinaries(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	ctx := ctxT(t, 60*time.Second)
	c, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, Nodes: 1, BasePort: port, StopWithParent: true,
		ListenerRW: sandboxtest.FreeAddr(t), ListenerRO: sandboxtest.FreeAddr(t), AdminAddress: sandboxtest.FreeAddr(t),
		EtcdClientAddress: sandboxtest.FreeAddr(t), EtcdPeerAddress: sandboxtest.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), dir, true) })
	if c.Nodes[0].Port != port {
		t.Errorf("port %d, want base port %d", c.Nodes[0].Port, port)
	}
	st := c.Status(ctx)
	if len(st) != 1 || !st[0].Reachable || st[0].ReadOnly {
		t.Errorf("single node status %+v", st)
	}
	// A second sandbox on the same base port must fail clearly, and clean up.
	dir2 := t.TempDir()
	if _, err := sandbox.Up(ctx, sandbox.Options{Dir: dir2, Nodes: 1, BasePort: port}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second up on a busy base port: err %v, want 'in use'", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, sandbox.StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed up left %s behind (err %v)", sandbox.StateFile, err)
	}
}

func TestUpRefusesForeignDirectory(t *testing.T) {
	if err := sandbox.CheckBinaries(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sandbox.Up(context.Background(), sandbox.Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("up in a non-empty directory: err %v, want a 'not empty' error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "precious.txt")); err != nil {
		t.Errorf("foreign file touched: %v", err)
	}
	if err := sandbox.Down(context.Background(), dir, false); err == nil {
		t.Error("down on a directory without sandbox.json succeeded, want an error")
	}
}

func pids(c *sandbox.Cluster) []int {
	out := make([]int, len(c.Nodes))
	for i := range c.Nodes {
		out[i] = c.PID(i)
	}
	return out
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	k := strings.LastIndexByte(string(data), ')')
	return k < 0 || k+2 >= len(data) || (data[k+2] != 'Z' && data[k+2] != 'X')
}

// TestLongDirectory puts the sandbox under a path too long for unix sockets:
// sockets must go to a short directory that Down removes.
func TestLongDirectory(t *testing.T) {
	if err := sandbox.CheckBinaries(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("long-directory-name-", 5))
	ctx := ctxT(t, 60*time.Second)
	c, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, Nodes: 1, StopWithParent: true, TemplateDir: sandboxtest.TemplateDir(),
		ListenerRW: sandboxtest.FreeAddr(t), ListenerRO: sandboxtest.FreeAddr(t), AdminAddress: sandboxtest.FreeAddr(t),
		EtcdClientAddress: sandboxtest.FreeAddr(t), EtcdPeerAddress: sandboxtest.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), dir, true) })
	if c.SocketDir == "" || len(c.Nodes[0].Socket) > 107 {
		t.Fatalf("socket dir %q, socket %q (%d bytes)", c.SocketDir, c.Nodes[0].Socket, len(c.Nodes[0].Socket))
	}
	if st := c.Status(ctx); !st[0].Reachable {
		t.Fatalf("node1 unreachable: %s", st[0].Error)
	}
	if err := sandbox.Down(ctx, dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.SocketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir %s left behind (err %v)", c.SocketDir, err)
	}
}

// TestUpCancelledLeavesNothing interrupts Up (as Ctrl-C would) and checks
// that no mariadbd of that sandbox survives and the directory is gone.
func TestUpCancelledLeavesNothing(t *testing.T) {
	if err := sandbox.CheckBinaries(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "sb")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, StopWithParent: true, TemplateDir: sandboxtest.TemplateDir()})
	if err == nil {
		_ = sandbox.Down(context.Background(), dir, true)
		t.Fatal("Up with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Logf("Up error (expected to mention cancellation): %v", err)
	}
	entries, rerr := os.ReadDir("/proc")
	if rerr != nil {
		t.Fatal(rerr)
	}
	for _, e := range entries {
		data, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(data), dir+"/") && processAlive(atoi(e.Name())) {
			t.Errorf("process %s survived a cancelled Up: %q", e.Name(), data)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind after a cancelled Up (err %v)", dir, err)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
