package topo

import "time"

// FailsafeWindow bounds how long a proxy that lost its registration lease
// keeps routing writes on one direct check of a cluster's nodes: it routes
// writes to the primary it knows only while a check that started less than
// FailsafeWindow ago found that primary writable and every other node
// read-only and replicating from it (internal/topo/FAILSAFE.md). A
// controller that fails over without having fenced the old primary waits
// this long after stopping the replicas' IO threads before it promotes, so
// that such a proxy sees the stopped threads and stops routing first.
// Patroni's failsafe_mode is the model: a primary cut off from the DCS keeps
// running only while it can reach every member directly.
const FailsafeWindow = time.Second

// FailsafePeriod is one period during which a proxy routed writes to a
// cluster's primary without its registration in the store, on the strength
// of its direct checks of the nodes (ProxyRegistration.Failsafe).
type FailsafePeriod struct {
	// Primary and Epoch are the primary and epoch the proxy kept routing by.
	Primary string `json:"primary"`
	Epoch   int64  `json:"epoch"`
	// Since is when the proxy entered failsafe for the cluster; Until when it
	// left (zero while it lasts).
	Since time.Time `json:"since"`
	Until time.Time `json:"until,omitzero"`
	// Ended says why it ended ("registered again", "check failed: ...").
	Ended string `json:"ended,omitempty"`
}

// AlarmProxyFailsafe is the code of the alarm event the leader writes for
// each failsafe period a proxy reports once it is registered again.
const AlarmProxyFailsafe = "proxy_failsafe"
