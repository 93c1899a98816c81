package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// transcript runs a multi-statement query and writes every result set
// (columns and rows as text) and the error that ended it.
func transcript(ctx context.Context, conn *sql.Conn, q string) string {
	var b strings.Builder
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		n, _ := mysqlErr(err)
		return fmt.Sprintf("error %d", n)
	}
	defer rows.Close()
	for {
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "cols %v;", cols)
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				fmt.Fprintf(&b, "scan %v;", err)
				break
			}
			fmt.Fprintf(&b, "row %v;", vals)
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		n, _ := mysqlErr(err)
		fmt.Fprintf(&b, "error %d", n)
	}
	return b.String()
}

// driverVariants runs, on one session of dsn, what applications do beyond
// the compat check sets: multi-statements with an error after result sets,
// LOAD DATA LOCAL INFILE of 20 MiB (packets split at 16 MiB - 1), a 17 MiB
// prepared parameter (COM_STMT_SEND_LONG_DATA) read back through the binary
// protocol, and a prepared statement executed after other sessions used
// the pool (a transaction-pooled session prepares it again on another
// connection). It returns what it saw, to be compared with direct's.
func driverVariants(t *testing.T, dsn, table string, others func()) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = true
	cfg.AllowAllFiles = false
	cfg.MaxAllowedPacket = 0 // read the server's
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []string
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", oneLineTest(q), err)
		}
	}
	exec("DROP TABLE IF EXISTS " + table)
	exec("CREATE TABLE " + table + " (id INT PRIMARY KEY AUTO_INCREMENT, b LONGBLOB) ENGINE=InnoDB")

	out = append(out, "multi: "+transcript(ctx, conn, "INSERT INTO "+table+" (b) VALUES ('x'), ('y'); SELECT id, b FROM "+table+
		" ORDER BY id; SELECT LAST_INSERT_ID(), ROW_COUNT(); SELECT * FROM no_such_table_v; SELECT 'after'"))
	out = append(out, "after multi: "+transcript(ctx, conn, "SELECT COUNT(*) FROM "+table+"; SELECT 1"))

	// 20 MiB through LOAD DATA LOCAL INFILE, one 20 MiB row and small ones.
	big := bytes.Repeat([]byte("abcdefgh"), 20<<20/8)
	data := append(append([]byte("small1\n"), big...), []byte("\nsmall2\n")...)
	name := "variants-" + table
	mysql.RegisterReaderHandler(name, func() io.Reader { return bytes.NewReader(data) })
	defer mysql.DeregisterReaderHandler(name)
	exec("DELETE FROM " + table)
	res, err := conn.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE "+table+" (b)")
	if err != nil {
		n, _ := mysqlErr(err)
		out = append(out, fmt.Sprintf("load data: error %d", n))
	} else {
		n, _ := res.RowsAffected()
		out = append(out, fmt.Sprintf("load data: %d rows", n))
	}
	out = append(out, "loaded: "+transcript(ctx, conn, "SELECT COUNT(*), SUM(LENGTH(b)), SHA2(GROUP_CONCAT(b ORDER BY id SEPARATOR ''), 256) FROM "+table))

	// 17 MiB prepared parameter, read back as a binary-protocol row.
	val := bytes.Repeat([]byte{0, 1, 2, 0xff, 'q'}, 17<<20/5)
	stmt, err := conn.PrepareContext(ctx, "INSERT INTO "+table+" (b) VALUES (?)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stmt.ExecContext(ctx, val); err != nil {
		n, _ := mysqlErr(err)
		out = append(out, fmt.Sprintf("long data: error %d", n))
	}
	stmt.Close()
	sel, err := conn.PrepareContext(ctx, "SELECT b, LENGTH(b) FROM "+table+" WHERE LENGTH(b) = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	var got []byte
	var n int
	if err := sel.QueryRowContext(ctx, len(val)).Scan(&got, &n); err != nil {
		out = append(out, fmt.Sprintf("read back: %v", err))
	} else {
		out = append(out, fmt.Sprintf("read back: %d bytes, equal %v, sha %x", n, bytes.Equal(got, val), sha256.Sum256(got)))
	}

	// Other sessions use the pool between the prepare and the execute.
	ps, err := conn.PrepareContext(ctx, "SELECT COUNT(*), ? + 1 FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	exec("SET @@session.sql_mode = 'ANSI_QUOTES'")
	others()
	var cnt, plus int
	if err := ps.QueryRowContext(ctx, 41).Scan(&cnt, &plus); err != nil {
		out = append(out, fmt.Sprintf("prepared after others: %v", err))
	} else {
		out = append(out, fmt.Sprintf("prepared after others: %d %d", cnt, plus))
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "SELECT @@session.sql_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	out = append(out, "sql_mode: "+mode)
	exec("DROP TABLE " + table)
	return out
}

func oneLineTest(q string) string {
	if len(q) > 80 {
		return q[:80] + "..."
	}
	return q
}

// Applications' uses that the compat check sets do not cover, run direct
// and through a session- and a transaction-pooled listener with
// go-sql-driver: each target's transcript must be direct's.
func TestDriverVariantsDirectAndPooled(t *testing.T) {
	c := sandboxtest.Start(t, sandbox.Options{Nodes: 1})
	cfg := c.Config()
	cfg.Proxy.MaxConnectionsPerBackend = 4
	var rw config.Listener
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
		if cfg.Listeners[i].Name == "rw" {
			cfg.Listeners[i].Pooling = config.PoolingSession
			rw = cfg.Listeners[i]
		}
	}
	rw.Name, rw.Pooling = "rw-tx", config.PoolingTransaction
	cfg.Listeners = append(cfg.Listeners, rw)
	h := &harness{t: t, c: c, cfg: cfg}
	root := h.direct(0)
	for _, q := range []string{"CREATE DATABASE variants", "SET GLOBAL max_allowed_packet = 64*1024*1024", "SET GLOBAL local_infile = 1"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	h.srv = h.startProxy(cfg)
	h.srv.SetClusterState(sandboxState(c, 1, 0))

	appDSN := func(addr string) string {
		m := mysql.NewConfig()
		m.User, m.Passwd, m.Net, m.Addr, m.DBName = c.AppUser, c.AppPassword, "tcp", addr, "variants"
		m.ReadTimeout, m.WriteTimeout = time.Minute, time.Minute
		return m.FormatDSN()
	}
	others := func(addr string) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := sql.Open("mysql", appDSN(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			for i := 0; i < 20; i++ {
				var x int
				if err := d.QueryRowContext(ctx, "SELECT ?", i).Scan(&x); err != nil {
					t.Fatalf("another session: %v", err)
				}
			}
		}
	}
	want := driverVariants(t, appDSN(c.Nodes[0].Address), "variants_direct", others(c.Nodes[0].Address))
	for i, w := range want {
		t.Logf("direct step %d: %.200s", i, w)
	}
	for _, l := range []string{"rw", "rw-tx"} {
		addr := h.srv.ListenerAddr(l)
		got := driverVariants(t, appDSN(addr), "variants_"+strings.ReplaceAll(l, "-", "_"), others(addr))
		for i := range want {
			if i >= len(got) || got[i] != want[i] {
				g := "(missing)"
				if i < len(got) {
					g = got[i]
				}
				t.Errorf("listener %s, step %d:\n got %.400s\nwant %.400s", l, i, g, want[i])
			}
		}
	}
}
