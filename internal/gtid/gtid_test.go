package gtid

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDispatch(t *testing.T) {
	m, err := Parse(MariaDB, "1-2-5,0-1-100")
	if err != nil || m.Flavor() != MariaDB || m.String() != "0-1-100,1-2-5" {
		t.Errorf("Parse(mariadb) = %v, %v", m, err)
	}
	y, err := Parse(MySQL, strings.ToUpper(uA)+":1-3:2-5")
	if err != nil || y.Flavor() != MySQL || y.String() != uA+":1-5" {
		t.Errorf("Parse(mysql) = %v, %v", y, err)
	}
	if _, err := Parse("postgres", "x"); err == nil || !strings.Contains(err.Error(), `unknown flavor "postgres"`) {
		t.Errorf("Parse(postgres) error = %v", err)
	}
	// A MySQL set is not a MariaDB position and vice versa.
	if _, err := Parse(MariaDB, uA+":1"); err == nil {
		t.Error("Parse(mariadb) accepted a MySQL set")
	}
	if _, err := Parse(MySQL, "0-1-1"); err == nil {
		t.Error("Parse(mysql) accepted a MariaDB position")
	}
	// A parse error comes back as a nil interface, not a typed zero value.
	if s, err := Parse(MySQL, "bad"); s != nil || err == nil {
		t.Errorf("Parse(mysql, bad) = %v, %v; want nil Set and an error", s, err)
	}
}

func TestParseFlavor(t *testing.T) {
	for _, f := range []Flavor{MariaDB, MySQL} {
		if got, err := ParseFlavor(string(f)); err != nil || got != f {
			t.Errorf("ParseFlavor(%q) = %v, %v", f, got, err)
		}
	}
	if _, err := ParseFlavor("MariaDB"); err == nil {
		t.Error("ParseFlavor is case-sensitive like the config; MariaDB must be rejected")
	}
}

func TestCrossFlavor(t *testing.T) {
	empties := []Set{Empty(MariaDB), Empty(MySQL)}
	if Empty("x") != nil {
		t.Error("Empty(unknown flavor) is not nil")
	}
	a, b := empties[0], empties[1]
	if a.Equal(b) || b.Equal(a) || a.Contains(b) || b.Contains(a) {
		t.Error("sets of different flavors compared as equal or contained")
	}
	if a.Compare(b) != Incomparable || b.Compare(a) != Incomparable {
		t.Error("sets of different flavors are not Incomparable")
	}
	if a.Contains(nil) || b.Contains(nil) || a.Equal(nil) || b.Compare(nil) != Incomparable {
		t.Error("nil Set not treated as foreign")
	}
	if _, err := Subtract(a, b); !errors.Is(err, ErrFlavorMismatch) {
		t.Errorf("Subtract across flavors: %v, want ErrFlavorMismatch", err)
	}
	_, err := Errant(b, a)
	if !errors.Is(err, ErrFlavorMismatch) || !strings.Contains(err.Error(), "mysql and mariadb") {
		t.Errorf("Errant across flavors: %v", err)
	}
	if _, err := Errant(nil, a); !errors.Is(err, ErrFlavorMismatch) {
		t.Errorf("Errant(nil, ...): %v", err)
	}
}

func TestErrantMySQL(t *testing.T) {
	primary, _ := Parse(MySQL, uA+":1-120")
	replica, _ := Parse(MySQL, uA+":1-100,"+uB+":1-2")
	e, err := Errant(replica, primary)
	if err != nil {
		t.Fatal(err)
	}
	if e.String() != uB+":1-2" {
		t.Errorf("Errant = %q, want %q", e, uB+":1-2")
	}
	// Lagging but clean replica: nothing errant.
	clean, _ := Parse(MySQL, uA+":1-100")
	if e, _ := Errant(clean, primary); !e.IsEmpty() {
		t.Errorf("Errant of a lagging replica = %q, want empty", e)
	}
}

func TestOrderString(t *testing.T) {
	for o, want := range map[Order]string{Less: "less", Equal: "equal", Greater: "greater", Incomparable: "incomparable", Order(42): "incomparable"} {
		if o.String() != want {
			t.Errorf("Order(%d).String() = %q, want %q", o, o.String(), want)
		}
	}
}

func TestParseErrorClipsLongTokens(t *testing.T) {
	_, err := ParseMariaDB(strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("error for a 10 kB token is %d bytes long", len(err.Error()))
	}
}
