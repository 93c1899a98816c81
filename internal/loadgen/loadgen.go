package loadgen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Options configure a run.
type Options struct {
	// RW and RO are DSNs (go-sql-driver format) for the rw and ro listeners;
	// RO may be empty (no readers).
	RW, RO string
	// Writers and Readers are the number of concurrent clients. Defaults 4 and 4.
	Writers, Readers int
	// Table is the ledger table (created if missing). Default "ledger".
	Table string
	// IDBase offsets ids so that several runs never issue the same id.
	IDBase int64
	// Interval between operations of one client; 0 = back to back.
	Interval time.Duration
}

// Result is what the clients saw during one run.
type Result struct {
	Writes, WriteErrors int64
	Reads, ReadErrors   int64
	// WritesByServer counts acknowledged writes per @@server_id that executed them.
	WritesByServer map[int64]int64
	// ReadsByServer counts reads per @@server_id that answered them.
	ReadsByServer map[int64]int64
	// ErrorsByCode counts client errors by MySQL error number (0 = not a MySQL
	// error, e.g. connection refused or bad connection).
	ErrorsByCode map[uint16]int64
	// FirstErrors keeps the first few error texts.
	FirstErrors []string
	// LongestWritePause is the longest time between two acknowledged writes
	// (over all writers) during the run.
	LongestWritePause time.Duration
	// Acked are every acknowledged write id.
	Acked   []int64
	Elapsed time.Duration
}

// Errors is the total of write and read errors.
func (r *Result) Errors() int64 { return r.WriteErrors + r.ReadErrors }

// Setup creates the ledger table through the rw DSN.
func Setup(ctx context.Context, rw, table string) error {
	if table == "" {
		table = "ledger"
	}
	db, err := sql.Open("mysql", rw)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+table+
		" (id BIGINT PRIMARY KEY, server_id INT NOT NULL, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")
	if err != nil {
		return fmt.Errorf("loadgen: create table %s: %w", table, err)
	}
	return nil
}

// Run drives the workload until ctx ends.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Writers == 0 {
		o.Writers = 4
	}
	if o.Readers == 0 && o.RO != "" {
		o.Readers = 4
	}
	if o.Table == "" {
		o.Table = "ledger"
	}
	rw, err := sql.Open("mysql", o.RW)
	if err != nil {
		return nil, err
	}
	defer rw.Close()
	rw.SetMaxOpenConns(o.Writers)
	rw.SetMaxIdleConns(o.Writers)
	var ro *sql.DB
	if o.RO != "" && o.Readers > 0 {
		ro, err = sql.Open("mysql", o.RO)
		if err != nil {
			return nil, err
		}
		defer ro.Close()
		ro.SetMaxOpenConns(o.Readers)
		ro.SetMaxIdleConns(o.Readers)
	}

	res := &Result{WritesByServer: map[int64]int64{}, ReadsByServer: map[int64]int64{}, ErrorsByCode: map[uint16]int64{}}
	var mu sync.Mutex
	lastWrite := time.Now()
	start := lastWrite
	recordErr := func(err error, write bool) {
		mu.Lock()
		defer mu.Unlock()
		if write {
			res.WriteErrors++
		} else {
			res.ReadErrors++
		}
		var me *mysql.MySQLError
		code := uint16(0)
		if errors.As(err, &me) {
			code = me.Number
		}
		res.ErrorsByCode[code]++
		if len(res.FirstErrors) < 5 {
			res.FirstErrors = append(res.FirstErrors, err.Error())
		}
	}

	insert := "INSERT INTO " + o.Table + " (id, server_id) VALUES (?, @@server_id)"
	var wg sync.WaitGroup
	for w := 0; w < o.Writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			seq := int64(0)
			for ctx.Err() == nil {
				seq++
				id := o.IDBase + int64(w)*1_000_000_000 + seq
				var sid int64
				err := func() error {
					tx, err := rw.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, insert, id); err != nil {
						tx.Rollback()
						return err
					}
					if err := tx.QueryRowContext(ctx, "SELECT server_id FROM "+o.Table+" WHERE id = ?", id).Scan(&sid); err != nil {
						tx.Rollback()
						return err
					}
					return tx.Commit()
				}()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					recordErr(err, true)
					continue
				}
				now := time.Now()
				mu.Lock()
				res.Writes++
				res.WritesByServer[sid]++
				res.Acked = append(res.Acked, id)
				if d := now.Sub(lastWrite); d > res.LongestWritePause {
					res.LongestWritePause = d
				}
				lastWrite = now
				mu.Unlock()
				sleep(ctx, o.Interval)
			}
		}(w)
	}
	for r := 0; ro != nil && r < o.Readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var sid int64
				if err := ro.QueryRowContext(ctx, "SELECT @@server_id").Scan(&sid); err != nil {
					if ctx.Err() != nil {
						return
					}
					recordErr(err, false)
					continue
				}
				mu.Lock()
				res.Reads++
				res.ReadsByServer[sid]++
				mu.Unlock()
				sleep(ctx, o.Interval)
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Check verifies the ledger on a node (normally the final primary, by a direct
// DSN): every acknowledged id is present and the table holds no id twice
// (the primary key guarantees the latter; Check counts rows to prove it).
// It returns the ids that are missing.
func Check(ctx context.Context, dsn, table string, acked []int64) (missing []int64, err error) {
	if table == "" {
		table = "ledger"
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("loadgen: read ledger: %w", err)
	}
	defer rows.Close()
	have := make(map[int64]struct{}, len(acked))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if _, dup := have[id]; dup {
			return nil, fmt.Errorf("loadgen: id %d present twice", id)
		}
		have[id] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, id := range acked {
		if _, ok := have[id]; !ok {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// Print writes a one-paragraph human summary of r labelled label.
func (r *Result) Print(w io.Writer, label string, names map[int64]string) {
	fmt.Fprintf(w, "%-10s %6.1fs  writes %6d (errors %d)  reads %6d (errors %d)  longest write pause %s\n",
		label, r.Elapsed.Seconds(), r.Writes, r.WriteErrors, r.Reads, r.ReadErrors, r.LongestWritePause.Round(time.Millisecond))
	fmt.Fprintf(w, "%-10s writes landed on: %s\n", "", histogram(r.WritesByServer, names))
	if r.Reads > 0 || r.ReadErrors > 0 {
		fmt.Fprintf(w, "%-10s reads answered by: %s\n", "", histogram(r.ReadsByServer, names))
	}
	if len(r.ErrorsByCode) > 0 {
		var parts []string
		for c, n := range r.ErrorsByCode {
			parts = append(parts, fmt.Sprintf("%d×%d", n, c))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "%-10s errors by MySQL error number: %s; first: %s\n", "", strings.Join(parts, " "), strings.Join(r.FirstErrors, " | "))
	}
}

func histogram(m map[int64]int64, names map[int64]string) string {
	if len(m) == 0 {
		return "(none)"
	}
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var parts []string
	for _, id := range ids {
		n := names[id]
		if n == "" {
			n = fmt.Sprintf("server_id %d", id)
		}
		parts = append(parts, fmt.Sprintf("%s=%d", n, m[id]))
	}
	return strings.Join(parts, " ")
}
