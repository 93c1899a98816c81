package analysis

import (
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Code names one condition of a cluster. Values are stable: they appear in
// events, status and metrics.
type Code string

// The analysis codes.
const (
	// DeadPrimary: the controller cannot reach the primary, every reachable
	// replica of it reports its IO thread disconnected (or silent for longer
	// than Limits.SilenceBound), and a quorum of live proxies cannot reach
	// it either. The only code that can lead to a failover.
	DeadPrimary Code = "DeadPrimary"
	// UnreachablePrimary: the controller cannot reach the primary but some
	// other observer still can (a replica's IO thread hears from it, or
	// proxies reach it). Detail names the witness.
	UnreachablePrimary Code = "UnreachablePrimary"
	// PrimaryOverloaded: the primary answers slowly, refuses the monitor
	// with "Too many connections" (1040/1203), or runs more threads than the
	// limit. Alert only.
	PrimaryOverloaded Code = "PrimaryOverloaded"
	// PrimaryReadOnly: the primary answers with read_only=ON outside a
	// change: writes fail.
	PrimaryReadOnly Code = "PrimaryReadOnly"
	// NoPrimary: no primary is published.
	NoPrimary Code = "NoPrimary"
	// TwoWritablePrimaries: a node besides the primary is writable and not
	// replicating (a returning old primary, or a split brain). Node names
	// the extra node.
	TwoWritablePrimaries Code = "TwoWritablePrimaries"
	// ReplicaLagging: a replica's Seconds_Behind_Master exceeds the limit.
	ReplicaLagging Code = "ReplicaLagging"
	// ReplicaNotReplicating: a reachable replica's IO or SQL thread is not
	// running, or a read-only node has no replication configured.
	ReplicaNotReplicating Code = "ReplicaNotReplicating"
	// ReplicaWrongSource: a replica replicates from a node that is not the
	// current primary.
	ReplicaWrongSource Code = "ReplicaWrongSource"
	// ErrantGTID: a node holds transactions the primary does not have.
	ErrantGTID Code = "ErrantGTID"
	// PrimaryWritesBlocked: the primary answers probes but the controller's
	// heartbeat write does not complete (a global read lock, a semi-sync
	// commit waiting for an acknowledgement no replica gives, a full disk,
	// ...). Detail names the blocker when the server shows it. Alert only:
	// busy or blocked is not dead (see health.go).
	PrimaryWritesBlocked Code = "PrimaryWritesBlocked"
	// ApplicationLoginsRefused: the primary refuses the application
	// account's login (1040 too many connections, 1203
	// max_user_connections, 1226 a resource limit, 1045, 1129) while the
	// monitor gets in. Alert only.
	ApplicationLoginsRefused Code = "ApplicationLoginsRefused"
)

// Snapshot is what Analyze looks at for one cluster.
type Snapshot struct {
	Cluster string
	// Flavor is "mariadb" (default when empty) or "mysql".
	Flavor string
	// Primary is the published primary ("" when none) and Phase the
	// published phase (topo.PhaseStable, ...).
	Primary string
	Phase   string
	// Nodes are every configured node, in config order.
	Nodes []Node
	// Proxies are the live proxies' reports (registrations with a lease).
	Proxies []Proxy
	// Now is the time of the analysis (the end of the probe round).
	Now    time.Time
	Limits Limits
	// PrimaryBinlogState is the published primary's @@gtid_binlog_state
	// read after the round's probes (MariaDB; "" unknown): a replica holding
	// a (domain, server_id) entry beyond it is ErrantGTID even when the
	// primary has written higher seqnos since.
	PrimaryBinlogState string
}

// Node is one configured node and what is known about it.
type Node struct {
	Name    string
	Address string
	// Promotion is the node's promotion rule (prefer, neutral, must_not).
	Promotion string
	// Probe is the controller's last probe of the node.
	Probe topo.Probe
	// IOProgressAt is when the controller last saw this replica's IO thread
	// make progress (received heartbeats, read position or Gtid_IO_Pos
	// changed), or first saw it: the end of that probe (its At). Zero means
	// unknown and counts as now.
	IOProgressAt time.Time
	// LastLag is the last non-NULL Seconds_Behind_Master seen (nil: never).
	LastLag *int64
	// Quarantined is why the node is quarantined ("" when it is not).
	Quarantined string
	// Drained is set when an operator drained the node (`switchyard drain`):
	// it is never chosen as a candidate while drained.
	Drained bool
	// HeartbeatFailures is how many consecutive rounds the heartbeat write
	// on this node (the primary) failed, this round's included.
	HeartbeatFailures int
}

// Proxy is one live proxy's view of the cluster's nodes.
type Proxy struct {
	ID string
	// Reach is keyed by node name; a node missing from it has not been
	// checked by the proxy yet.
	Reach map[string]topo.BackendReach
}

// Limits are the thresholds Analyze applies.
type Limits struct {
	// MaxLag: a replica lagging more is ReplicaLagging (read_routing.max_lag).
	MaxLag time.Duration
	// SlowProbe: a complete probe of the primary slower than this is a sign
	// of overload (0: not checked).
	SlowProbe time.Duration
	// MaxThreadsRunning: more running threads on the primary is a sign of
	// overload (0: not checked).
	MaxThreadsRunning int64
	// SilenceBound (failover.silence_bound) is how long a replica's IO
	// thread may receive nothing from its source (no event, no heartbeat)
	// and still count as connected. A replica whose heartbeat period P is
	// longer than SilenceBound/3 gets 3P instead (a live but idle source
	// is silent for up to P between heartbeats); with no heartbeat period
	// at all, 10s (the slave_net_timeout scale). 0 means 10s.
	//
	// The silence is measured between the controller's own reads of the
	// replica (its probes, and the replication-status reads between
	// rounds), never overstated: from the end of the read that last saw
	// progress (IOProgressAt) to the start of the current probe (Probe.At
	// minus its latency). A primary frozen for F makes a replica silent
	// for at most F plus one heartbeat period, so a freeze shorter than
	// SilenceBound − P never counts.
	SilenceBound time.Duration
	// HeartbeatFailures is how many consecutive failed heartbeat writes
	// make PrimaryWritesBlocked when the server shows no blocker (one
	// failure with a named blocker is enough); 0 means 2.
	HeartbeatFailures int
}

// Finding is one code about the cluster or one node.
type Finding struct {
	Code Code
	// Node is the node concerned ("" for the cluster).
	Node string
	// Detail says what was seen, in words an operator can act on.
	Detail string
}

// String formats "Code node: detail".
func (f Finding) String() string {
	s := string(f.Code)
	if f.Node != "" {
		s += " " + f.Node
	}
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	return s
}

// Result is the outcome of Analyze.
type Result struct {
	// Findings are sorted by severity (DeadPrimary first), then node.
	Findings []Finding
	// Trouble is true when anything suggests the primary may be failing
	// (any probe error on it, a proxy reporting it unreachable, a replica
	// losing it): the controller starts an extra probe round at once.
	Trouble bool
	// Silent is true when DeadPrimary rests on the silence of at least one
	// replica whose IO thread still shows Yes (rather than on every IO
	// thread having dropped its connection): a frozen or partitioned
	// primary, or one that only paused. The controller then confirms it in
	// rounds spaced apart in time, so that a pause shorter than the bound
	// plus that spacing never leads to a failover.
	Silent bool
	// Quiet is, when the controller cannot reach the primary, the shortest
	// silence among its replicas (an IO thread that dropped its connection
	// counts as silent for ever; no replica: 0). 0 when the primary was
	// reached or a replica just heard from it: the controller samples
	// fast only while every replica has been quiet a while, never
	// against a primary that is merely slow.
	Quiet time.Duration
}

// Has reports whether code was found (for any node).
func (r Result) Has(code Code) bool { return r.Get(code) != nil }

// Get returns the first finding with code, or nil.
func (r Result) Get(code Code) *Finding {
	for i := range r.Findings {
		if r.Findings[i].Code == code {
			return &r.Findings[i]
		}
	}
	return nil
}

// Analyze names every condition of the cluster. It is pure.
func Analyze(s Snapshot) Result {
	var r Result
	add := func(c Code, node, format string, args ...any) {
		r.Findings = append(r.Findings, Finding{Code: c, Node: node, Detail: fmt.Sprintf(format, args...)})
	}
	primary := s.node(s.Primary)
	if s.Primary == "" || primary == nil {
		if s.Phase == "" || s.Phase == topo.PhaseStable {
			add(NoPrimary, "", "no primary is published")
			s.noteReadOnly(add)
		}
	} else {
		s.analyzePrimary(primary, &r, add)
	}
	s.analyzeReplicas(primary, add)
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := rank(r.Findings[i].Code), rank(r.Findings[j].Code)
		if a != b {
			return a < b
		}
		return r.Findings[i].Node < r.Findings[j].Node
	})
	return r
}

var ranks = map[Code]int{DeadPrimary: 0, TwoWritablePrimaries: 1, NoPrimary: 2, UnreachablePrimary: 3,
	PrimaryReadOnly: 4, PrimaryOverloaded: 5, ErrantGTID: 6, ReplicaWrongSource: 7, ReplicaNotReplicating: 8, ReplicaLagging: 9,
	PrimaryWritesBlocked: 4, ApplicationLoginsRefused: 5, NoWritablePrimary: 2}

func rank(c Code) int { return ranks[c] }

func (s Snapshot) node(name string) *Node {
	if name == "" {
		return nil
	}
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i]
		}
	}
	return nil
}

// Probe error kinds (probe.Kind values) that mean "could not talk to the
// server at all". Too many connections, access denied and a blocked host
// mean the server answered: it is alive.
func lostKind(kind string) bool {
	switch kind {
	case "refused", "timeout", "network", "":
		return true
	}
	return false
}

func complete(p topo.Probe) bool { return p.Reachable && p.Error == "" }

func (s Snapshot) analyzePrimary(p *Node, r *Result, add func(Code, string, string, ...any)) {
	pp := p.Probe
	stable := s.Phase == "" || s.Phase == topo.PhaseStable
	if pp.Error != "" {
		r.Trouble = true
	}
	switch {
	case !pp.Reachable && pp.ErrorKind == "too_many_connections":
		add(PrimaryOverloaded, p.Name, "the primary refuses the monitor account: %s; it is alive (busy), not dead", pp.Error)
	case !pp.Reachable && !lostKind(pp.ErrorKind):
		add(UnreachablePrimary, p.Name, "the monitor account cannot log in (%s), but the server answers: it is alive", pp.Error)
	case !pp.Reachable:
		// During a switchover the old primary is still the published
		// one: its death ends the switchover (it never drains) and is
		// judged by the same rule. During a failover it is being
		// replaced: nothing to judge.
		if stable || s.Phase == topo.PhaseSwitching {
			s.deadOrUnreachable(p, r, add)
		}
	default:
		if complete(pp) && pp.ReadOnly && stable {
			add(PrimaryReadOnly, p.Name, "the primary has read_only=ON: writes fail with error 1290; run `mariadb -e 'SET GLOBAL read_only=OFF'` on it if it should take writes (failover.mode auto does it when safe), otherwise `switchyard failover`")
		}
		var why []string
		if s.Limits.SlowProbe > 0 && pp.LatencyMS > float64(s.Limits.SlowProbe)/float64(time.Millisecond) {
			why = append(why, fmt.Sprintf("probe took %.0fms (limit %s)", pp.LatencyMS, s.Limits.SlowProbe))
		}
		if pp.Error != "" {
			why = append(why, "probe incomplete: "+pp.Error)
		}
		if s.Limits.MaxThreadsRunning > 0 && pp.ThreadsRunning > s.Limits.MaxThreadsRunning {
			why = append(why, fmt.Sprintf("Threads_running %d > %d", pp.ThreadsRunning, s.Limits.MaxThreadsRunning))
		}
		if len(why) > 0 {
			add(PrimaryOverloaded, p.Name, "%s", strings.Join(why, "; "))
		}
	}
	for _, px := range s.Proxies {
		if br, ok := px.Reach[p.Name]; ok && !br.Reachable {
			r.Trouble = true
		}
	}
	s.analyzeWritePath(p, add)
}

// deadOrUnreachable decides between DeadPrimary and UnreachablePrimary for a
// primary the controller cannot reach.
func (s Snapshot) deadOrUnreachable(p *Node, r *Result, add func(Code, string, string, ...any)) {
	r.Trouble = true
	var witnesses, lost []string
	replicas, silent := 0, false
	quiet := time.Duration(math.MaxInt64)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Name == p.Name || !complete(n.Probe) || !n.Probe.Replicating ||
			!SameAddress(n.Probe.SourceHost, n.Probe.SourcePort, p.Address) {
			continue
		}
		replicas++
		if n.Probe.IORunning == "Yes" {
			q := time.Duration(0)
			if !n.IOProgressAt.IsZero() {
				q = s.silence(n)
			}
			quiet = min(quiet, q)
		}
		if ok, why := s.ioConnected(n); ok {
			witnesses = append(witnesses, fmt.Sprintf("replica %s IO thread connected (%s)", n.Name, why))
		} else {
			lost = append(lost, fmt.Sprintf("%s: %s", n.Name, why))
			silent = silent || n.Probe.IORunning == "Yes"
		}
	}
	down, total := 0, len(s.Proxies)
	var reaching []string
	for _, px := range s.Proxies {
		br, ok := px.Reach[p.Name]
		switch {
		case ok && !br.Reachable:
			down++
		case ok:
			reaching = append(reaching, "proxy "+px.ID)
		default:
			reaching = append(reaching, "proxy "+px.ID+" (not checked yet)")
		}
	}
	if replicas > 0 {
		r.Quiet = quiet
	}
	quorum := total == 0 || 2*down > total
	switch {
	case replicas == 0:
		add(UnreachablePrimary, p.Name, "controller cannot reach it (%s) and no reachable replica replicates from it to confirm it is dead", p.Probe.Error)
	case len(witnesses) > 0:
		add(UnreachablePrimary, p.Name, "controller cannot reach it (%s) but it is alive: %s", p.Probe.Error, strings.Join(witnesses, "; "))
	case !quorum:
		add(UnreachablePrimary, p.Name, "controller and replicas lost it (%s) but only %d of %d proxies cannot reach it (need a majority); still reached by %s",
			p.Probe.Error, down, total, strings.Join(reaching, ", "))
	default:
		add(DeadPrimary, p.Name, "controller cannot reach it (%s); every replica lost it (%s); %d of %d proxies cannot reach it",
			p.Probe.Error, strings.Join(lost, "; "), down, total)
		r.Silent = silent
	}
}

// ioConnected reports whether replica n's IO thread is connected to its
// source and has shown progress recently, and says what was seen.
func (s Snapshot) ioConnected(n *Node) (bool, string) {
	p := n.Probe
	if p.IORunning != "Yes" {
		why := "IO thread " + orDash(p.IORunning)
		if p.LastIOError != "" {
			why += ": " + p.LastIOError
		}
		return false, why
	}
	bound := s.ioSilenceBound(p)
	if n.IOProgressAt.IsZero() {
		return true, "no silence measured yet"
	}
	silent := s.silence(n)
	if silent > bound {
		return false, fmt.Sprintf("IO thread Yes but nothing received for %s (bound %s)", silent.Round(10*time.Millisecond), bound)
	}
	return true, fmt.Sprintf("last event or heartbeat %s ago", silent.Round(10*time.Millisecond))
}

// silence is how long replica n's IO thread has shown no progress, as far
// as the controller's probes prove it: from the end of the probe that last
// saw progress to the start of the current probe (both ends are when the
// replica answered at the latest and the earliest, so a silence is never
// overstated). Without a probe time (At zero) it runs to s.Now.
func (s Snapshot) silence(n *Node) time.Duration {
	at := s.Now
	if !n.Probe.At.IsZero() {
		at = n.Probe.At.Add(-time.Duration(n.Probe.LatencyMS * float64(time.Millisecond)))
	}
	return max(at.Sub(n.IOProgressAt), 0)
}

// ioSilenceBound is how long the IO thread of a replica probed as p may stay
// silent: SilenceBound, or three heartbeat periods when that is longer (a
// replica not aligned yet), or 10s with no heartbeat period at all.
func (s Snapshot) ioSilenceBound(p topo.Probe) time.Duration {
	b := s.Limits.SilenceBound
	if b <= 0 {
		b = 10 * time.Second
	}
	if p.HeartbeatPeriod <= 0 {
		return max(b, 10*time.Second)
	}
	return max(b, time.Duration(3*p.HeartbeatPeriod*float64(time.Second)))
}

func (s Snapshot) analyzeReplicas(primary *Node, add func(Code, string, string, ...any)) {
	var writable []string
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if complete(n.Probe) && !n.Probe.ReadOnly && !n.Probe.Replicating {
			writable = append(writable, n.Name)
		}
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		p := n.Probe
		if primary != nil && n.Name == primary.Name {
			continue
		}
		if !complete(p) {
			continue
		}
		if primary != nil && !p.Replicating && !p.ReadOnly {
			add(TwoWritablePrimaries, n.Name, "%s is writable and not replicating besides primary %s (a returning old primary or a split brain)",
				n.Name, primary.Name)
		}
		if primary != nil && complete(primary.Probe) {
			if errant := ErrantGTIDs(s.Flavor, p, primary.Probe); errant != "" {
				add(ErrantGTID, n.Name, "%s has transactions primary %s lacks: %s", n.Name, primary.Name, errant)
			} else if errant := ErrantByBinlogState(s.Flavor, p, s.PrimaryBinlogState, primary.Probe.ServerID); errant != "" {
				add(ErrantGTID, n.Name, "%s has transactions primary %s's binlog lacks (compared per domain and server_id): %s", n.Name, primary.Name, errant)
			} else if StrictModeError(p.LastSQLError) {
				add(ErrantGTID, n.Name, "%s's SQL thread stopped on a gtid_strict_mode conflict: it holds a transaction at a sequence number the primary used for another: %s",
					n.Name, p.LastSQLError)
			}
		} else if primary != nil && StrictModeError(p.LastSQLError) {
			add(ErrantGTID, n.Name, "%s's SQL thread stopped on a gtid_strict_mode conflict: %s", n.Name, p.LastSQLError)
		}
		if n.Quarantined != "" {
			continue
		}
		switch {
		case !p.Replicating:
			if p.ReadOnly {
				add(ReplicaNotReplicating, n.Name, "read-only and no replication configured")
			}
		case primary != nil && !SameAddress(p.SourceHost, p.SourcePort, primary.Address):
			add(ReplicaWrongSource, n.Name, "replicates from %s, not from primary %s (%s)",
				net.JoinHostPort(p.SourceHost, strconv.Itoa(p.SourcePort)), primary.Name, primary.Address)
		case p.IORunning != "Yes" || !p.SQLRunning:
			d := fmt.Sprintf("IO thread %s, SQL thread %s", orDash(p.IORunning), yesNo(p.SQLRunning))
			if p.LastIOError != "" {
				d += "; last IO error: " + p.LastIOError
			}
			if p.LastSQLError != "" {
				d += "; last SQL error: " + p.LastSQLError
			}
			add(ReplicaNotReplicating, n.Name, "%s", d)
		case s.Limits.MaxLag > 0 && p.LagSeconds != nil && time.Duration(*p.LagSeconds)*time.Second > s.Limits.MaxLag:
			add(ReplicaLagging, n.Name, "lag %ds > %s", *p.LagSeconds, s.Limits.MaxLag)
		}
	}
	if primary == nil && len(writable) > 1 {
		add(TwoWritablePrimaries, strings.Join(writable, ","), "several nodes are writable and not replicating: %s", strings.Join(writable, ", "))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// SameAddress reports whether a replica's source (Master_Host,
// Master_Port) is the node configured at addr (host:port). Host names
// compare case-insensitively; localhost and every loopback address are
// equal.
func SameAddress(host string, port int, addr string) bool {
	h, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p != port {
		return false
	}
	if strings.EqualFold(h, host) {
		return true
	}
	return isLoopback(h) && isLoopback(host)
}

func isLoopback(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
