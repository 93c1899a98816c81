package gtid

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func mustMariaDB(t *testing.T, s string) MariaDBPos {
	t.Helper()
	p, err := ParseMariaDB(s)
	if err != nil {
		t.Fatalf("ParseMariaDB(%q): %v", s, err)
	}
	return p
}

func TestParseMariaDB(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical String()
		len  int
	}{
		{"", "", 0},
		{"   \n\t ", "", 0},
		{"0-1-100", "0-1-100", 1},
		{"0-1-100,1-2-5", "0-1-100,1-2-5", 2},
		{"1-2-5,0-1-100", "0-1-100,1-2-5", 2},
		{" 1-2-5 ,\n 0-1-100\n", "0-1-100,1-2-5", 2},
		{"0 - 1 - 100", "0-1-100", 1},
		{"10-1-1,2-1-1,0-1-1", "0-1-1,2-1-1,10-1-1", 3},
		{"007-01-0100", "7-1-100", 1},
		{"0-0-0", "0-0-0", 1},
		{"4294967295-4294967295-18446744073709551615", "4294967295-4294967295-18446744073709551615", 1},
	}
	for _, tt := range tests {
		p, err := ParseMariaDB(tt.in)
		if err != nil {
			t.Errorf("ParseMariaDB(%q): unexpected error %v", tt.in, err)
			continue
		}
		if got := p.String(); got != tt.want {
			t.Errorf("ParseMariaDB(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if p.Len() != tt.len {
			t.Errorf("ParseMariaDB(%q).Len() = %d, want %d", tt.in, p.Len(), tt.len)
		}
		if p.IsEmpty() != (tt.len == 0) {
			t.Errorf("ParseMariaDB(%q).IsEmpty() = %v", tt.in, p.IsEmpty())
		}
	}
}

func TestParseMariaDBErrors(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string // substring; the bad token must be named
	}{
		{"0-1", `"0-1": expected domain-server_id-seqno`},
		{"0-1-2-3", `"0-1-2-3": expected domain-server_id-seqno`},
		{"0-1-100,", `"": empty entry`},
		{",0-1-100", `"": empty entry`},
		{"0-1-100,,1-1-1", `"": empty entry`},
		{"0-x-5", `"0-x-5": server_id "x" is not a decimal number`},
		{"a-1-5", `domain "a" is not a decimal number`},
		{"0-1-", `seqno "" is not a decimal number`},
		{"-1-1-5", `expected domain-server_id-seqno`},
		{"0-1-+5", `seqno "+5" is not a decimal number`},
		{"0-1-0x10", `seqno "0x10" is not a decimal number`},
		{"0-1-1_000", `seqno "1_000" is not a decimal number`},
		{"4294967296-1-1", `domain 4294967296 is out of range (at most 4294967295)`},
		{"0-4294967296-1", `server_id 4294967296 is out of range`},
		{"0-1-18446744073709551616", `seqno 18446744073709551616 is out of range (at most 18446744073709551615)`},
		{"0-1-100,0-2-200", `domain 0 appears twice`},
		{"0-1-5,0-1-5", `domain 0 appears twice`},
		{"0-1-5;1-1-1", `"0-1-5;1-1-1"`},
		{"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", `expected domain-server_id-seqno`},
	}
	for _, tt := range tests {
		_, err := ParseMariaDB(tt.in)
		if err == nil {
			t.Errorf("ParseMariaDB(%q): no error, want %q", tt.in, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseMariaDB(%q) error = %q, want substring %q", tt.in, err, tt.wantErr)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Flavor != MariaDB {
			t.Errorf("ParseMariaDB(%q) error %T is not a MariaDB *ParseError", tt.in, err)
		}
	}
}

func TestMariaDBCompare(t *testing.T) {
	tests := []struct {
		a, b     string
		order    Order
		contains bool // a.Contains(b)
		revCont  bool // b.Contains(a)
	}{
		{"", "", Equal, true, true},
		{"0-1-100", "0-1-100", Equal, true, true},
		{"0-1-100", "", Greater, true, false},
		{"0-1-101", "0-1-100", Greater, true, false},
		{"0-1-99", "0-1-100", Less, false, true},
		// server_id does not order: a later seqno from another server is ahead.
		{"0-2-101", "0-1-100", Greater, true, false},
		// Same seqno, different server_id: diverged. MariaDB's containment
		// (seqno only) holds both ways, but the positions are not ordered.
		{"0-2-100", "0-1-100", Incomparable, true, true},
		// Missing domain: b has domain 1 that a lacks.
		{"0-1-100", "0-1-100,1-2-5", Less, false, true},
		{"0-1-200", "0-1-100,1-2-5", Incomparable, false, false},
		{"0-1-100,1-2-6", "0-1-100,1-2-5", Greater, true, false},
		{"0-1-101,1-2-4", "0-1-100,1-2-5", Incomparable, false, false},
		{"0-1-100,2-3-1", "0-1-100,1-2-5", Incomparable, false, false},
		// Seqno 0 is still an entry: present beats absent.
		{"0-1-0", "", Greater, true, false},
		{"0-1-18446744073709551615", "0-1-18446744073709551614", Greater, true, false},
		{"4294967295-1-1,0-1-1", "0-1-1", Greater, true, false},
	}
	for _, tt := range tests {
		a, b := mustMariaDB(t, tt.a), mustMariaDB(t, tt.b)
		if got := a.Compare(b); got != tt.order {
			t.Errorf("%q.Compare(%q) = %v, want %v", tt.a, tt.b, got, tt.order)
		}
		if got := b.Compare(a); got != reverse(tt.order) {
			t.Errorf("%q.Compare(%q) = %v, want %v", tt.b, tt.a, got, reverse(tt.order))
		}
		if got := a.Contains(b); got != tt.contains {
			t.Errorf("%q.Contains(%q) = %v, want %v", tt.a, tt.b, got, tt.contains)
		}
		if got := b.Contains(a); got != tt.revCont {
			t.Errorf("%q.Contains(%q) = %v, want %v", tt.b, tt.a, got, tt.revCont)
		}
		if got, want := a.Equal(b), tt.order == Equal; got != want {
			t.Errorf("%q.Equal(%q) = %v, want %v", tt.a, tt.b, got, want)
		}
		// Missing is empty exactly when Contains holds.
		if got := len(a.Missing(b)) == 0; got != tt.contains {
			t.Errorf("%q.Missing(%q) = %v, inconsistent with Contains=%v", tt.a, tt.b, a.Missing(b), tt.contains)
		}
	}
}

func reverse(o Order) Order {
	switch o {
	case Less:
		return Greater
	case Greater:
		return Less
	}
	return o
}

func TestMariaDBDiverged(t *testing.T) {
	tests := []struct {
		a, b string
		want []uint32
	}{
		{"0-1-100", "0-1-100", nil},
		{"0-1-100", "0-2-100", []uint32{0}},
		{"0-1-100", "0-2-101", nil}, // different seqnos: cannot tell from positions
		{"0-1-100,1-1-7,2-5-9", "0-2-100,1-1-7,2-6-9,3-1-1", []uint32{0, 2}},
		{"", "0-1-1", nil},
	}
	for _, tt := range tests {
		a, b := mustMariaDB(t, tt.a), mustMariaDB(t, tt.b)
		if got := a.Diverged(b); !slices.Equal(got, tt.want) {
			t.Errorf("%q.Diverged(%q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := b.Diverged(a); !slices.Equal(got, tt.want) {
			t.Errorf("Diverged is not symmetric: %q.Diverged(%q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestMariaDBMissing(t *testing.T) {
	replica := mustMariaDB(t, "0-1-90,2-3-7,5-1-1")
	primary := mustMariaDB(t, "0-1-100,1-2-5,2-3-7,5-9-1")
	gaps := replica.Missing(primary)
	var got []string
	for _, g := range gaps {
		got = append(got, g.String())
	}
	want := []string{
		"domain 0: at 0-1-90, needs 0-1-100 (10 behind)",
		"domain 1: absent, needs 1-2-5",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Missing = %q, want %q", got, want)
	}
	if gaps[0].Behind() != 10 || gaps[1].Behind() != 5 || gaps[1].HavePresent {
		t.Errorf("gap details wrong: %+v", gaps)
	}
	huge := mustMariaDB(t, "0-1-18446744073709551615")
	if g := (MariaDBPos{}).Missing(huge); len(g) != 1 || g[0].Behind() != 18446744073709551615 {
		t.Errorf("Missing against huge seqno = %+v", g)
	}
	if g := mustMariaDB(t, "0-1-1").Missing(huge); len(g) != 1 || g[0].Behind() != 18446744073709551614 {
		t.Errorf("Missing against huge seqno = %+v", g)
	}
}

func TestMariaDBErrant(t *testing.T) {
	tests := []struct {
		replica, primary, want string
	}{
		{"", "0-1-100", ""},
		{"0-1-100", "0-1-100", ""},
		{"0-1-90", "0-1-100", ""},             // behind is not errant
		{"0-1-100,1-2-5", "0-1-100", "1-2-5"}, // a domain the primary never had
		{"0-2-101", "0-1-100", "0-2-101"},     // ahead of the primary in its domain
		{"0-2-100", "0-1-100", "0-2-100"},     // same seqno, other server: diverged
		{"0-1-100,1-2-5,2-3-3", "0-1-200,1-2-5", "2-3-3"},
	}
	for _, tt := range tests {
		r, p := mustMariaDB(t, tt.replica), mustMariaDB(t, tt.primary)
		got, err := Errant(r, p)
		if err != nil {
			t.Fatalf("Errant(%q, %q): %v", tt.replica, tt.primary, err)
		}
		if got.String() != tt.want {
			t.Errorf("Errant(%q, %q) = %q, want %q", tt.replica, tt.primary, got, tt.want)
		}
		if got.Flavor() != MariaDB {
			t.Errorf("Errant flavor = %v", got.Flavor())
		}
	}
}

func TestMariaDBAccessors(t *testing.T) {
	p := mustMariaDB(t, "1-2-5,0-1-100")
	if g, ok := p.Domain(1); !ok || g != (MariaDBGTID{Domain: 1, ServerID: 2, Seqno: 5}) {
		t.Errorf("Domain(1) = %v, %v", g, ok)
	}
	if _, ok := p.Domain(7); ok {
		t.Error("Domain(7) found in a position without domain 7")
	}
	e := p.Entries()
	e[0].Seqno = 1 // must not alias the position
	if p.String() != "0-1-100,1-2-5" {
		t.Errorf("Entries aliased the position: %q", p)
	}
	q, err := NewMariaDBPos(MariaDBGTID{1, 2, 5}, MariaDBGTID{0, 1, 100})
	if err != nil || !q.Equal(p) {
		t.Errorf("NewMariaDBPos = %v, %v; want %v", q, err, p)
	}
	if _, err := NewMariaDBPos(MariaDBGTID{1, 2, 5}, MariaDBGTID{1, 1, 100}); err == nil {
		t.Error("NewMariaDBPos accepted two entries for domain 1")
	}
}
