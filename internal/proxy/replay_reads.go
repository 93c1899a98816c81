package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Consistent reads in a replay (failover.replay_checksum:
// no_consistent_reads). Under InnoDB's MVCC a plain SELECT inside a
// transaction reads a snapshot without locking anything: another
// transaction may change the rows it read and commit before the first one
// does, and MariaDB still commits the first (REPEATABLE READ promises the
// transaction's reads one snapshot, not that the rows stay unchanged).
// Writes and locking reads act on the latest committed rows, and lock
// them until the transaction ends; so on the new primary a replayed write
// or locking read meets exactly the rows the original met (nothing else
// could change them while the original held its locks, and everything
// committed before is there), and its result is compared as in full mode.
// A plain read's replayed result can differ only by rows committed by
// others after it first ran; its client already has the first result,
// and no statement of the transaction depends on the second one. So the
// replay goes on and commits what the original would have committed. What
// the client can notice: under REPEATABLE READ, statements it sends after
// the failover read the replay's newer snapshot.
//
// A read qualifies only when nothing of it can reach the server's state:
// consistentRead below; and not in a SERIALIZABLE transaction, where
// InnoDB makes plain SELECTs locking reads (replayChecks).

// handlerWrites returns the rows the connection be has written, updated
// and deleted (Handler_write + Handler_update + Handler_delete, session
// status; internal temporary tables count in Handler_tmp_* instead), ok
// false when the server did not say; why is set when the connection
// failed.
func (s *session) handlerWrites(br *bufio.Reader, be *backend) (n uint64, ok bool, why string) {
	v, found, code, _, err := s.queryOne(br, be, []byte("SELECT SUM(VARIABLE_VALUE) FROM information_schema.SESSION_STATUS "+
		"WHERE VARIABLE_NAME IN ('HANDLER_WRITE', 'HANDLER_UPDATE', 'HANDLER_DELETE')"))
	if err != nil {
		return 0, false, lostInReplay(be, err)
	}
	if code != 0 || !found {
		return 0, false, ""
	}
	n, perr := strconv.ParseUint(v, 10, 64)
	return n, perr == nil, ""
}

// Isolation levels as @@tx_isolation spells them.
const (
	isoSerializable   = "SERIALIZABLE"
	isoRepeatableRead = "REPEATABLE-READ"
	isoReadCommitted  = "READ-COMMITTED"
	isoReadUncommit   = "READ-UNCOMMITTED"
)

// replayChecks looks at the first n recorded statements before they are
// replayed on be (the new primary connection, its state rebuilt). It
// reports whether plain consistent reads are not compared (relax: the mode
// is on, one of them is such a read, and the transaction is not
// SERIALIZABLE), or why the transaction must not be replayed at all
// (refuse): under READ COMMITTED or READ UNCOMMITTED a write that reads
// other rows (INSERT … SELECT, a subquery, a join, a multi-table UPDATE or
// DELETE) reads them without locking, so run again it can write other
// values with the same affected rows, which no checksum sees. why is set
// when the connection failed.
func (s *session) replayChecks(br *bufio.Reader, be *backend, n int) (relax bool, refuse, why string) {
	r := s.rlog
	reads, writeAt := false, -1
	var fl flight
	for i := 0; i < n; i++ {
		t := r.entryText(&r.entries[i])
		if r.relaxReads && !reads {
			reads = consistentRead(t)
		}
		if writeAt < 0 && txKind(t, &fl) == kindWrite && writeReadsRows(t) {
			writeAt = i
		}
	}
	if !reads && writeAt < 0 {
		return false, "", ""
	}
	level, why := s.replayIsolation(br, be, n)
	if why != "" {
		return false, "", why
	}
	if writeAt >= 0 && level != isoRepeatableRead && level != isoSerializable {
		if level == "" {
			level = "an unknown isolation level"
		}
		return false, fmt.Sprintf("statement %d of the transaction (%s) writes values it reads from other rows, which under %s it reads without locking them: run again, it could write other values than it wrote the first time",
			writeAt+1, r.describe(s, &r.entries[writeAt]), strings.ReplaceAll(level, "-", " ")), ""
	}
	return reads && level != "" && level != isoSerializable, "", ""
}

// replayIsolation returns the isolation level of the transaction recorded:
// the one its SET TRANSACTION (or unscoped SET @@tx_isolation) gave it,
// else the session's, read on be; "" when unknown.
func (s *session) replayIsolation(br *bufio.Reader, be *backend, n int) (level, why string) {
	r := s.rlog
	if n > 0 && r.entries[0].st == nil {
		if t := r.entryText(&r.entries[0]); isSetTx(t) {
			u := strings.NewReplacer("-", " ", "_", " ").Replace(strings.ToUpper(string(t)))
			switch {
			case strings.Contains(u, "SERIALIZABLE"):
				return isoSerializable, ""
			case strings.Contains(u, "READ UNCOMMITTED"):
				return isoReadUncommit, ""
			case strings.Contains(u, "READ COMMITTED"):
				return isoReadCommitted, ""
			case strings.Contains(u, "REPEATABLE READ"):
				return isoRepeatableRead, ""
			}
		}
	}
	for _, q := range []string{"SELECT @@SESSION.tx_isolation", "SELECT @@SESSION.transaction_isolation"} {
		v, found, code, _, err := s.queryOne(br, be, []byte(q))
		if err != nil {
			return "", lostInReplay(be, err)
		}
		if code == 0 && found {
			return strings.ToUpper(v), ""
		}
	}
	return "", ""
}

// writeReadsRows reports whether write statement q may read rows other
// than those it changes: it has a SELECT (INSERT … SELECT, a subquery) or
// a JOIN, is an UPDATE of several tables (a comma before SET) or a DELETE
// with USING or several tables, or has an executable comment (whose
// content is not looked at). Stored functions and triggers it runs are
// not seen.
func writeReadsRows(q []byte) bool {
	first, _ := firstWord(q)
	update, del := eqFold(first, "update"), eqFold(first, "delete")
	seenSet := false
	depth := 0
	for i := 0; i < len(q); {
		c := q[i]
		if next, comment, ok := skipComment(q, i); comment {
			if !ok {
				return true // executable or not closed: not looked at
			}
			i = next
			continue
		}
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := closeQuote(q, i)
			if j < 0 || c != '`' && bytes.IndexByte(q[i:j], '\\') >= 0 {
				return true // where it ends depends on NO_BACKSLASH_ESCAPES
			}
			i = j + 1
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			i++
		case c == ',' && depth == 0 && (update && !seenSet || del):
			return true
		case nameByte(c):
			w := wordAt(q, i)
			switch {
			case eqFold(w, "select"), eqFold(w, "join"), bytes.EqualFold(w, []byte("straight_join")), del && eqFold(w, "using"):
				return true
			case eqFold(w, "set"):
				seenSet = true
			}
			i += len(w)
		default:
			i++
		}
	}
	return false
}

// consistentRead reports whether statement text q is a plain consistent
// read: a SELECT (possibly parenthesized) with no locking clause (FOR
// UPDATE, FOR SHARE, LOCK IN SHARE MODE), no INTO, no PROCEDURE, no
// variable assignment (:=), no sequence function, no executable comment, a
// single statement, and calling only the built-in functions and keywords
// of readFuncs (a stored function could write, or read into its own
// variables). Anything it cannot tell is not one.
func consistentRead(q []byte) bool {
	var word []byte // the last word, when the last token was one
	dotted := false // the last word followed a '.'
	prevDot := false
	seenSelect := false
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		}
		if next, comment, ok := skipComment(q, i); comment {
			if !ok {
				return false // executable or not closed
			}
			i = next
			continue
		}
		if !seenSelect {
			// Only '(' may come before the SELECT.
			if c == '(' {
				i++
				continue
			}
			w := wordAt(q, i)
			if !eqFold(w, "select") {
				return false
			}
			seenSelect = true
			word, dotted, prevDot = w, false, false
			i += len(w)
			continue
		}
		switch {
		case c == '\'' || c == '"':
			j := closeQuote(q, i)
			if j < 0 || bytes.IndexByte(q[i:j], '\\') >= 0 {
				// Not closed, or a backslash: an escape, or not
				// (NO_BACKSLASH_ESCAPES), so where it ends is unknown.
				return false
			}
			if k := skipSpace(q[j+1:]); j+1+k < len(q) && q[j+1+k] == '(' {
				return false // "f"(…) under ANSI_QUOTES: a call
			}
			i, word, prevDot = j+1, nil, false
		case c == '`':
			j := closeQuote(q, i) + 1
			if j == 0 {
				return false
			}
			// A quoted name: called, it is no built-in.
			if k := skipSpace(q[j:]); j+k < len(q) && q[j+k] == '(' {
				return false
			}
			i, word, prevDot = j, nil, false
		case c == ';':
			if len(bytes.TrimSpace(q[i+1:])) > 0 {
				return false // more than one statement
			}
			i = len(q)
		case c == '@':
			// A variable read (@x, @@x): harmless; an assignment is
			// refused at its := (or its INTO).
			i, word, prevDot = i+1, nil, false
		case c == ':' && i+1 < len(q) && q[i+1] == '=':
			return false
		case c == '.':
			i, word, prevDot = i+1, nil, true
		case c == '(':
			if word != nil && (dotted || !readFuncs[strings.ToLower(string(word))]) {
				return false
			}
			i, word, prevDot = i+1, nil, false
		case nameByte(c):
			w := wordAt(q, i)
			switch strings.ToLower(string(w)) {
			case "for", "lock", "into", "procedure", "next", "previous", "nextval", "lastval", "setval":
				return false
			}
			word, dotted, prevDot = w, prevDot, false
			i += len(w)
		default:
			i, word, prevDot = i+1, nil, false
		}
	}
	return seenSelect
}

// skipComment reports whether a comment (#, -- , /* */) starts at q[i]
// and, when it does, the index just past it; ok is false for one the
// scanners cannot skip: an executable comment (/*! */, /*M! */, whose
// content MariaDB runs) or one not closed.
func skipComment(q []byte, i int) (next int, comment, ok bool) {
	switch {
	case q[i] == '#' || q[i] == '-' && i+1 < len(q) && q[i+1] == '-' && (i+2 == len(q) || q[i+2] <= ' '):
		for i < len(q) && q[i] != '\n' {
			i++
		}
		return i, true, true
	case q[i] == '/' && i+1 < len(q) && q[i+1] == '*':
		if i+2 < len(q) && (q[i+2] == '!' || q[i+2] == 'M' && i+3 < len(q) && q[i+3] == '!') {
			return i, true, false
		}
		end := bytes.Index(q[i+2:], []byte("*/"))
		if end < 0 {
			return i, true, false
		}
		return i + 2 + end + 2, true, true
	}
	return i, false, false
}

// lostInReplay says that the new primary connection be failed with err
// during a replay.
func lostInReplay(be *backend, err error) string {
	return fmt.Sprintf("the new primary %s was lost during the replay: %v", be.t.node, err)
}

// wordAt returns the word (letters, digits, '_', '$', bytes past ASCII)
// starting at q[i], empty when q[i] starts none.
func wordAt(q []byte, i int) []byte {
	j := i
	for j < len(q) && nameByte(q[j]) {
		j++
	}
	return q[i:j]
}

func nameByte(c byte) bool { return isWordByte(c) || c == '$' || c >= 0x80 }

// readFuncs are the words that may precede '(' in a plain consistent
// read: keywords, type names (CAST(x AS DECIMAL(10,2))) and built-in
// functions that neither write nor set anything (an unqualified name that
// is a built-in function's calls the built-in, never a stored function of
// that name; words that are neither are left out: a stored function may
// bear them). Not here, so such a read
// is compared: LAST_INSERT_ID (with an argument it sets the value),
// GET_LOCK and the other lock functions, SLEEP, BENCHMARK, sequence
// functions, MASTER_POS_WAIT / MASTER_GTID_WAIT, LOAD_FILE, and every
// stored or loadable function.
var readFuncs = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
in exists and or not xor on using over from join straight_join where select as by when then else case
any all some union except intersect is like rlike regexp between having distinct interval row index key
partition order group with div mod null binary left right inner outer cross natural
char character varchar decimal dec numeric signed unsigned integer int double float real date datetime time timestamp
count sum min max avg group_concat bit_and bit_or bit_xor std stddev stddev_pop stddev_samp var_pop var_samp variance
json_arrayagg json_objectagg
concat concat_ws substring substr substring_index mid length octet_length char_length character_length bit_length
upper lower ucase lcase trim ltrim rtrim replace reverse repeat space lpad rpad locate instr position field
find_in_set elt format ascii ord hex unhex bin oct conv md5 sha sha1 sha2 crc32 to_base64 from_base64
coalesce ifnull nullif if isnull greatest least abs round truncate floor ceil ceiling sign sqrt pow power exp ln
log log2 log10 pi rand cast convert year month day dayofmonth dayofweek dayofyear week weekday weekofyear hour
minute second microsecond quarter date_format time_format str_to_date date_add date_sub adddate subdate addtime
subtime datediff timediff timestampdiff timestampadd extract last_day makedate maketime now curdate curtime
current_date current_time current_timestamp localtime localtimestamp sysdate utc_date utc_time utc_timestamp
unix_timestamp from_unixtime from_days to_days to_seconds sec_to_time time_to_sec
json_extract json_unquote json_value json_query json_contains json_length json_keys json_object json_array
json_type json_valid json_search
row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
inet_aton inet_ntoa inet6_aton inet6_ntoa uuid database schema user current_user version connection_id
found_rows row_count`) {
		m[w] = true
	}
	return m
}()
