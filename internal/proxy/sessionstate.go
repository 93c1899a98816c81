package proxy

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Session state tracking. To move an idle session to another backend the
// proxy must rebuild on the new server what the client set up on the old
// one. It uses the server's session tracking rather than interpreting SQL:
// every backend connection is logged in with CLIENT_SESSION_TRACK and runs
//
//	SET @@session.session_track_system_variables='*', @@session.session_track_state_change=ON
//
// so every OK packet after a change carries the new value of each system
// variable the statement changed (sql_mode, time_zone, autocommit,
// character_set_*, collation_connection, tx_isolation, ... whatever the
// statement, even a stored procedure, changed), the new default schema
// (session_track_schema is on by default), and a "state changed" flag that
// also fires for user variables, temporary tables and SQL-level PREPARE.
// The proxy records the values (checked on MariaDB 10.11: SET NAMES reports
// the three character_set_* variables, SET SESSION TRANSACTION ISOLATION
// LEVEL reports tx_isolation, writes report last_gtid, which is ignored).
//
// What tracking does not identify is handled as follows:
//   - user variables: "SET @v = <literal>" statements are parsed and
//     replayed verbatim; a user variable set any other way (SET @v = expr,
//     SELECT @v := ..., SELECT ... INTO @v) makes the session unmigratable;
//   - temporary tables, SQL PREPARE, SET ROLE, HANDLER: unmigratable (a
//     "state changed" flag on a statement that is not SET/USE marks it);
//   - LOCK TABLES and GET_LOCK (not reported at all) are recognised from
//     the statement text; the session is not idle until UNLOCK TABLES
//     (GET_LOCK: until COM_RESET_CONNECTION or COM_CHANGE_USER);
//   - SET STATEMENT ... FOR reports the per-statement values: ignored;
//     SET TRANSACTION (next transaction only) makes the session busy until
//     its next statement.
//
// Clients that did not negotiate CLIENT_SESSION_TRACK never see any of it:
// the proxy removes the session-state block from OK packets it relays to
// them (only OK packets with SERVER_SESSION_STATE_CHANGED carry one; others
// are byte-identical in both formats). Clients that did negotiate it see
// only the entries their own tracking settings produce (trackvars.go).

// trackingSQL switches on what the proxy needs on every backend connection.
const trackingSQL = "SET @@session.session_track_system_variables='*', @@session.session_track_state_change=ON"

// sysVar is one system variable the client changed, with its last value.
type sysVar struct{ name, value string }

// sessState is the server-side session state the proxy knows of.
type sessState struct {
	vars     []sysVar        // system variables changed, in order of last change
	userVars []userVarAssign // user variables set with literals, in order of last change
	opaque   string          // why the session cannot be rebuilt elsewhere ("" when it can)
	locked   bool            // LOCK TABLES in effect
	userLock bool            // GET_LOCK was called
	txChars  bool            // SET TRANSACTION waits for the next transaction
	// lockWaitEcho: a SELECT … NOWAIT / WAIT n ran; the next statement's
	// report of lock_wait_timeout and innodb_lock_wait_timeout is MariaDB
	// restoring the session's own values (lockWaitClause).
	lockWaitEcho bool
}

func (st *sessState) reset() { *st = sessState{} }

// ignoredVar reports system variables whose changes are not session state
// to carry: last_gtid (reported after every write) and the tracking
// settings the proxy manages itself.
func ignoredVar(name string) bool {
	return name == "last_gtid"
}

func trackingVar(name string) bool {
	return strings.HasPrefix(name, "session_track_")
}

// setVar records a system variable's new value.
func (st *sessState) setVar(name, value string) {
	for i := range st.vars {
		if st.vars[i].name == name {
			copy(st.vars[i:], st.vars[i+1:])
			st.vars[len(st.vars)-1] = sysVar{name, value}
			return
		}
	}
	st.vars = append(st.vars, sysVar{name, value})
}

// setUserVar records a user variable assignment.
func (st *sessState) setUserVar(a userVarAssign) {
	for i := range st.userVars {
		if strings.EqualFold(st.userVars[i].name, a.name) {
			copy(st.userVars[i:], st.userVars[i+1:])
			st.userVars[len(st.userVars)-1] = a
			return
		}
	}
	st.userVars = append(st.userVars, a)
}

// markOpaque records the first reason the session cannot be rebuilt.
func (st *sessState) markOpaque(why string) {
	if st.opaque == "" {
		st.opaque = why
	}
}

// trackOK records the session-state changes of an OK packet (payload as
// the backend sent it, under CLIENT_SESSION_TRACK) for a statement of class
// cls; setText is the statement when cls is classSet.
func (s *session) trackOK(payload []byte, cls sqlClass, setText []byte) {
	ok, err := mysqlproto.ParseOK(payload, mysql.CLIENT_SESSION_TRACK)
	if err != nil || len(ok.SessionState) == 0 {
		return
	}
	changed := false
	b := ok.SessionState
	echo := s.st.lockWaitEcho
	s.st.lockWaitEcho = false
	if lockWaitClause(b) && (cls == classSelect || echo && cls == classOther) {
		s.st.lockWaitEcho = cls == classSelect
		// SELECT … NOWAIT / WAIT n: MariaDB reports the statement's own
		// lock_wait_timeout and innodb_lock_wait_timeout (0 or n) and a
		// state change, as for SET STATEMENT … FOR, and the session's
		// own values again with the next statement; neither changes
		// the session's values (checked on 10.11.19).
		return
	}
	for len(b) > 0 {
		typ := b[0]
		n, k, good := mysqlproto.ReadLenEnc(b[1:])
		if !good || uint64(len(b)-1-k) < n {
			return
		}
		data := b[1+k : 1+k+int(n)]
		b = b[1+k+int(n):]
		switch typ {
		case mysqlproto.SessionTrackSystemVariables:
			name, value, good := lenencPair(data)
			if !good || ignoredVar(name) {
				continue
			}
			switch {
			case cls == classSetStmt || cls == classSetStmtState:
				// SET STATEMENT ... FOR reports the per-statement values
				// (classSetStmtState: the session is marked opaque).
			case trackingVar(name):
				if !s.inTrackSet && !s.trackingValue(name, value) {
					// A client's SET relayed by relayTrackSet
					// (trackvars.go) is undone; anything else is not.
					s.st.markOpaque("changed the session tracking variable " + name)
				}
			case cls == classSetTx && (strings.HasPrefix(name, "tx_") || strings.HasPrefix(name, "transaction_")):
				// Next transaction only.
			default:
				s.st.setVar(name, value)
			}
		case mysqlproto.SessionTrackSchema:
			if name, good := (mysqlproto.SessionChange{Type: typ, Data: data}).Schema(); good {
				s.schema = name
			}
		case mysqlproto.SessionTrackStateChange:
			changed = true
		}
	}
	if !changed {
		return
	}
	switch cls {
	case classSet:
		assigns, good := parseSetUserVars(setText)
		if !good {
			s.st.markOpaque("set a user variable to an expression")
			return
		}
		for _, a := range assigns {
			s.st.setUserVar(a)
		}
		if coll, ok := namesCollation(setText); ok {
			s.st.setVar("collation_connection", coll)
		}
	case classUse, classSetTx, classSetStmt, classSetStmtState:
	case classSelect:
		// MariaDB reports only "changed": a stored function may have
		// made anything; SELECT … NOWAIT / WAIT n is reported so too.
		s.st.markOpaque("ran a SELECT that changed its session state in a way the server does not detail (a stored function, or NOWAIT / WAIT n)")
	default:
		s.st.markOpaque("changed its session state in a way the server does not detail (temporary tables, user variables, SQL prepared statements, or variables set inside a stored program)")
	}
}

// lockWaitClause reports whether session-state block b holds only what a
// SELECT … NOWAIT / WAIT n, or the statement after it, makes MariaDB
// report: lock_wait_timeout and innodb_lock_wait_timeout, and the
// state-change flag. (A stored function called by a SELECT that sets just
// these two would be missed: its SET is taken for such a report.)
func lockWaitClause(b []byte) bool {
	var lwt, ilwt string
	for len(b) > 0 {
		typ := b[0]
		n, k, good := mysqlproto.ReadLenEnc(b[1:])
		if !good || uint64(len(b)-1-k) < n {
			return false
		}
		data := b[1+k : 1+k+int(n)]
		b = b[1+k+int(n):]
		switch typ {
		case mysqlproto.SessionTrackSystemVariables:
			name, value, good := lenencPair(data)
			switch {
			case !good:
				return false
			case name == "lock_wait_timeout":
				lwt = value
			case name == "innodb_lock_wait_timeout":
				ilwt = value
			case ignoredVar(name): // last_gtid, ...
			default:
				return false
			}
		case mysqlproto.SessionTrackStateChange:
		default:
			return false
		}
	}
	return lwt != "" || ilwt != ""
}

// trackingValue reports whether a tracking variable has the value the
// proxy set.
func (s *session) trackingValue(name, value string) bool {
	switch name {
	case "session_track_system_variables":
		return value == "*"
	case "session_track_state_change", "session_track_schema":
		return value == "ON" || value == "1"
	}
	return true
}

func lenencPair(b []byte) (string, string, bool) {
	n1, k1, ok := mysqlproto.ReadLenEnc(b)
	if !ok || uint64(len(b)-k1) < n1 {
		return "", "", false
	}
	name := b[k1 : k1+int(n1)]
	rest := b[k1+int(n1):]
	n2, k2, ok := mysqlproto.ReadLenEnc(rest)
	if !ok || uint64(len(rest)-k2) < n2 {
		return "", "", false
	}
	return string(name), string(rest[k2 : k2+int(n2)]), true
}

// afterStatement applies what a successful statement of class cls implies
// that tracking does not report.
func (st *sessState) afterStatement(cls sqlClass) {
	switch cls {
	case classLock:
		st.locked = true
	case classUnlock:
		st.locked = false
	case classSetTx:
		st.txChars = true
		return
	case classSetOpaque:
		st.markOpaque("ran SET ROLE or SET DEFAULT ROLE")
	case classSetStmtState:
		st.markOpaque("ran SET STATEMENT ... FOR a statement that changes session state (SET, USE, LOCK, ...)")
	case classHandler:
		st.markOpaque("opened a HANDLER")
	}
	st.txChars = false
}

// replaySQL returns the statement that rebuilds the recorded variables on a
// new backend, tracking settings first (always), then character sets,
// collations, the other system variables and user variables, each in the
// order of its last change.
func (st *sessState) replaySQL() string {
	var b strings.Builder
	b.WriteString(trackingSQL)
	emit := func(pred func(string) bool) {
		for _, v := range st.vars {
			if !pred(v.name) {
				continue
			}
			b.WriteString(", @@session.")
			b.WriteString(v.name)
			b.WriteByte('=')
			b.WriteString(sqlValue(v.name, v.value))
		}
	}
	isCharset := func(n string) bool { return strings.HasPrefix(n, "character_set_") }
	isCollation := func(n string) bool { return strings.HasPrefix(n, "collation_") }
	emit(isCharset)
	emit(isCollation)
	emit(func(n string) bool { return !isCharset(n) && !isCollation(n) })
	for _, u := range st.userVars {
		b.WriteString(", @`")
		b.WriteString(u.name)
		b.WriteString("`=")
		b.WriteString(u.expr)
	}
	return b.String()
}

// sqlValue renders a tracked value for SET: numbers unquoted (numeric
// variables refuse strings, error 1232), everything else as a quoted
// string; an empty character_set_results is NULL.
func sqlValue(name, v string) string {
	if v == "" && name == "character_set_results" {
		return "NULL"
	}
	if isNumber(v) {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\'', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func isNumber(v string) bool {
	if v == "" {
		return false
	}
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		return true
	}
	if _, err := strconv.ParseUint(v, 10, 64); err == nil {
		return true
	}
	// Decimal like 10.000000 (max_statement_time): digits, one dot.
	dot := false
	for i, c := range []byte(v) {
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(v)-1:
			dot = true
		case c == '-' && i == 0 && len(v) > 1:
		default:
			return false
		}
	}
	return true
}

// stripState rewrites an OK payload for a client without
// CLIENT_SESSION_TRACK: the session-state block and the
// SERVER_SESSION_STATE_CHANGED flag are removed; the info message is kept
// (length-encoded, as servers write it in both formats). dst is reused.
func stripState(dst, payload []byte) []byte {
	ok, err := mysqlproto.ParseOK(payload, mysql.CLIENT_SESSION_TRACK)
	if err != nil {
		return append(dst[:0], payload...)
	}
	dst = append(dst[:0], payload[0])
	dst = mysql.AppendLengthEncodedInteger(dst, ok.AffectedRows)
	dst = mysql.AppendLengthEncodedInteger(dst, ok.LastInsertID)
	dst = binary.LittleEndian.AppendUint16(dst, ok.Status&^mysql.SERVER_SESSION_STATE_CHANGED)
	dst = binary.LittleEndian.AppendUint16(dst, ok.Warnings)
	if len(ok.Info) > 0 {
		dst = mysql.AppendLengthEncodedInteger(dst, uint64(len(ok.Info)))
		dst = append(dst, ok.Info...)
	}
	return dst
}
