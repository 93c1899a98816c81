package proxy

import (
	"bytes"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// CONNECTION_ID() on a transaction-pooled listener. The server answers
// CONNECTION_ID() with the thread id of the connection the statement runs
// on; with pooling: transaction that connection is shared, so the id
// changes from one transaction to the next and names another session's
// connection a moment later, while KILL through the proxy takes the
// session's own id, the one in its handshake (kill.go). So that a client
// that reads CONNECTION_ID() and later sends KILL [QUERY] with it kills
// its own statement, as it does direct, the proxy replaces each call
// CONNECTION_ID() in a COM_QUERY text or a COM_STMT_PREPARE with the
// handshake's id, as CAST(nnnnnnnnnn AS UNSIGNED): zero-padded to ten
// digits, it has the result metadata the function has (LONG, UNSIGNED,
// NOT NULL, length 10; checked with MariaDB 10.11.19). A select-list item
// that contains a call and has no alias is named AS its original text, the
// column name the server gives it. Calls inside quoted strings, quoted
// identifiers and comments, and words that only end in connection_id
// (t.my_connection_id, a column connection_id without "("), are left
// alone. A statement without the byte sequence "_id" (any case) costs a
// vectorized byte search for '_' and nothing else.

// hasConnIDCall reports, cheaply, whether q may call CONNECTION_ID(): it
// mentions connection_id in any letter case. False positives only cost
// rewriteConnID's scan, which then returns nil.
func hasConnIDCall(q []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(q[i:], '_')
		if j < 0 {
			return false
		}
		i += j
		if i >= 10 && i+3 <= len(q) && eqFold(q[i+1:i+3], "id") && eqFold(q[i-10:i], "connection") {
			return true
		}
		i++
	}
}

// selectModifiers are the words that may come between SELECT and its
// first select-list item.
var selectModifiers = []string{"all", "distinct", "distinctrow", "high_priority", "straight_join", "sql_small_result",
	"sql_big_result", "sql_buffer_result", "sql_cache", "sql_no_cache", "sql_calc_found_rows"}

// selectListEnd are the words that end a select list at depth 0.
var selectListEnd = []string{"from", "into", "where", "group", "having", "order", "limit", "union", "for", "lock",
	"window", "except", "intersect", "procedure"}

// rewriteConnID returns q (a statement text without the command byte) with
// each call CONNECTION_ID() replaced by id (see above), prefixed with
// cmd, or nil when q calls none. It allocates only when it returns a
// statement.
func rewriteConnID(cmd byte, q []byte, id uint32) []byte {
	var out []byte
	last := 0 // q[:last] is in out
	lit := []byte("CAST(")
	lit = append(lit, pad10(id)...)
	lit = append(lit, " AS UNSIGNED)"...)

	// Select-list tracking (depth 0 of a statement that starts with SELECT).
	inList := false    // between SELECT and the end of its list
	itemStart := -1    // where the current item starts in q (-1: none yet)
	itemCalls := false // the current item has a replaced call
	depth := 0
	startStmt := func(from int) {
		w, after := firstWord(q[from:])
		inList = eqFold(w, "select")
		itemStart, itemCalls = -1, false
		if !inList {
			return
		}
		pos := len(q) - len(after)
		for {
			w2, after2 := firstWord(q[pos:])
			if !isOneOf(w2, selectModifiers) {
				break
			}
			pos = len(q) - len(after2)
		}
		itemStart = pos + skipSpace(q[pos:])
	}
	// The replaced calls of the current item, applied when it ends (the
	// alias needs the original text).
	type call struct{ start, end int }
	var pending []call
	flush := func() {
		for _, c := range pending {
			if out == nil {
				out = append(make([]byte, 0, len(q)+64), cmd)
			}
			out = append(out, q[last:c.start]...)
			out = append(out, lit...)
			last = c.end
		}
		pending = pending[:0]
	}
	// closeItem applies the calls of the item that ends before q[end] and,
	// in a select list, names it AS its original text when it has a call
	// and no alias.
	closeItem := func(end int) {
		if inList && itemCalls && itemStart >= 0 && !aliased(q[itemStart:end]) {
			text := bytes.TrimRight(q[itemStart:end], " \t\r\n")
			flush()
			if out == nil {
				out = append(make([]byte, 0, len(q)+64), cmd)
			}
			out = append(out, q[last:itemStart+len(text)]...)
			out = append(out, " AS `"...)
			out = append(out, bytes.ReplaceAll(text, []byte("`"), []byte("``"))...)
			out = append(out, '`')
			last = itemStart + len(text)
		}
		flush()
		itemCalls = false
	}
	startStmt(0)
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(q, i)
			continue
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if i+2 < len(q) && q[i+2] == '!' || i+3 < len(q) && q[i+2] == 'M' && q[i+3] == '!' {
				continue // an executable comment: its body is SQL
			}
			end := bytes.Index(q[i+2:], []byte("*/"))
			if end < 0 {
				i = len(q)
				continue
			}
			i += 2 + end + 1
			continue
		case c == '#' || (c == '-' && i+2 < len(q) && q[i+1] == '-' && isSpace(q[i+2])):
			end := bytes.IndexByte(q[i:], '\n')
			if end < 0 {
				i = len(q)
				continue
			}
			i += end
			continue
		case c == '(':
			depth++
			continue
		case c == ')':
			depth--
			continue
		case c == ',' && depth == 0:
			closeItem(i)
			itemStart = i + 1 + skipSpace(q[i+1:])
			continue
		case c == ';' && depth == 0:
			closeItem(i)
			startStmt(i + 1)
			continue
		case !isWordByte(c) && c != '$':
			continue
		}
		// A word (an identifier or keyword): q[i:j].
		j := i
		for j < len(q) && (isWordByte(q[j]) || q[j] == '$') {
			j++
		}
		w := q[i:j]
		qualified := i > 0 && q[i-1] == '.'
		switch {
		case depth == 0 && inList && i > itemStart && !qualified && isOneOf(w, selectListEnd):
			closeItem(i)
			inList = false
		case !qualified && bytes.EqualFold(w, []byte("connection_id")):
			a := j + spaces(q[j:])
			if a < len(q) && q[a] == '(' {
				b := a + 1 + spaces(q[a+1:])
				if b < len(q) && q[b] == ')' {
					pending = append(pending, call{i, b + 1})
					itemCalls = itemCalls || inList
					j = b + 1
				}
			}
		}
		i = j - 1
	}
	closeItem(len(q))
	if out == nil {
		return nil
	}
	return append(out, q[last:]...)
}

// aliased reports whether the select-list item it (without the comma)
// ends with an alias: "... AS name", or a name right after a closing
// parenthesis, a quoted string or another name ("CONNECTION_ID() id").
func aliased(it []byte) bool {
	it = bytes.TrimRight(it, " \t\r\n")
	if len(it) == 0 {
		return false
	}
	end := len(it)
	var start int
	switch c := it[end-1]; {
	case c == '`' || c == '"' || c == '\'':
		k := bytes.LastIndexByte(it[:end-1], c)
		if k < 0 {
			return false
		}
		start = k
	case isWordByte(c) || c == '$':
		start = end - 1
		for start > 0 && (isWordByte(it[start-1]) || it[start-1] == '$') {
			start--
		}
		if start > 0 && it[start-1] == '.' {
			return false // t.col: a column reference
		}
	default:
		return false
	}
	before := bytes.TrimRight(it[:start], " \t\r\n")
	if len(before) == len(it[:start]) || len(before) == 0 {
		return false // no space before the name, or the name is the whole item
	}
	if k := len(before); k >= 2 && eqFold(before[k-2:], "as") && (k == 2 || !isWordByte(before[k-3])) {
		return true
	}
	switch c := before[len(before)-1]; {
	case c == ')' || c == '`' || c == '\'' || c == '"' || isWordByte(c):
		return true
	}
	return false
}

// isOneOf reports whether w is one of the lower-case keywords kws (which
// may hold '_', unlike eqFold's).
func isOneOf(w []byte, kws []string) bool {
	for _, kw := range kws {
		if len(w) == len(kw) && bytes.EqualFold(w, []byte(kw)) {
			return true
		}
	}
	return false
}

// pad10 is id in decimal, zero-padded to ten digits (the display width of
// CONNECTION_ID()'s result).
func pad10(id uint32) []byte {
	s := strconv.FormatUint(uint64(id), 10)
	b := make([]byte, 0, 10)
	for range 10 - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// connIDRewrite returns the COM_QUERY or COM_STMT_PREPARE payload p with
// the session's CONNECTION_ID() calls replaced (rewriteConnID), or nil
// when there is nothing to replace or the listener does not pool by
// transaction.
func (s *session) connIDRewrite(p []byte) []byte {
	if !s.txPool || len(p) < 2 || !hasConnIDCall(p[1:]) {
		return nil
	}
	if p[0] != mysql.COM_QUERY && p[0] != mysql.COM_STMT_PREPARE {
		return nil
	}
	return rewriteConnID(p[0], p[1:], s.id)
}
