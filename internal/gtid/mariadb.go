package gtid

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MariaDBGTID is one MariaDB global transaction ID, domain-server_id-seqno.
// Within a replication domain, seqno orders transactions; server_id records
// which server wrote the transaction and does not take part in ordering
// (MariaDB KB "Global Transaction ID").
type MariaDBGTID struct {
	Domain   uint32 // gtid_domain_id, 0..4294967295
	ServerID uint32 // server_id of the originating server, 0..4294967295
	Seqno    uint64 // sequence number within the domain, 0..18446744073709551615
}

// String formats as "domain-server_id-seqno", e.g. "0-1-100".
func (g MariaDBGTID) String() string {
	return strconv.FormatUint(uint64(g.Domain), 10) + "-" +
		strconv.FormatUint(uint64(g.ServerID), 10) + "-" +
		strconv.FormatUint(g.Seqno, 10)
}

// MariaDBPos is a MariaDB GTID position such as @@gtid_current_pos: the last
// GTID of each replication domain, at most one entry per domain. The zero
// value is the empty position. It implements Set.
//
// Comparison follows MariaDB (MASTER_GTID_WAIT, CHANGE MASTER ...
// MASTER_USE_GTID): position A has reached B when, for every domain in B, A
// has that domain with a seqno at least as high. server_id is ignored there,
// but two positions with the same domain and seqno and different server_ids
// name two different transactions — the histories diverged; Diverged reports
// that and Compare treats it as Incomparable.
type MariaDBPos struct {
	entries []MariaDBGTID // sorted by Domain, one per domain; never mutated
}

// ParseMariaDB parses a MariaDB GTID position: comma-separated
// domain-server_id-seqno entries, e.g. "0-1-100,1-2-5". Whitespace (spaces,
// tabs, newlines) around entries and numbers is ignored; an empty or blank
// string is the empty position. Errors are *ParseError naming the bad entry:
// empty entries, a wrong number of parts, non-decimal or out-of-range numbers
// (domain and server_id are 32-bit, seqno 64-bit unsigned) and a domain that
// appears twice (gtid_binlog_state, which lists one entry per server_id, is
// not a position).
func ParseMariaDB(s string) (MariaDBPos, error) {
	if strings.TrimSpace(s) == "" {
		return MariaDBPos{}, nil
	}
	parts := strings.Split(s, ",")
	entries := make([]MariaDBGTID, 0, len(parts))
	for _, raw := range parts {
		tok := strings.TrimSpace(raw)
		g, err := parseMariaDBGTID(tok)
		if err != nil {
			return MariaDBPos{}, err
		}
		entries = append(entries, g)
	}
	slices.SortStableFunc(entries, func(a, b MariaDBGTID) int { return cmpU32(a.Domain, b.Domain) })
	for i := 1; i < len(entries); i++ {
		if entries[i].Domain == entries[i-1].Domain {
			return MariaDBPos{}, &ParseError{Flavor: MariaDB, Token: entries[i].String(),
				Reason: fmt.Sprintf("domain %d appears twice (also in %q); a position has one entry per domain",
					entries[i].Domain, entries[i-1].String())}
		}
	}
	return MariaDBPos{entries: entries}, nil
}

func parseMariaDBGTID(tok string) (MariaDBGTID, error) {
	bad := func(reason string) (MariaDBGTID, error) {
		return MariaDBGTID{}, &ParseError{Flavor: MariaDB, Token: tok, Reason: reason}
	}
	if tok == "" {
		return bad("empty entry (stray comma?)")
	}
	f := strings.Split(tok, "-")
	if len(f) != 3 {
		return bad("expected domain-server_id-seqno, three non-negative decimal numbers")
	}
	names := [3]string{"domain", "server_id", "seqno"}
	bits := [3]int{32, 32, 64}
	var v [3]uint64
	for i := range f {
		n := strings.TrimSpace(f[i])
		if n == "" || !isDigits(n) {
			return bad(fmt.Sprintf("%s %q is not a decimal number", names[i], n))
		}
		x, err := strconv.ParseUint(n, 10, bits[i])
		if err != nil {
			return bad(fmt.Sprintf("%s %s is out of range (at most %d)", names[i], n, uint64(1)<<bits[i]-1))
		}
		v[i] = x
	}
	return MariaDBGTID{Domain: uint32(v[0]), ServerID: uint32(v[1]), Seqno: v[2]}, nil
}

// NewMariaDBPos builds a position from entries in any order. Two entries for
// the same domain are an error.
func NewMariaDBPos(entries ...MariaDBGTID) (MariaDBPos, error) {
	e := slices.Clone(entries)
	slices.SortStableFunc(e, func(a, b MariaDBGTID) int { return cmpU32(a.Domain, b.Domain) })
	for i := 1; i < len(e); i++ {
		if e[i].Domain == e[i-1].Domain {
			return MariaDBPos{}, fmt.Errorf("gtid: %s and %s: domain %d appears twice", e[i-1], e[i], e[i].Domain)
		}
	}
	return MariaDBPos{entries: e}, nil
}

// Entries returns a copy of the entries, sorted by domain.
func (p MariaDBPos) Entries() []MariaDBGTID { return slices.Clone(p.entries) }

// Len is the number of domains in the position.
func (p MariaDBPos) Len() int { return len(p.entries) }

// Domain returns the entry for domain d, if the position has one.
func (p MariaDBPos) Domain(d uint32) (MariaDBGTID, bool) {
	i, ok := slices.BinarySearchFunc(p.entries, d, func(g MariaDBGTID, d uint32) int { return cmpU32(g.Domain, d) })
	if !ok {
		return MariaDBGTID{}, false
	}
	return p.entries[i], true
}

// Flavor returns MariaDB.
func (p MariaDBPos) Flavor() Flavor { return MariaDB }

// String is the canonical form: entries sorted by domain, joined by ",", no
// spaces, e.g. "0-1-100,1-2-5"; "" for the empty position. MariaDB accepts it
// in SET GLOBAL gtid_slave_pos and MASTER_GTID_WAIT.
func (p MariaDBPos) String() string {
	var b strings.Builder
	for i, g := range p.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(g.String())
	}
	return b.String()
}

// IsEmpty reports whether the position has no domain.
func (p MariaDBPos) IsEmpty() bool { return len(p.entries) == 0 }

// Equal reports whether other is a MariaDBPos with exactly the same entries,
// server_id included.
func (p MariaDBPos) Equal(other Set) bool {
	q, ok := other.(MariaDBPos)
	return ok && slices.Equal(p.entries, q.entries)
}

// Contains reports whether p has reached other by MariaDB's rule: for every
// domain of other, p has the domain with a seqno ≥ other's. server_id is not
// compared (use Diverged for that). A non-MariaDB other is never contained.
func (p MariaDBPos) Contains(other Set) bool {
	q, ok := other.(MariaDBPos)
	if !ok {
		return false
	}
	for _, w := range q.entries {
		h, ok := p.Domain(w.Domain)
		if !ok || h.Seqno < w.Seqno {
			return false
		}
	}
	return true
}

// Compare compares domain by domain (an absent domain is behind any present
// entry): Equal when the entries are identical, Less or Greater when p is
// behind or ahead in some domains and level in the rest, Incomparable when p
// is ahead in one domain and behind in another, when some domain diverged
// (same seqno, different server_id), or when other is not a MariaDBPos.
func (p MariaDBPos) Compare(other Set) Order {
	q, ok := other.(MariaDBPos)
	if !ok {
		return Incomparable
	}
	less, greater := false, false
	i, j := 0, 0
	for i < len(p.entries) || j < len(q.entries) {
		switch {
		case j == len(q.entries) || (i < len(p.entries) && p.entries[i].Domain < q.entries[j].Domain):
			greater = true
			i++
		case i == len(p.entries) || q.entries[j].Domain < p.entries[i].Domain:
			less = true
			j++
		default:
			a, b := p.entries[i], q.entries[j]
			switch {
			case a.Seqno < b.Seqno:
				less = true
			case a.Seqno > b.Seqno:
				greater = true
			case a.ServerID != b.ServerID:
				return Incomparable
			}
			i++
			j++
		}
	}
	switch {
	case less && greater:
		return Incomparable
	case less:
		return Less
	case greater:
		return Greater
	}
	return Equal
}

// Diverged returns the domains, ascending, in which p and other are at the
// same seqno with different server_ids: two different transactions carry the
// same sequence number, so at least one of the servers has a transaction the
// other never saw (typically a write on a replica, or two primaries at once).
// In other domains divergence cannot be told from the positions alone.
func (p MariaDBPos) Diverged(other MariaDBPos) []uint32 {
	var out []uint32
	for _, a := range p.entries {
		if b, ok := other.Domain(a.Domain); ok && a.Seqno == b.Seqno && a.ServerID != b.ServerID {
			out = append(out, a.Domain)
		}
	}
	return out
}

// MariaDBGap says how far one position is behind another in one domain.
type MariaDBGap struct {
	Domain uint32
	// Have is the entry of the position that is behind; HavePresent is false
	// when it has nothing in this domain (Have is then the zero value).
	Have        MariaDBGTID
	HavePresent bool
	// Want is the entry of the position it is compared with.
	Want MariaDBGTID
}

// Behind is the number of seqnos between Have and Want (all of Want's seqno
// when the domain is absent).
func (g MariaDBGap) Behind() uint64 {
	if !g.HavePresent {
		return g.Want.Seqno
	}
	return g.Want.Seqno - g.Have.Seqno
}

// String describes the gap, e.g. "domain 0: at 0-1-90, needs 0-1-100 (10
// behind)" or "domain 1: absent, needs 1-2-5".
func (g MariaDBGap) String() string {
	if !g.HavePresent {
		return fmt.Sprintf("domain %d: absent, needs %s", g.Domain, g.Want)
	}
	return fmt.Sprintf("domain %d: at %s, needs %s (%d behind)", g.Domain, g.Have, g.Want, g.Behind())
}

// Missing lists, by ascending domain, where p is behind other: domains of
// other that p lacks or has at a lower seqno. It is empty exactly when
// p.Contains(other). Divergence at an equal seqno is not a gap; see Diverged.
func (p MariaDBPos) Missing(other MariaDBPos) []MariaDBGap {
	var out []MariaDBGap
	for _, w := range other.entries {
		h, ok := p.Domain(w.Domain)
		if !ok || h.Seqno < w.Seqno {
			out = append(out, MariaDBGap{Domain: w.Domain, Have: h, HavePresent: ok, Want: w})
		}
	}
	return out
}

// Subtract returns the entries of p that other does not contain: domains
// other lacks, domains where p's seqno is higher, and domains that diverged
// (same seqno, different server_id). A MariaDB position records only the
// last GTID of each domain, so this is the position-level approximation of a
// set difference: an entry in the result means p has at least one
// transaction in that domain that other has not.
func (p MariaDBPos) Subtract(other MariaDBPos) MariaDBPos {
	var out []MariaDBGTID
	for _, a := range p.entries {
		b, ok := other.Domain(a.Domain)
		if !ok || a.Seqno > b.Seqno || (a.Seqno == b.Seqno && a.ServerID != b.ServerID) {
			out = append(out, a)
		}
	}
	return MariaDBPos{entries: out}
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
