package analysis

import (
	"fmt"
	"strings"

	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// The promotion floor and errant detection that does not depend on
// sequence order.
//
// The floor is the highest GTID position the controller ever observed on a
// cluster's primary (recorded in the store, so it outlives controllers and
// leaders). A candidate whose received set (executed plus relay log) does
// not contain the floor would lose acknowledged transactions: a node that
// was shut down, missed writes and came back alone after every other node
// died (the 2012 incident's node 'c') is never promoted on its own.

// ParseFloor parses a recorded floor position; "" gives nil (no floor
// recorded).
func ParseFloor(flavor, floor string) (gtid.Set, error) {
	if strings.TrimSpace(floor) == "" {
		return nil, nil
	}
	return gtid.Parse(flavorOf(flavor), floor)
}

// RaiseFloor returns the floor raised to include the primary's executed
// set pos (Merge: per MariaDB domain the higher seqno; MySQL the union) and
// whether it changed. A nil floor becomes pos.
func RaiseFloor(floor, pos gtid.Set) (gtid.Set, bool) {
	if pos == nil || pos.IsEmpty() {
		return floor, false
	}
	if floor == nil {
		return pos, true
	}
	next := Merge(floor, pos)
	return next, !next.Equal(floor)
}

// BehindFloor reports what of floor the received set lacks: the missing
// entries as text ("" when none) and how many transactions that stands for
// (MariaDB: seqno gaps per domain; MySQL: GTIDs). A nil received (a node
// never seen) lacks all of the floor.
func BehindFloor(flavor string, received, floor gtid.Set) (string, uint64) {
	if floor == nil || floor.IsEmpty() {
		return "", 0
	}
	if received == nil {
		received = gtid.Empty(flavorOf(flavor))
	}
	if received.Contains(floor) {
		return "", 0
	}
	n := countMissing(received, floor)
	if fm, ok := floor.(gtid.MariaDBPos); ok {
		if rm, ok := received.(gtid.MariaDBPos); ok {
			var missing []gtid.MariaDBGTID
			for _, g := range rm.Missing(fm) {
				missing = append(missing, g.Want)
			}
			if p, err := gtid.NewMariaDBPos(missing...); err == nil {
				return p.String(), n
			}
		}
	}
	d, err := gtid.Subtract(floor, received)
	if err != nil {
		return floor.String(), n
	}
	return d.String(), n
}

// ErrantByBinlogState returns the transactions of a MariaDB node (probed as
// p: @@gtid_current_pos merged with @@gtid_binlog_pos) that the primary's
// @@gtid_binlog_state (the last GTID of every domain and server_id in its
// binlog) does not hold, ignoring entries written by the primary itself
// (server_id primaryServerID, which a replica may have applied after the
// primary's state was read). It compares per (domain, server_id), so an
// errant write on a replica is seen even when the primary has since written
// higher seqnos in that domain — which a position comparison cannot see.
// "" when none (or on MySQL, or when the state is unknown).
func ErrantByBinlogState(flavor string, p topo.Probe, primaryState string, primaryServerID uint32) string {
	if flavorOf(flavor) != gtid.MariaDB || strings.TrimSpace(primaryState) == "" {
		return ""
	}
	cur, err := gtid.ParseMariaDB(p.GTIDCurrent)
	if err != nil {
		return ""
	}
	pos := cur
	if bin, err := gtid.ParseMariaDB(p.GTIDBinlog); err == nil {
		if m, ok := Merge(cur, bin).(gtid.MariaDBPos); ok {
			pos = m
		}
	}
	var own []gtid.MariaDBGTID
	for _, e := range pos.Entries() {
		if e.ServerID != primaryServerID {
			own = append(own, e)
		}
	}
	if len(own) == 0 {
		return ""
	}
	q, err := gtid.NewMariaDBPos(own...)
	if err != nil {
		return ""
	}
	ok, missing, err := ContainedInBinlogState(q.String(), primaryState)
	if err != nil || ok {
		return ""
	}
	return missing
}

// StrictModeError reports whether a replica's SQL thread error is MariaDB's
// gtid_strict_mode refusal (ER_GTID_STRICT_OUT_OF_ORDER, 1950: "An attempt
// was made to binlog GTID d-s-n which would create an out-of-order sequence
// number with existing GTID d-s'-m, and gtid strict mode is enabled"): the
// replica holds a transaction at a sequence number its source wrote
// another transaction at — an errant transaction.
func StrictModeError(lastSQLError string) bool {
	e := strings.ToLower(lastSQLError)
	return strings.Contains(e, "out-of-order sequence number") || strings.Contains(e, "gtid strict mode")
}

// errantVsFloor returns the MariaDB entries of received in domains that
// neither the floor nor the old primary's last executed set has (a domain
// the primary never wrote in is errant whatever its seqno), and entries at
// the floor's seqno with another server_id (two transactions with one
// sequence number: diverged). An entry beyond the floor with another
// server_id is not counted: the floor trails the primary by up to a round.
func errantVsFloor(received, floor, old gtid.Set) string {
	r, ok := received.(gtid.MariaDBPos)
	if !ok {
		return ""
	}
	f, _ := floor.(gtid.MariaDBPos)
	o, _ := old.(gtid.MariaDBPos)
	var out []gtid.MariaDBGTID
	for _, e := range r.Entries() {
		if fe, ok := f.Domain(e.Domain); ok {
			if fe.Seqno == e.Seqno && fe.ServerID != e.ServerID {
				out = append(out, e)
			}
			continue
		}
		if _, ok := o.Domain(e.Domain); ok {
			continue
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return ""
	}
	p, err := gtid.NewMariaDBPos(out...)
	if err != nil {
		return ""
	}
	return p.String()
}

// floorReject says why a candidate with the received set is behind the
// floor, or "".
func floorReject(flavor string, received, floor gtid.Set) string {
	missing, n := BehindFloor(flavor, received, floor)
	if missing == "" {
		return ""
	}
	pos := "no GTID position (never seen replicating)"
	if received != nil && !received.IsEmpty() {
		pos = "at " + received.String()
	}
	return fmt.Sprintf("behind the promotion floor %s: %s, missing %s (%d transaction(s) committed on the primary, Switchyard's own heartbeats included)",
		floor, pos, missing, n)
}
