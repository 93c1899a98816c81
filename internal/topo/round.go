package topo

import (
	"path"
	"time"
)

// ProbeRounds is the prefix of every cluster's last probe round (trailing
// slash): <prefix>/rounds/<cluster>. It lies outside ClustersPrefix so that
// the per-round write wakes no proxy's cluster-state watch.
func (k Keys) ProbeRounds() string { return path.Join(k.Prefix, "rounds") + "/" }

// ProbeRound is the key of a cluster's last probe round.
func (k Keys) ProbeRound(cluster string) string { return k.ProbeRounds() + cluster }

// ProbeRound is the controller leader's compact record of its last probe
// round of one cluster, rewritten every round (at most once a second) while
// the ClusterState is rewritten only when routing changes. `switchyard
// status` shows its probe results when they are newer than the state's, so
// probe ages stay fresh. Nothing routes from it.
type ProbeRound struct {
	Cluster string `json:"cluster"`
	// Leader is the id of the controller that probed.
	Leader string `json:"leader"`
	// Epoch and Primary are the published state's when the round ended.
	Epoch   int64  `json:"epoch"`
	Primary string `json:"primary"`
	// At is when the round's probes were all back.
	At time.Time `json:"at"`
	// Nodes are the configured nodes with the role the published state
	// gives them and the round's probe, reduced to what status shows
	// (CompactProbe).
	Nodes []RoundNode `json:"nodes"`
}

// RoundNode is one node's result in a ProbeRound.
type RoundNode struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Probe Probe  `json:"probe"`
}

// CompactProbe returns the fields of p that `switchyard status` shows:
// reachability, error, time, latency, read_only, replication source,
// threads and lag, GTID position, the write-path heartbeat and the
// application login checks.
func CompactProbe(p Probe) Probe {
	return Probe{
		Reachable: p.Reachable, Error: p.Error, ErrorKind: p.ErrorKind, At: p.At, LatencyMS: p.LatencyMS,
		ReadOnly: p.ReadOnly, Replicating: p.Replicating, SourceHost: p.SourceHost, SourcePort: p.SourcePort,
		IORunning: p.IORunning, SQLRunning: p.SQLRunning, LagSeconds: p.LagSeconds,
		GTIDCurrent: p.GTIDCurrent, GTIDExecuted: p.GTIDExecuted, Heartbeat: p.Heartbeat, AppLogins: p.AppLogins,
	}
}
