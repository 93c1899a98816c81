package analysis

import (
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func TestWritePathFindings(t *testing.T) {
	ftwrl := "FLUSH TABLES WITH READ LOCK held by root@localhost thread 42 for 12s (Sleep)"
	hbFail := func(kind, err string, blockers ...string) func(*topo.Probe) {
		return func(p *topo.Probe) {
			p.Heartbeat = &topo.Heartbeat{Kind: kind, Error: err, LatencyMS: 500, Blockers: blockers}
		}
	}
	cases := []struct {
		name     string
		primary  topo.Probe
		failures int
		want     Code   // "" = neither write-path code
		detail   string // substring of the finding's detail
	}{
		{name: "heartbeat ok", primary: with(primaryOK("0-1-5"), func(p *topo.Probe) { p.Heartbeat = &topo.Heartbeat{OK: true, LatencyMS: 1} }), failures: 0},
		{name: "no heartbeat attempted", primary: primaryOK("0-1-5")},
		{name: "global read lock named at once", primary: with(primaryOK("0-1-5"), hbFail("timeout", "write: MySQL error 1969", ftwrl)), failures: 1,
			want: PrimaryWritesBlocked, detail: "FLUSH TABLES WITH READ LOCK held by root@localhost thread 42"},
		{name: "one slow heartbeat without a blocker is not enough", primary: with(primaryOK("0-1-5"), hbFail("timeout", "write: timeout")), failures: 1},
		{name: "two failed heartbeats without a blocker", primary: with(primaryOK("0-1-5"), hbFail("timeout", "write: timeout")), failures: 2,
			want: PrimaryWritesBlocked, detail: "2 round(s)"},
		{name: "pending heartbeat waiting for semi-sync", primary: with(primaryOK("0-1-5"), func(p *topo.Probe) {
			hbFail("pending", "the previous heartbeat (thread 9) is still in the server")(p)
			p.SemiSync = &topo.SemiSync{MasterEnabled: true, MasterStatus: true, WaitSessions: 3}
		}), failures: 1, want: PrimaryWritesBlocked, detail: "3 commit(s) waiting and no semi-sync replica connected"},
		{name: "disk full", primary: with(primaryOK("0-1-5"), hbFail("disk_full", "MySQL error 1021: Disk full")), failures: 1,
			want: PrimaryWritesBlocked, detail: "Disk full"},
		{name: "read_only has its own code", primary: with(primaryOK("0-1-5"), hbFail("read_only", "not written", "read_only=ON")), failures: 3},
		{name: "missing privileges is not blocked writes", primary: with(primaryOK("0-1-5"), hbFail("denied", "MySQL error 1142")), failures: 3},
		{name: "application refused with 1040", primary: with(primaryOK("0-1-5"), func(p *topo.Probe) {
			p.AppLogins = []topo.LoginCheck{{User: "app", Code: 1040, Error: "MySQL error 1040: Too many connections"}}
		}), want: ApplicationLoginsRefused, detail: "app: MySQL error 1040"},
		{name: "application refused with 1203", primary: with(primaryOK("0-1-5"), func(p *topo.Probe) {
			p.AppLogins = []topo.LoginCheck{{User: "ok", OK: true}, {User: "app", Code: 1203, Error: "MySQL error 1203: User app already has more than 'max_user_connections' active connections"}}
		}), want: ApplicationLoginsRefused, detail: "max_user_connections"},
		{name: "login network error is not a refusal", primary: with(primaryOK("0-1-5"), func(p *topo.Probe) {
			p.AppLogins = []topo.LoginCheck{{User: "app", Error: "login timed out"}}
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snap{primary: c.primary, db2: replicaOK(2, "0-1-5"), db3: replicaOK(3, "0-1-5")}.build()
			s.Nodes[0].HeartbeatFailures = c.failures
			r := Analyze(s)
			for _, code := range []Code{PrimaryWritesBlocked, ApplicationLoginsRefused} {
				f := r.Get(code)
				switch {
				case code == c.want && f == nil:
					t.Fatalf("no %s; findings %v", code, r.Findings)
				case code == c.want && !strings.Contains(f.Detail, c.detail):
					t.Errorf("%s detail %q does not contain %q", code, f.Detail, c.detail)
				case code != c.want && f != nil:
					t.Errorf("unexpected %s", f)
				}
			}
			if r.Has(DeadPrimary) || r.Has(UnreachablePrimary) || r.Trouble {
				t.Errorf("blocked writes must never look like a dead primary: %v trouble=%v", r.Findings, r.Trouble)
			}
		})
	}
}
