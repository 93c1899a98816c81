package controller

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/analysis"
	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// alignBackoff is how long the controller waits before aligning the same
// replica again (after a failure, or when the server keeps another value).
const alignBackoff = time.Minute

// replicaSettings are the heartbeat period and slave_net_timeout the
// controller keeps on the replicas of cl (from failover.silence_bound),
// and their parallel appliers (failover.replica_parallel_threads).
func replicaSettings(cl *config.Cluster) probe.ReplicaSettings {
	return probe.ReplicaSettings{HeartbeatPeriod: cl.Failover.HeartbeatPeriod(), NetTimeout: cl.Failover.NetTimeout(),
		ParallelThreads: cl.Failover.ParallelThreads()}
}

// replicaSettingsDiffer says how a replica's probe differs from rs ("" when
// it does not). A NetTimeoutSeconds of 0 was not read and is not compared,
// nor is an empty ParallelMode; rs.ParallelThreads 0 is not compared.
func replicaSettingsDiffer(p topo.Probe, rs probe.ReplicaSettings) string {
	var d string
	if math.Abs(p.HeartbeatPeriod-rs.HeartbeatPeriod.Seconds()) >= 0.0005 {
		d = fmt.Sprintf("MASTER_HEARTBEAT_PERIOD %.3fs → %.3fs", p.HeartbeatPeriod, rs.HeartbeatPeriod.Seconds())
	}
	if p.NetTimeoutSeconds != 0 && rs.NetTimeout > 0 && p.NetTimeoutSeconds != int64(rs.NetTimeout) {
		if d != "" {
			d += ", "
		}
		d += fmt.Sprintf("slave_net_timeout %ds → %ds", p.NetTimeoutSeconds, rs.NetTimeout)
	}
	if rs.ParallelThreads > 0 && p.ParallelMode != "" && (p.ParallelThreads != int64(rs.ParallelThreads) || !strings.EqualFold(p.ParallelMode, "optimistic")) {
		if d != "" {
			d += ", "
		}
		d += fmt.Sprintf("slave_parallel_threads %d (%s) → %d (optimistic)", p.ParallelThreads, p.ParallelMode, rs.ParallelThreads)
	}
	return d
}

// alignReplicaSettings gives one replica per round that replicates from
// the published primary with other settings the heartbeat period and
// slave_net_timeout of failover.silence_bound, and the parallel appliers
// of failover.replica_parallel_threads when set (every repoint sets them
// too; this catches replicas set up by hand or by an older version). It
// acts only when nothing is wrong: a stable phase, no trouble on the
// primary (stopping a replica's IO thread while the primary may be dying
// would hide whether it still hears from it), a writable primary, and a
// replica whose both threads run (one an operator stopped stays as it is).
// The replica's replication restarts in place (STOP SLAVE, CHANGE MASTER TO
// MASTER_HEARTBEAT_PERIOD, START SLAVE: the source and the GTID position
// are kept). Each alignment is an event; a failure is retried after
// alignBackoff. MariaDB only.
func (t *term) alignReplicaSettings(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, st *topo.ClusterState,
	probes map[string]topo.Probe, res analysis.Result, m *clusterMemory) {
	if ctx.Err() != nil || res.Trouble || (cl.Flavor != "" && cl.Flavor != probe.FlavorMariaDB) ||
		st.Phase != topo.PhaseStable || st.Primary == "" {
		return
	}
	primary := cl.Node(st.Primary)
	if pp, ok := probes[st.Primary]; primary == nil || !ok || !complete(pp) || pp.ReadOnly || pp.Replicating {
		return
	}
	rs := replicaSettings(cl)
	now := t.c.now()
	for _, n := range cl.Nodes {
		p, ok := probes[n.Name]
		if n.Name == st.Primary || !ok || !complete(p) || !p.Replicating || p.IORunning != "Yes" || !p.SQLRunning ||
			st.Quarantined[n.Name] != "" || !sameAddress(p.SourceHost, p.SourcePort, primary.Address) {
			continue
		}
		diff := replicaSettingsDiffer(p, rs)
		if diff == "" || now.Sub(m.alignAt[n.Name]) < alignBackoff {
			continue
		}
		m.alignAt[n.Name] = now
		pr, err := t.c.prober(cfg, cl, &n)
		if err == nil {
			err = pr.AlignReplicaSettings(ctx)
		}
		log := t.log.With("cluster", cl.Name, "node", n.Name, "change", diff)
		if err != nil {
			log.Warn("cannot align the replica's heartbeat period and slave_net_timeout; retrying later", "err", err, "retry_in", alignBackoff)
			t.repairEvent(ctx, st, topo.EventAlarm, "replica_settings", n.Name, fmt.Sprintf(
				"could not align %s's replication settings (%s) for failover.silence_bound %s: %v; a silent primary is detected later than the bound until they are set (retrying in %s)",
				n.Name, diff, cl.Failover.SilenceBound, err, alignBackoff))
			return
		}
		log.Info("replica settings aligned", "heartbeat_period", rs.HeartbeatPeriod, "slave_net_timeout_s", rs.NetTimeout)
		what, how := "", ""
		if rs.ParallelThreads > 0 {
			what = fmt.Sprintf(" and failover.replica_parallel_threads %d", rs.ParallelThreads)
			how = " and SET GLOBAL slave_parallel_threads, slave_parallel_mode"
		}
		t.repairEvent(ctx, st, topo.EventDecision, "replica_settings", n.Name, fmt.Sprintf(
			"aligned %s's replication settings for failover.silence_bound %s%s: %s (STOP SLAVE, CHANGE MASTER TO MASTER_HEARTBEAT_PERIOD%s, START SLAVE: same source, same GTID position)",
			n.Name, cl.Failover.SilenceBound, what, diff, how))
		return // one replica per round: the others keep acknowledging and serving
	}
}
