package proxy

import "strings"

// System variables set as @@name. MariaDB's session tracking does not
// report a system variable assigned as @@name without a scope (checked on
// 10.11.19: SET @@wait_timeout = 2, SET @@sql_mode = '' and SET
// @@time_zone = '+01:00' answer an OK without session state, and SET
// @@sql_mode = 'ANSI', SESSION wait_timeout = 6 reports only wait_timeout;
// the SESSION, @@session. and @@local. forms are reported), although it
// sets the session value. After such a SET the proxy reads the session
// values of those variables back (one SELECT on the same connection) and
// records them as tracking would have, so that they are re-created when
// the session moves or takes another pooled connection, and count for the
// session's wait_timeout (idletimeout.go).

// unscopedSysVars returns, lower case, the system variables the SET
// statement q assigns as @@name without a scope (GLOBAL, SESSION, LOCAL),
// except the session tracking variables (trackvars.go reads those back);
// nil when there are none or q is not one SET statement it can split.
func unscopedSysVars(q []byte) []string {
	_, rest := firstWord(q)
	var out []string
	for len(rest) > 0 {
		item, tail, ok := splitTop(rest)
		if !ok {
			return nil
		}
		rest = tail
		if name := unscopedAssign(item); name != "" && !trackingVar(name) {
			out = append(out, name)
		}
	}
	return out
}

// unscopedAssign returns, lower case, the system variable that the item
// of a SET statement assigns as @@name without a scope; "" for anything
// else (@@global.x, @@session.x, @@local.x, a user variable, not an
// assignment).
func unscopedAssign(item []byte) string {
	item = item[skipSpace(item):]
	if len(item) < 3 || item[0] != '@' || item[1] != '@' {
		return ""
	}
	j := 2
	for j < len(item) && isIdent(item[j]) {
		j++
	}
	if j == 2 || (j < len(item) && item[j] == '.') || !assigns(item[j:]) {
		return ""
	}
	return strings.ToLower(string(item[2:j]))
}

// readBackUnscoped records the session values of the system variables the
// client's SET (s.setText, answered OK) assigned as @@name.
func (s *session) readBackUnscoped() {
	names := unscopedSysVars(firstStatement(s.setText))
	if len(names) == 0 || s.be == nil {
		return
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("@@session.")
		b.WriteString(n)
	}
	row, err := s.backendRow(b.String())
	// The proxy's SELECT replaced the connection's FOUND_ROWS(): the next
	// statement reads the session's own (movediag.go).
	s.diagLost = true
	if err != nil || len(row) != len(names) {
		s.log.Warn("reading back system variables set as @@name failed; the session will not be moved on a switchover", "err", err)
		s.st.markOpaque("set system variables as @@name the proxy could not read back")
		return
	}
	for i, n := range names {
		s.st.setVar(n, row[i])
	}
}
