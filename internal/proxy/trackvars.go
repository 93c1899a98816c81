package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// The client's own session tracking. The proxy sets
// session_track_system_variables='*' and session_track_state_change=ON on
// its backend connections (sessionstate.go); a client must see neither.
// Each session keeps the tracking settings its client would have on a
// direct connection (trackSettings): the server's global values at login,
// COM_RESET_CONNECTION and COM_CHANGE_USER (read once per node and kept),
// then what the client SETs. The proxy
//   - passes on, in OK packets, only the session-state entries those
//     settings produce (filterState; clients that did not negotiate
//     CLIENT_SESSION_TRACK get none, stripState) and clears
//     SERVER_SESSION_STATE_CHANGED when none is left;
//   - answers reads of the four session_track_* session variables in a
//     COM_QUERY (@@session.x, @@local.x, @@x) with the client's values
//     (rewriteTrackRefs), and SHOW [SESSION] VARIABLES over them from
//     information_schema.SESSION_VARIABLES with the client's values;
//   - lets a client's SET of them run on the server (which checks the
//     value), reads back the values it left and sets its own again
//     (relayTrackSet), after the last result of a multi-statement that
//     starts with the SET: until then the server's own tracking decides
//     for what the first SET assigned (passAssigned) and reads after a
//     SET of a variable in the same text are left to the server.
// Reads through prepared statements, stored programs or
// information_schema queries the client writes itself still see the
// proxy's settings.

// Tracking variables as MariaDB names them.
const (
	tvSysVars     = "session_track_system_variables"
	tvStateChange = "session_track_state_change"
	tvSchema      = "session_track_schema"
	tvTxInfo      = "session_track_transaction_info"
)

// trackSettings are one client's session-tracking settings, as the server
// would hold them for it. Immutable once built.
type trackSettings struct {
	sysVars     string   // session_track_system_variables as SELECT shows it
	names       []string // its entries, lower case (nil with all)
	all         bool     // sysVars is '*'
	stateChange bool     // session_track_state_change
	schema      bool     // session_track_schema
	txInfo      string   // session_track_transaction_info (OFF, STATE, CHARACTERISTICS)
}

// newTrackSettings builds settings from the four values the server shows
// (booleans as 0/1 or OFF/ON).
func newTrackSettings(sysVars, stateChange, schema, txInfo string) *trackSettings {
	ts := &trackSettings{sysVars: sysVars, stateChange: onValue(stateChange), schema: onValue(schema), txInfo: txInfo}
	for _, n := range strings.Split(sysVars, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		switch n {
		case "":
		case "*":
			ts.all = true
		default:
			ts.names = append(ts.names, n)
		}
	}
	if ts.all {
		ts.names = nil
	}
	return ts
}

func onValue(v string) bool { return v == "1" || strings.EqualFold(v, "ON") }

// proxyEquivalent reports whether the settings produce every entry the
// proxy's own do (OKs pass unchanged).
func (ts *trackSettings) proxyEquivalent() bool {
	return ts.all && ts.stateChange && ts.schema
}

func (ts *trackSettings) keepVar(name []byte) bool {
	if ts.all {
		return true
	}
	for _, n := range ts.names {
		if len(n) == len(name) && strings.EqualFold(n, string(name)) {
			return true
		}
	}
	return false
}

// literal returns the SQL literal of variable name's value (one of the
// tv* constants).
func (ts *trackSettings) literal(name string) string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	switch name {
	case tvSysVars:
		return sqlValue("", ts.sysVars)
	case tvStateChange:
		return b(ts.stateChange)
	case tvSchema:
		return b(ts.schema)
	}
	return sqlValue("", ts.txInfo)
}

// show returns the value SHOW VARIABLES shows for name.
func (ts *trackSettings) show(name string) string {
	b := func(v bool) string {
		if v {
			return "ON"
		}
		return "OFF"
	}
	switch name {
	case tvSysVars:
		return ts.sysVars
	case tvStateChange:
		return b(ts.stateChange)
	case tvSchema:
		return b(ts.schema)
	}
	return ts.txInfo
}

// filterState rewrites an OK payload (CLIENT_SESSION_TRACK layout) keeping
// only the session-state entries ts produces; when none is left the block
// and SERVER_SESSION_STATE_CHANGED go. dst is reused; it allocates only to
// grow dst.
func (ts *trackSettings) filterState(dst, payload []byte) []byte {
	ok, err := mysqlproto.ParseOK(payload, mysql.CLIENT_SESSION_TRACK)
	if err != nil || len(ok.SessionState) == 0 {
		return append(dst[:0], payload...)
	}
	// Kept entries are copied after the fixed part first, then moved
	// behind their length once it is known.
	dst = append(dst[:0], payload[0])
	dst = mysql.AppendLengthEncodedInteger(dst, ok.AffectedRows)
	dst = mysql.AppendLengthEncodedInteger(dst, ok.LastInsertID)
	statusAt := len(dst)
	dst = binary.LittleEndian.AppendUint16(dst, ok.Status)
	dst = binary.LittleEndian.AppendUint16(dst, ok.Warnings)
	dst = mysql.AppendLengthEncodedInteger(dst, uint64(len(ok.Info)))
	dst = append(dst, ok.Info...)
	fixed := len(dst)
	b := ok.SessionState
	for len(b) > 0 {
		typ := b[0]
		n, k, good := mysqlproto.ReadLenEnc(b[1:])
		if !good || uint64(len(b)-1-k) < n {
			return append(dst[:0], payload...)
		}
		entry := b[:1+k+int(n)]
		data := b[1+k : 1+k+int(n)]
		b = b[len(entry):]
		keep := true
		switch typ {
		case mysqlproto.SessionTrackSystemVariables:
			nl, nk, good := mysqlproto.ReadLenEnc(data)
			keep = good && uint64(len(data)-nk) >= nl && ts.keepVar(data[nk:nk+int(nl)])
		case mysqlproto.SessionTrackSchema:
			keep = ts.schema
		case mysqlproto.SessionTrackStateChange:
			keep = ts.stateChange
		}
		if keep {
			dst = append(dst, entry...)
		}
	}
	kept := len(dst) - fixed
	if kept == 0 {
		binary.LittleEndian.PutUint16(dst[statusAt:], ok.Status&^mysql.SERVER_SESSION_STATE_CHANGED)
		return dst
	}
	// Insert the block's length before the kept entries.
	var lb [9]byte
	l := mysql.AppendLengthEncodedInteger(lb[:0], uint64(kept))
	dst = append(dst, l...)
	copy(dst[fixed+len(l):], dst[fixed:fixed+kept])
	copy(dst[fixed:], l)
	return dst
}

// trackingQuery reads a node's global tracking settings (a client's
// defaults) or the session's.
const (
	trackGlobalsSQL  = "SELECT @@global.session_track_system_variables, @@global.session_track_state_change, @@global.session_track_schema, @@global.session_track_transaction_info"
	trackSessionSQL  = "SELECT @@session.session_track_system_variables, @@session.session_track_state_change, @@session.session_track_schema, @@session.session_track_transaction_info"
	retrackSQL       = trackingSQL + ", @@session.session_track_schema=ON"
	trackDefaultsKey = "/"
)

// initTracking gives the session the client's default tracking settings
// (the node's global values) after a login, COM_CHANGE_USER or
// COM_RESET_CONNECTION on its backend. Without session tracking on the
// backend there is nothing to hide.
func (s *session) initTracking() {
	s.trk = nil
	if s.be != nil && s.be.tracked {
		key := s.l.cluster + trackDefaultsKey + s.be.t.node
		if v, ok := s.srv.trackDefaults.Load(key); ok {
			s.trk = v.(*trackSettings)
		} else if row, err := s.backendRow(trackGlobalsSQL); err == nil && len(row) == 4 {
			s.trk = newTrackSettings(row[0], row[1], row[2], row[3])
			s.srv.trackDefaults.Store(key, s.trk)
		} else {
			s.log.Warn("reading the server's session tracking defaults failed; clients see the proxy's", "node", s.be.t.node, "err", err)
		}
	}
	s.updateTrackFilter()
}

// updateTrackFilter decides whether OKs relayed to the client are
// filtered (filterState).
func (s *session) updateTrackFilter() {
	s.trkFilter = s.tracked && !s.strip && s.caps&mysql.CLIENT_SESSION_TRACK != 0 && s.trk != nil && !s.trk.proxyEquivalent()
}

// relayTrackSet relays the response to a client's SET that may change its
// tracking settings (between acquire and release). A SET answers one OK
// (or ERR, relayed as it is): before the OK is passed on, the values the
// statement assigned (trackAssigned) are read back from the server as the
// client's, the proxy's own settings are set again, and the OK is given
// the session-state entries the client's new settings produce, as the
// server gives them on a direct connection.
func (s *session) relayTrackSet() error {
	if s.peekFirst() != mysql.OK_HEADER {
		return s.relay(mysql.COM_QUERY, respResults)
	}
	p, seq, err := mysqlproto.ReadPacket(s.br, nil, handshakeMax)
	if err != nil {
		return fail(closeBackendLost, err)
	}
	payload := append([]byte(nil), p...)
	st, ok := mysqlproto.OKStatus(payload)
	if !ok {
		return backendProtocol("malformed OK packet")
	}
	if st&mysql.SERVER_SESSION_STATE_CHANGED != 0 && s.tracked {
		s.inTrackSet = true
		s.trackOK(payload, s.cls, s.setText)
		s.inTrackSet = false
	}
	prev := s.trk
	switch {
	case !s.tracked:
	case st&mysql.SERVER_MORE_RESULTS_EXISTS == 0:
		s.retrack()
	case s.trk != nil:
		// A multi-statement: until the values are read back at the
		// end, the server's own tracking decides for what the SET
		// assigned (this OK included).
		s.trk = s.trk.passAssigned(trackAssigned(firstStatement(s.setText)))
		s.updateTrackFilter()
	}
	out := payload
	switch {
	case st&mysql.SERVER_SESSION_STATE_CHANGED == 0:
	case s.strip:
		out = stripState(nil, payload)
	case s.trk != nil && s.caps&mysql.CLIENT_SESSION_TRACK != 0:
		// The statement that turns the state-change tracker off is
		// still reported by it (checked on MariaDB 10.11).
		ts := s.trk
		if prev != nil && prev.stateChange && !ts.stateChange {
			c := *ts
			c.stateChange = true
			ts = &c
		}
		if !ts.proxyEquivalent() {
			out = ts.filterState(nil, payload)
		}
	}
	var hdr [mysqlproto.HeaderSize]byte
	mysqlproto.PutHeader(hdr[:], len(out), seq)
	if _, err := s.cw.Write(hdr[:]); err != nil {
		return fail(closeClientGone, err)
	}
	if _, err := s.cw.Write(out); err != nil {
		return fail(closeClientGone, err)
	}
	s.seq = seq
	s.out += mysqlproto.HeaderSize + len(out)
	s.onOK(out, st)
	if st&mysql.SERVER_MORE_RESULTS_EXISTS != 0 {
		// A multi-statement: the rest as usual, then the settings are
		// read back (its first OK was filtered by the old ones).
		if err := s.relayResults(true); err != nil {
			return err
		}
		if s.tracked {
			s.retrack()
		}
	}
	return nil
}

// retrack reads back the tracking variables the client's SET (s.setText)
// assigned, records them as the client's, and sets the proxy's own again.
func (s *session) retrack() {
	assigned := trackAssigned(s.setText)
	if len(assigned) == 0 {
		return
	}
	row, err := s.backendRow(trackSessionSQL)
	if err == nil && len(row) == 4 && s.trk != nil {
		v := []string{s.trk.sysVars, boolText(s.trk.stateChange), boolText(s.trk.schema), s.trk.txInfo}
		for i, name := range []string{tvSysVars, tvStateChange, tvSchema, tvTxInfo} {
			if assigned[name] {
				v[i] = row[i]
			}
		}
		s.trk = newTrackSettings(v[0], v[1], v[2], v[3])
		s.updateTrackFilter()
	}
	if err == nil {
		_, err = s.backendRow(retrackSQL)
		// The proxy's SELECT replaced the connection's FOUND_ROWS():
		// the next statement reads the session's own (movediag.go).
		s.retracked = true
	}
	if err != nil {
		s.log.Warn("restoring session tracking after the client changed it failed; the session will not be moved on a switchover", "err", err)
		s.st.markOpaque("changed session tracking and the proxy could not set its own again")
	}
}

// passAssigned returns a copy of ts that lets pass every entry of the
// trackers the variables in assigned rule: in the rest of a multi-statement
// opened by the client's SET of them, the server itself tracks those with
// the client's values, the others still with the proxy's.
func (ts *trackSettings) passAssigned(assigned map[string]bool) *trackSettings {
	c := *ts
	if assigned[tvSysVars] {
		c.all, c.names = true, nil
	}
	c.stateChange = c.stateChange || assigned[tvStateChange]
	c.schema = c.schema || assigned[tvSchema]
	return &c
}

func boolText(v bool) string {
	if v {
		return "ON"
	}
	return "OFF"
}

// trackAssigned returns the tracking variables a SET statement assigns as
// session values: each name followed by "=" or ":=", unless written
// @@global.name or after GLOBAL.
func trackAssigned(q []byte) map[string]bool {
	var out map[string]bool
	for i := 0; i < len(q); i++ {
		if !isIdent(q[i]) || (i > 0 && isIdent(q[i-1])) {
			continue
		}
		j := i
		for j < len(q) && isIdent(q[j]) {
			j++
		}
		word := q[i:j]
		for _, v := range []string{tvSysVars, tvStateChange, tvSchema, tvTxInfo} {
			if len(word) != len(v) || !eqFoldASCII(word, v) || !assigns(q[j:]) {
				continue
			}
			before := bytes.TrimRight(q[:i], " \t\r\n")
			if bytes.HasSuffix(bytes.ToLower(before), []byte("@@global.")) || bytes.HasSuffix(bytes.ToLower(before), []byte("global")) {
				continue
			}
			if out == nil {
				out = map[string]bool{}
			}
			out[v] = true
		}
		i = j - 1
	}
	return out
}

// firstStatement returns q up to its first ';' outside quotes (all of q
// when there is none).
func firstStatement(q []byte) []byte {
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case ';':
			return q[:i]
		case '\'', '"', '`':
			i = skipQuoted(q, i)
		}
	}
	return q
}

// backendRow runs q on the session's backend (between commands) and
// returns the first row of its text result (nil for an OK).
func (s *session) backendRow(q string) ([]string, error) {
	if err := writePacket(s.be.conn, 0, append([]byte{mysql.COM_QUERY}, q...)); err != nil {
		return nil, err
	}
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(s.be.reader())
	defer func() { br.Reset(nil); s.srv.readers.Put(br) }()
	next := func() ([]byte, error) {
		p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
		return p, err
	}
	p, err := next()
	if err != nil {
		return nil, err
	}
	switch p[0] {
	case mysql.OK_HEADER:
		return nil, nil
	case mysql.ERR_HEADER:
		return nil, mysqlproto.ParseERR(p)
	}
	n, meta, _ := mysqlproto.ColumnCount(p, s.cacheMeta())
	if !meta {
		n = 0
	}
	for range n {
		if _, err := next(); err != nil {
			return nil, err
		}
	}
	if !s.deprecateEOF() {
		if _, err := next(); err != nil {
			return nil, err
		}
	}
	var row []string
	for {
		p, err := next()
		if err != nil {
			return nil, err
		}
		if p[0] == mysql.ERR_HEADER {
			return nil, mysqlproto.ParseERR(p)
		}
		if p[0] == mysql.EOF_HEADER && len(p) < 0xffffff {
			return row, nil
		}
		if row != nil {
			continue
		}
		row = []string{}
		for pos := 0; pos < len(p); {
			if p[pos] == 0xfb {
				row = append(row, "")
				pos++
				continue
			}
			l, k, ok := mysqlproto.ReadLenEnc(p[pos:])
			if !ok || pos+k+int(l) > len(p) {
				return nil, fmt.Errorf("malformed row")
			}
			row = append(row, string(p[pos+k:pos+k+int(l)]))
			pos += k + int(l)
		}
	}
}

// hasTrackRef reports whether q mentions session_track (any case: "_track"
// preceded by "session"); a quick scan (IndexByte) for every COM_QUERY.
func hasTrackRef(q []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(q[i:], '_')
		if j < 0 {
			return false
		}
		i += j
		if i >= 7 && i+6 <= len(q) && eqFoldASCII(q[i:i+6], "_track") && eqFoldASCII(q[i-7:i], "session") {
			return true
		}
		i++
	}
}

func eqFoldASCII(b []byte, lower string) bool {
	for i := range len(lower) {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// rewriteTrackRefs returns q (a COM_QUERY text) with each read of a session
// tracking variable as a session value (@@x, @@session.x, @@local.x)
// replaced by the client's value, named as the server would name the
// column when it ends a select-list item; or, for SHOW [SESSION|LOCAL]
// VARIABLES [LIKE 'p' | WHERE ...] matching tracking variables, a query of
// information_schema.SESSION_VARIABLES with the client's values. It
// returns nil when there is nothing to replace. The result starts with
// the COM_QUERY command byte.
func (ts *trackSettings) rewriteTrackRefs(q []byte) []byte {
	if out := ts.rewriteShow(q); out != nil {
		return out
	}
	first, _ := firstWord(q[skipSpace(q):])
	sel := eqFold(first, "select")
	// In a multi-statement, a statement after a SET of tracking
	// variables reads the values that SET gave the server's session,
	// which are the client's (relayTrackSet sets the proxy's own again
	// only after the last result): assigned gathers them, statement by
	// statement.
	var assigned map[string]bool
	var out []byte
	last, depth, stmt := 0, 0, 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch c {
		case ';':
			if depth == 0 {
				if w, _ := firstWord(q[stmt+skipSpace(q[stmt:]) : i]); eqFold(w, "set") {
					for v := range trackAssigned(q[stmt:i]) {
						if assigned == nil {
							assigned = map[string]bool{}
						}
						assigned[v] = true
					}
				}
				stmt = i + 1
				w, _ := firstWord(q[stmt+skipSpace(q[stmt:]):])
				sel = eqFold(w, "select")
			}
			continue
		case '(':
			depth++
			continue
		case ')':
			depth--
			continue
		case '\'', '"', '`':
			i = skipQuoted(q, i)
			continue
		case '@':
		default:
			continue
		}
		if i+1 >= len(q) || q[i+1] != '@' {
			continue
		}
		start := i
		j := i + 2
		for j < len(q) && (isIdent(q[j]) || q[j] == '.') {
			j++
		}
		ref := q[i+2 : j]
		name := ref
		if k := bytes.IndexByte(ref, '.'); k >= 0 {
			scope := ref[:k]
			if !eqFold(scope, "session") && !eqFold(scope, "local") {
				i = j - 1
				continue
			}
			name = ref[k+1:]
		}
		var tv string
		for _, v := range []string{tvSysVars, tvStateChange, tvSchema, tvTxInfo} {
			if len(name) == len(v) && eqFoldASCII(name, v) {
				tv = v
			}
		}
		if tv == "" || (!sel && assigns(q[j:])) || assigned[tv] {
			// Not a tracking variable, the target of a SET, or one
			// the server holds the client's value of.
			i = j - 1
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(q)+64), mysql.COM_QUERY)
		}
		out = append(out, q[last:start]...)
		out = append(out, ts.literal(tv)...)
		if sel && depth == 0 && itemEnds(q[j:]) {
			out = append(out, " AS `"...)
			out = append(out, bytes.ReplaceAll(q[start:j], []byte("`"), []byte("``"))...)
			out = append(out, '`')
		}
		last = j
		i = j - 1
	}
	if out == nil {
		return nil
	}
	return append(out, q[last:]...)
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// itemEnds reports whether rest (after a select-list expression) ends the
// item: a comma, the end of the statement, or FROM/INTO/LIMIT...
func itemEnds(rest []byte) bool {
	rest = rest[skipSpace(rest):]
	if len(rest) == 0 || rest[0] == ',' || rest[0] == ';' {
		return true
	}
	w, _ := firstWord(rest)
	for _, kw := range []string{"from", "into", "limit", "where", "union", "order", "group", "having", "for"} {
		if eqFold(w, kw) {
			return true
		}
	}
	return false
}

// rewriteShow handles SHOW [SESSION|LOCAL] VARIABLES LIKE '...' / WHERE
// ... when the statement mentions the tracking variables (the caller
// checked hasTrackRef).
func (ts *trackSettings) rewriteShow(q []byte) []byte {
	w, rest := firstWord(q[skipSpace(q):])
	if !eqFold(w, "show") {
		return nil
	}
	rest = rest[skipSpace(rest):]
	w, rest = firstWord(rest)
	if eqFold(w, "session") || eqFold(w, "local") {
		rest = rest[skipSpace(rest):]
		w, rest = firstWord(rest)
	}
	if !eqFold(w, "variables") {
		return nil
	}
	rest = bytes.TrimRight(rest, " \t\r\n;")
	rest = rest[skipSpace(rest):]
	w, tail := firstWord(rest)
	tail = tail[skipSpace(tail):]
	var cond string
	switch {
	case eqFold(w, "like"):
		cond = "WHERE Variable_name LIKE " + string(tail)
	case eqFold(w, "where"):
		cond = "WHERE " + string(tail)
	default:
		return nil
	}
	var b strings.Builder
	b.WriteByte(mysql.COM_QUERY)
	b.WriteString("SELECT Variable_name, Value FROM (SELECT LOWER(VARIABLE_NAME) AS Variable_name, CASE LOWER(VARIABLE_NAME)")
	for _, v := range []string{tvSysVars, tvStateChange, tvSchema, tvTxInfo} {
		b.WriteString(" WHEN '" + v + "' THEN " + sqlValue("", ts.show(v)))
	}
	b.WriteString(" ELSE VARIABLE_VALUE END AS Value FROM information_schema.SESSION_VARIABLES) AS v ")
	b.WriteString(cond)
	b.WriteString(" ORDER BY Variable_name")
	return []byte(b.String())
}

// restoreSQL is what a move adds to the replayed SET (sessionstate.go
// replaySQL): the client's session_track_transaction_info, which the proxy
// leaves to the client ("" when unknown).
func (ts *trackSettings) restoreSQL() string {
	if ts == nil {
		return ""
	}
	return ", @@session.session_track_transaction_info=" + ts.literal(tvTxInfo)
}

// assigns reports whether rest (after a variable) starts an assignment:
// "=" or ":=" (not "==", which MariaDB does not have, nor "=>").
func assigns(rest []byte) bool {
	rest = rest[skipSpace(rest):]
	return (len(rest) > 0 && rest[0] == '=') || (len(rest) > 1 && rest[0] == ':' && rest[1] == '=')
}
