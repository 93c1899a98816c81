package controller

import (
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// noteProbeKind logs the cause of a probe failure an operator must fix
// (wrong monitor credentials, a blocked host, missing privileges) once when
// a node's probes start failing that way, with what to do, and once when
// they stop; probes repeating the same outcome log nothing. Other outcomes
// (refused, timeout) are findings (logFindings).
func (t *term) noteProbeKind(cluster, node string, pr *nodeProber, kind probe.Kind, p topo.Probe) {
	pr.kindMu.Lock()
	prev := pr.lastKind
	pr.lastKind = kind
	pr.kindMu.Unlock()
	if prev == kind {
		return
	}
	switch kind {
	case probe.KindAccessDenied:
		t.log.Error("access denied for monitor user on node: check credentials.monitor (user, and password, password_env or password_file) and that the account exists on the node for the controller's host",
			"cluster", cluster, "node", node, "addr", pr.address, "user", pr.user, "err", p.Error)
	case probe.KindHostBlocked:
		t.log.Error("node blocks the controller's host after too many connection errors: run FLUSH HOSTS on the node (and raise max_connect_errors)",
			"cluster", cluster, "node", node, "addr", pr.address, "err", p.Error)
	case probe.KindPrivilege:
		t.log.Error("monitor user lacks a privilege the probe needs: grant the privileges listed in the README to credentials.monitor on every node",
			"cluster", cluster, "node", node, "addr", pr.address, "user", pr.user, "err", p.Error)
	default:
		switch prev {
		case probe.KindAccessDenied, probe.KindHostBlocked, probe.KindPrivilege:
			t.log.Info("monitor user's probes work again", "cluster", cluster, "node", node, "user", pr.user, "was", string(prev), "now", string(kind))
		}
	}
}
