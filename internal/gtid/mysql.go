package gtid

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxMySQLGNO is the largest transaction number MySQL assigns (GNO_END - 1 in
// the server source: 2^63 - 1). Larger numbers are rejected by ParseMySQL.
const MaxMySQLGNO = math.MaxInt64

// Interval is an inclusive range of MySQL transaction numbers, Start..End,
// with 1 ≤ Start ≤ End ≤ MaxMySQLGNO.
type Interval struct {
	Start, End uint64
}

// String formats as "n" for a single transaction, "a-b" otherwise.
func (iv Interval) String() string {
	if iv.Start == iv.End {
		return strconv.FormatUint(iv.Start, 10)
	}
	return strconv.FormatUint(iv.Start, 10) + "-" + strconv.FormatUint(iv.End, 10)
}

// MySQLGroup is the part of a MySQL GTID set for one source UUID and tag:
// sorted, merged, non-adjacent intervals.
type MySQLGroup struct {
	// UUID is the server_uuid of the source, lower-case 8-4-4-4-12 form.
	UUID string
	// Tag is the MySQL 8.3+ GTID tag, lower case; "" for untagged GTIDs.
	Tag       string
	Intervals []Interval
}

type mysqlGroup struct {
	uuid [16]byte
	tag  string
	ivs  []Interval // sorted, merged (no overlap, no adjacency), never empty
}

func (g mysqlGroup) cmpKey(h mysqlGroup) int {
	if c := bytes.Compare(g.uuid[:], h.uuid[:]); c != 0 {
		return c
	}
	return strings.Compare(g.tag, h.tag)
}

// MySQLSet is a MySQL GTID set such as @@gtid_executed, kept normalized:
// groups sorted by UUID then tag (untagged first), intervals sorted and
// merged. The zero value is the empty set. It implements Set.
type MySQLSet struct {
	groups []mysqlGroup // never mutated after construction
}

// ParseMySQL parses a MySQL GTID set:
//
//	uuid:interval[:interval...][:tag:interval[:interval...]...][,uuid:...]
//
// where an interval is "n" or "a-b" (1 ≤ a ≤ b ≤ MaxMySQLGNO) and a tag
// (MySQL 8.3+) is a letter or underscore followed by up to 31 letters,
// digits or underscores, applying to the intervals after it. UUIDs and tags
// are case-insensitive. Whitespace and newlines around tokens are ignored (MySQL
// prints gtid_executed with ",\n" between UUIDs), as are empty elements
// between commas, like the server does. Overlapping, adjacent and repeated
// intervals are merged. An empty or blank string is the empty set. Errors are
// *ParseError naming the bad UUID, tag or interval.
func ParseMySQL(s string) (MySQLSet, error) {
	var groups []mysqlGroup
	for _, raw := range strings.Split(s, ",") {
		elem := strings.TrimSpace(raw)
		if elem == "" {
			continue
		}
		parts := strings.Split(elem, ":")
		uuid, err := parseUUID(strings.TrimSpace(parts[0]))
		if err != nil {
			return MySQLSet{}, &ParseError{Flavor: MySQL, Token: elem, Reason: err.Error()}
		}
		if len(parts) == 1 {
			return MySQLSet{}, &ParseError{Flavor: MySQL, Token: elem,
				Reason: "a UUID must be followed by at least one :interval"}
		}
		cur := mysqlGroup{uuid: uuid}
		for _, p := range parts[1:] {
			tok := strings.TrimSpace(p)
			switch {
			case tok == "":
				return MySQLSet{}, &ParseError{Flavor: MySQL, Token: elem, Reason: "empty interval (stray colon?)"}
			case tok[0] >= '0' && tok[0] <= '9':
				iv, err := parseInterval(tok)
				if err != nil {
					return MySQLSet{}, &ParseError{Flavor: MySQL, Token: tok, Reason: err.Error()}
				}
				cur.ivs = append(cur.ivs, iv)
			default:
				tag, err := parseTag(tok)
				if err != nil {
					return MySQLSet{}, &ParseError{Flavor: MySQL, Token: tok, Reason: err.Error()}
				}
				if cur.tag != "" && len(cur.ivs) == 0 {
					return MySQLSet{}, &ParseError{Flavor: MySQL, Token: elem,
						Reason: fmt.Sprintf("tag %q has no interval", cur.tag)}
				}
				if len(cur.ivs) > 0 {
					groups = append(groups, cur)
				}
				cur = mysqlGroup{uuid: uuid, tag: tag}
			}
		}
		if len(cur.ivs) == 0 {
			reason := "a UUID must be followed by at least one :interval"
			if cur.tag != "" {
				reason = fmt.Sprintf("tag %q has no interval", cur.tag)
			}
			return MySQLSet{}, &ParseError{Flavor: MySQL, Token: elem, Reason: reason}
		}
		groups = append(groups, cur)
	}
	return normalize(groups), nil
}

func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("%q is not a UUID (expected 8-4-4-4-12 hex digits)", clip(s))
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("%q is not a UUID (expected 8-4-4-4-12 hex digits)", s)
	}
	return u, nil
}

func formatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func parseTag(s string) (string, error) {
	ok := len(s) >= 1 && len(s) <= 32
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			ok = false
		}
	}
	if !ok {
		return "", fmt.Errorf("%q is neither an interval nor a tag (a letter or _ then up to 31 letters, digits or _)", clip(s))
	}
	return strings.ToLower(s), nil
}

func parseInterval(s string) (Interval, error) {
	a, b, isRange := strings.Cut(s, "-")
	start, err := parseGNO(strings.TrimSpace(a))
	if err != nil {
		return Interval{}, err
	}
	end := start
	if isRange {
		if end, err = parseGNO(strings.TrimSpace(b)); err != nil {
			return Interval{}, err
		}
		if start > end {
			return Interval{}, fmt.Errorf("interval start %d is greater than its end %d", start, end)
		}
	}
	return Interval{Start: start, End: end}, nil
}

func parseGNO(s string) (uint64, error) {
	if s == "" || !isDigits(s) {
		return 0, fmt.Errorf("transaction number %q is not a decimal number", clip(s))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxMySQLGNO {
		return 0, fmt.Errorf("transaction number %s is out of range (1..%d)", clip(s), uint64(MaxMySQLGNO))
	}
	if n == 0 {
		return 0, fmt.Errorf("transaction number 0 is not allowed (numbers start at 1)")
	}
	return n, nil
}

// normalize sorts groups, merges groups with the same key and merges their
// intervals. It takes ownership of groups.
func normalize(groups []mysqlGroup) MySQLSet {
	slices.SortStableFunc(groups, mysqlGroup.cmpKey)
	var out []mysqlGroup
	for _, g := range groups {
		if n := len(out); n > 0 && out[n-1].cmpKey(g) == 0 {
			out[n-1].ivs = append(out[n-1].ivs, g.ivs...)
			continue
		}
		out = append(out, g)
	}
	for i := range out {
		out[i].ivs = mergeIntervals(out[i].ivs)
	}
	return MySQLSet{groups: out}
}

func mergeIntervals(ivs []Interval) []Interval {
	ivs = slices.Clone(ivs)
	slices.SortFunc(ivs, func(a, b Interval) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	out := ivs[:0]
	for _, iv := range ivs {
		// End ≤ MaxMySQLGNO, so End+1 cannot overflow.
		if n := len(out); n > 0 && iv.Start <= out[n-1].End+1 {
			out[n-1].End = max(out[n-1].End, iv.End)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Groups returns a copy of the set's groups, sorted by UUID then tag.
func (s MySQLSet) Groups() []MySQLGroup {
	out := make([]MySQLGroup, len(s.groups))
	for i, g := range s.groups {
		out[i] = MySQLGroup{UUID: formatUUID(g.uuid), Tag: g.tag, Intervals: slices.Clone(g.ivs)}
	}
	return out
}

// Count is the number of transactions in the set, saturating at
// math.MaxUint64.
func (s MySQLSet) Count() uint64 {
	var n uint64
	for _, g := range s.groups {
		for _, iv := range g.ivs {
			c := iv.End - iv.Start + 1
			if n > math.MaxUint64-c {
				return math.MaxUint64
			}
			n += c
		}
	}
	return n
}

// Flavor returns MySQL.
func (s MySQLSet) Flavor() Flavor { return MySQL }

// String is the canonical form: groups sorted by UUID, lower-case UUIDs, one
// element per UUID with its untagged intervals first and then each tag (sorted)
// followed by its intervals, elements joined by "," without spaces, e.g.
// "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:11,...". "" for the empty set.
// MySQL accepts it wherever it takes a GTID set.
func (s MySQLSet) String() string {
	var b strings.Builder
	for i, g := range s.groups {
		if i == 0 || g.uuid != s.groups[i-1].uuid {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(formatUUID(g.uuid))
		}
		if g.tag != "" {
			b.WriteByte(':')
			b.WriteString(g.tag)
		}
		for _, iv := range g.ivs {
			b.WriteByte(':')
			b.WriteString(iv.String())
		}
	}
	return b.String()
}

// IsEmpty reports whether the set holds no GTID.
func (s MySQLSet) IsEmpty() bool { return len(s.groups) == 0 }

// Equal reports whether other is a MySQLSet holding exactly the same GTIDs.
func (s MySQLSet) Equal(other Set) bool {
	o, ok := other.(MySQLSet)
	if !ok || len(s.groups) != len(o.groups) {
		return false
	}
	for i := range s.groups {
		if s.groups[i].cmpKey(o.groups[i]) != 0 || !slices.Equal(s.groups[i].ivs, o.groups[i].ivs) {
			return false
		}
	}
	return true
}

// Contains reports whether s is a superset of other. A non-MySQL other is
// never contained.
func (s MySQLSet) Contains(other Set) bool {
	o, ok := other.(MySQLSet)
	if !ok {
		return false
	}
	return o.Subtract(s).IsEmpty()
}

// Compare reports Equal, Less (s ⊂ other), Greater (s ⊃ other) or
// Incomparable (neither contains the other, or other is not a MySQLSet).
func (s MySQLSet) Compare(other Set) Order {
	o, ok := other.(MySQLSet)
	if !ok {
		return Incomparable
	}
	sub, sup := o.Contains(s), s.Contains(o)
	switch {
	case sub && sup:
		return Equal
	case sub:
		return Less
	case sup:
		return Greater
	}
	return Incomparable
}

// Subtract returns s − other: the GTIDs of s that other lacks. With s a
// replica's gtid_executed and other the primary's, the result is the
// replica's errant transactions.
func (s MySQLSet) Subtract(other MySQLSet) MySQLSet {
	var out []mysqlGroup
	j := 0
	for _, g := range s.groups {
		for j < len(other.groups) && other.groups[j].cmpKey(g) < 0 {
			j++
		}
		ivs := g.ivs
		if j < len(other.groups) && other.groups[j].cmpKey(g) == 0 {
			ivs = subtractIntervals(g.ivs, other.groups[j].ivs)
		}
		if len(ivs) > 0 {
			out = append(out, mysqlGroup{uuid: g.uuid, tag: g.tag, ivs: ivs})
		}
	}
	return MySQLSet{groups: out}
}

// Union returns s ∪ other.
func (s MySQLSet) Union(other MySQLSet) MySQLSet {
	groups := make([]mysqlGroup, 0, len(s.groups)+len(other.groups))
	for _, g := range s.groups {
		groups = append(groups, mysqlGroup{uuid: g.uuid, tag: g.tag, ivs: slices.Clone(g.ivs)})
	}
	for _, g := range other.groups {
		groups = append(groups, mysqlGroup{uuid: g.uuid, tag: g.tag, ivs: slices.Clone(g.ivs)})
	}
	return normalize(groups)
}

// subtractIntervals returns a − b for normalized interval lists.
func subtractIntervals(a, b []Interval) []Interval {
	var out []Interval
	j := 0
	for _, iv := range a {
		start := iv.Start
		for j < len(b) && b[j].End < start {
			j++
		}
		k := j
		for k < len(b) && b[k].Start <= iv.End {
			if b[k].Start > start {
				out = append(out, Interval{Start: start, End: b[k].Start - 1})
			}
			if b[k].End >= iv.End {
				start = iv.End + 1 // consumed
				break
			}
			start = b[k].End + 1
			k++
		}
		if start <= iv.End {
			out = append(out, Interval{Start: start, End: iv.End})
		}
	}
	return out
}
