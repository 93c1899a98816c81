package topo

import (
	"path"
	"time"
)

// FloorsPrefix is the prefix of every cluster's promotion floor (trailing
// slash). It lives outside ClustersPrefix so that watchers of cluster
// states (every proxy) do not see the floor's updates, which follow the
// primary's position as often as once per probe round.
func (k Keys) FloorsPrefix() string { return path.Join(k.Prefix, "floors") + "/" }

// Floor is the key of one cluster's promotion floor (PromotionFloor, JSON),
// written by the controller leader with leader-conditioned compare-and-swap.
func (k Keys) Floor(cluster string) string { return k.FloorsPrefix() + cluster }

// PromotionFloor is the highest GTID position the controller leader ever
// observed on a cluster's primary. It only rises while primaries change by
// switchover or failover (each new primary holds it); a failover forced past
// it (--force-stale --reason) resets it to the new primary's position and
// records why. A failover candidate whose received set (executed plus relay
// log) does not contain it is never promoted without --force-stale: it
// would lose transactions the primary acknowledged.
type PromotionFloor struct {
	Cluster string `json:"cluster"`
	// GTID is the floor: MariaDB a position (one entry per domain, the
	// highest seqno seen), MySQL a GTID set (the union seen).
	GTID string `json:"gtid"`
	// Primary and Epoch name the primary whose probe last raised it.
	Primary string `json:"primary"`
	Epoch   int64  `json:"epoch"`
	// UpdatedAt is when it last rose; Leader the controller that wrote it.
	UpdatedAt time.Time `json:"updated_at"`
	Leader    string    `json:"leader"`
	// ResetAt and ResetReason are set when a forced failover lowered the
	// floor to its new primary's position (Lowered is the floor it
	// replaced: the acknowledged transactions given up).
	ResetAt     *time.Time `json:"reset_at,omitempty"`
	ResetReason string     `json:"reset_reason,omitempty"`
	Lowered     string     `json:"lowered,omitempty"`
}
