package mysqlproto

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// OK is a decoded OK packet (header 0x00, or 0xfe when it ends a result set
// under CLIENT_DEPRECATE_EOF).
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_ok_packet.html
type OK struct {
	AffectedRows uint64
	LastInsertID uint64
	// Status are the server status flags (SERVER_STATUS_*).
	Status uint16
	// Warnings is the warning count.
	Warnings uint16
	// Info is the human-readable message, aliasing the parsed payload.
	Info []byte
	// SessionState is the raw session-state-change block (CLIENT_SESSION_TRACK
	// and SERVER_SESSION_STATE_CHANGED), aliasing the payload; decode it with
	// SessionStateChanges.
	SessionState []byte
}

// ParseOK decodes an OK payload under the negotiated capabilities caps
// (CLIENT_SESSION_TRACK decides how Info and SessionState are laid out).
// It does not allocate; slices alias p.
func ParseOK(p []byte, caps uint32) (OK, error) {
	var ok OK
	if len(p) < 1 || (p[0] != mysql.OK_HEADER && p[0] != mysql.EOF_HEADER) {
		return ok, fmt.Errorf("%w: not an OK packet", ErrMalformed)
	}
	c := cursor{b: p, pos: 1}
	var good bool
	if ok.AffectedRows, good = c.lenenc(); !good {
		return ok, fmt.Errorf("%w: OK affected rows", ErrMalformed)
	}
	if ok.LastInsertID, good = c.lenenc(); !good {
		return ok, fmt.Errorf("%w: OK last insert id", ErrMalformed)
	}
	st, ok1 := c.uint16()
	w, ok2 := c.uint16()
	if !ok1 || !ok2 {
		return ok, fmt.Errorf("%w: OK status flags", ErrMalformed)
	}
	ok.Status, ok.Warnings = st, w
	if c.left() == 0 {
		return ok, nil
	}
	if caps&mysql.CLIENT_SESSION_TRACK == 0 {
		// Servers write the message length-encoded although the
		// documentation says string<EOF>; accept both.
		save := c.pos
		if info, good := c.lenencBytes(); good && c.left() == 0 {
			ok.Info = info
		} else {
			c.pos = save
			ok.Info = c.rest()
		}
		return ok, nil
	}
	if ok.Info, good = c.lenencBytes(); !good {
		return ok, fmt.Errorf("%w: OK info", ErrMalformed)
	}
	if ok.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0 && c.left() > 0 {
		if ok.SessionState, good = c.lenencBytes(); !good {
			return ok, fmt.Errorf("%w: OK session state", ErrMalformed)
		}
	}
	return ok, nil
}

// OKStatus returns the status flags of an OK payload (header 0x00 or 0xfe)
// without decoding the rest; ok is false when the payload is too short.
func OKStatus(p []byte) (status uint16, ok bool) {
	if len(p) < 1 {
		return 0, false
	}
	_, n1, ok1 := ReadLenEnc(p[1:])
	if !ok1 {
		return 0, false
	}
	_, n2, ok2 := ReadLenEnc(p[1+n1:])
	if !ok2 || len(p) < 1+n1+n2+2 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[1+n1+n2:]), true
}

// AppendOK appends ok as an OK payload with header 0x00 for a connection
// with capabilities caps.
func AppendOK(b []byte, caps uint32, ok *OK) []byte {
	return appendOK(b, mysql.OK_HEADER, caps, ok)
}

// AppendOKTerminator appends ok as the 0xfe-headed OK packet that ends a
// result set under CLIENT_DEPRECATE_EOF.
func AppendOKTerminator(b []byte, caps uint32, ok *OK) []byte {
	return appendOK(b, mysql.EOF_HEADER, caps, ok)
}

func appendOK(b []byte, header byte, caps uint32, ok *OK) []byte {
	b = append(b, header)
	b = mysql.AppendLengthEncodedInteger(b, ok.AffectedRows)
	b = mysql.AppendLengthEncodedInteger(b, ok.LastInsertID)
	b = binary.LittleEndian.AppendUint16(b, ok.Status)
	b = binary.LittleEndian.AppendUint16(b, ok.Warnings)
	if caps&mysql.CLIENT_SESSION_TRACK != 0 {
		if len(ok.Info) > 0 || (ok.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0 && len(ok.SessionState) > 0) {
			b = mysql.AppendLengthEncodedInteger(b, uint64(len(ok.Info)))
			b = append(b, ok.Info...)
		}
		if ok.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0 && len(ok.SessionState) > 0 {
			b = mysql.AppendLengthEncodedInteger(b, uint64(len(ok.SessionState)))
			b = append(b, ok.SessionState...)
		}
		return b
	}
	if len(ok.Info) > 0 {
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(ok.Info)))
		b = append(b, ok.Info...)
	}
	return b
}

// Session state change types carried in OK packets.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_ok_packet.html
const (
	SessionTrackSystemVariables   = 0x00
	SessionTrackSchema            = 0x01
	SessionTrackStateChange       = 0x02
	SessionTrackGTIDs             = 0x03
	SessionTrackTxCharacteristics = 0x04
	SessionTrackTxState           = 0x05
)

// SessionChange is one entry of an OK packet's session-state block.
type SessionChange struct {
	// Type is one of the SessionTrack* constants.
	Type byte
	// Data is the entry's payload, aliasing the OK packet.
	Data []byte
}

// Schema returns the new default schema of a SessionTrackSchema entry.
func (s SessionChange) Schema() (string, bool) {
	if s.Type != SessionTrackSchema {
		return "", false
	}
	c := cursor{b: s.Data}
	name, ok := c.lenencBytes()
	return string(name), ok
}

// SystemVariable returns the name and new value of a
// SessionTrackSystemVariables entry.
func (s SessionChange) SystemVariable() (name, value string, ok bool) {
	if s.Type != SessionTrackSystemVariables {
		return "", "", false
	}
	c := cursor{b: s.Data}
	n, ok1 := c.lenencBytes()
	v, ok2 := c.lenencBytes()
	return string(n), string(v), ok1 && ok2
}

// SessionStateChanges decodes an OK packet's session-state block into its
// entries (type byte + length-encoded data each).
func SessionStateChanges(b []byte) ([]SessionChange, error) {
	var out []SessionChange
	c := cursor{b: b}
	for c.left() > 0 {
		t, _ := c.byte1()
		d, ok := c.lenencBytes()
		if !ok {
			return out, fmt.Errorf("%w: session state entry", ErrMalformed)
		}
		out = append(out, SessionChange{Type: t, Data: d})
	}
	return out, nil
}

// ParseERR decodes an ERR payload (first byte 0xff) into a *mysql.MyError.
// The SQLSTATE is taken from the '#'-marked field when present (protocol 4.1),
// else HY000. A payload too short to hold an error number yields error 2027
// (CR_MALFORMED_PACKET) so callers always get an error value.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_err_packet.html
func ParseERR(p []byte) *mysql.MyError {
	if len(p) < 3 || p[0] != mysql.ERR_HEADER {
		return &mysql.MyError{Code: 2027, State: mysql.DEFAULT_MYSQL_STATE, Message: "malformed error packet"}
	}
	e := &mysql.MyError{Code: binary.LittleEndian.Uint16(p[1:]), State: mysql.DEFAULT_MYSQL_STATE}
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State = string(rest[1:6])
		rest = rest[6:]
	}
	e.Message = string(rest)
	return e
}

// AppendERR appends an ERR payload (protocol 4.1 layout) with error number
// code, SQLSTATE state (5 characters; "HY000" if empty) and message msg.
func AppendERR(b []byte, code uint16, state, msg string) []byte {
	if len(state) != 5 {
		state = mysql.DEFAULT_MYSQL_STATE
	}
	b = append(b, mysql.ERR_HEADER)
	b = binary.LittleEndian.AppendUint16(b, code)
	b = append(b, '#')
	b = append(b, state...)
	return append(b, msg...)
}

// AppendError appends e as an ERR payload.
func AppendError(b []byte, e *mysql.MyError) []byte {
	return AppendERR(b, e.Code, e.State, e.Message)
}

// NewError returns a *mysql.MyError with code, message msg and the SQLSTATE
// MySQL uses for that code (HY000 when unknown).
func NewError(code uint16, msg string) *mysql.MyError { return mysql.NewError(code, msg) }

// ParseEOF decodes an EOF payload (0xfe, fewer than 9 bytes): warning count
// and status flags. ok is false when p is not an EOF packet.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_eof_packet.html
func ParseEOF(p []byte) (warnings, status uint16, ok bool) {
	if len(p) < 5 || len(p) >= 9 || p[0] != mysql.EOF_HEADER {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint16(p[1:]), binary.LittleEndian.Uint16(p[3:]), true
}

// AppendEOF appends an EOF payload with the given warning count and status.
func AppendEOF(b []byte, warnings, status uint16) []byte {
	b = append(b, mysql.EOF_HEADER)
	b = binary.LittleEndian.AppendUint16(b, warnings)
	return binary.LittleEndian.AppendUint16(b, status)
}

// StmtPrepareOK is the first packet of a successful COM_STMT_PREPARE response.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_stmt_prepare.html
type StmtPrepareOK struct {
	StatementID uint32
	Columns     uint16
	Params      uint16
	Warnings    uint16
}

// ParseStmtPrepareOK decodes a COM_STMT_PREPARE_OK payload (header 0x00).
func ParseStmtPrepareOK(p []byte) (StmtPrepareOK, error) {
	if len(p) < 9 || p[0] != mysql.OK_HEADER {
		return StmtPrepareOK{}, fmt.Errorf("%w: COM_STMT_PREPARE_OK", ErrMalformed)
	}
	r := StmtPrepareOK{
		StatementID: binary.LittleEndian.Uint32(p[1:]),
		Columns:     binary.LittleEndian.Uint16(p[5:]),
		Params:      binary.LittleEndian.Uint16(p[7:]),
	}
	if len(p) >= 12 {
		r.Warnings = binary.LittleEndian.Uint16(p[10:])
	}
	return r, nil
}

// AppendStmtPrepareOK appends r as a COM_STMT_PREPARE_OK payload.
func AppendStmtPrepareOK(b []byte, r StmtPrepareOK) []byte {
	b = append(b, mysql.OK_HEADER)
	b = binary.LittleEndian.AppendUint32(b, r.StatementID)
	b = binary.LittleEndian.AppendUint16(b, r.Columns)
	b = binary.LittleEndian.AppendUint16(b, r.Params)
	b = append(b, 0)
	return binary.LittleEndian.AppendUint16(b, r.Warnings)
}
