package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// A pool of 8 connections through the rw listener running queries
// concurrently; every query must succeed and see the primary.
func TestGoDriverPoolConcurrentQueries(t *testing.T) { poolings(t, testGoDriverPoolConcurrentQueries) }

func testGoDriverPoolConcurrentQueries(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	db := h.db("rw", "sbtest", nil)
	db.SetMaxOpenConns(8)
	mustExec(t, db, "CREATE TABLE pool_t (id INT PRIMARY KEY, v INT)")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := w*1000 + i
				if _, err := db.Exec(fmt.Sprintf("INSERT INTO pool_t VALUES (%d, %d)", id, i)); err != nil {
					errs <- err
					return
				}
				var v, sid int
				if err := db.QueryRow(fmt.Sprintf("SELECT v, @@server_id FROM pool_t WHERE id = %d", id)).Scan(&v, &sid); err != nil {
					errs <- err
					return
				}
				if v != i || sid != 1 {
					errs <- fmt.Errorf("row %d: v=%d server_id=%d", id, v, sid)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM pool_t").Scan(&n); err != nil || n != 400 {
		t.Fatalf("count %d, %v", n, err)
	}
	if st := h.srv.Stats(); st.Listeners[0].Sessions < 1 || len(st.Backends) == 0 || st.Backends[0].Connections < 1 {
		t.Fatalf("stats do not show the open sessions: %+v", st)
	}
}

// Server-side prepared statements (interpolateParams=false): prepared once,
// executed many times with parameters, through Exec and Query.
func TestGoDriverPreparedStatements(t *testing.T) { poolings(t, testGoDriverPreparedStatements) }

func testGoDriverPreparedStatements(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	db := h.db("rw", "sbtest", func(c *mysql.Config) { c.InterpolateParams = false })
	db.SetMaxOpenConns(4)
	mustExec(t, db, "CREATE TABLE ps_t (id INT PRIMARY KEY, name VARCHAR(40), score DOUBLE, note TEXT NULL)")
	ins, err := db.Prepare("INSERT INTO ps_t (id, name, score, note) VALUES (?, ?, ?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	for i := range 200 {
		var note any
		if i%3 == 0 {
			note = fmt.Sprintf("note-%d", i)
		}
		res, err := ins.Exec(i, fmt.Sprintf("name-%d", i), float64(i)/4, note)
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("exec %d: %d rows affected", i, n)
		}
	}
	sel, err := db.Prepare("SELECT name, score, note FROM ps_t WHERE id BETWEEN ? AND ? ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	for i := 0; i < 200; i += 20 {
		rows, err := sel.Query(i, i+9)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var name string
			var score float64
			var note sql.NullString
			if err := rows.Scan(&name, &score, &note); err != nil {
				t.Fatal(err)
			}
			id := i + n
			if name != fmt.Sprintf("name-%d", id) || score != float64(id)/4 || note.Valid != (id%3 == 0) {
				t.Fatalf("row %d: %q %v %v", id, name, score, note)
			}
			n++
		}
		if err := rows.Err(); err != nil || n != 10 {
			t.Fatalf("range %d: %d rows, %v", i, n, err)
		}
		rows.Close()
	}
	// A statement that fails at execution time reports the server's error.
	dup, err := db.Prepare("INSERT INTO ps_t (id, name) VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	if _, err := dup.Exec(1, "dup"); err == nil {
		t.Fatal("duplicate key accepted")
	} else if n, _ := mysqlErr(err); n != 1062 {
		t.Fatalf("duplicate key: got %v, want 1062", err)
	}
	var count int
	if err := db.QueryRow("SELECT COUNT(*) FROM ps_t WHERE id < ?", 100).Scan(&count); err != nil || count != 100 {
		t.Fatalf("count %d %v", count, err)
	}
}

func TestGoDriverTransactions(t *testing.T) { poolings(t, testGoDriverTransactions) }

func testGoDriverTransactions(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	db := h.db("rw", "sbtest", nil)
	mustExec(t, db, "CREATE TABLE tx_t (id INT PRIMARY KEY) ENGINE=InnoDB")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO tx_t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO tx_t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	var inside int
	if err := tx.QueryRow("SELECT COUNT(*) FROM tx_t").Scan(&inside); err != nil || inside != 2 {
		t.Fatalf("inside the transaction: %d %v", inside, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	var ids []int
	rows, err := db.Query("SELECT id FROM tx_t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	if len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("after commit+rollback: %v", ids)
	}
}

// multiStatements=true: a batch with several statements and several result
// sets, and a stored procedure returning two result sets.
func TestGoDriverMultiStatementsAndResults(t *testing.T) {
	poolings(t, testGoDriverMultiStatementsAndResults)
}

func testGoDriverMultiStatementsAndResults(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	db := h.db("rw", "sbtest", func(c *mysql.Config) { c.MultiStatements = true })
	db.SetMaxOpenConns(1)
	mustExec(t, db, "CREATE TABLE ms_t (id INT PRIMARY KEY); INSERT INTO ms_t VALUES (1),(2),(3); INSERT INTO ms_t VALUES (4)")
	rows, err := db.Query("SELECT id FROM ms_t WHERE id <= 2 ORDER BY id; SELECT 'x', 'y'; DO 1; SELECT COUNT(*) FROM ms_t")
	if err != nil {
		t.Fatal(err)
	}
	var sets [][]string
	for {
		var set []string
		cols, _ := rows.Columns()
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				set = append(set, string(v))
			}
		}
		sets = append(sets, set)
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	want := fmt.Sprint([][]string{{"1", "2"}, {"x", "y"}, {"4"}})
	if fmt.Sprint(sets) != want {
		t.Fatalf("result sets %v, want %v", sets, want)
	}
	// An error in the middle of a batch ends it and is reported.
	if _, err := db.Exec("INSERT INTO ms_t VALUES (10); INSERT INTO ms_t VALUES (1); INSERT INTO ms_t VALUES (11)"); err == nil {
		t.Fatal("duplicate inside a batch not reported")
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM ms_t WHERE id IN (10, 11)").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after failed batch: %d %v (the connection must still work)", n, err)
	}
	mustExec(t, db, "CREATE PROCEDURE two_sets() BEGIN SELECT 1 AS a; SELECT 2 AS b, 3 AS c; END")
	rows, err = db.Query("CALL two_sets()")
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		for rows.Next() {
			got++
		}
		if !rows.NextResultSet() {
			break
		}
	}
	rows.Close()
	if got != 2 {
		t.Fatalf("procedure rows %d", got)
	}
}

// A 20 MiB BLOB goes through as a packet larger than 16 MiB in both
// directions, byte for byte, with text and binary protocol.
func TestBlobRoundTrip20MiB(t *testing.T) { poolings(t, testBlobRoundTrip20MiB) }

func testBlobRoundTrip20MiB(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	blob := make([]byte, 20<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	for _, interpolate := range []bool{false, true} {
		db := h.db("rw", "sbtest", func(c *mysql.Config) {
			c.InterpolateParams = interpolate
			c.MaxAllowedPacket = 64 << 20
		})
		table := fmt.Sprintf("blob_t_%v", interpolate)
		mustExec(t, db, "CREATE TABLE "+table+" (id INT PRIMARY KEY, b LONGBLOB)")
		if _, err := db.Exec("INSERT INTO "+table+" VALUES (1, ?)", blob); err != nil {
			t.Fatalf("interpolate=%v insert: %v", interpolate, err)
		}
		var got []byte
		if err := db.QueryRow("SELECT b FROM "+table+" WHERE id = ?", 1).Scan(&got); err != nil {
			t.Fatalf("interpolate=%v select: %v", interpolate, err)
		}
		if !bytes.Equal(got, blob) {
			t.Fatalf("interpolate=%v: blob differs (%d bytes back)", interpolate, len(got))
		}
		var l int
		if err := db.QueryRow("SELECT LENGTH(b) FROM " + table).Scan(&l); err != nil || l != len(blob) {
			t.Fatalf("length on the server %d %v", l, err)
		}
	}
}

// USE otherdb through COM_QUERY, then an idle move to another node restores it.
func TestUseOtherDatabase(t *testing.T) { poolings(t, testUseOtherDatabase) }

func testUseOtherDatabase(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	db := h.db("rw", "sbtest", nil)
	db.SetMaxOpenConns(1)
	mustExec(t, db, "USE otherdb")
	var cur string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&cur); err != nil || cur != "otherdb" {
		t.Fatalf("after USE: %q %v", cur, err)
	}
	mustExec(t, db, "CREATE TABLE in_other (x INT)")
	if _, err := h.direct(0).Exec("SELECT * FROM otherdb.in_other"); err != nil {
		t.Fatalf("table not created in otherdb: %v", err)
	}
}

// LOAD DATA LOCAL INFILE is relayed (the client streams the file).
func TestLoadDataLocalInfile(t *testing.T) { poolings(t, testLoadDataLocalInfile) }

func testLoadDataLocalInfile(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	path := filepath.Join(t.TempDir(), "rows.csv")
	var buf bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&buf, "%d,name-%d\n", i, i)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	mysql.RegisterLocalFile(path)
	defer mysql.DeregisterLocalFile(path)
	db := h.db("rw", "sbtest", nil)
	db.SetMaxOpenConns(1)
	mustExec(t, db, "CREATE TABLE infile_t (id INT PRIMARY KEY, name VARCHAR(20))")
	res, err := db.Exec(fmt.Sprintf("LOAD DATA LOCAL INFILE '%s' INTO TABLE infile_t FIELDS TERMINATED BY ','", path))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1000 {
		t.Fatalf("rows affected %d", n)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM infile_t").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("count %d %v", n, err)
	}
}

func mustExec(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
