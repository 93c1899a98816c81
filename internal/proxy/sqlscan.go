package proxy

import (
	"bytes"
)

// The proxy does not parse SQL. For session migration and hot-read sampling
// it only needs to know a statement's first keyword and to notice a few
// constructs that leave state on the server which session tracking does not
// report (GET_LOCK, user variables assigned outside SET). These scanners
// look at the bytes of a COM_QUERY or COM_STMT_PREPARE, skipping leading
// spaces and comments; they never allocate.

// sqlClass is the kind of statement a query starts with, as far as session
// migration cares.
type sqlClass uint8

const (
	classOther        sqlClass = iota
	classSelect                // SELECT / WITH / (SELECT: a read, sampled for warming
	classSet                   // SET ... (session or user variables, NAMES, ...)
	classSetStmt               // SET STATEMENT ... FOR <DML or read>: per-statement variables, nothing lasts
	classSetStmtState          // SET STATEMENT ... FOR <SET, USE, LOCK, ...>: the inner statement leaves state the OK does not tell apart
	classSetTx                 // SET TRANSACTION ...: characteristics of the next transaction only
	classSetOpaque             // SET ROLE / SET DEFAULT ROLE...: state tracking does not report
	classUse                   // USE db
	classLock                  // LOCK TABLE(S), FLUSH ... WITH READ LOCK, BACKUP LOCK
	classUnlock                // UNLOCK TABLE(S), BACKUP UNLOCK
	classHandler               // HANDLER ...: open table handlers live in the session
	classKill                  // KILL ...: answered by the proxy (kill.go)
)

// classify returns the class of query q.
func classify(q []byte) sqlClass {
	w, rest := firstWord(q)
	switch len(w) {
	case 3:
		switch {
		case eqFold(w, "set"):
			if c := classifySet(rest); c != classSet || !nextTxVars(rest) {
				return c
			}
			return classSetTx
		case eqFold(w, "use"):
			return classUse
		}
	case 4:
		switch {
		case eqFold(w, "with"):
			return classSelect
		case eqFold(w, "lock"):
			return classLock
		case eqFold(w, "kill"):
			return classKill
		}
	case 5:
		if eqFold(w, "flush") && containsFold(rest, "lock") {
			return classLock
		}
	case 6:
		switch {
		case eqFold(w, "select"):
			return classSelect
		case eqFold(w, "unlock"):
			return classUnlock
		case eqFold(w, "backup"):
			w2, _ := firstWord(rest)
			if eqFold(w2, "lock") {
				return classLock
			}
			if eqFold(w2, "unlock") {
				return classUnlock
			}
		}
	case 7:
		if eqFold(w, "handler") {
			return classHandler
		}
	}
	if len(w) == 0 {
		// "(SELECT ...)" and friends.
		if i := skipSpace(q); i < len(q) && q[i] == '(' {
			if w2, _ := firstWord(q[i+1:]); eqFold(w2, "select") {
				return classSelect
			}
		}
	}
	return classOther
}

// nextTxVars reports whether the assignments of a SET statement (rest: what
// follows SET) are all to @@tx_isolation or @@tx_read_only without a scope:
// like SET TRANSACTION, they set the next transaction's characteristics
// only (checked on 10.11.19: the session value stays, and the next
// transaction, or autocommit statement, uses and consumes it; MySQL
// documents the same for @@transaction_isolation).
func nextTxVars(rest []byte) bool {
	n := 0
	for len(rest) > 0 {
		item, tail, ok := splitTop(rest)
		if !ok {
			return false
		}
		rest = tail
		switch unscopedAssign(item) {
		case "tx_isolation", "transaction_isolation", "tx_read_only", "transaction_read_only":
			n++
		default:
			return false
		}
	}
	return n > 0
}

// classifySet refines a SET statement by its second word.
func classifySet(rest []byte) sqlClass {
	w, after := firstWord(rest)
	switch {
	case eqFold(w, "statement"):
		// The per-statement values go away; what the inner statement
		// does may not (MariaDB: SET STATEMENT var=value [, ...] FOR
		// statement). Its session tracking reports the per-statement
		// values and the inner statement's changes alike.
		inner, ok := setStatementInner(after)
		if !ok {
			return classSetStmtState
		}
		switch classify(inner) {
		case classOther, classSelect, classSetStmt:
			return classSetStmt
		}
		return classSetStmtState
	case eqFold(w, "transaction"):
		return classSetTx
	case eqFold(w, "role"), eqFold(w, "default"):
		return classSetOpaque
	}
	return classSet
}

// setStatementInner returns the statement after the FOR of a SET
// STATEMENT (q: what follows the word STATEMENT): the first FOR outside
// quotes, backticks and parentheses. ok is false when there is none.
func setStatementInner(q []byte) (inner []byte, ok bool) {
	depth := 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'' || c == '"' || c == '`':
			for i++; i < len(q) && q[i] != c; i++ {
				if q[i] == '\\' && c != '`' {
					i++
				}
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && (c|0x20) == 'f' && i+3 <= len(q) && eqFold(q[i:i+3], "for") &&
			(i == 0 || !isWordByte(q[i-1])) && (i+3 == len(q) || !isWordByte(q[i+3])):
			return q[i+3:], true
		}
	}
	return nil, false
}

// firstWord returns the first keyword of q (letters, digits and '_' after
// spaces and comments) and what follows it.
func firstWord(q []byte) (word, rest []byte) {
	i := skipSpace(q)
	j := i
	for j < len(q) && isWordByte(q[j]) {
		j++
	}
	return q[i:j], q[j:]
}

// skipSpace returns the index of the first byte of q that is not a space or
// inside a leading comment (/* */, -- , #).
func skipSpace(q []byte) int {
	i := 0
	for i < len(q) {
		switch c := q[i]; {
		case isSpace(c):
			i++
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			// MariaDB executable comments /*! ... */ and /*M! ... */ hold
			// SQL: treat their body as the statement.
			if i+2 < len(q) && (q[i+2] == '!' || (q[i+2] == 'M' && i+3 < len(q) && q[i+3] == '!')) {
				i += 3
				if q[i-1] == 'M' {
					i++
				}
				for i < len(q) && q[i] >= '0' && q[i] <= '9' {
					i++
				}
				continue
			}
			end := bytes.Index(q[i+2:], []byte("*/"))
			if end < 0 {
				return len(q)
			}
			i += 2 + end + 2
		case c == '#' || (c == '-' && i+2 < len(q) && q[i+1] == '-' && isSpace(q[i+2])):
			end := bytes.IndexByte(q[i:], '\n')
			if end < 0 {
				return len(q)
			}
			i += end + 1
		default:
			return i
		}
	}
	return i
}

func isWordByte(c byte) bool {
	return c == '_' || (c >= '0' && c <= '9') || ((c|0x20) >= 'a' && (c|0x20) <= 'z')
}

// eqFold compares an ASCII word with a lower-case keyword.
func eqFold(w []byte, kw string) bool {
	if len(w) != len(kw) {
		return false
	}
	for i := range w {
		if w[i]|0x20 != kw[i] {
			return false
		}
	}
	return true
}

// containsFold reports whether q contains the lower-case ASCII word kw in
// any letter case.
func containsFold(q []byte, kw string) bool {
	first := kw[0]
	for i := 0; i+len(kw) <= len(q); i++ {
		if q[i]|0x20 != first {
			continue
		}
		if eqFold(q[i:i+len(kw)], kw) {
			return true
		}
	}
	return false
}

// stickyState reports constructs in q that leave state in the server
// session which session tracking does not report: user locks taken with
// GET_LOCK, and user variables assigned outside SET (SELECT @v := ...,
// SELECT ... INTO @v). It scans for '_' and '@' only, so a statement
// without them costs two vectorized byte searches.
func stickyState(q []byte) (userLock, userVar bool) {
	for i := 0; ; {
		j := bytes.IndexByte(q[i:], '_')
		if j < 0 {
			break
		}
		i += j
		if i >= 3 && i+5 <= len(q) && eqFold(q[i-3:i], "get") && eqFold(q[i+1:i+5], "lock") {
			userLock = true
			break
		}
		i++
	}
	for i := 0; ; {
		j := bytes.IndexByte(q[i:], '@')
		if j < 0 {
			break
		}
		i += j
		if i+1 < len(q) && q[i+1] == '@' {
			i += 2 // @@system_variable: a read
			continue
		}
		if bytes.Contains(q, []byte(":=")) || containsFold(q, "into") {
			userVar = true
		}
		break
	}
	return userLock, userVar
}

// userVarAssign is one "@name = literal" of a SET statement, kept verbatim
// for replay on a new backend.
type userVarAssign struct {
	name string // without '@', as written (unquoted)
	expr string // the literal, as written
}

// parseSetUserVars returns the user-variable assignments of a SET statement
// (q starts with SET). System-variable assignments are skipped (session
// tracking reports their values). ok is false when a user variable is
// assigned something other than a literal (a number, a quoted string, NULL,
// TRUE, FALSE, a hex or bit literal), or when the statement cannot be
// split: replaying an expression could give another value, so such a
// session is not migrated.
func parseSetUserVars(q []byte) (out []userVarAssign, ok bool) {
	_, rest := firstWord(q)
	for len(rest) > 0 {
		item, tail, sok := splitTop(rest)
		if !sok {
			return nil, false
		}
		rest = tail
		i := skipSpace(item)
		item = bytes.TrimRight(item[i:], " \t\r\n;")
		if len(item) == 0 {
			continue
		}
		if item[0] != '@' || (len(item) > 1 && item[1] == '@') {
			continue // a system variable (or NAMES / CHARACTER SET): tracked by the server
		}
		eq := bytes.IndexByte(item, '=')
		if eq < 0 {
			return nil, false
		}
		lhs := bytes.TrimRight(item[1:eq], " \t\r\n:")
		rhs := bytes.TrimSpace(item[eq+1:])
		name, nok := userVarName(lhs)
		if !nok || !isLiteral(rhs) {
			return nil, false
		}
		out = append(out, userVarAssign{name: name, expr: string(rhs)})
	}
	return out, true
}

// namesCollation returns the collation of a "SET NAMES cs COLLATE coll"
// statement (q starts with SET). Session tracking reports the three
// character_set_* variables SET NAMES changes but not collation_connection
// (checked on MariaDB 10.11), so the proxy takes it from the statement.
func namesCollation(q []byte) (string, bool) {
	_, rest := firstWord(q)
	for len(rest) > 0 {
		item, tail, ok := splitTop(rest)
		if !ok {
			return "", false
		}
		rest = tail
		w, after := firstWord(item)
		if !eqFold(w, "names") {
			continue
		}
		// Skip the character set (a word or a quoted name).
		if i := skipSpace(after); i < len(after) && (after[i] == '\'' || after[i] == '"' || after[i] == '`') {
			end := closeQuote(after, i)
			if end < 0 {
				return "", false
			}
			after = after[end+1:]
		} else {
			_, after = firstWord(after)
		}
		if w2, coll := firstWord(after); eqFold(w2, "collate") {
			c := bytes.TrimSpace(coll)
			c = bytes.TrimRight(c, ";")
			c = bytes.Trim(bytes.TrimSpace(c), "'\"`")
			if len(c) > 0 {
				return string(c), true
			}
		}
	}
	return "", false
}

// splitTop splits b at its first comma outside quotes and parentheses.
func splitTop(b []byte) (item, rest []byte, ok bool) {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '\'', '"', '`':
			end := closeQuote(b, i)
			if end < 0 {
				return nil, nil, false
			}
			i = end
		case '(':
			depth++
		case ')':
			depth--
		case ';':
			if depth == 0 && len(bytes.TrimSpace(b[i+1:])) > 0 {
				return nil, nil, false // several statements
			}
		case ',':
			if depth == 0 {
				return b[:i], b[i+1:], true
			}
		}
	}
	return b, nil, depth == 0
}

// skipQuoted returns the index of the quote closing the one at q[i], or
// len(q) when the string is not closed: where a scan resumes after it.
func skipQuoted(q []byte, i int) int {
	if j := closeQuote(q, i); j >= 0 {
		return j
	}
	return len(q)
}

// closeQuote returns the index of the quote closing the one at b[i]
// (doubled quotes and backslash escapes inside), or -1.
func closeQuote(b []byte, i int) int {
	q := b[i]
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			if q != '`' {
				j++
			}
		case q:
			if j+1 < len(b) && b[j+1] == q {
				j++
				continue
			}
			return j
		}
	}
	return -1
}

func userVarName(b []byte) (string, bool) {
	if len(b) == 0 {
		return "", false
	}
	if b[0] == '`' || b[0] == '\'' || b[0] == '"' {
		end := closeQuote(b, 0)
		if end != len(b)-1 || end < 2 {
			return "", false
		}
		inner := b[1:end]
		if bytes.ContainsAny(inner, "`'\"\\") {
			return "", false
		}
		return string(inner), true
	}
	for _, c := range b {
		if !isWordByte(c) && c != '$' && c != '.' {
			return "", false
		}
	}
	return string(b), true
}

// isLiteral reports whether b is one SQL literal.
func isLiteral(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	switch {
	case eqFold(b, "null"), eqFold(b, "true"), eqFold(b, "false"):
		return true
	case b[0] == '\'' || b[0] == '"':
		return closeQuote(b, 0) == len(b)-1
	case (b[0]|0x20 == 'x' || b[0]|0x20 == 'b') && len(b) >= 3 && b[1] == '\'':
		return closeQuote(b, 1) == len(b)-1
	case b[0] == '_':
		// Introducer: _utf8mb4'text'.
		i := 1
		for i < len(b) && isWordByte(b[i]) {
			i++
		}
		return i < len(b) && b[i] == '\'' && closeQuote(b, i) == len(b)-1
	}
	i := 0
	if b[0] == '-' || b[0] == '+' {
		i++
	}
	digits, dot, exp := 0, false, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot && !exp:
			dot = true
		case (c == 'e' || c == 'E') && digits > 0 && !exp:
			exp = true
			if i+1 < len(b) && (b[i+1] == '-' || b[i+1] == '+') {
				i++
			}
		default:
			return false
		}
	}
	return digits > 0
}

// digestInto appends the digest of query q to dst: literals (numbers,
// quoted strings, hex) replaced by "?", runs of spaces folded into one,
// comments dropped, "IN (?, ?, ...)" lists folded into "IN (...)". Two
// executions of the same statement with other values have equal digests.
func digestInto(dst, q []byte) []byte {
	i := skipSpace(q)
	space := false
	for i < len(q) {
		c := q[i]
		switch {
		case isSpace(c):
			space = true
			i++
			continue
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := bytes.Index(q[i+2:], []byte("*/"))
			if end < 0 {
				return dst
			}
			i += 2 + end + 2
			space = true
			continue
		}
		if space && len(dst) > 0 {
			dst = append(dst, ' ')
		}
		space = false
		switch {
		case c == '\'' || c == '"':
			end := closeQuote(q, i)
			if end < 0 {
				return append(dst, '?')
			}
			dst = append(dst, '?')
			i = end + 1
		case c == '`':
			end := closeQuote(q, i)
			if end < 0 {
				end = len(q) - 1
			}
			dst = append(dst, q[i:end+1]...)
			i = end + 1
		case c >= '0' && c <= '9' && (len(dst) == 0 || !isWordByte(dst[len(dst)-1])):
			for i < len(q) && (isWordByte(q[i]) || q[i] == '.') {
				i++
			}
			dst = append(dst, '?')
		case isWordByte(c):
			for i < len(q) && isWordByte(q[i]) {
				dst = append(dst, q[i])
				i++
			}
		default:
			dst = append(dst, c)
			i++
		}
	}
	return foldInLists(dst)
}

// foldInLists rewrites "(?, ?, ?)" and "(?,?)" to "(...)" in place.
func foldInLists(d []byte) []byte {
	out := d[:0]
	for i := 0; i < len(d); i++ {
		if d[i] == '(' {
			j := i + 1
			n := 0
			for j < len(d) {
				if d[j] == '?' {
					n++
					j++
				} else if d[j] == ',' || d[j] == ' ' {
					j++
				} else {
					break
				}
			}
			if n > 1 && j < len(d) && d[j] == ')' {
				out = append(out, "(...)"...)
				i = j
				continue
			}
		}
		out = append(out, d[i])
	}
	return out
}

// rewriteRowCount is rewriteDiagnostics (movediag.go) for a SELECT of
// ROW_COUNT() calls only.
func rewriteRowCount(q []byte, rowCount int64) []byte { return rewriteDiagnostics(q, rowCount, -1) }

// spaces returns the number of leading space bytes of q.
func spaces(q []byte) int {
	i := 0
	for i < len(q) && isSpace(q[i]) {
		i++
	}
	return i
}

// setsGlobal reports whether the SET statement q assigns a global value:
// the keyword GLOBAL (SET GLOBAL x = ...) or @@global.x followed by "=" or
// ":=". Reading a global value (SET @v = @@global.x) is not one. Quoted
// text is not skipped: a false positive only costs a pooled connection a
// reset.
func setsGlobal(q []byte) bool {
	const kw = "global"
	for i := 0; i+len(kw) <= len(q); i++ {
		if q[i]|0x20 != 'g' || !eqFold(q[i:i+len(kw)], kw) || (i > 0 && isWordByte(q[i-1])) {
			continue
		}
		j := i + len(kw)
		if j < len(q) && isWordByte(q[j]) {
			continue
		}
		if i >= 2 && q[i-1] == '@' && q[i-2] == '@' {
			if j < len(q) && q[j] == '.' {
				k := j + 1
				for k < len(q) && (isWordByte(q[k]) || q[k] == '`') {
					k++
				}
				if assigns(q[k:]) {
					return true
				}
			}
			continue
		}
		if (i == 0 || (q[i-1] != '@' && q[i-1] != '.')) && (j >= len(q) || q[j] != '.') {
			return true
		}
	}
	return false
}
