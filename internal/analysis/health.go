package analysis

import (
	"fmt"
	"strings"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// analyzeWritePath reports PrimaryWritesBlocked and ApplicationLoginsRefused
// for the published primary p. Neither sets Result.Trouble nor feeds
// DeadPrimary: a primary whose writes are blocked, or that refuses the
// application, answers the monitor and is alive (scenario S1: busy or
// blocked is not dead; failing over would not help — a global read lock or
// a full disk is an operator's matter, and a new primary would start cold).
func (s Snapshot) analyzeWritePath(p *Node, add func(Code, string, string, ...any)) {
	pp := p.Probe
	if hb := pp.Heartbeat; hb != nil && !hb.OK && blockingKind(hb.Kind) {
		need := s.Limits.HeartbeatFailures
		if need <= 0 {
			need = 2
		}
		if len(hb.Blockers) > 0 || p.HeartbeatFailures >= need || hb.Kind == "pending" || hb.Kind == "disk_full" {
			d := fmt.Sprintf("heartbeat write failed (%s, %d round(s)): %s", hb.Kind, max(p.HeartbeatFailures, 1), hb.Error)
			if len(hb.Blockers) > 0 {
				d += "; blocked by: " + strings.Join(hb.Blockers, "; ")
			}
			if ss := pp.SemiSync; ss != nil && ss.MasterEnabled && ss.WaitSessions > 0 && ss.Clients == 0 {
				d += fmt.Sprintf("; semi-sync: %d commit(s) waiting and no semi-sync replica connected", ss.WaitSessions)
			}
			add(PrimaryWritesBlocked, p.Name, "%s; writes do not complete, but the primary is alive: not failing over", d)
		}
	}
	var refused []string
	for _, lc := range pp.AppLogins {
		if !lc.OK && lc.Code != 0 {
			refused = append(refused, fmt.Sprintf("%s: %s", lc.User, lc.Error))
		}
	}
	if len(refused) > 0 {
		add(ApplicationLoginsRefused, p.Name, "the primary refuses application logins (%s); clients cannot connect, but the primary is alive: not failing over",
			strings.Join(refused, "; "))
	}
}

// blockingKind reports whether a heartbeat failure of this kind means the
// write path is blocked. read_only has its own code (PrimaryReadOnly) and
// denied means the monitor account lacks privileges on the heartbeat
// schema (an alarm, not a write-path condition).
func blockingKind(kind string) bool {
	switch kind {
	case "read_only", "denied", "":
		return false
	}
	return true
}

// HeartbeatFailed reports whether p holds a failed heartbeat write that
// counts towards PrimaryWritesBlocked.
func HeartbeatFailed(p topo.Probe) bool {
	return p.Heartbeat != nil && !p.Heartbeat.OK && blockingKind(p.Heartbeat.Kind)
}
