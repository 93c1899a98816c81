package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sort"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Prepared statements. The proxy keeps the text of every statement a
// session prepared (COM_STMT_PREPARE) so that a migrated session can
// prepare them again on the new backend. The client keeps using the
// statement ids it was given; when the new backend numbers them otherwise
// (ids of closed statements leave gaps, the new server counts from 1), the
// session translates the id in every COM_STMT_EXECUTE, _FETCH, _CLOSE,
// _RESET and _SEND_LONG_DATA (4 bytes rewritten in place in the client read
// buffer, only while a translation is in effect) and hands out its own ids
// for statements prepared afterwards.

// maxStmtText bounds the text of one prepared statement the proxy reads
// (and keeps for a move): a COM_STMT_PREPARE larger than this closes the
// session.
const maxStmtText = 64 << 20

// stmtInfo is one prepared statement of a session, by client-visible id.
type stmtInfo struct {
	backendID uint32
	text      []byte
	params    uint16
	columns   uint16
	class     sqlClass
	userLock  bool // the text calls GET_LOCK
	userVar   bool // the text assigns a user variable
	longData  bool // COM_STMT_SEND_LONG_DATA sent since the last execute/reset
	cursor    bool // a cursor is open (SERVER_STATUS_CURSOR_EXISTS)
	types     []byte
	digest    string // of text, for hot-read sampling (computed on first sample)
	// calc: the text is a SELECT SQL_CALC_FOUND_ROWS (calcFoundRows);
	// calcAny: it mentions sql_calc_found_rows at all (transaction
	// pooling). Both worked out once, at prepare.
	calc, calcAny bool
	// meta sums the result column definitions the client holds for the
	// statement, under MARIADB_CLIENT_CACHE_METADATA only: from its
	// prepare, or the last execute that sent them again.
	meta metaSum
	// resend: prepared again on another connection, whose server took
	// other result column definitions than the client holds as sent
	// (cache metadata): the next execute that leaves them out gets these
	// put in (relayResults).
	resend *metaResend
	// rebind: prepared again on a new backend, which has no parameter
	// types yet; the next COM_STMT_EXECUTE must carry them (clients send
	// them only with the first execute after binding).
	rebind bool
}

// readPrepare reads the pending COM_STMT_PREPARE packet from the client and
// keeps its text in s.prepText; the caller forwards s.prepPacket.
func (s *session) readPrepare() error {
	payload, _, err := mysqlproto.ReadPacket(s.cr, s.prepPacket[:0], maxStmtText)
	if err != nil {
		return fail(clientReason(err), err)
	}
	s.in += mysqlproto.HeaderSize + len(payload)
	if out := s.connIDRewrite(payload); out != nil { // connid.go
		payload = append(payload[:0], out...)
	}
	s.prepPacket = payload
	if _, err := mysqlproto.WritePacket(s.be.conn, 0, payload); err != nil {
		return fail(closeBackendLost, err)
	}
	return nil
}

// translateID rewrites the statement id of the pending COM_STMT_* payload
// p (its start, buffered in cr, or the padded copy the proxy forwards in
// its place) from the client's id to the backend's. Called only while
// s.xlate is set.
func (s *session) translateID(p []byte) {
	if len(p) < 5 {
		return
	}
	id := binary.LittleEndian.Uint32(p[1:])
	if st, ok := s.stmts[id]; ok && st.backendID != id {
		binary.LittleEndian.PutUint32(p[1:], st.backendID)
	}
}

// stmtOf returns the statement the pending COM_STMT_* packet names (by its
// client-visible id; call before translateID), or nil. An id cut short is
// read as the server reads it on a fresh connection: the missing bytes
// are zeros (stmtShort).
func (s *session) stmtOf(p []byte) (uint32, *stmtInfo) {
	if len(p) < 2 {
		return 0, nil
	}
	var b [4]byte
	copy(b[:], p[1:])
	id := binary.LittleEndian.Uint32(b[:])
	return id, s.stmts[id]
}

// shortAction is what the proxy does with a COM_STMT_* packet too short
// for its fixed fields (stmtShort).
type shortAction int

const (
	shortNone      shortAction = iota // long enough: handled as usual
	shortMalformed                    // answered ER_MALFORMED_PACKET, not forwarded
	shortIgnored                      // consumed without an answer, not forwarded
	shortPadded                       // forwarded padded with zeros to the length returned
)

// stmtShort says what becomes of a COM_STMT_* command cmd whose payload
// (command byte included) is n bytes long, as MariaDB treats one
// (sql_prepare.cc; each checked on 10.11 by TestShortCommandsAnswerAsDirect):
//
//   - COM_STMT_EXECUTE shorter than its 10-byte header (command, id,
//     flags, iteration count) and COM_STMT_BULK_EXECUTE shorter than 7
//     (command, id, flags): the server answers ER_MALFORMED_PACKET (1835)
//     and goes on; the proxy answers the same without forwarding it.
//   - COM_STMT_SEND_LONG_DATA shorter than 7 (command, id, parameter):
//     the server ignores it and sends nothing; the proxy drops it.
//   - COM_STMT_CLOSE and COM_STMT_RESET shorter than 5 (command, id) and
//     COM_STMT_FETCH shorter than 9 (command, id, rows): the server reads
//     the missing bytes past the packet's end — zeros on a fresh
//     connection, what an earlier packet left there otherwise. The proxy
//     forwards the packet padded with zeros: the server acts on the id a
//     fresh direct connection would, translated like any other id, never
//     on bytes the proxy's own statements left on a pooled connection.
//
// Forwarded as they are, such packets had the proxy read past their end
// (the next command taken for the rest of this one) or its statement
// bookkeeping miss them.
func stmtShort(cmd byte, n int) (shortAction, int) {
	switch cmd {
	case mysql.COM_STMT_EXECUTE:
		if n < execHeader {
			return shortMalformed, 0
		}
	case mysqlproto.ComStmtBulkExecute:
		if n < bulkOff {
			return shortMalformed, 0
		}
	case mysql.COM_STMT_SEND_LONG_DATA:
		if n < 7 {
			return shortIgnored, 0
		}
	case mysql.COM_STMT_CLOSE, mysql.COM_STMT_RESET:
		if n < 5 {
			return shortPadded, 5
		}
	case mysql.COM_STMT_FETCH:
		if n < 9 {
			return shortPadded, 9
		}
	}
	return shortNone, 0
}

// errMalformedPacket is the server's ER_MALFORMED_PACKET.
func errMalformedPacket() *mysql.MyError {
	return mysqlproto.NewError(mysql.ER_MALFORMED_PACKET, "Malformed communication packet")
}

// clientID picks the id the client sees for a statement the backend
// numbered backendID.
func (s *session) clientID(backendID uint32) uint32 {
	if !s.xlate {
		return backendID
	}
	for {
		s.nextStmtID++
		if s.nextStmtID == 0 || s.nextStmtID == math.MaxUint32 {
			s.nextStmtID = 1
		}
		if _, used := s.stmts[s.nextStmtID]; !used {
			return s.nextStmtID
		}
	}
}

// addStmt records a statement prepared by the backend.
func (s *session) addStmt(clientID, backendID uint32, ok mysqlproto.StmtPrepareOK, text []byte) *stmtInfo {
	if s.stmts == nil {
		s.stmts = make(map[uint32]*stmtInfo)
	}
	st := &stmtInfo{backendID: backendID, text: append([]byte(nil), text...), params: ok.Params, columns: ok.Columns,
		class: classify(text)}
	st.userLock, st.userVar = stickyState(text)
	st.calc = st.class == classSelect && calcFoundRows(text)
	st.calcAny = mentions(text, "sql_calc_found_rows")
	s.stmts[clientID] = st
	return st
}

// dropStmts forgets every prepared statement (COM_RESET_CONNECTION,
// COM_CHANGE_USER).
func (s *session) dropStmts() {
	s.stmts = nil
	s.xlate = false
	s.nextStmtID = 0
}

// stmtIDsSorted returns the client ids of the session's statements in
// increasing order.
func (s *session) stmtIDsSorted() []uint32 {
	ids := make([]uint32, 0, len(s.stmts))
	for id := range s.stmts {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// executeTypes records the parameter types of a COM_STMT_EXECUTE payload
// when it binds new ones (new-params-bound flag), for rendering examples.
// Layout: cmd, stmt id (4), flags (1), iteration count (4), NULL bitmap
// ((n+7)/8), new-params-bound (1), types (2n), values.
func (st *stmtInfo) executeTypes(p []byte) {
	n := int(st.params)
	if n == 0 {
		return
	}
	off := 10 + (n+7)/8
	if len(p) < off+1+2*n || p[off] != 1 {
		return
	}
	st.types = append(st.types[:0], p[off+1:off+1+2*n]...)
}

// forwardRebound forwards the pending COM_STMT_EXECUTE of st, a statement
// prepared again on a new backend: when the client left out the parameter
// types (new-params-bound flag 0, as clients do after their first execute),
// the types it sent last are put back in, since the new server has none
// (it would answer error 1210).
func (s *session) forwardRebound(st *stmtInfo) error {
	payload, _, err := mysqlproto.ReadPacket(s.cr, nil, 0)
	if err != nil {
		return fail(clientReason(err), err)
	}
	s.in += mysqlproto.HeaderSize + len(payload)
	st.rebind = false
	n := int(st.params)
	off := 10 + (n+7)/8
	if n > 0 && len(payload) > off && payload[off] == 0 && len(st.types) == 2*n {
		out := make([]byte, 0, len(payload)+2*n)
		out = append(out, payload[:off]...)
		out = append(out, 1)
		out = append(out, st.types...)
		out = append(out, payload[off+1:]...)
		payload = out
	}
	if _, err := mysqlproto.WritePacket(s.be.conn, 0, payload); err != nil {
		return fail(closeBackendLost, err)
	}
	return nil
}

var errUnrenderable = errors.New("parameter cannot be rendered")

// renderExample returns the statement text with the parameters of a
// COM_STMT_EXECUTE payload p substituted as SQL literals, for the hot read
// set. It fails for types it does not render (dates, unknown) or a packet
// without the types.
func (st *stmtInfo) renderExample(p []byte) (string, error) {
	n := int(st.params)
	if n == 0 {
		return string(st.text), nil
	}
	if len(st.types) != 2*n {
		return "", errUnrenderable
	}
	nullOff := 10
	off := nullOff + (n+7)/8
	if len(p) < off+1 {
		return "", errUnrenderable
	}
	if p[off] == 1 {
		off += 1 + 2*n
	} else {
		off++
	}
	vals := make([]string, n)
	for i := 0; i < n; i++ {
		if p[nullOff+i/8]&(1<<(i%8)) != 0 {
			vals[i] = "NULL"
			continue
		}
		v, k, err := renderParam(st.types[2*i], st.types[2*i+1]&0x80 != 0, p[off:])
		if err != nil {
			return "", err
		}
		vals[i] = v
		off += k
	}
	return substitute(st.text, vals)
}

// renderParam renders one binary-protocol value of type typ and returns it
// with the bytes it used.
// https://mariadb.com/kb/en/com_stmt_execute/#binary-parameter-encoding
func renderParam(typ byte, unsigned bool, b []byte) (string, int, error) {
	need := func(k int) error {
		if len(b) < k {
			return errUnrenderable
		}
		return nil
	}
	switch typ {
	case mysql.MYSQL_TYPE_TINY:
		if err := need(1); err != nil {
			return "", 0, err
		}
		if unsigned {
			return strconv.FormatUint(uint64(b[0]), 10), 1, nil
		}
		return strconv.FormatInt(int64(int8(b[0])), 10), 1, nil
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		if err := need(2); err != nil {
			return "", 0, err
		}
		v := binary.LittleEndian.Uint16(b)
		if unsigned {
			return strconv.FormatUint(uint64(v), 10), 2, nil
		}
		return strconv.FormatInt(int64(int16(v)), 10), 2, nil
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24:
		if err := need(4); err != nil {
			return "", 0, err
		}
		v := binary.LittleEndian.Uint32(b)
		if unsigned {
			return strconv.FormatUint(uint64(v), 10), 4, nil
		}
		return strconv.FormatInt(int64(int32(v)), 10), 4, nil
	case mysql.MYSQL_TYPE_LONGLONG:
		if err := need(8); err != nil {
			return "", 0, err
		}
		v := binary.LittleEndian.Uint64(b)
		if unsigned {
			return strconv.FormatUint(v, 10), 8, nil
		}
		return strconv.FormatInt(int64(v), 10), 8, nil
	case mysql.MYSQL_TYPE_FLOAT:
		if err := need(4); err != nil {
			return "", 0, err
		}
		return strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 'g', -1, 32), 4, nil
	case mysql.MYSQL_TYPE_DOUBLE:
		if err := need(8); err != nil {
			return "", 0, err
		}
		return strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)), 'g', -1, 64), 8, nil
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING,
		mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET,
		mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB:
		l, k, ok := mysqlproto.ReadLenEnc(b)
		if !ok || uint64(len(b)-k) < l || l > 4096 {
			return "", 0, errUnrenderable
		}
		return quoteSQL(b[k : k+int(l)]), k + int(l), nil
	case mysql.MYSQL_TYPE_NULL:
		return "NULL", 0, nil
	}
	return "", 0, errUnrenderable
}

// quoteSQL renders b as a quoted string literal (hex when not printable).
func quoteSQL(b []byte) string {
	out := make([]byte, 0, len(b)+2)
	out = append(out, '\'')
	for _, c := range b {
		switch {
		case c == '\'' || c == '\\':
			out = append(out, '\\', c)
		case c == 0:
			out = append(out, '\\', '0')
		case c < 0x20 && c != '\t' && c != '\n' && c != '\r':
			return "X'" + fmt.Sprintf("%X", b) + "'"
		default:
			out = append(out, c)
		}
	}
	return string(append(out, '\''))
}

// substitute replaces the '?' placeholders of text (outside quotes and
// comments) by vals in order.
func substitute(text []byte, vals []string) (string, error) {
	out := make([]byte, 0, len(text)+16*len(vals))
	k := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			end := closeQuote(text, i)
			if end < 0 {
				return "", errUnrenderable
			}
			out = append(out, text[i:end+1]...)
			i = end
		case c == '?':
			if k >= len(vals) {
				return "", errUnrenderable
			}
			out = append(out, vals[k]...)
			k++
		default:
			out = append(out, c)
		}
	}
	if k != len(vals) {
		return "", errUnrenderable
	}
	return string(out), nil
}

// bulkOff is where the parameter types (or, without them, the rows) start
// in a COM_STMT_BULK_EXECUTE payload: command, statement id (4), flags (2).
const bulkOff = 7

// bulkTypes records the parameter types of a COM_STMT_BULK_EXECUTE payload
// when it sends them (MariaDBBulkSendTypes), in the layout of
// COM_STMT_EXECUTE's (2 bytes each: type, unsigned flag).
func (st *stmtInfo) bulkTypes(p []byte) {
	n := int(st.params)
	flags, ok := mysqlproto.BulkFlags(p)
	if n == 0 || !ok || flags&mysqlproto.MariaDBBulkSendTypes == 0 || len(p) < bulkOff+2*n {
		return
	}
	st.types = append(st.types[:0], p[bulkOff:bulkOff+2*n]...)
}

// forwardReboundBulk forwards the pending COM_STMT_BULK_EXECUTE of st, a
// statement prepared again on a new backend: without parameter types
// (MariaDBBulkSendTypes clear) the new server has none, so the types the
// client sent last are put in and the flag set. st.rebind stays set: a
// later COM_STMT_EXECUTE without types still gets them (forwardRebound).
func (s *session) forwardReboundBulk(st *stmtInfo) error {
	payload, _, err := mysqlproto.ReadPacket(s.cr, nil, 0)
	if err != nil {
		return fail(clientReason(err), err)
	}
	s.in += mysqlproto.HeaderSize + len(payload)
	n := int(st.params)
	if flags, ok := mysqlproto.BulkFlags(payload); ok && n > 0 && flags&mysqlproto.MariaDBBulkSendTypes == 0 && len(st.types) == 2*n {
		out := make([]byte, 0, len(payload)+2*n)
		out = append(out, payload[:bulkOff]...)
		binary.LittleEndian.PutUint16(out[5:], flags|mysqlproto.MariaDBBulkSendTypes)
		out = append(out, st.types...)
		out = append(out, payload[bulkOff:]...)
		payload = out
	}
	if _, err := mysqlproto.WritePacket(s.be.conn, 0, payload); err != nil {
		return fail(closeBackendLost, err)
	}
	return nil
}

// metaSum is a checksum of a statement's result column definitions, as a
// client that caches metadata holds them (MARIADB_CLIENT_CACHE_METADATA): a
// statement prepared again on another connection must have the same, since
// that server then leaves them out of its executes. unknown is set when a
// definition was too large to be summed (it never matches then).
//
// Of the collation id only "binary (63) or not" is summed: a restored
// session has the same character_set_results, in which the server sends
// every text column (and names its collation in the definition), but not
// always the same collation of it (a statement prepared after SET NAMES
// latin1 COLLATE latin1_bin reports latin1_bin, 47, on its first server
// and latin1_swedish_ci, 8, prepared again on a restored one); two
// collations of one character set decode the same bytes.
type metaSum struct {
	sum     uint64
	n       int
	unknown bool
}

// add sums one column definition payload; ext are the session's MariaDB
// extended capabilities (MARIADB_CLIENT_EXTENDED_TYPE_INFO adds a block
// before the fixed-length fields).
func (m *metaSum) add(seed maphash.Seed, def []byte, ext uint32) {
	m.n++
	strs := 6
	if ext&mysqlproto.MariaDBClientExtendedTypeInfo != 0 {
		strs++
	}
	pos := 0
	for range strs {
		l, k, ok := mysqlproto.ReadLenEnc(def[pos:])
		if !ok || pos+k+int(l) > len(def) {
			m.sum = m.sum*31 + maphash.Bytes(seed, def)
			return
		}
		pos += k + int(l)
	}
	// def[pos] is the fixed fields' length (0x0c), then the collation id.
	if pos+3 > len(def) {
		m.sum = m.sum*31 + maphash.Bytes(seed, def)
		return
	}
	isBin := byte(0)
	if def[pos+1] == 63 && def[pos+2] == 0 {
		isBin = 1
	}
	m.sum = m.sum*31 + maphash.Bytes(seed, def[:pos+1])
	m.sum = m.sum*31 + maphash.Bytes(seed, append([]byte{isBin}, def[pos+3:]...))
}

// metaResend is the result column definitions of a statement prepared
// again (payloads) and their metaSum, for the client that holds others.
type metaResend struct {
	defs [][]byte
	sum  metaSum
}

// addPacket adds a relayed definition (p.Payload is nil when it was
// larger than the relay buffer).
func (m *metaSum) addPacket(seed maphash.Seed, p mysqlproto.Packet, ext uint32) {
	if p.Payload == nil {
		m.unknown = true
		return
	}
	m.add(seed, p.Payload, ext)
}
