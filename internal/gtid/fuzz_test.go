package gtid

import (
	"testing"
)

func FuzzParseMariaDB(f *testing.F) {
	for _, s := range []string{
		"", "0-1-100", "0-1-100,1-2-5", " 1-2-5 ,\n0-1-100", "0-1-100,0-2-1", "0-1-",
		"4294967295-4294967295-18446744073709551615", "0-1-18446744073709551616", ",", "0--1",
	} {
		f.Add(s, "0-1-50,2-3-4")
	}
	f.Fuzz(func(t *testing.T, s, other string) {
		p, err := ParseMariaDB(s)
		if err != nil {
			return
		}
		text := p.String()
		q, err := ParseMariaDB(text)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", text, s, err)
		}
		if !q.Equal(p) || q.String() != text || q.Compare(p) != Equal {
			t.Fatalf("round trip of %q: %q became %q", s, text, q)
		}
		if !p.Contains(p) {
			t.Fatalf("%q does not contain itself", text)
		}
		o, err := ParseMariaDB(other)
		if err != nil {
			return
		}
		// Consistency between the operations.
		c := p.Compare(o)
		if c != reverse(o.Compare(p)) {
			t.Fatalf("Compare not antisymmetric for %q, %q", p, o)
		}
		if (c == Equal) != p.Equal(o) {
			t.Fatalf("Compare/Equal disagree for %q, %q", p, o)
		}
		if (c == Greater || c == Equal) && !p.Contains(o) {
			t.Fatalf("%q Compare %v %q but does not contain it", p, c, o)
		}
		if (len(p.Missing(o)) == 0) != p.Contains(o) {
			t.Fatalf("Missing/Contains disagree for %q, %q", p, o)
		}
		d := p.Subtract(o)
		if !p.Contains(d) {
			t.Fatalf("%q − %q = %q is not within %q", p, o, d, p)
		}
		if d.IsEmpty() != (o.Contains(p) && len(p.Diverged(o)) == 0) {
			t.Fatalf("Subtract/Contains disagree for %q, %q: %q", p, o, d)
		}
	})
}

func FuzzParseMySQL(f *testing.F) {
	for _, s := range []string{
		"", uA + ":1-5", uA + ":1-5:3-8:10", uB + ":1-3,\n" + uA + ":4", uA + ":t:1-2:1",
		uA + ":0", uA + ":5-3", uA + ":1-9223372036854775807", ",,", uA + "::", "x:1",
	} {
		f.Add(s, uA+":2-4,"+uB+":1")
	}
	f.Fuzz(func(t *testing.T, s, other string) {
		m, err := ParseMySQL(s)
		if err != nil {
			return
		}
		assertNormalized(t, m)
		text := m.String()
		n, err := ParseMySQL(text)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", text, s, err)
		}
		if !n.Equal(m) || n.String() != text {
			t.Fatalf("round trip of %q: %q became %q", s, text, n)
		}
		o, err := ParseMySQL(other)
		if err != nil {
			return
		}
		d, u := m.Subtract(o), m.Union(o)
		assertNormalized(t, d)
		assertNormalized(t, u)
		if !u.Contains(m) || !u.Contains(o) || !m.Contains(d) {
			t.Fatalf("union/difference containment broken for %q, %q", m, o)
		}
		if !o.Union(d).Equal(u) {
			t.Fatalf("o ∪ (m − o) != m ∪ o for %q, %q", m, o)
		}
		if !d.Subtract(m).IsEmpty() || !o.Subtract(o).IsEmpty() {
			t.Fatalf("difference not empty where it must be for %q, %q", m, o)
		}
		if m.Contains(o) != o.Subtract(m).IsEmpty() {
			t.Fatalf("Contains/Subtract disagree for %q, %q", m, o)
		}
		if m.Compare(o) != reverse(o.Compare(m)) || (m.Compare(o) == Equal) != m.Equal(o) {
			t.Fatalf("Compare inconsistent for %q, %q", m, o)
		}
	})
}
