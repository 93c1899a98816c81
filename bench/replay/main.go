// Command replay measures transaction replay through a crash failover: a
// 3-node MariaDB sandbox (semi-sync AFTER_SYNC, durability semi_sync), an
// embedded etcd, one controller in failover.mode auto and one proxy with
// failover.transaction_replay on, all on this machine. sysbench
// oltp_read_write (prepared statements, uniform keys) runs through the rw
// listener; the primary gets SIGKILL in the middle of the run. Every trial
// uses a fresh sandbox.
//
// Per trial it prints the time from the kill to the published new
// primary, the transactions the proxy replayed, the COMMITs in flight at
// the kill and how each was resolved by its commit marker
// (failover.commit_outcome marker: committed, not committed and replayed,
// not committed and its replay rolled back, unresolved), and every error a
// client got, by class, from the proxy's own account of each (its log):
// COMMITs in flight left unresolved (outcome unknown), autocommit
// statements in flight (outcome unknown), replays rolled back because a
// replayed statement returned a different result (by statement kind:
// point select, range selects, UPDATE, DELETE, INSERT), and anything else.
// The line "client errors N = unresolved COMMITs M (+ ...)" must add up:
// a trial whose sysbench error count differs from the classified errors
// fails.
//
// Each replay rolled back because a statement differed is printed with the
// statement, its parameters and its cause, from the new primary's binary
// log (diagnose.go): (a) a transaction committed before the crash wrote
// rows it read (the last such write is named: how many transactions before
// the old primary's last one); (b) a transaction the new primary committed
// itself wrote its table before the replay's snapshot; (c) anything else.
// Each trial also prints each replica's relay log not yet applied at the
// kill (transactions), which the failover applies before it promotes, and,
// with -v or when the failover took over 3 s, the controller's events and
// failover steps with their durations.
//
// -ignore-errors is passed to sysbench as --mysql-ignore-errors: none
// (the default) makes any client error fatal: a trial then reports
// whether sysbench ended in FATAL (at the first client error) and the
// errors the proxy gave until then; 1105 lets the run go on and count
// every error the proxy gives for what it cannot hide.
// -commit-outcome unknown turns the marker off (the behaviour before it).
// -replay-checksum no_consistent_reads does not compare the replayed plain
// consistent reads (failover.replay_checksum); each trial then prints how
// many replayed reads returned a different result and were let through.
//
// Usage: go run ./bench/replay [-trials 5] [-threads 16] [-seconds 30] [-kill-at 10s]
// [-tables 4] [-table-size 10000] [-interval 1s] [-ignore-errors none|1105]
// [-commit-outcome marker|unknown] [-replay-checksum full|no_consistent_reads] [-max-hold D] [-parallel-replication N] [-v]
//
// -parallel-replication N gives the replicas N optimistic parallel
// appliers (failover.replica_parallel_threads N), which keeps the relay
// log not yet applied at the kill short.
//
// -kill-at 0 kills nothing: the transactions per trial then compare the
// cost of the commit marker (-commit-outcome marker against unknown).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/bench/internal/benchkit"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/topo"
)

type options struct {
	trials, threads, seconds, tables, tableSize int
	parallel                                    int // slave_parallel_threads on the replicas (0: the sandbox's single SQL thread)
	killAt, interval, maxHold                   time.Duration
	ignoreErrors, commitOutcome, replayChecksum string
	verbose                                     bool
}

type trial struct {
	failover                          time.Duration
	newPrimary                        string
	transactions                      int
	sysbenchErrors                    int
	attempts, replayed, unknown, fail float64
	readsDiffered                     float64 // switchyard_proxy_replay_reads_differed_total
	failed                            map[string]float64
	classes                           map[string]int // client errors by class (the proxy's log)
	// COMMITs in flight at the kill, by resolution (the proxy's log and
	// switchyard_proxy_commit_outcome_resolved_total).
	inFlight, committed, absent, absentReplayed, unresolved int
	fatal                                                   string // sysbench's FATAL line, "" if none
	mismatches                                              []mismatch
	early                                                   int    // statements released before every replay's snapshot
	events                                                  string // the controller's events from the kill on
	backlog                                                 string // per replica, transactions received and not applied at the kill
}

func main() {
	var o options
	flag.IntVar(&o.trials, "trials", 5, "number of trials (a fresh sandbox each)")
	flag.IntVar(&o.threads, "threads", 16, "sysbench threads")
	flag.IntVar(&o.seconds, "seconds", 30, "sysbench run length")
	flag.DurationVar(&o.killAt, "kill-at", 10*time.Second, "when the primary is killed, from the start of the run (0: never, to compare throughput)")
	flag.IntVar(&o.tables, "tables", 4, "sysbench tables")
	flag.IntVar(&o.tableSize, "table-size", 10000, "rows per sysbench table")
	flag.DurationVar(&o.interval, "interval", time.Second, "probe.interval")
	flag.DurationVar(&o.maxHold, "max-hold", 0, "failover.max_hold (0: the default)")
	flag.StringVar(&o.ignoreErrors, "ignore-errors", "none", "sysbench --mysql-ignore-errors: none (any client error is fatal) or 1105 (count the errors the proxy cannot hide)")
	flag.StringVar(&o.commitOutcome, "commit-outcome", config.CommitOutcomeMarker, "failover.commit_outcome: marker or unknown")
	flag.StringVar(&o.replayChecksum, "replay-checksum", config.ReplayChecksumFull, "failover.replay_checksum: full or no_consistent_reads")
	flag.IntVar(&o.parallel, "parallel-replication", -1, "slave_parallel_threads on the replicas (slave_parallel_mode optimistic): set before the run and kept by the controller (failover.replica_parallel_threads); -1: the default (4); 0: leave the servers' setting")
	flag.BoolVar(&o.verbose, "v", false, "print the controller's events after the kill in every trial (else only when the failover took over 3 s)")
	flag.Parse()
	if o.ignoreErrors != "1105" && o.ignoreErrors != "none" {
		fmt.Fprintln(os.Stderr, "replay: -ignore-errors must be 1105 or none")
		os.Exit(2)
	}
	if o.commitOutcome != config.CommitOutcomeMarker && o.commitOutcome != config.CommitOutcomeUnknown {
		fmt.Fprintln(os.Stderr, "replay: -commit-outcome must be marker or unknown")
		os.Exit(2)
	}
	if o.replayChecksum != config.ReplayChecksumFull && o.replayChecksum != config.ReplayChecksumNoConsistentReads {
		fmt.Fprintln(os.Stderr, "replay: -replay-checksum must be full or no_consistent_reads")
		os.Exit(2)
	}
	if o.parallel < -1 || o.parallel > 256 {
		fmt.Fprintln(os.Stderr, "replay: -parallel-replication must be -1 to 256")
		os.Exit(2)
	}
	if _, err := exec.LookPath("sysbench"); err != nil {
		fmt.Fprintln(os.Stderr, "replay: sysbench not found: apt-get install -y sysbench")
		os.Exit(1)
	}
	if o.killAt >= time.Duration(o.seconds)*time.Second {
		fmt.Fprintln(os.Stderr, "replay: -kill-at must be before the end of the run (-seconds)")
		os.Exit(2)
	}
	repl := "replicas with the default 4 optimistic parallel appliers (failover.replica_parallel_threads unset)"
	if o.parallel == 0 {
		repl = "replicas with the servers' own slave_parallel_threads (failover.replica_parallel_threads 0)"
	}
	if o.parallel > 0 {
		repl = fmt.Sprintf("replicas with slave_parallel_threads=%d optimistic", o.parallel)
	}
	fmt.Printf("transaction replay through a crash failover: %d trial(s), sysbench oltp_read_write %d threads, %d s, %d×%d rows, kill -9 at %s, probe interval %s, --mysql-ignore-errors=%s, commit_outcome %s, replay_checksum %s, %s\n",
		o.trials, o.threads, o.seconds, o.tables, o.tableSize, o.killAt, o.interval, o.ignoreErrors, o.commitOutcome, o.replayChecksum, repl)
	var all []trial
	for i := 1; i <= o.trials; i++ {
		tr, err := runTrial(o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "trial %d: %v\n", i, err)
			os.Exit(1)
		}
		all = append(all, tr)
		txs := strconv.Itoa(tr.transactions)
		if tr.fatal != "" {
			txs = "? (no summary after FATAL)"
		}
		fmt.Printf("trial %d: failover to %s %s after the kill; sysbench transactions %s; open transactions at the kill: %v replayed, %v rolled back %v\n",
			i, tr.newPrimary, tr.failover.Round(time.Millisecond), txs, tr.replayed, tr.fail, tr.failed)
		fmt.Printf("trial %d: COMMITs in flight %d: resolved committed %d, resolved not committed %d (replayed and committed %d, replay rolled back %d), unresolved %d (outcome unknown)\n",
			i, tr.inFlight, tr.committed, tr.absent, tr.absentReplayed, tr.absent-tr.absentReplayed, tr.unresolved)
		fatal := "no"
		if tr.fatal != "" {
			fatal = "yes (" + tr.fatal + ")"
		}
		fmt.Printf("trial %d: %s; mismatches %d; replayed reads that differed, not compared %v; sysbench FATAL: %s\n", i, tr.errorLine(), tr.mismatchCount(), tr.readsDiffered, fatal)
		causes := map[string]int{}
		for _, m := range tr.mismatches {
			causes[m.cause]++
			fmt.Printf("trial %d: rolled back: %s %s on %s: %s; %s\n", i, m.stmt, m.args, m.node, m.before, m.cause)
		}
		fmt.Printf("trial %d: rolled-back replays by cause %v; statements released before every replay's snapshot (bound ran out) %d\n", i, causes, tr.early)
		fmt.Printf("trial %d: relay log not yet applied at the kill: %s\n", i, tr.backlog)
		if tr.failover > 3*time.Second || o.verbose {
			fmt.Printf("trial %d: controller events from the kill:\n    %s\n", i, tr.events)
		}
		if sum := tr.classified(); tr.fatal == "" && tr.sysbenchErrors != sum {
			fmt.Fprintf(os.Stderr, "trial %d: sysbench saw %d errors, the proxy accounts for %d (%v)\n", i, tr.sysbenchErrors, sum, tr.classes)
			os.Exit(1)
		}
	}
	var att, rep, fl, differed float64
	var inFlight, committed, absent, absentReplayed, unresolved, fatals int
	classes, causes := map[string]int{}, map[string]int{}
	early := 0
	for _, tr := range all {
		early += tr.early
		for _, m := range tr.mismatches {
			causes[m.cause]++
		}
		att, rep, fl = att+tr.attempts, rep+tr.replayed, fl+tr.fail
		differed += tr.readsDiffered
		inFlight, committed, absent, absentReplayed, unresolved = inFlight+tr.inFlight, committed+tr.committed, absent+tr.absent,
			absentReplayed+tr.absentReplayed, unresolved+tr.unresolved
		if tr.fatal != "" {
			fatals++
		}
		for k, v := range tr.classes {
			classes[k] += v
		}
	}
	fmt.Printf("total: %v replays attempted, %v replayed (%.0f %%), %v rolled back; COMMITs in flight %d: committed %d, not committed %d (replayed %d), unresolved %d; "+
		"client errors by class %v; rolled-back replays by cause %v; replayed reads that differed, not compared %v; released before every snapshot %d; sysbench FATAL in %d of %d trials\n",
		att, rep, 100*rep/max(att, 1), fl, inFlight, committed, absent, absentReplayed, unresolved, classes, causes, differed, early, fatals, len(all))
}

// Client error classes.
const (
	errCommit     = "unresolved COMMIT in flight"
	errAutocommit = "autocommit statement in flight"
	errMismatch   = "mismatch: " // + statement kind
	errOther      = "other: "    // + what
)

// classified is the number of client errors the proxy accounted for.
func (tr *trial) classified() int {
	n := 0
	for _, v := range tr.classes {
		n += v
	}
	return n
}

// mismatchCount is the number of transactions rolled back because a replayed
// statement returned a different result.
func (tr *trial) mismatchCount() int {
	n := 0
	for c, v := range tr.classes {
		if strings.HasPrefix(c, errMismatch) {
			n += v
		}
	}
	return n
}

// errorLine is "client errors N = unresolved COMMITs M (+ mismatches K: by
// kind) (+ ...)"; N is sysbench's count, or the proxy's after a FATAL.
func (tr *trial) errorLine() string {
	n := tr.sysbenchErrors
	if tr.fatal != "" {
		n = tr.classified()
	}
	line := fmt.Sprintf("client errors %d = unresolved COMMITs %d", n, tr.classes[errCommit])
	var mism []string
	k := 0
	var rest []string
	for _, c := range sortedKeys(tr.classes) {
		v := tr.classes[c]
		switch {
		case c == errCommit:
		case strings.HasPrefix(c, errMismatch):
			k += v
			mism = append(mism, fmt.Sprintf("%s %d", strings.TrimPrefix(c, errMismatch), v))
		default:
			rest = append(rest, fmt.Sprintf("%s %d", c, v))
		}
	}
	if k > 0 {
		line += fmt.Sprintf(" (+ mismatches %d: %s)", k, strings.Join(mism, ", "))
	}
	for _, r := range rest {
		line += " (+ " + r + ")"
	}
	return line
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// errorLog is a slog handler that keeps, from the proxy's log, the record
// of each error a client got after the loss of the primary, by class.
type errorLog struct {
	mu      sync.Mutex
	classes map[string]int
	commits map[string]int // COMMITs in flight, by resolution
	attrs   []slog.Attr
	// mismatches: each replay rolled back because a statement returned
	// another result; early: statements the proxy released before every
	// replay had taken its snapshot (its bound ran out).
	mismatches []mismatch
	early      int
}

// mismatch is one replay rolled back because a replayed statement returned
// a different result.
type mismatch struct {
	stmt, args, node string
	snapshotGTID     string // @@gtid_binlog_state on the new primary at the replay's snapshot
	cause            string // filled in by diagnose
	before           string // what the new primary had committed before the snapshot
}

func newErrorLog() *errorLog { return &errorLog{classes: map[string]int{}, commits: map[string]int{}} }

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (l *errorLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &errorLogView{l: l, attrs: as}
}

func (l *errorLog) WithGroup(string) slog.Handler { return l }

func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.record(r)
	return nil
}

// errorLogView is errorLog with attributes (the proxy's session loggers).
type errorLogView struct {
	l     *errorLog
	attrs []slog.Attr
}

func (v *errorLogView) Enabled(ctx context.Context, lv slog.Level) bool { return v.l.Enabled(ctx, lv) }
func (v *errorLogView) WithAttrs(as []slog.Attr) slog.Handler {
	return &errorLogView{l: v.l, attrs: append(append([]slog.Attr(nil), v.attrs...), as...)}
}
func (v *errorLogView) WithGroup(string) slog.Handler { return v }
func (v *errorLogView) Handle(_ context.Context, r slog.Record) error {
	v.l.record(r)
	return nil
}

// sysbench's statements, by the start of their text.
var stmtKinds = []struct{ prefix, kind string }{
	{"SELECT c FROM sbtest", "point or simple range select"},
	{"SELECT SUM(k)", "sum range select"},
	{"SELECT DISTINCT", "distinct range select"},
	{"UPDATE", "UPDATE"},
	{"DELETE", "DELETE"},
	{"INSERT", "INSERT"},
	{"SELECT", "other select"},
}

var (
	mismatchStmt = regexp.MustCompile(`statement \d+ of the transaction \("((?:[^"\\]|\\.)*)`)
	replayedOn   = regexp.MustCompile(`returned a different result when replayed on (\S+)`)
)

func (l *errorLog) record(r slog.Record) {
	attr := func(k string) string {
		var v string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == k {
				v = a.Value.String()
				return false
			}
			return true
		})
		return v
	}
	var class string
	switch r.Message {
	case "COMMIT in flight when the primary was lost: committed":
		l.count(l.commits, "committed")
		return
	case "COMMIT in flight when the primary was lost: not committed; replaying the transaction":
		l.count(l.commits, "absent")
		return
	case "primary lost while a statement ending a transaction ran: its outcome is unknown",
		"primary lost while a write ran: its outcome is unknown":
		if st := attr("statement"); strings.EqualFold(st, "COMMIT") {
			class = errCommit
		} else {
			class = errOther + "outcome unknown of " + st
		}
	case "primary connection lost with a statement in flight; its outcome is unknown":
		class = errAutocommit
	case "transaction not replayed: rolled back":
		why := attr("why")
		if attr("result") != "mismatch" {
			class = errOther + "rolled back (" + attr("result") + ")"
			break
		}
		class = errMismatch + "unknown statement"
		mm := mismatch{args: attr("args"), snapshotGTID: attr("snapshot_gtid")}
		if m := replayedOn.FindStringSubmatch(why); m != nil {
			mm.node = m[1]
		}
		defer func() {
			l.mu.Lock()
			l.mismatches = append(l.mismatches, mm)
			l.mu.Unlock()
		}()
		if m := mismatchStmt.FindStringSubmatch(why); m != nil {
			q := strings.ReplaceAll(m[1], `\"`, `"`)
			mm.stmt = q
			for _, k := range stmtKinds {
				if strings.HasPrefix(strings.TrimSpace(q), k.prefix) {
					class = errMismatch + k.kind
					if k.kind == "point or simple range select" {
						if strings.Contains(q, "BETWEEN") {
							class = errMismatch + "simple range select"
						} else {
							class = errMismatch + "point select"
						}
					}
					if k.kind == "other select" && strings.Contains(q, "ORDER BY") {
						class = errMismatch + "order range select"
					}
					break
				}
			}
		}
	case "statement released before every replay took its snapshot":
		l.mu.Lock()
		l.early++
		l.mu.Unlock()
		return
	case "primary lost: statement refused":
		class = errOther + "refused (" + attr("reason") + ")"
	default:
		return
	}
	l.count(l.classes, class)
}

func (l *errorLog) count(m map[string]int, k string) {
	l.mu.Lock()
	m[k]++
	l.mu.Unlock()
}

func (l *errorLog) commitCounts() (committed, absent int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commits["committed"], l.commits["absent"]
}

func (l *errorLog) details() ([]mismatch, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]mismatch(nil), l.mismatches...), l.early
}

func (l *errorLog) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.classes))
	for k, v := range l.classes {
		out[k] = v
	}
	return out
}

func runTrial(o options) (tr trial, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	s, err := startStack(ctx, o, reg)
	for attempt := 1; err != nil && (strings.Contains(err.Error(), "is used twice") || strings.Contains(err.Error(), "already in use")) && attempt < 3; attempt++ {
		// A port picked for a listener or etcd was taken (by the sandbox
		// or another process) meanwhile: pick again.
		reg = prometheus.NewRegistry()
		s, err = startStack(ctx, o, reg)
	}
	if err != nil {
		return tr, err
	}
	defer func() {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	host, port, _ := strings.Cut(s.srv.ListenerAddr("rw"), ":")
	args := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + s.sb.AppUser, "--mysql-password=" + s.sb.AppPassword, "--mysql-db=sbtest",
		"--tables=" + strconv.Itoa(o.tables), "--table-size=" + strconv.Itoa(o.tableSize), "--rand-type=uniform"}
	if out, perr := exec.CommandContext(ctx, "sysbench", append(args, "prepare")...).CombinedOutput(); perr != nil {
		return tr, fmt.Errorf("sysbench prepare: %v\n%s", perr, out)
	}
	sbc := exec.CommandContext(ctx, "sysbench", append(args, "--threads="+strconv.Itoa(o.threads), "--time="+strconv.Itoa(o.seconds),
		"--mysql-ignore-errors="+o.ignoreErrors, "--db-ps-mode=auto", "run")...)
	var out strings.Builder
	sbc.Stdout, sbc.Stderr = &out, &out
	if err := sbc.Start(); err != nil {
		return tr, err
	}
	done := make(chan error, 1)
	go func() { done <- sbc.Wait() }()
	var serr error
	if o.killAt > 0 {
		select {
		case err := <-done:
			return tr, fmt.Errorf("sysbench ended before the kill: %v\n%s", err, out.String())
		case <-time.After(o.killAt):
		}
		if err := s.sb.KillNode(0); err != nil {
			return tr, err
		}
		killed := time.Now()
		tr.backlog = relayBacklog(ctx, s.sb)
		var st topo.ClusterState
		if err := benchkit.WaitFor(ctx, 30*time.Second, func() bool {
			_, gerr := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st)
			return gerr == nil && st.Primary != "" && st.Primary != "node1"
		}); err != nil {
			return tr, fmt.Errorf("no failover: %w", err)
		}
		tr.failover, tr.newPrimary = time.Since(killed), st.Primary
		defer func() {
			if err == nil {
				tr.events = failoverEvents(ctx, s, killed)
			}
		}()
	}
	serr = <-done
	if f := regexp.MustCompile(`FATAL: .*`).FindString(out.String()); f != "" {
		tr.fatal = f
	} else if serr != nil {
		return tr, fmt.Errorf("sysbench failed (%v):\n%s", serr, out.String())
	}
	m := regexp.MustCompile(`ignored errors:\s+(\d+)`).FindStringSubmatch(out.String())
	t := regexp.MustCompile(`transactions:\s+(\d+)`).FindStringSubmatch(out.String())
	if tr.fatal == "" && (m == nil || t == nil) {
		return tr, fmt.Errorf("cannot read sysbench's summary:\n%s", out.String())
	}
	if m != nil {
		tr.sysbenchErrors, _ = strconv.Atoi(m[1])
	}
	if t != nil {
		tr.transactions, _ = strconv.Atoi(t[1])
	}
	if err := tr.gather(reg); err != nil {
		return tr, err
	}
	tr.classes = s.errs.snapshot()
	tr.committed, tr.absent = s.errs.commitCounts()
	tr.unresolved = tr.classes[errCommit]
	tr.inFlight = tr.committed + tr.absent + tr.unresolved
	tr.mismatches, tr.early = s.errs.details()
	if err := diagnose(ctx, s.sb, tr.newPrimary, tr.mismatches); err != nil {
		return tr, err
	}
	return tr, nil
}

func (tr *trial) gather(reg *prometheus.Registry) error {
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	tr.failed = map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "switchyard_proxy_transaction_replay_attempts_total":
				tr.attempts += v
			case "switchyard_proxy_commit_outcome_unknown_total":
				tr.unknown += v
			case "switchyard_proxy_replay_reads_differed_total":
				tr.readsDiffered += v
			case "switchyard_proxy_commit_outcome_resolved_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "replayed" {
						tr.absentReplayed += int(v)
					}
				}
			case "switchyard_proxy_transaction_replays_total":
				for _, l := range m.GetLabel() {
					if l.GetName() != "result" {
						continue
					}
					if l.GetValue() == "replayed" {
						tr.replayed += v
					} else {
						tr.failed[l.GetValue()] += v
						tr.fail += v
					}
				}
			}
		}
	}
	return nil
}

// stack is one trial's sandbox, etcd, controller and proxy.
type stack struct {
	errs  *errorLog // the client errors the proxy logged
	sb    *sandbox.Cluster
	store topo.Store
	keys  topo.Keys
	srv   *proxy.Server
	close func() error
}

func startStack(ctx context.Context, o options, reg prometheus.Registerer) (_ *stack, err error) {
	var closers []func() error
	cleanup := func() error {
		var first error
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i](); cerr != nil && first == nil {
				first = cerr
			}
		}
		return first
	}
	defer func() {
		if err != nil {
			_ = cleanup()
		}
	}()
	dir, err := os.MkdirTemp("", "sy-bench-replay")
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() error { return os.RemoveAll(dir) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addrs, err := benchkit.FreeAddrs(5)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: filepath.Join(dir, "sb"), Nodes: 3, SemiSync: true, StopWithParent: true,
		TemplateDir: filepath.Join(os.TempDir(), "switchyard-sandbox-template-"+strconv.Itoa(os.Getuid())),
		ListenerRW:  addrs[0], ListenerRO: addrs[1], AdminAddress: addrs[2], EtcdClientAddress: addrs[3], EtcdPeerAddress: addrs[4]})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	closers = append(closers, func() error {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		return sandbox.Down(dctx, sb.Dir, true)
	})
	if o.parallel > 0 {
		if err := parallelReplication(ctx, sb, o.parallel); err != nil {
			return nil, err
		}
	}
	etcd, err := topo.StartEmbedded(topo.EmbeddedOptions{DataDir: filepath.Join(dir, "etcd"), ClientAddress: addrs[3], PeerAddress: addrs[4], UnsafeNoFsync: true})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	closers = append(closers, func() error { etcd.Close(); return nil })

	cfg := sb.Config()
	cfg.Etcd.Endpoints = etcd.Endpoints()
	cfg.Probe.Interval = config.Duration(o.interval)
	cfg.Probe.Timeout = config.Duration(min(500*time.Millisecond, o.interval*4/5))
	cfg.Clusters[0].Failover.Mode = config.FailoverAuto
	cfg.Clusters[0].Failover.TransactionReplay = true
	cfg.Clusters[0].Failover.CommitOutcome = o.commitOutcome
	cfg.Clusters[0].Failover.ReplayChecksum = o.replayChecksum
	if o.maxHold > 0 {
		cfg.Clusters[0].Failover.MaxHold = config.Duration(o.maxHold)
	}
	cfg.Clusters[0].Durability = config.DurabilitySemiSync
	if o.parallel >= 0 {
		n := o.parallel // the controller keeps them (and sets them on a repointed replica)
		cfg.Clusters[0].Failover.ReplicaParallelThreads = &n
	}
	cfg.Admin.Address = "off"
	cfg.Listeners[0].Address, cfg.Listeners[1].Address = addrs[0], addrs[1]
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	newStore := func() (topo.Store, error) {
		return topo.NewEtcd(topo.EtcdOptions{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Log: log})
	}
	cst, err := newStore()
	if err != nil {
		return nil, err
	}
	closers = append(closers, cst.Close)
	pst, err := newStore()
	if err != nil {
		return nil, err
	}
	closers = append(closers, pst.Close)
	ctl, err := controller.New(controller.Options{Config: cfg, Store: cst, Keys: keys, ID: "bench-ctl", Log: log})
	if err != nil {
		return nil, err
	}
	errs := newErrorLog()
	srv, err := proxy.New(proxy.Options{Config: cfg, ID: "bench-proxy", Log: slog.New(errs), Registry: reg})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = ctl.Run(rctx) }()
	go func() { defer wg.Done(); _ = proxy.Follow(rctx, pst, keys, srv) }()
	closers = append(closers, func() error {
		rcancel()
		srv.Close()
		wg.Wait()
		return nil
	})
	var st topo.ClusterState
	if err := benchkit.WaitFor(ctx, 30*time.Second, func() bool {
		_, gerr := topo.GetJSON(ctx, cst, keys.ClusterState("main"), &st)
		return gerr == nil && st.Primary == "node1" && srv.Epochs()["main"] == st.Epoch && st.Node("node2").Serving && st.Node("node3").Serving
	}); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	return &stack{errs: errs, sb: sb, store: cst, keys: keys, srv: srv, close: cleanup}, nil
}

// parallelReplication gives every replica of sb n parallel appliers in
// optimistic mode (the replication threads stopped meanwhile: MariaDB
// refuses both variables while a replica runs).
func parallelReplication(ctx context.Context, sb *sandbox.Cluster, n int) error {
	for i := 1; i < len(sb.Nodes); i++ {
		db, err := sql.Open("mysql", sb.RootDSN(i))
		if err != nil {
			return err
		}
		for _, q := range []string{"STOP SLAVE", fmt.Sprintf("SET GLOBAL slave_parallel_threads = %d", n),
			"SET GLOBAL slave_parallel_mode = 'optimistic'", "START SLAVE"} {
			if _, err = db.ExecContext(ctx, q); err != nil {
				err = fmt.Errorf("%s on %s: %w", q, sb.Nodes[i].Name, err)
				break
			}
		}
		db.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
