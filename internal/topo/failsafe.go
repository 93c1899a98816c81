package topo

import (
	"strconv"
	"time"
)

// FailsafeWindow is how long a controller that fails over without having
// fenced the old primary waits after stopping the replicas' IO threads
// before it promotes, when it has no proof that the replicas had stopped
// receiving from the old primary earlier (internal/topo/FAILSAFE.md): a
// proxy that lost its registration lease routes writes to the primary it
// knows only on a direct check that started less than FailsafeValidity
// (shorter than this) ago and found that primary writable and every other
// node read-only and replicating from it, so once the window is over every
// such proxy has seen the stopped threads. Patroni's failsafe_mode is the
// model: a primary cut off from the DCS keeps running only while it can
// reach every member directly.
const FailsafeWindow = time.Second

// FailsafeValidity is how long one passing direct check lets a proxy
// without its registration keep routing writes to the primary, counted from
// the start of the check. 650ms: with the default failover.silence_bound of
// 1.2s and its heartbeat period of 100ms (bound/12), FailsafeProgress +
// FailsafeValidity is 1.1s, below the bound, so a failover decided on the
// replicas' silence needs no window (FAILSAFE.md); and rounds of checks
// 150ms apart, each bounded by 350ms, renew a pass well within it.
const FailsafeValidity = 650 * time.Millisecond

// FailsafeProgress is how recent a replica's progress must be for a
// proxy's direct check to pass: the check needs every replica (not
// quarantined) to have received something from the primary (an event or a
// heartbeat: Slave_received_heartbeats, Master_Log_File/Read_Master_Log_Pos
// or Gtid_IO_Pos changed) after a moment at most FailsafeProgress before
// the check started. period is the replica's MASTER_HEARTBEAT_PERIOD
// (Slave_heartbeat_period); the result is max(450ms, 2×period + 150ms):
// a live idle primary sends a heartbeat every period and the proxy's checks
// start every 150ms, so a live primary always meets it with a period of
// margin. A period of 0 (heartbeats off, or not read) returns 0: no
// progress is required of that replica, since an idle primary would show
// none, and a controller then has no silence to go by either.
func FailsafeProgress(period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	return max(450*time.Millisecond, 2*period+150*time.Millisecond)
}

// HeartbeatPeriodOf returns p's Slave_heartbeat_period as a duration (0
// when unset).
func HeartbeatPeriodOf(p Probe) time.Duration {
	if p.HeartbeatPeriod <= 0 {
		return 0
	}
	return time.Duration(p.HeartbeatPeriod * float64(time.Second))
}

// IOProgressMark is what tells two probes of a replica's IO thread apart
// when it received something in between: its source, Slave_received_heartbeats,
// Master_Log_File, Read_Master_Log_Pos and Gtid_IO_Pos. The controller's
// silence measurement and the proxy's failsafe check use the same mark, so
// progress one of them sees is progress the other sees.
func IOProgressMark(p Probe) string {
	return p.SourceHost + "|" + strconv.Itoa(p.SourcePort) + "|" + strconv.FormatInt(p.HeartbeatsReceived, 10) + "|" +
		p.SourceLogFile + "|" + strconv.FormatInt(p.ReadSourceLogPos, 10) + "|" + p.GTIDIO
}

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
