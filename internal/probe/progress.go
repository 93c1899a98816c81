package probe

import (
	"context"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// ReplicationProgress reads only the replica's replication status (SHOW ALL
// SLAVES STATUS on MariaDB, SHOW REPLICA STATUS on MySQL) on the probe
// pool, bounded by timeout (the probe timeout when <= 0 or longer). It is
// the cheap read the controller repeats between full probes to date a
// replica's IO-thread progress finely (topo.IOProgressMark of the result):
// the returned probe has At (set to when the read ended), LatencyMS,
// Reachable, Replicating and the replication fields of Probe filled, and
// nothing else. A node that cannot be read gives Reachable=false or Error
// set; one that is not a replica gives Replicating=false.
func (p *Prober) ReplicationProgress(ctx context.Context, timeout time.Duration) topo.Probe {
	if timeout <= 0 || timeout > p.timeout {
		timeout = p.timeout
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pr := p.replicationProgress(ctx)
	pr.At = time.Now()
	pr.LatencyMS = float64(pr.At.Sub(start).Microseconds()) / 1000
	return pr
}

func (p *Prober) replicationProgress(ctx context.Context) topo.Probe {
	var pr topo.Probe
	if p.flavorErr != nil {
		pr.Error = p.flavorErr.Error()
		return pr
	}
	conn, err := p.probeDB.Conn(ctx)
	if err != nil {
		pr.Error = describe("connect", err)
		return pr
	}
	defer conn.Close()
	pr.Reachable = true
	q := p.d.replicaStatusQuery()
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		pr.Error = describe(q, err)
		return pr
	}
	cols, vals, err := scanAll(rows)
	rows.Close()
	if err != nil {
		pr.Error = describe(q, err)
		return pr
	}
	rs, ok, err := parseReplicaStatus(cols, vals)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	if ok {
		rs.fill(&pr)
	}
	return pr
}
