package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/loadgen"
)

// TestSwitchoverUnderLoadS10 is scenario S10 with the coordinated
// switchover: sysbench oltp_read_write (16 threads, prepared statements,
// no error tolerated) through one proxy and a database/sql pool of
// long-lived connections (the ledger workload) through a second proxy run
// through the rw listeners while the primary is
// switched over 10 times, alternating node2 and node1. No client sees an
// error, every acknowledged ledger row is on the final primary, and the
// longest write pause is printed (asserted only against a generous bound).
func TestSwitchoverUnderLoadS10(t *testing.T) {
	needSysbench(t)
	s := startSwitchStack(t, 2, nil)
	// The ledger pool goes through the second proxy: the controller must
	// hold and release both.
	ledgerRW := s.proxyDSN(1, "primary", "sbtest")
	ledgerRO := s.proxyDSN(1, "replica", "sbtest")
	host, port, _ := strings.Cut(s.listener("primary"), ":")
	args := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + s.sb.AppUser, "--mysql-password=" + s.sb.AppPassword, "--mysql-db=sbtest",
		// Uniform keys over 4 tables of 10000 rows: sysbench's default
		// skewed distribution deadlocks InnoDB (error 1213) with 16
		// threads even straight against the primary, and
		// --mysql-ignore-errors=none would end the run on the first one.
		"--tables=4", "--table-size=10000", "--rand-type=uniform"}
	ctx := context.Background()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer pcancel()
	if out, err := exec.CommandContext(pctx, "sysbench", append(args, "prepare")...).CombinedOutput(); err != nil {
		t.Fatalf("sysbench prepare: %v\n%s", err, out)
	}
	if err := loadgen.Setup(ctx, ledgerRW, ""); err != nil {
		t.Fatal(err)
	}
	s.waitServing("node1")

	const runFor = 40 * time.Second
	sbOut := make(chan string, 1)
	sbErr := make(chan error, 1)
	go func() {
		out, err := exec.CommandContext(pctx, "sysbench", append(args, "--threads=16", "--time="+strings.TrimSuffix(runFor.String(), "s"),
			"--mysql-ignore-errors=none", "--db-ps-mode=auto", "--report-interval=5", "run")...).CombinedOutput()
		sbOut <- string(out)
		sbErr <- err
	}()
	lctx, lcancel := context.WithCancel(ctx)
	resc := make(chan *loadgen.Result, 1)
	go func() {
		r, err := loadgen.Run(lctx, loadgen.Options{RW: ledgerRW, RO: ledgerRO, Writers: 8, Readers: 4})
		if err != nil {
			t.Error(err)
		}
		resc <- r
	}()
	started := time.Now()
	time.Sleep(2 * time.Second)
	var took []time.Duration
	targets := []string{"node2", "node1"}
	for i := range 10 {
		to := targets[i%2]
		t0 := time.Now()
		out, err := s.switchover(to)
		if err != nil {
			lcancel()
			t.Fatalf("switchover %d to %s: %v\n%s", i+1, to, err, out)
		}
		took = append(took, time.Since(t0))
		if i < 2 {
			t.Logf("switchover %d:\n%s", i+1, out)
		}
		s.waitServing(to)
		time.Sleep(700 * time.Millisecond)
	}
	switchedIn := time.Since(started)
	if switchedIn > runFor {
		t.Fatalf("10 switchovers took %s, longer than the sysbench run (%s): raise runFor", switchedIn, runFor)
	}
	out, err := <-sbOut, <-sbErr
	lcancel()
	r := <-resc
	var sb strings.Builder
	r.Print(&sb, "ledger", map[int64]string{1: "node1", 2: "node2", 3: "node3"})
	t.Log("\n" + sb.String())
	tx, errs, maxLat := sysbenchFigures(out)
	t.Logf("S10: 10 switchovers in %s; CLI switchover time %s", switchedIn.Round(time.Millisecond), durations(took))
	t.Logf("S10: sysbench oltp_read_write 16 threads %s: transactions %s, ignored errors %s, max latency %s ms; ledger longest write pause %s",
		runFor, tx, errs, maxLat, r.LongestWritePause.Round(time.Millisecond))
	if err != nil || tx == "" || tx == "0" || errs != "0" {
		t.Fatalf("sysbench: %v, transactions %q, errors %q\n%s", err, tx, errs, out)
	}
	if r.Errors() != 0 {
		t.Fatalf("ledger clients saw %d errors: %v %v", r.Errors(), r.ErrorsByCode, r.FirstErrors)
	}
	if r.WritesByServer[1] == 0 || r.WritesByServer[2] == 0 {
		t.Fatalf("writes by server %v: want writes on node1 and node2", r.WritesByServer)
	}
	missing, err := loadgen.Check(ctx, s.sb.RootDSN(0), "sbtest.ledger", r.Acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("%d acknowledged writes missing on the final primary (first %d)", len(missing), missing[0])
	}
	if r.LongestWritePause > 5*time.Second {
		t.Fatalf("longest write pause %s (target < 0.5 s, bound 5 s)", r.LongestWritePause)
	}
}
