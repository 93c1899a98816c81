package gtid

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const (
	uA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uB = "8f6a9c2e-0001-11ef-8a00-0242ac120002"
)

func mustMySQL(t *testing.T, s string) MySQLSet {
	t.Helper()
	m, err := ParseMySQL(s)
	if err != nil {
		t.Fatalf("ParseMySQL(%q): %v", s, err)
	}
	return m
}

func TestParseMySQL(t *testing.T) {
	tests := []struct {
		in, want string
		count    uint64
	}{
		{"", "", 0},
		{" \n ", "", 0},
		{uA + ":1-5", uA + ":1-5", 5},
		{uA + ":5", uA + ":5", 1},
		{strings.ToUpper(uA) + ":1-5", uA + ":1-5", 5},
		// Overlapping, adjacent, unsorted and repeated intervals merge.
		{uA + ":1-5:3-8", uA + ":1-8", 8},
		{uA + ":1-5:6-8", uA + ":1-8", 8},
		{uA + ":10-12:1-3:5", uA + ":1-3:5:10-12", 7},
		{uA + ":1-3:1-3:2", uA + ":1-3", 3},
		{uA + ":7-7", uA + ":7", 1},
		// The same UUID in two elements merges; UUIDs sort.
		{uB + ":1-3," + uA + ":4," + uB + ":4-9", uA + ":4," + uB + ":1-9", 10},
		// MySQL prints gtid_executed with ",\n" between UUIDs.
		{uA + ":1-100,\n" + uB + ":1-20\n", uA + ":1-100," + uB + ":1-20", 120},
		{" " + uA + " : 1 - 5 : 7 ", uA + ":1-5:7", 6},
		// Empty elements between commas are skipped, as the server does.
		{"," + uA + ":1,,", uA + ":1", 1},
		{uA + ":1-9223372036854775807", uA + ":1-9223372036854775807", 9223372036854775807},
		// Tagged GTIDs (MySQL 8.3+): a tag applies to the intervals after it;
		// tags are lower-cased and sorted after the untagged intervals.
		{uA + ":Zeta:1-2:1-5:alpha:3", uA + ":alpha:3:zeta:1-5", 6},
		{uA + ":Zeta:1-2:alpha:3," + uA + ":1-5", uA + ":1-5:alpha:3:zeta:1-2", 8},
		{uA + ":t1:1:2:3," + uA + ":T1:4", uA + ":t1:1-4", 4},
		{uA + ":_x:1", uA + ":_x:1", 1},
	}
	for _, tt := range tests {
		m, err := ParseMySQL(tt.in)
		if err != nil {
			t.Errorf("ParseMySQL(%q): unexpected error %v", tt.in, err)
			continue
		}
		if got := m.String(); got != tt.want {
			t.Errorf("ParseMySQL(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if got := m.Count(); got != tt.count {
			t.Errorf("ParseMySQL(%q).Count() = %d, want %d", tt.in, got, tt.count)
		}
		if m.IsEmpty() != (tt.count == 0) {
			t.Errorf("ParseMySQL(%q).IsEmpty() = %v", tt.in, m.IsEmpty())
		}
	}
}

func TestParseMySQLErrors(t *testing.T) {
	tests := []struct{ in, wantErr string }{
		{uA, `a UUID must be followed by at least one :interval`},
		{uA + ":", `empty interval`},
		{uA + ":1-5:", `empty interval`},
		{uA + "::1", `empty interval`},
		{"3e11fa47-71ca-11e1-9e33:1-5", `"3e11fa47-71ca-11e1-9e33" is not a UUID`},
		{"3e11fa4771ca11e19e33c80aa9429562:1", `is not a UUID (expected 8-4-4-4-12 hex digits)`},
		{"ze11fa47-71ca-11e1-9e33-c80aa9429562:1", `"ze11fa47-71ca-11e1-9e33-c80aa9429562" is not a UUID`},
		{uA + ":0", `"0": transaction number 0 is not allowed`},
		{uA + ":0-5", `transaction number 0 is not allowed`},
		{uA + ":5-3", `"5-3": interval start 5 is greater than its end 3`},
		{uA + ":1-", `"1-": transaction number "" is not a decimal number`},
		{uA + ":1-2-3", `transaction number "2-3" is not a decimal number`},
		{uA + ":1x", `"1x": transaction number "1x" is not a decimal number`},
		{uA + ":9223372036854775808", `transaction number 9223372036854775808 is out of range (1..9223372036854775807)`},
		{uA + ":18446744073709551616", `out of range`},
		{uA + ":1-5:-3", `"-3" is neither an interval nor a tag`},
		{uA + ":tag", `tag "tag" has no interval`},
		{uA + ":tag1:tag2:1", `tag "tag1" has no interval`},
		{uA + ":1:9tag:2", `transaction number "9tag" is not a decimal number`},
		{uA + ":a-b:1", `"a-b" is neither an interval nor a tag`},
		{uA + ":" + strings.Repeat("t", 33) + ":1", `is neither an interval nor a tag`},
		{"0-1-100", `is not a UUID`},
	}
	for _, tt := range tests {
		_, err := ParseMySQL(tt.in)
		if err == nil {
			t.Errorf("ParseMySQL(%q): no error, want %q", tt.in, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseMySQL(%q) error = %q, want substring %q", tt.in, err, tt.wantErr)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Flavor != MySQL {
			t.Errorf("ParseMySQL(%q) error %T is not a MySQL *ParseError", tt.in, err)
		}
	}
}

func TestMySQLSetOps(t *testing.T) {
	tests := []struct {
		a, b       string
		order      Order
		aMinusB    string
		union      string
		aContainsB bool
		bContainsA bool
	}{
		{"", "", Equal, "", "", true, true},
		{uA + ":1-10", "", Greater, uA + ":1-10", uA + ":1-10", true, false},
		{uA + ":1-10", uA + ":1-10", Equal, "", uA + ":1-10", true, true},
		{uA + ":1-10", uA + ":3-4", Greater, uA + ":1-2:5-10", uA + ":1-10", true, false},
		{uA + ":1-10", uA + ":1", Greater, uA + ":2-10", uA + ":1-10", true, false},
		{uA + ":1-10", uA + ":10", Greater, uA + ":1-9", uA + ":1-10", true, false},
		{uA + ":1-5", uA + ":3-8", Incomparable, uA + ":1-2", uA + ":1-8", false, false},
		{uA + ":1-5", uA + ":6-8", Incomparable, uA + ":1-5", uA + ":1-8", false, false},
		{uA + ":1-5:10-20", uA + ":2-3:12:15-30", Incomparable, uA + ":1:4-5:10-11:13-14", uA + ":1-5:10-30", false, false},
		{uA + ":1-100", uA + ":1-100," + uB + ":1", Less, "", uA + ":1-100," + uB + ":1", false, true},
		// Errant transaction on a replica: the replica wrote under its own UUID.
		{uA + ":1-100," + uB + ":1-2", uA + ":1-120", Incomparable, uB + ":1-2", uA + ":1-120," + uB + ":1-2", false, false},
		// Tags are separate groups: tagged 1-5 is not untagged 1-5.
		{uA + ":1-5", uA + ":t:1-5", Incomparable, uA + ":1-5", uA + ":1-5:t:1-5", false, false},
		{uA + ":1-5:t:1-5", uA + ":t:2", Greater, uA + ":1-5:t:1:3-5", uA + ":1-5:t:1-5", true, false},
		{uA + ":1-9223372036854775807", uA + ":9223372036854775807", Greater, uA + ":1-9223372036854775806", uA + ":1-9223372036854775807", true, false},
	}
	for _, tt := range tests {
		a, b := mustMySQL(t, tt.a), mustMySQL(t, tt.b)
		if got := a.Compare(b); got != tt.order {
			t.Errorf("%q.Compare(%q) = %v, want %v", tt.a, tt.b, got, tt.order)
		}
		if got := b.Compare(a); got != reverse(tt.order) {
			t.Errorf("%q.Compare(%q) = %v, want %v", tt.b, tt.a, got, reverse(tt.order))
		}
		if got := a.Subtract(b).String(); got != tt.aMinusB {
			t.Errorf("%q − %q = %q, want %q", tt.a, tt.b, got, tt.aMinusB)
		}
		if got := a.Union(b).String(); got != tt.union {
			t.Errorf("%q ∪ %q = %q, want %q", tt.a, tt.b, got, tt.union)
		}
		if got := b.Union(a).String(); got != tt.union {
			t.Errorf("%q ∪ %q = %q, want %q", tt.b, tt.a, got, tt.union)
		}
		if got := a.Contains(b); got != tt.aContainsB {
			t.Errorf("%q.Contains(%q) = %v, want %v", tt.a, tt.b, got, tt.aContainsB)
		}
		if got := b.Contains(a); got != tt.bContainsA {
			t.Errorf("%q.Contains(%q) = %v, want %v", tt.b, tt.a, got, tt.bContainsA)
		}
		if got, want := a.Equal(b), tt.order == Equal; got != want {
			t.Errorf("%q.Equal(%q) = %v, want %v", tt.a, tt.b, got, want)
		}
	}
}

// TestMySQLSetOpsAgainstOracle checks Subtract, Union and Contains against a
// naive map-of-transactions implementation on random small sets.
func TestMySQLSetOpsAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	uuids := []string{uA, uB}
	tags := []string{"", "t"}
	random := func() string {
		var elems []string
		for range r.IntN(4) {
			e := uuids[r.IntN(2)]
			if tag := tags[r.IntN(2)]; tag != "" {
				e += ":" + tag
			}
			for range 1 + r.IntN(3) {
				s := 1 + r.IntN(20)
				if r.IntN(2) == 0 {
					e += fmt.Sprintf(":%d", s)
				} else {
					e += fmt.Sprintf(":%d-%d", s, s+r.IntN(6))
				}
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, ",")
	}
	expand := func(m MySQLSet) map[string]bool {
		out := map[string]bool{}
		for _, g := range m.Groups() {
			for _, iv := range g.Intervals {
				for n := iv.Start; n <= iv.End; n++ {
					out[fmt.Sprintf("%s:%s:%d", g.UUID, g.Tag, n)] = true
				}
			}
		}
		return out
	}
	for i := range 2000 {
		sa, sb := random(), random()
		a, b := mustMySQL(t, sa), mustMySQL(t, sb)
		ea, eb := expand(a), expand(b)
		wantDiff := map[string]bool{}
		wantUnion := map[string]bool{}
		containsB := true
		for k := range ea {
			wantUnion[k] = true
			if !eb[k] {
				wantDiff[k] = true
			}
		}
		for k := range eb {
			wantUnion[k] = true
			if !ea[k] {
				containsB = false
			}
		}
		if got := expand(a.Subtract(b)); !mapsEqual(got, wantDiff) {
			t.Fatalf("case %d: %q − %q = %q", i, sa, sb, a.Subtract(b))
		}
		if got := expand(a.Union(b)); !mapsEqual(got, wantUnion) {
			t.Fatalf("case %d: %q ∪ %q = %q", i, sa, sb, a.Union(b))
		}
		if a.Contains(b) != containsB {
			t.Fatalf("case %d: %q.Contains(%q) = %v", i, sa, sb, a.Contains(b))
		}
		if uint64(len(ea)) != a.Count() {
			t.Fatalf("case %d: %q.Count() = %d, want %d", i, sa, a.Count(), len(ea))
		}
		assertNormalized(t, a)
		assertNormalized(t, a.Subtract(b))
		assertNormalized(t, a.Union(b))
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// assertNormalized checks the MySQLSet invariants: groups sorted and unique,
// intervals non-empty, sorted, disjoint and non-adjacent.
func assertNormalized(t *testing.T, m MySQLSet) {
	t.Helper()
	for i, g := range m.groups {
		if i > 0 && m.groups[i-1].cmpKey(g) >= 0 {
			t.Fatalf("groups not sorted/unique in %q", m)
		}
		if len(g.ivs) == 0 {
			t.Fatalf("empty group in %q", m)
		}
		for j, iv := range g.ivs {
			if iv.Start < 1 || iv.Start > iv.End || iv.End > MaxMySQLGNO {
				t.Fatalf("bad interval %v in %q", iv, m)
			}
			if j > 0 && g.ivs[j-1].End+1 >= iv.Start {
				t.Fatalf("intervals not merged in %q", m)
			}
		}
	}
}

func TestMySQLGroupsCopy(t *testing.T) {
	m := mustMySQL(t, uA+":1-5:t:7")
	g := m.Groups()
	want := []MySQLGroup{
		{UUID: uA, Intervals: []Interval{{1, 5}}},
		{UUID: uA, Tag: "t", Intervals: []Interval{{7, 7}}},
	}
	if len(g) != 2 || g[0].UUID != uA || g[1].Tag != "t" ||
		!slices.Equal(g[0].Intervals, want[0].Intervals) || !slices.Equal(g[1].Intervals, want[1].Intervals) {
		t.Fatalf("Groups() = %+v, want %+v", g, want)
	}
	g[0].Intervals[0].End = 100
	if m.String() != uA+":1-5:t:7" {
		t.Errorf("Groups aliased the set: %q", m)
	}
}

func TestMySQLCountSaturates(t *testing.T) {
	var elems []string
	for i := range 3 {
		elems = append(elems, fmt.Sprintf("3e11fa47-71ca-11e1-9e33-c80aa942956%d:1-9223372036854775807", i))
	}
	m := mustMySQL(t, strings.Join(elems, ","))
	if got := m.Count(); got != ^uint64(0) {
		t.Errorf("Count() = %d, want saturation at MaxUint64", got)
	}
}
