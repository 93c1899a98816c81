package analysis

import (
	"strings"

	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func flavorOf(f string) gtid.Flavor {
	if f == string(gtid.MySQL) {
		return gtid.MySQL
	}
	return gtid.MariaDB
}

// Executed is the GTID set a node has applied or written: gtid_current_pos
// on MariaDB, gtid_executed on MySQL. An unparsable value gives an error.
func Executed(flavor string, p topo.Probe) (gtid.Set, error) {
	f := flavorOf(flavor)
	if f == gtid.MySQL {
		return gtid.Parse(f, p.GTIDExecuted)
	}
	return gtid.Parse(f, p.GTIDCurrent)
}

// Received is what a replica holds once its relay log is applied: its
// executed set merged with Gtid_IO_Pos (MariaDB; the received set is not
// probed on MySQL, where Received is Executed).
func Received(flavor string, p topo.Probe) (gtid.Set, error) {
	ex, err := Executed(flavor, p)
	if err != nil || flavorOf(flavor) == gtid.MySQL || p.GTIDIO == "" {
		return ex, err
	}
	io, err := gtid.ParseMariaDB(p.GTIDIO)
	if err != nil {
		return nil, err
	}
	return Merge(ex, io), nil
}

// Merge returns the smallest set that contains a and b: for MySQL the
// union; for MariaDB, per domain, the entry with the higher seqno (a's on a
// tie). Sets of different flavors (or nil) give whichever is usable.
func Merge(a, b gtid.Set) gtid.Set {
	switch x := a.(type) {
	case gtid.MySQLSet:
		if y, ok := b.(gtid.MySQLSet); ok {
			return x.Union(y)
		}
	case gtid.MariaDBPos:
		y, ok := b.(gtid.MariaDBPos)
		if !ok {
			return x
		}
		out := x.Entries()
		for _, e := range y.Entries() {
			found := false
			for i := range out {
				if out[i].Domain == e.Domain {
					found = true
					if e.Seqno > out[i].Seqno {
						out[i] = e
					}
				}
			}
			if !found {
				out = append(out, e)
			}
		}
		p, err := gtid.NewMariaDBPos(out...)
		if err != nil {
			return x
		}
		return p
	}
	if b != nil {
		return b
	}
	return a
}

// ErrantGTIDs returns the transactions a node (probed as p) has that the
// primary (probed as pp) does not, or "" when none are visible. Probes of
// one round run in parallel, so a replica may have applied a transaction
// the primary wrote after its own probe: on MariaDB an entry ahead of the
// primary's in a domain counts only when it was written by another server
// than the primary (its server_id differs), and an entry at the same seqno
// with another server_id (diverged histories) always counts. A MariaDB
// position shows only the last transaction per domain; a returning old
// primary's lost transactions hide behind the new primary's later ones —
// the controller checks those against @@gtid_binlog_state before a rejoin.
func ErrantGTIDs(flavor string, p, pp topo.Probe) string {
	ps, err := Executed(flavor, p)
	if err != nil {
		return ""
	}
	prs, err := Executed(flavor, pp)
	if err != nil {
		return ""
	}
	x, ok1 := ps.(gtid.MariaDBPos)
	y, ok2 := prs.(gtid.MariaDBPos)
	if !ok1 || !ok2 {
		e, err := gtid.Errant(ps, prs)
		if err != nil || e.IsEmpty() {
			return ""
		}
		return e.String()
	}
	var out []gtid.MariaDBGTID
	for _, e := range x.Entries() {
		h, ok := y.Domain(e.Domain)
		switch {
		case !ok:
			out = append(out, e)
		case e.Seqno > h.Seqno && e.ServerID != pp.ServerID:
			out = append(out, e)
		case e.Seqno == h.Seqno && e.ServerID != h.ServerID:
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return ""
	}
	pos, err := gtid.NewMariaDBPos(out...)
	if err != nil {
		return ""
	}
	return pos.String()
}

// ContainedInBinlogState reports whether a MariaDB node at position pos
// (its @@gtid_current_pos or @@gtid_binlog_pos) holds only transactions the
// primary also has, judged from the primary's @@gtid_binlog_state (the last
// GTID of every domain and server_id in its binlog): for each entry
// d-s-n of pos, the primary's state must have d-s-m with m ≥ n. Unlike a
// position comparison this sees a returning old primary's transactions that
// never replicated, even when the new primary has written later seqnos
// since. missing lists the entries that fail.
func ContainedInBinlogState(pos, state string) (ok bool, missing string, err error) {
	p, err := gtid.ParseMariaDB(pos)
	if err != nil {
		return false, "", err
	}
	var last []gtid.MariaDBGTID
	for _, tok := range strings.Split(state, ",") {
		if strings.TrimSpace(tok) == "" {
			continue
		}
		g, err := gtid.ParseMariaDB(tok)
		if err != nil {
			return false, "", err
		}
		last = append(last, g.Entries()...)
	}
	var miss []gtid.MariaDBGTID
	for _, e := range p.Entries() {
		found := false
		for _, s := range last {
			if s.Domain == e.Domain && s.ServerID == e.ServerID && s.Seqno >= e.Seqno {
				found = true
				break
			}
		}
		if !found {
			miss = append(miss, e)
		}
	}
	if len(miss) == 0 {
		return true, "", nil
	}
	mp, err := gtid.NewMariaDBPos(miss...)
	if err != nil {
		return false, "", err
	}
	return false, mp.String(), nil
}
