package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// replayCounts are the proxy's transaction replay counters.
type replayCounts struct {
	attempts, replayed, unknown float64
	failed                      map[string]float64 // by result
	resolved                    map[string]float64 // COMMITs in flight, by outcome
}

func (c replayCounts) failedTotal() float64 {
	n := 0.0
	for _, v := range c.failed {
		n += v
	}
	return n
}

func gatherReplay(t *testing.T, reg *prometheus.Registry) replayCounts {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := replayCounts{failed: map[string]float64{}, resolved: map[string]float64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "switchyard_proxy_transaction_replay_attempts_total":
				c.attempts += v
			case "switchyard_proxy_commit_outcome_unknown_total":
				c.unknown += v
			case "switchyard_proxy_commit_outcome_resolved_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						c.resolved[l.GetValue()] += v
					}
				}
			case "switchyard_proxy_transaction_replays_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" {
						if l.GetValue() == "replayed" {
							c.replayed += v
						} else {
							c.failed[l.GetValue()] += v
						}
					}
				}
			}
		}
	}
	return c
}

// sysbenchIgnored reads "ignored errors: N" from sysbench's summary.
func sysbenchIgnored(out string) (int, bool) {
	m := regexp.MustCompile(`ignored errors:\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// TestTransactionReplayCrashFailover: sysbench oltp_read_write (16
// threads, prepared statements) through the rw listener with
// failover.transaction_replay on; the primary is killed (kill -9) in the
// middle, the controller fails over (auto mode, semi-sync). The
// transactions open on the dead primary are replayed on the new one, and
// every COMMIT in flight is resolved by its commit marker (committed: an
// OK; not committed: replayed and committed), none is left with the
// outcome-unknown error; the only errors clients see are transactions
// whose replay read something else (the rolled-back error, 1105, which
// sysbench is told to tolerate so that the run goes on and counts them;
// any other error ends it with FATAL; counted by the proxy, a few in 16).
func TestTransactionReplayCrashFailover(t *testing.T) {
	needSysbench(t)
	reg := prometheus.NewRegistry()
	s := startFO(t, foOpts{SemiSync: true, ProxyRegistry: reg, Mutate: func(c *config.Config) {
		c.Clusters[0].Durability = config.DurabilitySemiSync
		c.Clusters[0].Failover.TransactionReplay = true
	}})
	host, port, _ := strings.Cut(s.listener(0, "primary"), ":")
	args := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + s.sb.AppUser, "--mysql-password=" + s.sb.AppPassword, "--mysql-db=sbtest",
		"--tables=4", "--table-size=10000", "--rand-type=uniform"}
	ctx := context.Background()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer pcancel()
	if out, err := exec.CommandContext(pctx, "sysbench", append(args, "prepare")...).CombinedOutput(); err != nil {
		t.Fatalf("sysbench prepare: %v\n%s", err, out)
	}
	// 1105 is tolerated so that the run counts the outcome-unknown errors
	// ("ignored errors") instead of ending at the first; every other
	// error is still FATAL.
	rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
	defer rcancel()
	sb := exec.CommandContext(rctx, "sysbench", append(args, "--threads=16", "--time=15",
		"--mysql-ignore-errors=1105", "--db-ps-mode=auto", "--report-interval=1", "run")...)
	sb.Cancel = func() error { return sb.Process.Signal(os.Interrupt) }
	var sbOut strings.Builder
	sb.Stdout, sb.Stderr = &sbOut, &sbOut
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	sbDone := make(chan error, 1)
	go func() { sbDone <- sb.Wait() }()
	time.Sleep(6 * time.Second)
	if err := s.sb.KillNode(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	st, _ := s.waitState("failover to a new primary", 20*time.Second, func(st topo.ClusterState) bool {
		return st.Primary != "" && st.Primary != "node1"
	})
	t.Logf("failed over to %s %s after the kill (epoch %d)", st.Primary, time.Since(killed).Round(time.Millisecond), st.Epoch)
	err := <-sbDone
	out := sbOut.String()
	c := gatherReplay(t, reg)
	ignored, ok := sysbenchIgnored(out)
	rep := parseSysbenchReports(out)
	t.Logf("sysbench: %d s reported, about %.0f transactions, %d client errors (1105, tolerated); proxy: %v replays attempted, %v replayed, %v rolled back %v; "+
		"COMMITs in flight: resolved %v, %v unresolved (outcome unknown)",
		rep.seconds, rep.transactions, ignored, c.attempts, c.replayed, c.failedTotal(), c.failed, c.resolved, c.unknown)
	if err != nil || strings.Contains(out, "FATAL") || !ok {
		t.Fatalf("sysbench failed (%v):\n%s", err, out)
	}
	if rep.reconnects != 0 {
		t.Fatalf("sysbench reconnected %v times: sessions must survive the failover\n%s", rep.reconnects, out)
	}
	if c.attempts == 0 || c.replayed == 0 {
		t.Fatalf("no transaction was replayed (%v attempts): the kill hit no open transaction?", c.attempts)
	}
	if c.unknown != 0 && c.failed["no_primary"] == 0 {
		// Only a failover slower than failover.max_hold (a very loaded
		// machine: the replays then fail with no_primary too) leaves a
		// COMMIT unresolved.
		t.Fatalf("%v COMMITs in flight got the outcome-unknown error: the commit marker must resolve every one (resolved: %v)", c.unknown, c.resolved)
	}
	if float64(ignored) != c.unknown+c.failedTotal() {
		t.Fatalf("sysbench saw %d errors; the proxy answered %v outcome-unknown COMMITs and %v failed replays %v: every client error must be one of them",
			ignored, c.unknown, c.failedTotal(), c.failed)
	}
	for r, n := range c.failed {
		// A replay may fail because it read something else, or because
		// the failover took longer than failover.max_hold (a very loaded
		// machine); anything else is a fault.
		if r != "mismatch" && r != "no_primary" && n > 0 {
			t.Fatalf("%v replays failed with %q: %v", n, r, c.failed)
		}
	}
}
