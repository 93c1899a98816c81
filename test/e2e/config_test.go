package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
)

// loadDuration is how long sysbench runs through each proxy; the scenario
// must finish within it.
const loadDuration = 20 * time.Second

// TestConfigS8EmptyRoutingPush is scenario S8 (empty routing push) with
// three proxies, one controller and sysbench running through every proxy:
//
//  1. the CLI refuses an empty config and a config that drops 90% of the
//     routes, and the store keeps revision 1;
//  2. an empty value, then garbage, then a schema-valid config without
//     listeners written straight into etcd leave every proxy serving its
//     last-known-good config with no client error, and raise the alarm on
//     each (accessor, metric, status);
//  3. one `config rollback` restores the current revision, the alarms clear
//     and status shows every consumer's applied revision converge;
//  4. a valid, non-destructive change (add replica node3, change
//     read_routing.max_lag) reaches every proxy within one second of the
//     apply, with no client error, and node3 starts serving reads.
func TestConfigS8EmptyRoutingPush(t *testing.T) {
	if _, err := exec.LookPath("sysbench"); err != nil {
		if os.Getenv(sandboxtest.RequireEnv) == "1" {
			t.Fatal("sysbench not found: apt-get install -y sysbench")
		}
		t.Skip("sysbench not found: apt-get install -y sysbench")
	}
	fl := startFleet(t, 3, 2, 3)
	routes := len(fl.cfg.Routes())
	t.Logf("fleet up: 3 proxies, 1 controller, %d listeners, %d routes, revision 1", len(fl.cfg.Listeners), routes)

	// Load: sysbench through every proxy's rw listener, and new connections
	// every 50 ms through every proxy's rw, ro and a tenant listener.
	var benches []*sysbench
	for i, p := range fl.proxies {
		db := fmt.Sprintf("sbp%d", i)
		admin := fl.openThrough(p.addrs["rw"], "")
		if _, err := admin.Exec("CREATE DATABASE IF NOT EXISTS " + db); err != nil {
			t.Fatal(err)
		}
		admin.Close()
		benches = append(benches, startSysbench(t, fl.sb, p.id, p.addrs["rw"], db, loadDuration))
	}
	loadStart := time.Now()
	cctx, stopChecks := context.WithCancel(context.Background())
	defer stopChecks()
	checkers := map[string]*connChecker{}
	checksDone := make(chan struct{})
	nChecks := 0
	for _, p := range fl.proxies {
		for _, l := range []string{"rw", "ro", "tenant3"} {
			c := &connChecker{}
			checkers[p.id+"/"+l] = c
			nChecks++
			go func() {
				c.run(cctx, fl.dsnThrough(p.addrs[l], ""), 50*time.Millisecond)
				checksDone <- struct{}{}
			}()
		}
	}
	time.Sleep(time.Second)

	// 1. The CLI refuses an empty config and a 90% route drop.
	empty := fl.writeFile("empty.yaml", []byte("# nothing here\n"))
	for _, extra := range [][]string{nil, {"--allow-destructive"}} {
		out, code := fl.cli(append([]string{"config", "apply", empty, "--reason", "s8 empty push"}, extra...)...)
		if code == 0 || !strings.Contains(out, "empty document") {
			t.Fatalf("config apply of an empty file %v: exit %d\n%s", extra, code, out)
		}
		t.Logf("config apply empty.yaml %v: exit %d: %s", extra, code, strings.TrimSpace(out))
	}
	drop := withAddrs(fl.cfg, nil)
	drop.Listeners = drop.Listeners[:1]
	dropFile := fl.writeConfigFile("drop90.yaml", drop)
	out, code := fl.cli("config", "diff", dropFile)
	if code != 2 || !strings.Contains(out, "guard: apply would REFUSE") { // diff exits 2 when apply would refuse
		t.Fatalf("config diff drop90.yaml: exit %d\n%s", code, out)
	}
	out, code = fl.cli("config", "apply", dropFile, "--reason", "s8 drop 90% of routes")
	// Whether a removed listener also counts as in use depends on the
	// sessions the proxies report at that instant; the route fraction alone
	// must refuse the push.
	for _, want := range []string{"routes-removed: 18 of 20 routes (90%) are removed", "the refused change:", "- tenant0", "routes: 20 -> 2", "--allow-destructive"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal output lacks %q", want)
		}
	}
	if code != 2 {
		t.Fatalf("config apply drop90.yaml: exit %d, want 2 (refused)\n%s", code, out)
	}
	t.Logf("config apply drop90.yaml: exit %d; first lines:\n%s", code, firstLines(out, 14))
	if rev := fl.currentRev(); rev != 1 {
		t.Fatalf("after the refusals the current revision is %d, want 1", rev)
	}

	// 2. Direct writes into etcd, around the CLI.
	noListeners := withAddrs(fl.cfg, nil)
	noListeners.Listeners = nil
	nlYAML, err := noListeners.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	nlDoc, _ := json.Marshal(configstore.Revision{Rev: 2, Author: "rogue@tool", Reason: "migration rollback", Source: "apply", SHA256: configstore.Hash(nlYAML), YAML: string(nlYAML)})
	writes := []struct {
		name   string
		value  []byte
		reason string
	}{
		{"empty value", []byte{}, "the stored value is empty"},
		{"garbage", []byte("\x1f\x8b\x08\x00garbage\xff"), "not a config revision document"},
		{"schema-valid config without listeners", nlDoc, "listeners: at least one listener is required"},
	}
	for _, w := range writes {
		v := fl.putCurrent(w.value)
		took := fl.waitUntil("alarm on every consumer after "+w.name, 10*time.Second, func() bool {
			for _, c := range fl.consumers() {
				if a := c.f.Alarm(); a == nil || a.Version != v {
					return false
				}
			}
			return true
		})
		for _, c := range fl.consumers() {
			a := c.f.Alarm()
			if !strings.Contains(a.Reason, w.reason) {
				t.Errorf("%s: alarm %q, want it to contain %q", c.id, a.Reason, w.reason)
			}
			if c.f.AppliedRev() != 1 {
				t.Errorf("%s applied revision %d after %s, want 1 (last-known-good)", c.id, c.f.AppliedRev(), w.name)
			}
			if g := metric(t, c.reg, "switchyard_config_alarm"); g != 1 {
				t.Errorf("%s: switchyard_config_alarm = %v, want 1", c.id, g)
			}
		}
		t.Logf("direct write of %s (etcd version %d): alarm on all %d consumers after %s: %s", w.name, v, len(fl.consumers()), took.Round(time.Millisecond), fl.proxies[0].f.Alarm())
		fl.checkServing(w.name)
	}
	for _, p := range fl.proxies {
		if n := metric(t, p.reg, "switchyard_config_rejected_revisions_total"); n != 3 {
			t.Errorf("%s rejected %v revisions, want 3", p.id, n)
		}
	}
	// status shows the alarm of every proxy.
	out, code = fl.cli("status")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	for _, p := range fl.proxies {
		if !lineHas(out, p.id, "ALARM") {
			t.Errorf("status does not show the alarm of %s:\n%s", p.id, out)
		}
	}
	if !strings.Contains(out, "config: ALARM: the current config value") {
		t.Errorf("status does not flag the current value:\n%s", out)
	}
	t.Logf("status during the alarm (config part):\n%s", firstLines(out, 7))

	// 3. One command restores service.
	out, code = fl.cli("config", "history")
	t.Logf("config history before the rollback (exit %d):\n%s", code, out)
	start := time.Now()
	out, code = fl.cli("config", "rollback", "--to", "1", "--reason", "restore after the direct writes")
	if code != 0 || !strings.Contains(out, "applied revision 3") || !strings.Contains(out, "replaced an invalid current value") {
		t.Fatalf("config rollback --to 1: exit %d\n%s", code, out)
	}
	cliTook := time.Since(start)
	took := fl.waitUntil("alarms cleared after the rollback", 10*time.Second, func() bool {
		for _, c := range fl.consumers() {
			if c.f.Alarm() != nil || c.f.AppliedRev() != 3 {
				return false
			}
		}
		return true
	})
	t.Logf("config rollback --to 1 (%s): every consumer on revision 3 with no alarm %s after the command returned:\n%s", cliTook.Round(time.Millisecond), took.Round(100*time.Microsecond), strings.TrimSpace(out))
	fl.waitConverged(3)
	for _, c := range fl.consumers() {
		if g := metric(t, c.reg, "switchyard_config_alarm"); g != 0 {
			t.Errorf("%s: switchyard_config_alarm = %v after the rollback, want 0", c.id, g)
		}
	}
	fl.checkServing("after the rollback")

	// 4. A valid, non-destructive change propagates within one second.
	change := withAddrs(fl.cfg, nil)
	change.Clusters = append([]config.Cluster(nil), fl.cfg.Clusters...)
	change.Clusters[0].Nodes = append(append([]config.Node(nil), fl.cfg.Clusters[0].Nodes...),
		config.Node{Name: "node3", Address: fl.sb.Nodes[2].Address, Promotion: config.PromotionNeutral})
	change.Clusters[0].ReadRouting.MaxLag = config.Duration(5 * time.Second)
	changeFile := fl.writeConfigFile("add-node3.yaml", change)
	out, code = fl.cli("config", "diff", changeFile)
	if code != 0 || !strings.Contains(out, "+ main/node3") || !strings.Contains(out, "read_routing.max_lag  10s -> 5s") || !strings.Contains(out, "not destructive") {
		t.Fatalf("config diff add-node3.yaml: exit %d\n%s", code, out)
	}
	start = time.Now()
	out, code = fl.cli("config", "apply", changeFile, "--reason", "add replica node3, max_lag 5s", "--if-rev", "3")
	applied := time.Now()
	if code != 0 || !strings.Contains(out, "applied revision 4") {
		t.Fatalf("config apply add-node3.yaml: exit %d\n%s", code, out)
	}
	var slowest time.Duration
	for _, p := range fl.proxies {
		d := fl.waitUntil(p.id+" on revision 4", 10*time.Second, func() bool { return p.f.AppliedRev() == 4 })
		slowest = max(slowest, d)
	}
	t.Logf("config apply add-node3.yaml took %s; the last of 3 proxies applied revision 4 %s after the command returned (%s after it started)",
		applied.Sub(start).Round(time.Millisecond), slowest.Round(100*time.Microsecond), time.Since(start).Round(time.Millisecond))
	if slowest > time.Second {
		t.Errorf("revision 4 reached every proxy %s after the apply, want within 1s", slowest)
	}
	for _, p := range fl.proxies {
		c := p.f.Config()
		if c.Cluster("main").Node("node3") == nil || c.Cluster("main").ReadRouting.MaxLag.D() != 5*time.Second {
			t.Errorf("%s serves a config without node3 or max_lag 5s", p.id)
		}
	}
	fl.waitConverged(4)
	// The controller probes node3 and the proxies route reads to it.
	fl.waitUntil("node3 serving in the cluster state", 15*time.Second, func() bool {
		st, err := fl.state()
		n := st.Node("node3")
		return err == nil && n != nil && n.Serving
	})
	seen := map[int64]int{}
	deadline := time.Now().Add(10 * time.Second)
	for seen[3] == 0 && time.Now().Before(deadline) {
		db := fl.openThrough(fl.proxies[1].addrs["ro"], "")
		var id int64
		if err := db.QueryRow("SELECT @@server_id").Scan(&id); err != nil {
			t.Fatalf("ro through proxy-1: %v", err)
		}
		db.Close()
		seen[id]++
	}
	if seen[3] == 0 {
		t.Errorf("node3 never answered reads through proxy-1's ro listener: %v", seen)
	}
	t.Logf("ro reads through proxy-1 after adding node3, by server_id: %v", seen)

	// The load ran through all of it without a single client error.
	if time.Since(loadStart) > loadDuration-2*time.Second {
		t.Errorf("the scenario took %s, longer than the %s sysbench run: raise loadDuration", time.Since(loadStart).Round(time.Second), loadDuration)
	}
	stopChecks()
	for range nChecks {
		<-checksDone
	}
	var okTotal int64
	for name, c := range checkers {
		okTotal += c.ok.Load()
		if f := c.failed.Load(); f > 0 {
			t.Errorf("%s: %d of %d new connections failed: %v", name, f, f+c.ok.Load(), c.firstErrs)
		}
		if c.ok.Load() == 0 {
			t.Errorf("%s: no successful connection", name)
		}
	}
	t.Logf("new-connection checks: %d connections through 9 listeners (3 per proxy), 0 failures allowed", okTotal)
	for _, b := range benches {
		tx, errs, err := b.result()
		t.Logf("sysbench oltp_read_write through %s rw (%s, 1 thread, ps on): transactions %s, ignored errors %s", b.name, loadDuration, tx, errs)
		if err != nil || tx == "" || tx == "0" || errs != "0" {
			t.Errorf("sysbench through %s: %v, transactions %q, errors %q\n%s", b.name, err, tx, errs, b.out.String())
		}
	}
	out, _ = fl.cli("config", "history")
	t.Logf("config history at the end:\n%s", out)

	// show prints the current revision with passwords redacted; --rev and
	// --json give an older one as a document.
	out, code = fl.cli("config", "show")
	if code != 0 || !strings.Contains(out, "# revision 4 (") || !strings.Contains(out, "name: node3") || !strings.Contains(out, configstore.Redacted) || strings.Contains(out, fl.sb.AppPassword) {
		t.Errorf("config show: exit %d\n%s", code, out)
	}
	out, code = fl.cli("config", "show", "--rev", "3", "--json")
	var shown configstore.Revision
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Rev != 3 || shown.RollbackOf != 1 || strings.Contains(shown.YAML, "node3") {
		t.Errorf("config show --rev 3 --json: exit %d\n%s", code, out)
	}
	if out, code = fl.cli("config", "show", "--rev", "2"); code == 0 || !strings.Contains(out, "revision 2 is not in the history") {
		t.Errorf("config show --rev 2 (never applied): exit %d\n%s", code, out)
	}
}

// openThrough opens a go-sql-driver pool through a listener address.
func (fl *fleet) openThrough(addr, db string) *sql.DB {
	fl.t.Helper()
	h, err := sql.Open("mysql", fl.dsnThrough(addr, db))
	if err != nil {
		fl.t.Fatal(err)
	}
	h.SetMaxOpenConns(1)
	return h
}

func (fl *fleet) dsnThrough(addr, db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?timeout=2s&readTimeout=30s&writeTimeout=30s", fl.sb.AppUser, fl.sb.AppPassword, addr, db)
}

// checkServing opens a new connection through every listener of every
// proxy and runs a query: all must answer.
func (fl *fleet) checkServing(when string) {
	fl.t.Helper()
	for _, p := range fl.proxies {
		for name, addr := range p.addrs {
			db := fl.openThrough(addr, "")
			var id int64
			err := db.QueryRow("SELECT @@server_id").Scan(&id)
			db.Close()
			if err != nil {
				fl.t.Errorf("%s: %s listener %s does not serve: %v", when, p.id, name, err)
			}
		}
	}
}

// currentRev is the revision of the current key (0 when it is not valid).
func (fl *fleet) currentRev() int64 {
	fl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := configstore.Load(ctx, fl.store, fl.keys)
	if err != nil {
		fl.t.Fatal(err)
	}
	if s.Current == nil {
		return 0
	}
	return s.Current.Rev
}

// waitConverged polls `switchyard status --json` until every consumer
// reports revision rev without an alarm, and logs how the applied
// revisions converged.
func (fl *fleet) waitConverged(rev int64) {
	fl.t.Helper()
	var seen []string
	took := fl.waitUntil(fmt.Sprintf("status shows every consumer on revision %d", rev), 15*time.Second, func() bool {
		r := fl.statusJSON()
		if r.Config == nil || r.Config.Current == nil {
			return false
		}
		var line []string
		for _, c := range r.Config.Consumers {
			line = append(line, fmt.Sprintf("%s=%d", c.ID, c.AppliedRev))
		}
		seen = append(seen, strings.Join(line, " "))
		return len(r.Config.Consumers) == 1+len(fl.proxies) && r.Config.Current.Rev == rev && r.Config.Converged()
	})
	fl.t.Logf("status converged on revision %d after %s (%d polls; last: %s)", rev, took.Round(time.Millisecond), len(seen), seen[len(seen)-1])
}

func lineHas(out, a, b string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, a) && strings.Contains(l, b) {
			return true
		}
	}
	return false
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
