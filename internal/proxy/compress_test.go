package proxy

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func compressed(c *mysql.Config) { _ = c.Apply(mysql.EnableCompression(true)) }

// go-sql-driver with compress=true through both listeners: text and
// prepared results that span many frames, a row of 20 MiB and a statement
// of 17 MiB (more than one 16 MiB packet, so more than one frame each way),
// compared with what the same queries return straight from the primary;
// then the session parks idle and is served again.
func TestCompressGoDriver(t *testing.T) { poolings(t, testCompressGoDriver) }

func testCompressGoDriver(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := h.db("rw", "sbtest", compressed)
	db.SetMaxOpenConns(1)
	direct := h.direct(0)
	mustExec(t, db, "CREATE TABLE zt (id INT PRIMARY KEY, s VARCHAR(200), b LONGBLOB)")
	mustExec(t, db, "INSERT INTO zt (id, s) SELECT seq, CONCAT('row-', seq, '-', REPEAT('z', seq % 150)) FROM seq_1_to_20000")
	digest := func(q *sql.DB, query string, args ...any) string {
		t.Helper()
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		sum, n := sha1.New(), 0
		for rows.Next() {
			var id int
			var s string
			if err := rows.Scan(&id, &s); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(sum, "%d:%s\n", id, s)
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return fmt.Sprintf("%d rows %x", n, sum.Sum(nil))
	}
	const q = "SELECT id, s FROM sbtest.zt WHERE id > ? ORDER BY id"
	want := digest(direct, q, 0)
	if got := digest(db, q, 0); got != want { // prepared (binary protocol)
		t.Fatalf("prepared result through the proxy %s, direct %s", got, want)
	}
	if got := digest(db, strings.Replace(q, "?", "0", 1)); got != want { // text protocol
		t.Fatalf("text result through the proxy %s, direct %s", got, want)
	}
	if !strings.HasPrefix(want, "20000 rows") {
		t.Fatalf("direct result %s", want)
	}
	// Larger than one packet and one frame: a 17 MiB statement, a 20 MiB row back.
	big := strings.Repeat("0123456789abcdef", 17<<16)
	if _, err := db.ExecContext(ctx, "UPDATE zt SET b = ? WHERE id = 1", big); err != nil {
		t.Fatalf("17 MiB statement: %v", err)
	}
	var n int
	var tail string
	if err := db.QueryRowContext(ctx, "SELECT LENGTH(CONCAT(b, REPEAT('x', 3<<20))), RIGHT(b, 16) FROM zt WHERE id = 1").Scan(&n, &tail); err != nil {
		t.Fatal(err)
	}
	if n != len(big)+3<<20 || tail != "0123456789abcdef" {
		t.Fatalf("row length %d tail %q", n, tail)
	}
	var row []byte
	if err := db.QueryRowContext(ctx, "SELECT CONCAT(b, REPEAT('x', 3<<20)) FROM zt WHERE id = 1").Scan(&row); err != nil {
		t.Fatalf("20 MiB row: %v", err)
	}
	if len(row) != len(big)+3<<20 || string(row[:len(big)]) != big {
		t.Fatalf("20 MiB row came back as %d bytes", len(row))
	}
	// Idle long enough to park (idlepark.go), then served again.
	waitParked(t, h.srv, 1)
	if got := digest(db, q, 19990); !strings.HasPrefix(got, "10 rows") {
		t.Fatalf("after parking: %s", got)
	}
	if n := counterValue(t, h, "switchyard_proxy_compressed_sessions_total"); n < 1 {
		t.Fatalf("switchyard_proxy_compressed_sessions_total %v", n)
	}
	// The replica listener too.
	ro := h.db("ro", "sbtest", compressed)
	h.waitReplicated(1, 2)
	if got := digest(ro, strings.Replace(q, "?", "0", 1)); got != want {
		t.Fatalf("replica listener: %s, direct %s", got, want)
	}
}

// The mariadb command-line client with --compress: its status (\s) reports
// the compressed protocol, SHOW STATUS LIKE 'Compression' says ON, and
// queries, errors and a 5 MB result work.
func TestCompressCommandLineClient(t *testing.T) {
	bin := lookTool(t, "mariadb")
	h := newHarness(t, nil)
	host, port := hostPort(t, h.srv.ListenerAddr("rw"))
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base := []string{"--no-defaults", "--compress", "-h" + host, "-P" + port, "-u" + h.c.AppUser, "-p" + h.c.AppPassword, "--skip-ssl", "-D", "sbtest"}
		out, err := exec.CommandContext(ctx, bin, append(base, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := run("-e", "status")
	if err != nil || !strings.Contains(out, "Protocol:\t\tCompressed") {
		t.Fatalf("status through the proxy (%v):\n%s", err, out)
	}
	out, err = run("-N", "-e", "SELECT 1+1; SELECT CONCAT(seq, REPEAT('q', 100)) FROM seq_1_to_50000 /* 5 MB */; SELECT 'done'")
	lines := strings.Split(out, "\n")
	if err != nil || len(lines) != 50003 || lines[0] != "2" || lines[50000] != "50000"+strings.Repeat("q", 100) || lines[50001] != "done" {
		t.Fatalf("queries (%v): %d lines, %.200q", err, len(lines), out)
	}
	// The status reports the client's connection, not the proxy's
	// uncompressed one to the backend.
	out, err = run("-N", "-e", "SHOW STATUS LIKE 'Compression'; show session  status like \"compression\"; SHOW STATUS LIKE 'Bytes_received'")
	if err != nil || !strings.HasPrefix(out, "Compression\tON\nCompression\tON\nBytes_received\t") {
		t.Fatalf("compression status (%v): %q", err, out)
	}
	out, err = run("-e", "SELECT * FROM no_such_table")
	if err == nil || !strings.Contains(out, "ERROR 1146 (42S02)") {
		t.Fatalf("error through the proxy (%v): %q", err, out)
	}
}

// A coordinated switchover under load from compressed clients (four
// writers, a reader of 2 000-row results): no statement fails, writes land
// on node1 before and node2 after, and no row is lost.
func TestCompressSwitchover(t *testing.T) {
	h := newHarness(t, nil)
	db := h.db("rw", "sbtest", compressed)
	db.SetMaxOpenConns(5)
	mustExec(t, db, "CREATE TABLE zsw (id INT AUTO_INCREMENT PRIMARY KEY, w INT, sid INT, pad VARCHAR(200))")
	mustExec(t, db, "INSERT INTO zsw (w, sid, pad) SELECT 0, @@server_id, REPEAT('p', 200) FROM seq_1_to_2000")
	h.waitReplicated(1, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type tally struct {
		ok     int
		err    error
		reader bool
	}
	results := make(chan tally, 5)
	for w := 1; w <= 4; w++ {
		go func() {
			var r tally
			for ctx.Err() == nil {
				if _, err := db.ExecContext(context.Background(), "INSERT INTO zsw (w, sid, pad) VALUES (?, @@server_id, REPEAT('w', 150))", w); err != nil {
					r.err = err
					break
				}
				r.ok++
			}
			results <- r
		}()
	}
	go func() {
		r := tally{reader: true}
		for ctx.Err() == nil {
			var n int
			if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM (SELECT pad FROM zsw WHERE w = 0) x").Scan(&n); err != nil || n != 2000 {
				r.err = fmt.Errorf("reader: %d rows, %v", n, err)
				break
			}
			r.ok++
		}
		results <- r
	}()
	time.Sleep(500 * time.Millisecond)
	startHold(h, "sw-z", topo.SwitchStepHold)
	waitAck(t, h, "drained with statements held", func(a topo.SwitchoverAck) bool { return a.ID == "sw-z" && a.Holding && a.Busy == 0 })
	h.waitReplicated(1)
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	time.Sleep(500 * time.Millisecond)
	cancel()
	written, reads := 0, 0
	for range 5 {
		r := <-results
		if r.err != nil {
			t.Fatalf("statement failed across the switchover: %v", r.err)
		}
		if r.reader {
			reads += r.ok
		} else {
			written += r.ok
		}
	}
	var total, before, after int
	err := h.direct(1).QueryRow("SELECT COUNT(*), SUM(sid = 1), SUM(sid = 2) FROM sbtest.zsw WHERE w > 0").Scan(&total, &before, &after)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d inserts and %d reads acknowledged; %d rows written on node1, %d on node2", written, reads, before, after)
	if total != written {
		t.Fatalf("%d inserts acknowledged, %d rows in the table", written, total)
	}
	if before == 0 || after == 0 || reads == 0 {
		t.Fatalf("writes on node1 %d, on node2 %d (total %d): the switchover did not happen under load", before, after, total)
	}
	if n := counterValue(t, h, "switchyard_proxy_hold_refused_total"); n != 0 {
		t.Fatalf("%v statements refused", n)
	}
}

// Compression on top of TLS: go-sql-driver with a TLS config and
// compress=true through rw reads a 20,000-row result and a 5 MB row, and
// the proxy counts the session as both.
func TestCompressOverTLS(t *testing.T) {
	h := newHarness(t, nil)
	cfg, err := mysql.ParseDSN(h.dsn("rw", "sbtest", compressed))
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS = tlsClientConfig(t, h.c.TLS().CA, nil)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var n, total int
	if err := db.QueryRow("SELECT COUNT(*), SUM(LENGTH(s)) FROM (SELECT CONCAT(seq, REPEAT('t', 100)) s FROM seq_1_to_20000) x").Scan(&n, &total); err != nil || n != 20000 {
		t.Fatalf("over TLS and compression: %d rows, %v", n, err)
	}
	rows, err := db.Query("SELECT CONCAT(seq, REPEAT('t', 100)) FROM seq_1_to_20000")
	if err != nil {
		t.Fatal(err)
	}
	got, sum := 0, 0
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got++
		sum += len(s)
	}
	if err := rows.Err(); err != nil || got != 20000 || sum != total {
		t.Fatalf("20,000-row result over TLS and compression: %d rows, %d bytes (want %d), %v", got, sum, total, err)
	}
	var big []byte
	if err := db.QueryRow("SELECT REPEAT('b', 5<<20)").Scan(&big); err != nil || len(big) != 5<<20 {
		t.Fatalf("5 MB row: %d bytes, %v", len(big), err)
	}
	if c, z := counterValue(t, h, "switchyard_proxy_tls_sessions_total"), counterValue(t, h, "switchyard_proxy_compressed_sessions_total"); c < 1 || z < 1 {
		t.Fatalf("tls sessions %v, compressed sessions %v", c, z)
	}
}
