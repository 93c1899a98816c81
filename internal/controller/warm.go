package controller

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Candidate warmth. A replica's InnoDB buffer pool holds the pages its
// replication thread touched, not the pages the primary's readers keep hot;
// a replica restarted recently holds almost nothing. Promoting it makes every
// read a disk read for a while (one of our incidents). The controller
// measures warmth as the candidate's buffer-pool data pages
// (Innodb_buffer_pool_pages_data) relative to the primary's, plus the hit
// ratio (1 - Innodb_buffer_pool_reads / Innodb_buffer_pool_read_requests).
//
// `switchover --warm` raises it before anything is held: the proxies'
// hot read sets (topo.HotReadSet, sampled on every listener) are merged by
// digest, each sampled statement is replayed on the candidate as the user
// that ran it, and then the tables those statements read are scanned in
// the order of their read counts (a point-select example touches one page;
// the scan loads the table's clustered index) — at
// switchover.warm_concurrency connections, until the warmth reaches
// switchover.warm_threshold or switchover.warm_timeout passes.
// `--require-warm` refuses a candidate still below the threshold.

// bufferPool is one reading of a node's buffer-pool status.
type bufferPool struct {
	pagesData, readRequests, reads int64
}

// readBufferPool reads the buffer-pool status of the server behind db.
func readBufferPool(ctx context.Context, db *sql.DB) (bufferPool, error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN "+
		"('Innodb_buffer_pool_pages_data', 'Innodb_buffer_pool_read_requests', 'Innodb_buffer_pool_reads')")
	if err != nil {
		return bufferPool{}, err
	}
	defer rows.Close()
	var bp bufferPool
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return bufferPool{}, err
		}
		switch strings.ToLower(name) {
		case "innodb_buffer_pool_pages_data":
			bp.pagesData = v
		case "innodb_buffer_pool_read_requests":
			bp.readRequests = v
		case "innodb_buffer_pool_reads":
			bp.reads = v
		}
	}
	return bp, rows.Err()
}

func hitRatio(requests, reads int64) float64 {
	if requests <= 0 {
		return 1
	}
	return max(0, 1-float64(reads)/float64(requests))
}

// openNode opens a small pool to addr as user (schema may be "").
// The connections use the cluster's TLS settings (ct, clusters[].tls).
func openNode(addr, user, password, schema string, conns int, timeout time.Duration, ct config.ClusterTLS) (*sql.DB, error) {
	tc, err := config.BackendTLS(ct, "")
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	cfg := mysql.NewConfig()
	cfg.TLS = tc
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, password, "tcp", addr, schema
	cfg.Timeout = timeout
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

// Warmth measures node's buffer-pool warmth relative to primary, as the
// monitor account of cfg.
func Warmth(ctx context.Context, cfg *config.Config, cl *config.Cluster, node, primary string) (topo.Warmth, error) {
	w := topo.Warmth{Node: node}
	pw, err := cfg.Credentials.Monitor.Resolve()
	if err != nil {
		return w, fmt.Errorf("credentials.monitor: %w", err)
	}
	read := func(name string) (bufferPool, error) {
		n := cl.Node(name)
		if n == nil {
			return bufferPool{}, fmt.Errorf("%s is not a node of cluster %s", name, cl.Name)
		}
		db, err := openNode(n.Address, cfg.Credentials.Monitor.User, pw, "", 1, cfg.Proxy.ConnectTimeout.D(), cl.TLS)
		if err != nil {
			return bufferPool{}, err
		}
		defer db.Close()
		bp, err := readBufferPool(ctx, db)
		if err != nil {
			return bp, fmt.Errorf("buffer pool status of %s: %w", name, err)
		}
		return bp, nil
	}
	c, err := read(node)
	if err != nil {
		return w, err
	}
	p, err := read(primary)
	if err != nil {
		return w, err
	}
	w.DataPages, w.PrimaryDataPages = c.pagesData, p.pagesData
	w.Fraction = 1
	if p.pagesData > 0 {
		w.Fraction = min(1, float64(c.pagesData)/float64(p.pagesData))
	}
	w.HitRatio = hitRatio(c.readRequests, c.reads)
	return w, nil
}

// warmth is the switchover step that measures the candidate's warmth,
// warms it with --warm, and refuses a cold one with --require-warm.
func (s *switchover) warmth(ctx context.Context) (string, error) {
	sw := s.cfg.Switchover
	before, err := Warmth(ctx, s.cfg, s.cl, s.cand, s.old)
	if err != nil {
		if s.req.RequireWarm {
			return "", fmt.Errorf("cannot measure the warmth of %s: %w", s.cand, err)
		}
		return "not measured: " + err.Error(), nil
	}
	w := before
	detail := fmt.Sprintf("%.0f%% of %s's buffer-pool data pages (%d of %d), hit ratio %.3f",
		100*w.Fraction, s.old, w.DataPages, w.PrimaryDataPages, w.HitRatio)
	if s.req.Warm && w.Fraction < sw.WarmThreshold {
		wctx, cancel := context.WithTimeout(ctx, sw.WarmTimeout.D())
		after, rerr := s.warm(wctx, before)
		cancel()
		if rerr != nil && ctx.Err() != nil {
			return "", ctx.Err()
		}
		w = after
		detail = fmt.Sprintf("warmed from %.0f%% to %.0f%% of %s's data pages (%d of %d), hit ratio %.3f; replayed %d statements and hot-table scans (%d failed; %.0f%% of their page reads missed the buffer pool)",
			100*before.Fraction, 100*w.Fraction, s.old, w.DataPages, w.PrimaryDataPages, w.HitRatio, w.Replayed, w.ReplayErrors, 100*(1-s.replayHit))
		if rerr != nil {
			detail += "; " + rerr.Error()
		}
	}
	s.req.Warmth = &w
	if s.req.RequireWarm && w.Fraction < sw.WarmThreshold {
		hint := "run the switchover with --warm, or wait for reads to warm it"
		s.req.Override = "--warm, or leave out --require-warm"
		if s.req.Warm {
			s.req.Override = "leave out --require-warm"
			hint = fmt.Sprintf("warming stopped after switchover.warm_timeout %s; raise it or warm the node by other means", sw.WarmTimeout)
		}
		return detail, fmt.Errorf("candidate %s is cold: %s, below switchover.warm_threshold %.0f%% (--require-warm): %s",
			s.cand, detail, 100*sw.WarmThreshold, hint)
	}
	return detail, nil
}

// hotReads merges every proxy's hot read set for cluster by digest, most
// read first.
func hotReads(ctx context.Context, st topo.Store, keys topo.Keys, cluster string) ([]topo.HotRead, error) {
	kvs, err := st.List(ctx, keys.HotReadSets())
	if err != nil {
		return nil, fmt.Errorf("read hot read sets: %w", err)
	}
	type key struct{ schema, user, digest string }
	merged := map[key]*topo.HotRead{}
	for _, kv := range kvs {
		var set topo.HotReadSet
		if json.Unmarshal(kv.Value, &set) != nil {
			continue
		}
		for _, r := range set.Reads {
			if r.Cluster != cluster {
				continue
			}
			k := key{r.Schema, r.User, r.Digest}
			if m, ok := merged[k]; ok {
				m.Count += r.Count
				continue
			}
			r := r
			merged[k] = &r
		}
	}
	out := make([]topo.HotRead, 0, len(merged))
	for _, r := range merged {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Digest < out[j].Digest
	})
	return out, nil
}

// warm replays the hot read set on the candidate and scans the tables it
// reads until the threshold or ctx's deadline.
func (s *switchover) warm(ctx context.Context, before topo.Warmth) (topo.Warmth, error) {
	sw := s.cfg.Switchover
	w := before
	reads, err := hotReads(ctx, s.t.c.store, s.t.c.keys, s.cl.Name)
	if err != nil {
		return w, err
	}
	if len(reads) == 0 {
		return w, errors.New("no hot read set published by any proxy yet")
	}
	cand := s.cl.Node(s.cand)
	monPw, err := s.cfg.Credentials.Monitor.Resolve()
	if err != nil {
		return w, err
	}
	mon, err := openNode(cand.Address, s.cfg.Credentials.Monitor.User, monPw, "", 1, s.cfg.Proxy.ConnectTimeout.D(), s.cl.TLS)
	if err != nil {
		return w, err
	}
	defer mon.Close()
	start, err := readBufferPool(ctx, mon)
	if err != nil {
		return w, err
	}
	// One pool per (user, schema) whose password the config holds.
	type poolKey struct{ user, schema string }
	pools := map[poolKey]*sql.DB{}
	defer func() {
		for _, db := range pools {
			db.Close()
		}
	}()
	var skipped []string
	pool := func(user, schema string) *sql.DB {
		k := poolKey{user, schema}
		if db, ok := pools[k]; ok {
			return db
		}
		var db *sql.DB
		for _, u := range s.cfg.Users {
			if u.Name != user {
				continue
			}
			if pw, ok, _ := u.Secret(); ok {
				db, _ = openNode(cand.Address, user, pw, schema, sw.WarmConcurrency, s.cfg.Proxy.ConnectTimeout.D(), s.cl.TLS)
			}
		}
		if db == nil {
			skipped = append(skipped, user)
		}
		pools[k] = db
		return db
	}
	type job struct {
		db *sql.DB
		q  string
	}
	var jobs []job
	seenTable := map[string]bool{}
	var scans []job
	for _, r := range reads {
		db := pool(r.User, r.Schema)
		if db == nil {
			continue
		}
		jobs = append(jobs, job{db, r.Example})
		for _, tb := range tablesOf(r.Digest) {
			if !seenTable[r.Schema+"."+tb] {
				seenTable[r.Schema+"."+tb] = true
				scans = append(scans, job{db, "SELECT * FROM " + tb})
			}
		}
	}
	jobs = append(jobs, scans...)
	var replayed, failed atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := make(chan job)
	var wg sync.WaitGroup
	for range sw.WarmConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := drainQuery(wctx, j.db, j.q); err != nil {
					if wctx.Err() != nil {
						return
					}
					failed.Add(1)
					continue
				}
				replayed.Add(1)
			}
		}()
	}
	// Measure while the workers run; stop them at the threshold.
	measured := make(chan struct{})
	go func() {
		defer close(measured)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if cur, err := Warmth(wctx, s.cfg, s.cl, s.cand, s.old); err == nil && cur.Fraction >= sw.WarmThreshold {
				stop()
				return
			}
		}
	}()
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-wctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	stop()
	<-measured
	mctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	after, err := Warmth(mctx, s.cfg, s.cl, s.cand, s.old)
	if err == nil {
		w = after
	}
	if end, err := readBufferPool(mctx, mon); err == nil {
		s.replayHit = hitRatio(end.readRequests-start.readRequests, end.reads-start.reads)
	}
	w.Replayed, w.ReplayErrors = replayed.Load(), failed.Load()
	if len(skipped) > 0 {
		return w, fmt.Errorf("statements of users without a password in the config were not replayed: %s", strings.Join(skipped, ", "))
	}
	return w, nil
}

// drainQuery runs q and reads (and drops) every row.
func drainQuery(ctx context.Context, db *sql.DB, q string) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// tablesOf returns the tables a statement digest reads (the identifiers
// after FROM and JOIN, comma lists included, with their schema when
// qualified), as written.
func tablesOf(digest string) []string {
	d := digest
	var out []string
	isWord := func(c byte) bool {
		return c == '_' || c == '$' || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
	}
	skip := func(i int) int {
		for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n') {
			i++
		}
		return i
	}
	// ident reads a possibly quoted, possibly qualified identifier at i.
	ident := func(i int) (string, int) {
		start := i
		for {
			if i < len(d) && d[i] == '`' {
				end := strings.IndexByte(d[i+1:], '`')
				if end < 0 {
					return "", start
				}
				i += end + 2
			} else {
				j := i
				for j < len(d) && isWord(d[j]) {
					j++
				}
				if j == i {
					return "", start
				}
				i = j
			}
			if i < len(d) && d[i] == '.' {
				i++
				continue
			}
			return d[start:i], i
		}
	}
	keywords := map[string]bool{"where": true, "join": true, "on": true, "using": true, "group": true, "order": true,
		"limit": true, "inner": true, "left": true, "right": true, "cross": true, "natural": true, "straight_join": true,
		"union": true, "having": true, "for": true, "lock": true, "force": true, "use": true, "ignore": true, "window": true}
	for i := 0; i < len(d); {
		if !isWord(d[i]) {
			i++
			continue
		}
		j := i
		for j < len(d) && isWord(d[j]) {
			j++
		}
		w := strings.ToLower(d[i:j])
		i = j
		if w != "from" && w != "join" {
			continue
		}
		for {
			k := skip(i)
			t, next := ident(k)
			if t == "" {
				break
			}
			out = append(out, t)
			i = skip(next)
			// An alias (AS x, or a bare word that is not a keyword).
			if a, n := ident(i); a != "" && !keywords[strings.ToLower(a)] {
				if strings.EqualFold(a, "as") {
					_, n = ident(skip(n))
				}
				i = skip(n)
			}
			if i < len(d) && d[i] == ',' && w == "from" {
				i++
				continue
			}
			break
		}
	}
	return out
}
