package mysqlproto

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// ScrambleLen is the length of the mysql_native_password challenge ("auth
// plugin data") in bytes.
const ScrambleLen = 20

// MariaDBExtCapsShift: MariaDB extended capabilities are the high 32 bits of
// a 64-bit capability word; on the wire they travel in the last 4 reserved
// bytes of the handshake packets when the CLIENT_MYSQL (= CLIENT_LONG_PASSWORD)
// bit is clear. See https://mariadb.com/kb/en/connection/.
const MariaDBExtCapsShift = 32

// Handshake is the server's initial HandshakeV10 packet.
// Layout: https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_handshake_v10.html
type Handshake struct {
	// ServerVersion is the human-readable version, e.g. "5.5.5-10.11.19-MariaDB".
	ServerVersion string
	// ConnectionID is the server's thread id for this connection.
	ConnectionID uint32
	// Scramble is the auth plugin data (20 bytes for mysql_native_password).
	Scramble []byte
	// Capabilities are the server's capability flags (CLIENT_*).
	Capabilities uint32
	// ExtCapabilities are MariaDB's extended capability flags (0 unless the
	// server is MariaDB and clears CLIENT_MYSQL).
	ExtCapabilities uint32
	// Charset is the server's default collation id.
	Charset byte
	// Status are the server status flags (SERVER_STATUS_*).
	Status uint16
	// AuthPlugin is the default authentication plugin name.
	AuthPlugin string
}

// AppendHandshake appends h as a HandshakeV10 payload to b. The scramble must
// be 20 bytes without NUL bytes (part 2 is NUL-terminated on the wire).
// ExtCapabilities are written only when CLIENT_LONG_PASSWORD (CLIENT_MYSQL) is
// not set, as MariaDB does.
func AppendHandshake(b []byte, h *Handshake) []byte {
	b = append(b, mysql.ClassicProtocolVersion)
	b = append(b, h.ServerVersion...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, h.ConnectionID)
	part1 := h.Scramble
	if len(part1) > 8 {
		part1 = part1[:8]
	}
	b = append(b, part1...)
	for i := len(part1); i < 8; i++ {
		b = append(b, 0)
	}
	b = append(b, 0) // filler
	b = binary.LittleEndian.AppendUint16(b, uint16(h.Capabilities))
	b = append(b, h.Charset)
	b = binary.LittleEndian.AppendUint16(b, h.Status)
	b = binary.LittleEndian.AppendUint16(b, uint16(h.Capabilities>>16))
	if h.Capabilities&mysql.CLIENT_PLUGIN_AUTH != 0 {
		b = append(b, byte(len(h.Scramble)+1))
	} else {
		b = append(b, 0)
	}
	b = append(b, 0, 0, 0, 0, 0, 0) // reserved
	if h.Capabilities&mysql.CLIENT_LONG_PASSWORD == 0 {
		b = binary.LittleEndian.AppendUint32(b, h.ExtCapabilities)
	} else {
		b = append(b, 0, 0, 0, 0)
	}
	if h.Capabilities&mysql.CLIENT_SECURE_CONNECTION != 0 {
		var part2 []byte
		if len(h.Scramble) > 8 {
			part2 = h.Scramble[8:]
		}
		b = append(b, part2...)
		for i := len(part2); i < 12; i++ {
			b = append(b, 0)
		}
		b = append(b, 0)
	}
	if h.Capabilities&mysql.CLIENT_PLUGIN_AUTH != 0 {
		b = append(b, h.AuthPlugin...)
		b = append(b, 0)
	}
	return b
}

// ParseHandshake decodes a HandshakeV10 payload. A payload starting with
// 0xff is a server error: the returned error is *mysql.MyError. Other protocol
// versions and truncated packets return ErrMalformed.
func ParseHandshake(p []byte) (*Handshake, error) {
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		return nil, ParseERR(p)
	}
	if len(p) < 1 || p[0] != mysql.ClassicProtocolVersion {
		return nil, fmt.Errorf("%w: handshake protocol version is not 10", ErrMalformed)
	}
	c := cursor{b: p, pos: 1}
	ver, ok := c.nulString()
	if !ok {
		return nil, fmt.Errorf("%w: handshake server version", ErrMalformed)
	}
	h := &Handshake{ServerVersion: string(ver)}
	cid, ok1 := c.uint32()
	part1, ok2 := c.bytes(8)
	_, ok3 := c.bytes(1)
	capLow, ok4 := c.uint16()
	if !(ok1 && ok2 && ok3 && ok4) {
		return nil, fmt.Errorf("%w: handshake too short", ErrMalformed)
	}
	h.ConnectionID = cid
	h.Capabilities = uint32(capLow)
	scramble := append([]byte(nil), part1...)
	if c.left() == 0 {
		h.Scramble = scramble
		return h, nil
	}
	cs, ok1 := c.byte1()
	st, ok2 := c.uint16()
	capHigh, ok3 := c.uint16()
	dataLen, ok4 := c.byte1()
	reserved, ok5 := c.bytes(10)
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return nil, fmt.Errorf("%w: handshake too short", ErrMalformed)
	}
	h.Charset, h.Status = cs, st
	h.Capabilities |= uint32(capHigh) << 16
	if h.Capabilities&mysql.CLIENT_LONG_PASSWORD == 0 {
		h.ExtCapabilities = binary.LittleEndian.Uint32(reserved[6:])
	}
	if h.Capabilities&mysql.CLIENT_SECURE_CONNECTION != 0 {
		n := 13
		if int(dataLen)-8 > n {
			n = int(dataLen) - 8
		}
		if n > c.left() {
			n = c.left()
		}
		part2, _ := c.bytes(n)
		// Part 2 is NUL-terminated; the terminator is not scramble data.
		if i := bytes.IndexByte(part2, 0); i >= 0 {
			part2 = part2[:i]
		}
		scramble = append(scramble, part2...)
	}
	h.Scramble = scramble
	if h.Capabilities&mysql.CLIENT_PLUGIN_AUTH != 0 && c.left() > 0 {
		name, ok := c.nulString()
		if !ok { // some servers omit the terminator
			name = c.rest()
		}
		h.AuthPlugin = string(name)
	}
	return h, nil
}

// HandshakeResponse is the client's HandshakeResponse41 packet.
// Layout: https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_handshake_response.html
type HandshakeResponse struct {
	// Capabilities are the client's capability flags.
	Capabilities uint32
	// ExtCapabilities are MariaDB extended capabilities (only when
	// CLIENT_LONG_PASSWORD/CLIENT_MYSQL is clear).
	ExtCapabilities uint32
	// MaxPacketSize is the client's max_allowed_packet in bytes.
	MaxPacketSize uint32
	// Charset is the client's collation id.
	Charset byte
	// User is the login name.
	User string
	// AuthResponse is the plugin's answer to the scramble (20 bytes for
	// mysql_native_password with a password, empty without one).
	AuthResponse []byte
	// Database is the initial schema ("" if none).
	Database string
	// AuthPlugin is the plugin the client used for AuthResponse.
	AuthPlugin string
	// Attrs is the raw connect-attributes block (without its length prefix),
	// nil if the client sent none.
	Attrs []byte
	// SSLRequest is true when the packet was the short SSLRequest (the client
	// wants TLS before sending its credentials).
	SSLRequest bool
}

// ParseHandshakeResponse decodes a HandshakeResponse41 payload. Byte slices
// in the result are copies. A client without CLIENT_PROTOCOL_41 returns
// ErrMalformed (the 4.0 protocol is not supported). A 32-byte payload with
// CLIENT_SSL set is an SSLRequest and returns SSLRequest = true.
func ParseHandshakeResponse(p []byte) (*HandshakeResponse, error) {
	c := cursor{b: p}
	capsv, ok1 := c.uint32()
	maxp, ok2 := c.uint32()
	cs, ok3 := c.byte1()
	filler, ok4 := c.bytes(23)
	if !(ok1 && ok2 && ok3 && ok4) {
		return nil, fmt.Errorf("%w: handshake response shorter than 32 bytes", ErrMalformed)
	}
	r := &HandshakeResponse{Capabilities: capsv, MaxPacketSize: maxp, Charset: cs}
	if capsv&mysql.CLIENT_PROTOCOL_41 == 0 {
		return nil, fmt.Errorf("%w: client does not speak protocol 4.1", ErrMalformed)
	}
	if capsv&mysql.CLIENT_LONG_PASSWORD == 0 {
		r.ExtCapabilities = binary.LittleEndian.Uint32(filler[19:])
	}
	if c.left() == 0 && capsv&mysql.CLIENT_SSL != 0 {
		r.SSLRequest = true
		return r, nil
	}
	user, ok := c.nulString()
	if !ok {
		return nil, fmt.Errorf("%w: handshake response user name", ErrMalformed)
	}
	r.User = string(user)
	var auth []byte
	switch {
	case capsv&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
		auth, ok = c.lenencBytes()
	case capsv&mysql.CLIENT_SECURE_CONNECTION != 0:
		var n byte
		if n, ok = c.byte1(); ok {
			auth, ok = c.bytes(int(n))
		}
	default:
		auth, ok = c.nulString()
	}
	if !ok {
		return nil, fmt.Errorf("%w: handshake response auth data", ErrMalformed)
	}
	r.AuthResponse = append([]byte{}, auth...)
	if capsv&mysql.CLIENT_CONNECT_WITH_DB != 0 && c.left() > 0 {
		db, ok := c.nulString()
		if !ok {
			return nil, fmt.Errorf("%w: handshake response database", ErrMalformed)
		}
		r.Database = string(db)
	}
	if capsv&mysql.CLIENT_PLUGIN_AUTH != 0 && c.left() > 0 {
		name, ok := c.nulString()
		if !ok {
			name = c.rest()
		}
		r.AuthPlugin = string(name)
	}
	if capsv&mysql.CLIENT_CONNECT_ATTRS != 0 && c.left() > 0 {
		attrs, ok := c.lenencBytes()
		if !ok {
			return nil, fmt.Errorf("%w: handshake response connect attributes", ErrMalformed)
		}
		r.Attrs = append([]byte{}, attrs...)
	}
	return r, nil
}

// AppendHandshakeResponse appends r as a HandshakeResponse41 payload to b.
// The auth response is length-encoded when CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
// is set, else prefixed by one length byte (CLIENT_SECURE_CONNECTION must then
// be set). Database is written when CLIENT_CONNECT_WITH_DB is set, AuthPlugin
// when CLIENT_PLUGIN_AUTH is set, Attrs when CLIENT_CONNECT_ATTRS is set.
func AppendHandshakeResponse(b []byte, r *HandshakeResponse) []byte {
	b = binary.LittleEndian.AppendUint32(b, r.Capabilities)
	b = binary.LittleEndian.AppendUint32(b, r.MaxPacketSize)
	b = append(b, r.Charset)
	var filler [23]byte
	if r.Capabilities&mysql.CLIENT_LONG_PASSWORD == 0 {
		binary.LittleEndian.PutUint32(filler[19:], r.ExtCapabilities)
	}
	b = append(b, filler[:]...)
	if r.SSLRequest {
		return b
	}
	b = append(b, r.User...)
	b = append(b, 0)
	if r.Capabilities&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(r.AuthResponse)))
	} else {
		b = append(b, byte(len(r.AuthResponse)))
	}
	b = append(b, r.AuthResponse...)
	if r.Capabilities&mysql.CLIENT_CONNECT_WITH_DB != 0 {
		b = append(b, r.Database...)
		b = append(b, 0)
	}
	if r.Capabilities&mysql.CLIENT_PLUGIN_AUTH != 0 {
		b = append(b, r.AuthPlugin...)
		b = append(b, 0)
	}
	if r.Capabilities&mysql.CLIENT_CONNECT_ATTRS != 0 {
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(r.Attrs)))
		b = append(b, r.Attrs...)
	}
	return b
}

// AuthSwitchRequest is the server's request to continue authentication with
// another plugin (payload header 0xfe).
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_auth_switch_request.html
type AuthSwitchRequest struct {
	// Plugin is the plugin to switch to.
	Plugin string
	// Data is the plugin's challenge; for mysql_native_password the 20-byte
	// scramble (the trailing NUL on the wire is not included).
	Data []byte
}

// AppendAuthSwitchRequest appends an AuthSwitchRequest payload. The data is
// followed by a NUL byte, as MySQL and MariaDB send it for
// mysql_native_password.
func AppendAuthSwitchRequest(b []byte, plugin string, data []byte) []byte {
	b = append(b, mysql.EOF_HEADER)
	b = append(b, plugin...)
	b = append(b, 0)
	b = append(b, data...)
	return append(b, 0)
}

// ParseAuthSwitchRequest decodes an AuthSwitchRequest payload (first byte
// 0xfe). A single 0xfe byte (the pre-4.1 "old password" switch) returns
// ErrMalformed: it is not supported.
func ParseAuthSwitchRequest(p []byte) (*AuthSwitchRequest, error) {
	if len(p) < 2 || p[0] != mysql.EOF_HEADER {
		return nil, fmt.Errorf("%w: auth switch request", ErrMalformed)
	}
	c := cursor{b: p, pos: 1}
	name, ok := c.nulString()
	if !ok {
		return nil, fmt.Errorf("%w: auth switch request plugin name", ErrMalformed)
	}
	data := c.rest()
	if n := len(data); n > 0 && data[n-1] == 0 {
		data = data[:n-1]
	}
	return &AuthSwitchRequest{Plugin: string(name), Data: append([]byte{}, data...)}, nil
}

// ChangeUser is a COM_CHANGE_USER command.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_change_user.html
type ChangeUser struct {
	User         string
	AuthResponse []byte
	Database     string
	// Charset is the collation id (0 if the client sent none).
	Charset uint16
	// AuthPlugin is the plugin the client used ("" if none).
	AuthPlugin string
	// Attrs is the raw connect-attributes block, nil if absent.
	Attrs []byte
}

// ParseChangeUser decodes a COM_CHANGE_USER payload (first byte 0x11); caps
// are the capabilities negotiated at connect. Byte slices are copies.
func ParseChangeUser(p []byte, caps uint32) (*ChangeUser, error) {
	if len(p) < 1 || p[0] != mysql.COM_CHANGE_USER {
		return nil, fmt.Errorf("%w: not a COM_CHANGE_USER", ErrMalformed)
	}
	c := cursor{b: p, pos: 1}
	user, ok := c.nulString()
	if !ok {
		return nil, fmt.Errorf("%w: change user name", ErrMalformed)
	}
	cu := &ChangeUser{User: string(user)}
	var auth []byte
	if caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		var n byte
		if n, ok = c.byte1(); ok {
			auth, ok = c.bytes(int(n))
		}
	} else {
		auth, ok = c.nulString()
	}
	if !ok {
		return nil, fmt.Errorf("%w: change user auth data", ErrMalformed)
	}
	cu.AuthResponse = append([]byte{}, auth...)
	db, ok := c.nulString()
	if !ok {
		if c.left() > 0 {
			return nil, fmt.Errorf("%w: change user database", ErrMalformed)
		}
		return cu, nil
	}
	cu.Database = string(db)
	if c.left() == 0 {
		return cu, nil
	}
	cs, ok := c.uint16()
	if !ok {
		return nil, fmt.Errorf("%w: change user charset", ErrMalformed)
	}
	cu.Charset = cs
	if caps&mysql.CLIENT_PLUGIN_AUTH != 0 && c.left() > 0 {
		name, ok := c.nulString()
		if !ok {
			name = c.rest()
		}
		cu.AuthPlugin = string(name)
	}
	if caps&mysql.CLIENT_CONNECT_ATTRS != 0 && c.left() > 0 {
		attrs, ok := c.lenencBytes()
		if !ok {
			return nil, fmt.Errorf("%w: change user connect attributes", ErrMalformed)
		}
		cu.Attrs = append([]byte{}, attrs...)
	}
	return cu, nil
}

// AppendChangeUser appends cu as a COM_CHANGE_USER payload for a connection
// with capabilities caps (CLIENT_SECURE_CONNECTION is assumed).
func AppendChangeUser(b []byte, cu *ChangeUser, caps uint32) []byte {
	b = append(b, mysql.COM_CHANGE_USER)
	b = append(b, cu.User...)
	b = append(b, 0)
	b = append(b, byte(len(cu.AuthResponse)))
	b = append(b, cu.AuthResponse...)
	b = append(b, cu.Database...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, cu.Charset)
	if caps&mysql.CLIENT_PLUGIN_AUTH != 0 {
		b = append(b, cu.AuthPlugin...)
		b = append(b, 0)
	}
	if caps&mysql.CLIENT_CONNECT_ATTRS != 0 {
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(cu.Attrs)))
		b = append(b, cu.Attrs...)
	}
	return b
}
