package gtid

import (
	"errors"
	"fmt"
)

// Flavor names the server family whose GTID format a Set follows. Its values
// are the same strings as the cluster flavor in switchyard.yaml.
type Flavor string

// The supported flavors.
const (
	// MariaDB positions: domain-server_id-seqno lists (MariaDB 10.0+).
	MariaDB Flavor = "mariadb"
	// MySQL sets: uuid:interval sets (MySQL 5.6+, tags from 8.3).
	MySQL Flavor = "mysql"
)

// ParseFlavor maps "mariadb" or "mysql" to a Flavor; anything else is an error
// naming the value.
func ParseFlavor(s string) (Flavor, error) {
	switch Flavor(s) {
	case MariaDB, MySQL:
		return Flavor(s), nil
	}
	return "", fmt.Errorf("gtid: unknown flavor %q (use %q or %q)", s, MariaDB, MySQL)
}

// Set is a flavor-neutral GTID position or set. Values are immutable; every
// operation returns a new value. Operations between sets of different flavors
// never succeed: Contains and Equal report false, Compare reports
// Incomparable, and the package-level Subtract and Errant return
// ErrFlavorMismatch. A nil Set argument is treated like a set of another
// flavor.
type Set interface {
	// Flavor reports which format the set follows.
	Flavor() Flavor
	// String is the canonical text: MariaDB entries sorted by domain, MySQL
	// groups sorted by UUID with merged, sorted intervals. Parsing it gives an
	// Equal set. The empty set is "".
	String() string
	// IsEmpty reports whether the set holds no GTID.
	IsEmpty() bool
	// Equal reports whether other is of the same flavor and holds exactly the
	// same GTIDs (MariaDB: the same entries, server_id included).
	Equal(other Set) bool
	// Contains reports whether every transaction of other is also in this
	// set — for switchover, whether a candidate at this position has applied
	// everything the old primary had.
	Contains(other Set) bool
	// Compare places this set relative to other in the partial order of
	// containment.
	Compare(other Set) Order
}

// Order is the result of comparing two GTID sets, which are only partially
// ordered: two replicas that each applied something the other has not are
// Incomparable. The zero value is Incomparable.
type Order int

// The possible results of Compare.
const (
	// Incomparable: each side has something the other lacks, the sets
	// diverged (MariaDB: the same seqno from different server_ids), or the
	// flavors differ.
	Incomparable Order = iota
	// Less: the receiver is strictly behind the argument.
	Less
	// Equal: both hold exactly the same GTIDs.
	Equal
	// Greater: the receiver is strictly ahead of the argument.
	Greater
)

// String returns "less", "equal", "greater" or "incomparable".
func (o Order) String() string {
	switch o {
	case Less:
		return "less"
	case Equal:
		return "equal"
	case Greater:
		return "greater"
	default:
		return "incomparable"
	}
}

// ErrFlavorMismatch is returned (wrapped) when an operation combines a MariaDB
// position with a MySQL set. It usually means a cluster's flavor in the config
// does not match its servers.
var ErrFlavorMismatch = errors.New("gtid: cannot combine GTID sets of different flavors")

// ParseError describes input that is not a valid GTID position or set. Token
// is the offending part of the input (one entry or one interval), so the
// message points at it rather than at the whole, possibly long, value.
type ParseError struct {
	Flavor Flavor
	Token  string
	Reason string
}

// Error formats as `gtid: invalid mariadb GTID position: "1-x-5": server_id
// "x" is not a decimal number`.
func (e *ParseError) Error() string {
	what := "GTID position"
	if e.Flavor == MySQL {
		what = "GTID set"
	}
	return fmt.Sprintf("gtid: invalid %s %s: %q: %s", e.Flavor, what, clip(e.Token), e.Reason)
}

// clip keeps error messages readable when fed megabytes of garbage.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// Parse parses s in the given flavor: ParseMariaDB for MariaDB, ParseMySQL for
// MySQL. An unknown flavor is an error naming it.
func Parse(flavor Flavor, s string) (Set, error) {
	switch flavor {
	case MariaDB:
		p, err := ParseMariaDB(s)
		if err != nil {
			return nil, err
		}
		return p, nil
	case MySQL:
		m, err := ParseMySQL(s)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, fmt.Errorf("gtid: unknown flavor %q (use %q or %q)", flavor, MariaDB, MySQL)
}

// Empty returns the empty set of the given flavor, or nil for an unknown
// flavor.
func Empty(flavor Flavor) Set {
	switch flavor {
	case MariaDB:
		return MariaDBPos{}
	case MySQL:
		return MySQLSet{}
	}
	return nil
}

// Subtract returns the GTIDs of a that b does not contain: for MySQL the set
// difference a − b; for MariaDB the entries of a whose domain is missing from
// b, ahead of b, or diverged from b (see MariaDBPos.Subtract). Sets of
// different flavors give an error wrapping ErrFlavorMismatch.
func Subtract(a, b Set) (Set, error) {
	switch x := a.(type) {
	case MariaDBPos:
		if y, ok := b.(MariaDBPos); ok {
			return x.Subtract(y), nil
		}
	case MySQLSet:
		if y, ok := b.(MySQLSet); ok {
			return x.Subtract(y), nil
		}
	}
	return nil, fmt.Errorf("%w: %s and %s", ErrFlavorMismatch, flavorOf(a), flavorOf(b))
}

// Errant returns the transactions a replica has applied that the primary does
// not contain — errant GTIDs, which make the replica unsafe to promote and
// must be resolved before it replicates cleanly. It is Subtract(replica,
// primary); an empty result means no errant transactions.
func Errant(replica, primary Set) (Set, error) {
	s, err := Subtract(replica, primary)
	if err != nil {
		return nil, fmt.Errorf("errant GTIDs: %w", err)
	}
	return s, nil
}

func flavorOf(s Set) string {
	if s == nil {
		return "nil"
	}
	return string(s.Flavor())
}
