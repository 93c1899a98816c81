package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// upProcess is one `switchyard up` process, stopped by pid.
type upProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startUp(t *testing.T, cfgPath, logPath string) *upProcess {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "up", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProcess{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	t.Cleanup(func() { p.kill(syscall.SIGTERM) })
	return p
}

func (p *upProcess) kill(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(p.cmd.Process.Pid, sig)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// TestUpRestartLeadsAgain: `switchyard up` (embedded etcd, controller,
// proxy) is killed with SIGKILL under ledger writes and started again on
// the same config and data. Its id is derived from the embedded etcd's
// data directory, so the restarted controller drops the election key its
// predecessor left and leads (publishes the cluster state) at once instead
// of after the old session's TTL; no acknowledged write is lost.
func TestUpRestartLeadsAgain(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 3, SemiSync: true})
	dir := t.TempDir()
	cfg := sb.Config()
	cfg.Etcd.Embedded = config.EmbeddedEtcd{DataDir: filepath.Join(dir, "etcd"),
		ClientAddress: sandboxtest.FreeAddr(t), PeerAddress: sandboxtest.FreeAddr(t)}
	cfg.Admin.Address = "off"
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = sandboxtest.FreeAddr(t)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	interval := cfg.Probe.Interval.D()
	logPath := filepath.Join(dir, "up.log")
	up := startUp(t, cfgPath, logPath)
	keys := topo.Keys{Prefix: cfg.Etcd.Prefix}
	var rw string
	for _, l := range cfg.Listeners {
		if l.Role == "primary" {
			rw = l.Address
		}
	}
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=1s&readTimeout=5s&writeTimeout=5s", sb.AppUser, sb.AppPassword, rw)

	// published waits until a controller wrote the cluster state after since
	// and the proxy takes writes; it returns both durations.
	var st topo.Store
	published := func(since time.Time, timeout time.Duration) (lead, write time.Duration) {
		t.Helper()
		for lead == 0 || write == 0 {
			if time.Since(since) > timeout {
				out, _ := os.ReadFile(logPath)
				t.Fatalf("not leading and routing %s after start (lead %s, write %s)\n%s", timeout, lead, write, tailText(string(out), 3000))
			}
			if st == nil {
				s, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: []string{"http://" + cfg.Etcd.Embedded.ClientAddress}, DialTimeout: time.Second})
				if err == nil {
					st = s
					t.Cleanup(func() { st.Close() })
				}
			}
			if st != nil && lead == 0 {
				var cs topo.ClusterState
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := topo.GetJSON(ctx, st, keys.ClusterState(sandbox.ClusterName), &cs)
				cancel()
				if err == nil && cs.UpdatedAt.After(since) && cs.Primary == "node1" {
					lead = time.Since(since)
				}
			}
			if write == 0 {
				if db := openOne(t, dsn); db.Ping() == nil {
					if _, err := db.Exec("CREATE TABLE IF NOT EXISTS restart_probe (id INT PRIMARY KEY)"); err == nil {
						write = time.Since(since)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		return lead, write
	}
	first := time.Now()
	lead, write := published(first, 60*time.Second)
	t.Logf("first start: leading after %s, first write through the proxy after %s", lead.Round(time.Millisecond), write.Round(time.Millisecond))

	if err := loadgen.Setup(context.Background(), dsn, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resc := make(chan *loadgen.Result, 1)
	go func() {
		r, err := loadgen.Run(ctx, loadgen.Options{RW: dsn, Writers: 4, Interval: 5 * time.Millisecond, IDBase: 5_000_000_000_000})
		if err != nil {
			t.Error(err)
		}
		resc <- r
	}()
	time.Sleep(2 * time.Second)
	up.kill(syscall.SIGKILL)
	restart := time.Now()
	startUp(t, cfgPath, logPath)
	lead, write = published(restart, 60*time.Second)
	t.Logf("kill -9 and restart of switchyard up: controller leading (state published) %s after the restart, first write through the proxy %s after (probe interval %s, old leader session TTL %s)",
		lead.Round(time.Millisecond), write.Round(time.Millisecond), interval, topo.DefaultSessionTTL)
	out, _ := os.ReadFile(logPath)
	if !strings.Contains(string(out), "dropped the election key of an earlier process with this identity") {
		t.Errorf("the restarted controller did not drop its predecessor's election key\n%s", tailText(string(out), 3000))
	}
	// Before, the restarted controller waited out its predecessor's session
	// (topo.DefaultSessionTTL, ≈ 7 s in all); leading sooner than that proves
	// the stale key was dropped.
	if lead >= topo.DefaultSessionTTL {
		t.Errorf("leading %s after the restart: the old leader session was waited out", lead)
	}
	time.Sleep(time.Second)
	cancel()
	r := <-resc
	var b strings.Builder
	r.Print(&b, "ledger", map[int64]string{1: "node1", 2: "node2", 3: "node3"})
	t.Log("\n" + b.String())
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	rc, err := mysql.ParseDSN(sb.RootDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	rc.DBName = "sbtest"
	missing, err := loadgen.Check(cctx, rc.FormatDSN(), "", r.Acked)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ledger: %d acknowledged writes, %d missing on node1", len(r.Acked), len(missing))
	if len(missing) > 0 {
		t.Errorf("%d acknowledged writes lost across the restart", len(missing))
	}
}

func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
