package proxy

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// What a statement leaves for the next one to read, across moves. MariaDB
// keeps per connection the previous statement's diagnostics: LAST_INSERT_ID(),
// ROW_COUNT(), FOUND_ROWS() and the warnings (SHOW WARNINGS, SHOW ERRORS,
// @@warning_count, @@error_count, GET DIAGNOSTICS). A session that moves to
// another connection (session pooling: switchover, failover, drain;
// transaction pooling: any statement, txpool.go) must not read another
// connection's. On every listener the proxy keeps, from the OK/EOF packets
// it relays anyway (no allocation):
//   - LAST_INSERT_ID(): the last insert id reported to the session. A move
//     sets it on the new connection in the same SET that rebuilds the
//     session (@@session.last_insert_id, sessionstate.go replaySQL);
//     transaction pooling runs DO LAST_INSERT_ID(n) before a statement that
//     reads it (txpool.go);
//   - ROW_COUNT(): the affected rows of the last OK, -1 after a result set;
//   - FOUND_ROWS(): the rows of the last result set relayed (MariaDB sets
//     it from every statement that returns a result set, SELECT or SHOW,
//     and keeps it over statements that return an OK, checked on 10.11);
//     unknown after a SELECT SQL_CALC_FOUND_ROWS (the server counted rows
//     it did not send) or a cursor;
//   - whether the last statement left warnings or an error.
// The first statement after a move (diagLost) that reads them is answered
// from these values when it is a SELECT of only ROW_COUNT() and
// FOUND_ROWS() calls (rewriteDiagnostics: each call becomes its value, the
// column named as the server names it); any other statement that reads
// ROW_COUNT() or FOUND_ROWS(), reads a FOUND_ROWS() the proxy does not know,
// or reads warnings the previous statement left, gets a clear error rather
// than the new connection's answer. FOUND_ROWS() after a
// SQL_CALC_FOUND_ROWS on a transaction-pooled listener keeps its
// connection for the next statement instead (txpool.go pinned).

// noteFoundRows records FOUND_ROWS() and the diagnostics flag after a
// COM_QUERY or COM_STMT_EXECUTE (calc: it was a SELECT SQL_CALC_FOUND_ROWS).
func (s *session) noteFoundRows(calc bool) {
	if s.results > 0 {
		s.foundRows = s.rows
		if calc {
			s.foundRows = -1
		}
	}
	s.lastDiag = !s.lastOK || s.warned
}

// calcFoundRows reports whether q mentions SQL_CALC_FOUND_ROWS (any case:
// "_calc_found_rows" preceded by "sql"), scanning with IndexByte.
func calcFoundRows(q []byte) bool {
	const kw = "_calc_found_rows"
	for i := 0; ; {
		j := bytes.IndexByte(q[i:], '_')
		if j < 0 {
			return false
		}
		i += j
		if i >= 3 && i+len(kw) <= len(q) && eqFoldASCII(q[i:i+len(kw)], kw) && eqFoldASCII(q[i-3:i], "sql") {
			return true
		}
		i++
	}
}

// afterMove checks the first statement q after a move to another
// connection (text: a COM_QUERY, which may be rewritten) and returns the
// error it gets instead of another connection's diagnostics, or nil.
func (s *session) afterMove(q []byte, text bool) *mysql.MyError {
	switch {
	case readsDiagnostics(q):
		if text && !s.replayRecords() {
			if out := rewriteDiagnostics(q, s.rowCount, s.foundRows); out != nil {
				s.rewritten = out
				return nil
			}
		}
		return errUnknown(fmt.Sprintf("switchyard: ROW_COUNT() and FOUND_ROWS() read the previous statement's result, which is not on this session's backend connection (the session moved to %s, or the proxy ran a statement there to follow a change of session tracking); "+
			"the proxy answers only SELECT ROW_COUNT() / FOUND_ROWS() [[AS] alias][, ...] itself, and FOUND_ROWS() not after SQL_CALC_FOUND_ROWS: run the statement again", nodeName(s.be)))
	case s.lastDiag && readsWarnings(q):
		return errUnknown(fmt.Sprintf("switchyard: the session moved to %s before this statement; the warnings and errors of the previous statement stayed on the old connection", nodeName(s.be)))
	}
	return nil
}

// replayRecords reports whether transaction replay records the next
// statement (recordBegin): an answer the proxy writes in its place
// (rewriteDiagnostics) would not be what replaying it gives.
func (s *session) replayRecords() bool {
	return s.rlog != nil && (s.inTx() || s.status&mysql.SERVER_STATUS_AUTOCOMMIT == 0)
}

// readsWarnings reports whether q may read the previous statement's
// warnings or errors.
func readsWarnings(q []byte) bool {
	return mentions(q, "warning") || mentions(q, "errors") || mentions(q, "error_count") || mentions(q, "diagnostics")
}

// insertIDSQL is what a move adds to the SET that rebuilds the session
// (sessionstate.go replaySQL) so that LAST_INSERT_ID() answers as before
// ("" when the session has none; transaction pooling restores it its own
// way, txpool.go).
func (s *session) insertIDSQL() string {
	if s.txPool || s.insertID == 0 {
		return ""
	}
	return ", @@session.last_insert_id=" + strconv.FormatUint(s.insertID, 10)
}

// rewriteDiagnostics returns q, a SELECT of only ROW_COUNT() and
// FOUND_ROWS() calls (any letter case, spaces and leading comments
// allowed), with each call replaced by its value, COALESCE(n,
// ROW_COUNT()), named as the client would see it (its alias, else the
// call's own text quoted with backticks). COALESCE never evaluates the
// call and takes its column definition, the one both functions have:
// BIGINT, length 21, NOT NULL, binary (CAST(n AS SIGNED) is an INT of
// n's length; checked on 10.11 by TestDiagnosticsColumnsMatchDirect). It
// returns nil for any other statement, and when FOUND_ROWS() is read and
// foundRows is unknown (< 0). It allocates, on that path only. The result
// starts with the COM_QUERY command byte.
func rewriteDiagnostics(q []byte, rowCount, foundRows int64) []byte {
	w, rest := firstWord(q)
	if !eqFold(w, "select") {
		return nil
	}
	out := append(make([]byte, 0, 2*len(q)+32), mysql.COM_QUERY)
	out = append(out, "SELECT "...)
	for n := 0; ; n++ {
		i := skipSpace(rest)
		rest = rest[i:]
		fn, after := firstWord(rest)
		var v int64
		switch {
		case bytes.EqualFold(fn, []byte("row_count")):
			v = rowCount
		case bytes.EqualFold(fn, []byte("found_rows")) && foundRows >= 0:
			v = foundRows
		default:
			return nil
		}
		a := after[spaces(after):]
		if len(a) == 0 || a[0] != '(' {
			return nil
		}
		a = a[1:]
		a = a[spaces(a):]
		if len(a) == 0 || a[0] != ')' {
			return nil
		}
		a = a[1:]
		call := rest[:len(rest)-len(a)]
		if n > 0 {
			out = append(out, ", "...)
		}
		out = append(out, "COALESCE("...)
		out = strconv.AppendInt(out, v, 10)
		out = append(out, ", ROW_COUNT()) AS "...)
		rest = a
		alias, after := firstWord(rest)
		if eqFold(alias, "as") {
			alias, after = firstWord(after)
			if len(alias) == 0 {
				return nil
			}
		}
		switch {
		case len(alias) > 0 && !eqFold(alias, "from"):
			out = append(out, alias...)
			rest = after
		case len(alias) > 0:
			return nil // SELECT ROW_COUNT() FROM ...
		default:
			out = append(out, '`')
			out = append(out, call...)
			out = append(out, '`')
		}
		rest = rest[spaces(rest):]
		if len(rest) > 0 && rest[0] == ',' {
			rest = rest[1:]
			continue
		}
		break
	}
	for _, c := range rest {
		if !isSpace(c) && c != ';' {
			return nil
		}
	}
	return out
}
