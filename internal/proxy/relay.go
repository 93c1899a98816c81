package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// The response relays copy backend packets to the client unchanged and look
// only at packet headers, first bytes and the OK/EOF packets that say where a
// response ends (column counts, EOF/OK terminators and their status flags).
// Layouts: https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_query_response.html
// and MariaDB's https://mariadb.com/kb/en/result-set-packets/.

var errBackendProtocol = errors.New("unexpected packet from backend")

func backendProtocol(format string, args ...any) error {
	return fail(closeBackendLost, fmt.Errorf("%w: "+format, append([]any{errBackendProtocol}, args...)...))
}

// copyPacket relays one physical packet from the backend to the client,
// its sequence id moved on by seqShift (in the read buffer, before the
// copy).
func (s *session) copyPacket() (mysqlproto.Packet, error) {
	if s.seqShift != 0 {
		if hb, err := s.br.Peek(mysqlproto.HeaderSize); err == nil {
			hb[3] += s.seqShift
		}
	}
	p, err := mysqlproto.CopyPacket(s.cw, s.br)
	if err != nil {
		var we *mysqlproto.WriteError
		if errors.As(err, &we) {
			return p, fail(closeClientGone, err)
		}
		return p, fail(closeBackendLost, err)
	}
	s.seq = p.Seq
	s.out += mysqlproto.HeaderSize + p.Len
	return p, nil
}

// copyRun relays, with one write to the client writer, the run of
// complete packets at the start of the backend read buffer that are
// ordinary rows or column definitions: at most max packets, up to the
// first one that is not wholly buffered, is empty, has MaxPacketPayload
// bytes (a continuation follows) or starts with 0xfe (EOF, or the OK
// terminator) or 0xff (ERR). It returns how many it relayed (0: the
// packet-by-packet relay reads the next one, waiting for it if need be).
// Sequence ids are moved on by seqShift, as copyPacket does. Nothing is
// read from the backend connection.
func (s *session) copyRun(max int) (int, error) {
	avail := s.br.Buffered()
	if avail <= mysqlproto.HeaderSize || max <= 0 {
		return 0, nil
	}
	b, _ := s.br.Peek(avail) // cannot fail: avail bytes are buffered
	off, n := 0, 0
	var seq byte
	for n < max && off+mysqlproto.HeaderSize < len(b) {
		h := mysqlproto.ParseHeader(b[off:])
		end := off + mysqlproto.HeaderSize + h.Len
		if h.Len == 0 || h.Len == mysqlproto.MaxPacketPayload || end > len(b) {
			break
		}
		if f := b[off+mysqlproto.HeaderSize]; f == mysql.EOF_HEADER || f == mysql.ERR_HEADER {
			break
		}
		if s.seqShift != 0 {
			// As copyPacket: the packet goes on with its sequence id moved
			// on, in the read buffer (only packets of the run, so none is
			// moved twice).
			b[off+3] += s.seqShift
			h.Seq = b[off+3]
		}
		seq, off, n = h.Seq, end, n+1
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := s.cw.Write(b[:off]); err != nil {
		return 0, fail(closeClientGone, &mysqlproto.WriteError{Err: err})
	}
	_, _ = s.br.Discard(off)
	s.seq = seq
	s.out += off
	return n, nil
}

// copyLogical relays one logical packet (with its continuation packets).
func (s *session) copyLogical() (mysqlproto.Packet, error) {
	first, err := s.copyPacket()
	p := first
	for err == nil && p.Len == mysqlproto.MaxPacketPayload {
		p, err = s.copyPacket()
	}
	return first, err
}

func (s *session) deprecateEOF() bool { return s.caps&mysql.CLIENT_DEPRECATE_EOF != 0 }

// cacheMeta reports whether column counts carry MariaDB's "metadata
// follows" byte (MARIADB_CLIENT_CACHE_METADATA).
func (s *session) cacheMeta() bool { return s.ext&mysqlproto.MariaDBClientCacheMetadata != 0 }

// defPackets is how many packets follow a result's column count before
// its rows: the ncols column definitions when meta says they were sent,
// plus the EOF after them without CLIENT_DEPRECATE_EOF.
func (s *session) defPackets(ncols uint64, meta bool) int {
	n := 0
	if meta {
		n = int(ncols)
	}
	if !s.deprecateEOF() {
		n++
	}
	return n
}

// relay relays the backend's response to a command of the given kind.
func (s *session) relay(cmd byte, kind responseKind) error {
	switch kind {
	case respResults:
		err := s.relayResults(cmd == mysql.COM_QUERY)
		s.seqShift = 0
		return err
	case respBinary:
		err := s.relayResults(false)
		s.seqShift = 0
		return err
	case respPrepare:
		return s.relayPrepare()
	case respRows:
		_, err := s.relayRows()
		return err
	case respSingle:
		if s.peekFirst() == mysql.OK_HEADER {
			p, err := s.copyOK()
			if err != nil {
				return err
			}
			return s.endPacket(p)
		}
		p, err := s.copyLogical()
		if err != nil {
			return err
		}
		return s.endPacket(p)
	case respString:
		_, err := s.copyLogical()
		s.lastOK = err == nil
		return err
	}
	return fmt.Errorf("proxy: no relay for command 0x%02x", cmd)
}

// endPacket records the outcome of a final OK, EOF or ERR packet.
func (s *session) endPacket(p mysqlproto.Packet) error {
	if p.Payload == nil {
		return backendProtocol("oversized status packet (%d bytes)", p.Len)
	}
	switch p.First {
	case mysql.OK_HEADER:
		st, ok := mysqlproto.OKStatus(p.Payload)
		if !ok {
			return backendProtocol("malformed OK packet")
		}
		s.onOK(p.Payload, st)
		s.noteOK(p.Payload)
	case mysql.EOF_HEADER:
		st, ok := s.terminatorStatus(p)
		if !ok {
			return backendProtocol("malformed EOF packet")
		}
		s.status, s.lastOK = st, true
		s.noteTerminator(p.Payload)
	case mysql.ERR_HEADER:
		s.lastOK = false
	default:
		return backendProtocol("status packet starts with 0x%02x", p.First)
	}
	return nil
}

// onOK records an OK packet's status flags (the session state it carried
// was recorded by copyOK).
func (s *session) onOK(_ []byte, status uint16) {
	s.status, s.lastOK = status, true
}

// peekFirst returns the first payload byte of the next backend packet
// without consuming it (0 when it cannot be read yet: the copy that follows
// reports the error).
func (s *session) peekFirst() byte {
	b, err := s.br.Peek(mysqlproto.HeaderSize + 1)
	if err != nil {
		return 0
	}
	return b[mysqlproto.HeaderSize]
}

// copyOK relays one OK packet (0x00, or the 0xfe terminator under
// CLIENT_DEPRECATE_EOF). One that reports session-state changes
// (SERVER_SESSION_STATE_CHANGED, rare: SET, USE, writes that report
// last_gtid) is recorded (sessionstate.go) and, for a client that did not
// negotiate CLIENT_SESSION_TRACK, rewritten without the session-state
// block. Others are copied as they are.
func (s *session) copyOK() (mysqlproto.Packet, error) {
	hb, err := s.br.Peek(mysqlproto.HeaderSize)
	if err != nil {
		return s.copyPacket()
	}
	h := mysqlproto.ParseHeader(hb)
	total := mysqlproto.HeaderSize + h.Len
	if h.Len >= mysqlproto.MaxPacketPayload || total > s.br.Size() {
		return s.copyPacket()
	}
	b, err := s.br.Peek(total)
	if err != nil {
		return s.copyPacket()
	}
	payload := b[mysqlproto.HeaderSize:]
	st, ok := mysqlproto.OKStatus(payload)
	if !ok || st&mysql.SERVER_SESSION_STATE_CHANGED == 0 || !s.tracked {
		return s.copyPacket()
	}
	s.trackOK(payload, s.cls, s.setText)
	switch {
	case s.strip:
		s.okBuf = stripState(s.okBuf, payload)
	case s.trkFilter:
		s.okBuf = s.trk.filterState(s.okBuf, payload)
	default:
		return s.copyPacket()
	}
	var hdr [mysqlproto.HeaderSize]byte
	h.Seq += s.seqShift
	mysqlproto.PutHeader(hdr[:], len(s.okBuf), h.Seq)
	if _, err := s.cw.Write(hdr[:]); err != nil {
		return mysqlproto.Packet{}, fail(closeClientGone, err)
	}
	if _, err := s.cw.Write(s.okBuf); err != nil {
		return mysqlproto.Packet{}, fail(closeClientGone, err)
	}
	_, _ = s.br.Discard(total)
	s.seq = h.Seq
	s.out += mysqlproto.HeaderSize + len(s.okBuf)
	return mysqlproto.Packet{Header: mysqlproto.Header{Len: len(s.okBuf), Seq: h.Seq}, Payload: s.okBuf, First: s.okBuf[0]}, nil
}

// terminatorStatus reads the status flags of a 0xfe packet ending a result
// set: an EOF packet, or an OK packet under CLIENT_DEPRECATE_EOF.
func (s *session) terminatorStatus(p mysqlproto.Packet) (uint16, bool) {
	if p.Payload == nil {
		return 0, false
	}
	if s.deprecateEOF() {
		return mysqlproto.OKStatus(p.Payload)
	}
	_, st, ok := mysqlproto.ParseEOF(p.Payload)
	return st, ok
}

// relayResults relays a COM_QUERY / COM_STMT_EXECUTE response: any number of
// OK packets and result sets chained by SERVER_MORE_RESULTS_EXISTS, ended by
// one without it or by an ERR. With infile, a LOCAL INFILE request is served
// by relaying the client's file packets to the backend.
func (s *session) relayResults(infile bool) error {
	for {
		var p mysqlproto.Packet
		var err error
		resend := false
		if s.peekFirst() == mysql.OK_HEADER {
			p, err = s.copyOK()
		} else {
			resend = s.flagResend()
			p, err = s.copyPacket()
		}
		if err != nil {
			return err
		}
		if p.Payload == nil || p.Len == mysqlproto.MaxPacketPayload {
			return backendProtocol("oversized first packet of a result (%d bytes)", p.Len)
		}
		if p.First == mysql.ERR_HEADER && s.ext&mysqlproto.MariaDBClientProgress != 0 && mysqlproto.IsProgress(p.Payload) {
			continue // a progress report: the response goes on
		}
		if r := s.rlog; r != nil && r.hashing {
			r.sumFirst(p, infile)
		}
		switch p.First {
		case mysql.OK_HEADER:
			if err := s.endPacket(p); err != nil {
				return err
			}
			if s.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return nil
			}
			continue
		case mysql.ERR_HEADER:
			s.lastOK = false
			return nil
		case mysql.LocalInFile_HEADER:
			if !infile {
				return backendProtocol("LOCAL INFILE request outside COM_QUERY")
			}
			if err := s.relayLocalInfile(); err != nil {
				return err
			}
			continue
		}
		ncols, meta, ok := mysqlproto.ColumnCount(p.Payload, s.cacheMeta())
		if !ok {
			return backendProtocol("bad column count packet")
		}
		if resend {
			if err := s.resendMeta(p.Seq); err != nil {
				return err
			}
			meta = false // the server sent none
		} else if st := s.execStmt; meta && st != nil {
			st.resend = nil // the server sends them itself
		}
		more, err := s.relayResultSet(ncols, meta)
		if err != nil || !more {
			return err
		}
	}
}

// flagResend is called before the first packet of a result to a
// COM_STMT_EXECUTE is copied. When the statement was prepared again on a
// server that took other column definitions than the client holds
// (stmtInfo.resend) and the packet is a column count that says none follow
// (MARIADB_CLIENT_CACHE_METADATA), it sets the "metadata follows" byte in
// the read buffer, so that the client reads the definitions resendMeta puts
// in after it, and reports true.
func (s *session) flagResend() bool {
	st := s.execStmt
	if st == nil || st.resend == nil || !s.cacheMeta() {
		return false
	}
	hb, err := s.br.Peek(mysqlproto.HeaderSize)
	if err != nil {
		return false
	}
	h := mysqlproto.ParseHeader(hb)
	if h.Len < 2 || h.Len >= mysqlproto.MaxPacketPayload || mysqlproto.HeaderSize+h.Len > s.br.Size() {
		return false
	}
	b, err := s.br.Peek(mysqlproto.HeaderSize + h.Len)
	if err != nil {
		return false
	}
	payload := b[mysqlproto.HeaderSize:]
	switch payload[0] {
	case mysql.OK_HEADER, mysql.ERR_HEADER, mysql.EOF_HEADER, mysql.LocalInFile_HEADER:
		return false
	}
	n, k, ok := mysqlproto.ReadLenEnc(payload)
	if !ok || k != len(payload)-1 || payload[k] != 0 || n != uint64(len(st.resend.defs)) {
		return false
	}
	payload[k] = 1
	return true
}

// resendMeta writes the definitions of s.execStmt.resend to the client
// after the column count (sequence id seq) that flagResend changed, and
// moves the sequence ids of the rest of the response on by as many
// packets (seqShift). The client then holds these definitions
// (stmtInfo.meta).
func (s *session) resendMeta(seq byte) error {
	st := s.execStmt
	first := seq
	for _, d := range st.resend.defs {
		next, err := mysqlproto.WritePacket(s.cw, seq+1, d)
		if err != nil {
			return fail(closeClientGone, err)
		}
		s.out += int(next-seq-1)*mysqlproto.HeaderSize + len(d)
		seq = next - 1
	}
	s.seq = seq
	s.seqShift += seq - first
	st.meta, st.resend = st.resend.sum, nil
	return nil
}

// relayResultSet relays ncols column definitions (none when meta is false:
// the server left them out, MARIADB_CLIENT_CACHE_METADATA), the EOF after
// them (unless CLIENT_DEPRECATE_EOF) and the rows, and reports whether
// another result follows. When the server opened a cursor
// (SERVER_STATUS_CURSOR_EXISTS) no rows follow; the client fetches them with
// COM_STMT_FETCH. Column definitions are copied whole, so the extended type
// information of MARIADB_CLIENT_EXTENDED_TYPE_INFO passes as it is.
//
// An ERR in place of a column definition or of the EOF after them (MariaDB
// sends one when evaluating the first row fails in a cursor execute, error
// 3037 from ST_DISTANCE_SPHERE for instance) ends the response there, as
// it ends it for the client library: it is relayed and nothing follows.
//
// Only a COM_STMT_EXECUTE that asked for a cursor (flags byte, s.cursorReq)
// can have opened one: a COM_QUERY whose stored program has an open cursor
// (BEGIN NOT ATOMIC ... OPEN c; FETCH c ...; SELECT ...) reports
// SERVER_STATUS_CURSOR_EXISTS in the same EOF and then sends its rows
// (MariaDB sql/protocol.cc Protocol::send_eof writes the session's status).
func (s *session) relayResultSet(ncols uint64, meta bool) (bool, error) {
	s.rows = 0
	if !meta {
		ncols = 0
	}
	ms := s.execStmt
	if ms != nil && ncols > 0 && s.cacheMeta() {
		ms.meta = metaSum{} // the client caches these instead
	} else {
		ms = nil
	}
	for i := uint64(0); i < ncols; i++ {
		if ms == nil {
			// Definitions already buffered go in one write.
			k, err := s.copyRun(int(min(ncols-i, 1<<20)))
			if err != nil {
				return false, err
			}
			if i += uint64(k); i == ncols {
				break
			}
		}
		p, err := s.copyLogical()
		if err != nil {
			return false, err
		}
		// A column definition starts with the catalog's length (3, "def").
		if p.First == mysql.ERR_HEADER && p.Len < mysqlproto.MaxPacketPayload {
			s.lastOK = false
			return false, nil
		}
		if ms != nil {
			ms.meta.addPacket(s.srv.metaSeed, p, s.ext)
		}
	}
	if !s.deprecateEOF() {
		p, err := s.copyPacket()
		if err != nil {
			return false, err
		}
		if p.First == mysql.ERR_HEADER && p.Len < mysqlproto.MaxPacketPayload {
			s.lastOK = false
			return false, nil
		}
		_, st, ok := mysqlproto.ParseEOF(p.Payload)
		if !ok {
			return false, backendProtocol("expected EOF after column definitions, got 0x%02x", p.First)
		}
		s.status = st
		if st&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 && s.cursorReq {
			if s.rlog != nil {
				s.rlog.breakTx("it opened a cursor")
			}
			s.rows, s.results = -1, s.results+1 // FOUND_ROWS(): unknown
			s.lastOK = true
			return false, nil
		}
	}
	return s.relayRows()
}

// relayRows relays packets until the 0xfe terminator (EOF, or OK under
// CLIENT_DEPRECATE_EOF; a row never starts with 0xfe in a packet shorter than
// 0xffffff bytes) or an ERR, and reports whether another result follows.
func (s *session) relayRows() (bool, error) {
	cont := false
	deprecateEOF := s.deprecateEOF() && s.tracked
	batch := s.rlog == nil || !s.rlog.hashing // rows are hashed one by one
	for {
		if batch && !cont {
			// Rows already buffered go in one write.
			k, err := s.copyRun(1 << 30)
			if err != nil {
				return false, err
			}
			s.rows += int64(k)
		}
		var p mysqlproto.Packet
		var err error
		if deprecateEOF && !cont && s.peekFirst() == mysql.EOF_HEADER {
			// Maybe the OK terminator; copyOK copies anything else as is.
			p, err = s.copyOK()
		} else {
			p, err = s.copyPacket()
		}
		if err != nil {
			return false, err
		}
		if r := s.rlog; r != nil && r.hashing {
			r.sumRowPacket(p, cont)
		}
		if cont || p.Len == mysqlproto.MaxPacketPayload {
			cont = p.Len == mysqlproto.MaxPacketPayload
			continue
		}
		switch p.First {
		case mysql.ERR_HEADER:
			s.lastOK = false
			return false, nil
		case mysql.EOF_HEADER:
			s.results++
			st, ok := s.terminatorStatus(p)
			if !ok {
				return false, backendProtocol("malformed result set terminator")
			}
			s.status, s.lastOK = st, true
			s.noteTerminator(p.Payload)
			return st&mysql.SERVER_MORE_RESULTS_EXISTS != 0, nil
		}
		s.rows++
	}
}

// relayPrepare relays a COM_STMT_PREPARE response and records the
// statement. While statement ids are translated, the id in the
// COM_STMT_PREPARE_OK is rewritten (in the backend read buffer, before it
// is copied) to the one the client will use.
func (s *session) relayPrepare() error {
	var clientID, backendID uint32
	if b, err := s.br.Peek(mysqlproto.HeaderSize + 5); err == nil && b[mysqlproto.HeaderSize] == mysql.OK_HEADER {
		backendID = binary.LittleEndian.Uint32(b[mysqlproto.HeaderSize+1:])
		clientID = s.clientID(backendID)
		if clientID != backendID {
			binary.LittleEndian.PutUint32(b[mysqlproto.HeaderSize+1:], clientID)
		}
	}
	p, err := s.copyPacket()
	if err != nil {
		return err
	}
	switch p.First {
	case mysql.ERR_HEADER:
		s.lastOK = false
		return nil
	case mysql.OK_HEADER:
	default:
		return backendProtocol("COM_STMT_PREPARE response starts with 0x%02x", p.First)
	}
	ok, err := mysqlproto.ParseStmtPrepareOK(p.Payload)
	if err != nil {
		return backendProtocol("%v", err)
	}
	var text []byte
	if len(s.prepPacket) > 0 {
		text = s.prepPacket[1:]
	}
	if backendID == 0 {
		clientID, backendID = ok.StatementID, ok.StatementID
	}
	st := s.addStmt(clientID, backendID, ok, text)
	for i, n := range []uint16{ok.Params, ok.Columns} {
		if n == 0 {
			continue
		}
		for range n {
			p, err := s.copyLogical()
			if err != nil {
				return err
			}
			if i == 1 && s.cacheMeta() {
				st.meta.addPacket(s.srv.metaSeed, p, s.ext)
			}
		}
		if !s.deprecateEOF() {
			if _, err := s.copyPacket(); err != nil {
				return err
			}
		}
	}
	s.lastOK = true
	return nil
}

// relayLocalInfile serves LOAD DATA LOCAL INFILE: the 0xfb request has been
// copied to the client; flush it, then relay the client's file packets to the
// backend up to and including the empty packet that ends them. The caller
// then relays the server's OK/ERR.
func (s *session) relayLocalInfile() error {
	if err := s.cw.Flush(); err != nil {
		return fail(closeClientGone, err)
	}
	cont := false
	for {
		p, err := mysqlproto.CopyPacket(s.be.conn, s.cr)
		if err != nil {
			var we *mysqlproto.WriteError
			if errors.As(err, &we) {
				return fail(closeBackendLost, err)
			}
			return fail(clientReason(err), err)
		}
		s.in += mysqlproto.HeaderSize + p.Len
		if !cont && p.Len == 0 {
			return nil
		}
		cont = p.Len == mysqlproto.MaxPacketPayload
	}
}

// parseUse recognises "USE name" / "USE `name`" at the start of a query (after
// spaces) and returns the schema name.
func parseUse(q []byte) (string, bool) {
	i := 0
	for i < len(q) && isSpace(q[i]) {
		i++
	}
	if len(q)-i < 4 || (q[i]|0x20) != 'u' || (q[i+1]|0x20) != 's' || (q[i+2]|0x20) != 'e' || !isSpace(q[i+3]) {
		return "", false
	}
	rest := q[i+4:]
	for len(rest) > 0 && isSpace(rest[0]) {
		rest = rest[1:]
	}
	for len(rest) > 0 && (isSpace(rest[len(rest)-1]) || rest[len(rest)-1] == ';') {
		rest = rest[:len(rest)-1]
	}
	if len(rest) >= 2 && rest[0] == '`' && rest[len(rest)-1] == '`' {
		inner := string(rest[1 : len(rest)-1])
		out := make([]byte, 0, len(inner))
		for j := 0; j < len(inner); j++ {
			out = append(out, inner[j])
			if inner[j] == '`' && j+1 < len(inner) && inner[j+1] == '`' {
				j++
			}
		}
		return string(out), true
	}
	for _, c := range rest {
		if isSpace(c) || c == ';' || c == '`' || c == '\'' || c == '"' {
			return "", false
		}
	}
	if len(rest) == 0 {
		return "", false
	}
	return string(rest), true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
