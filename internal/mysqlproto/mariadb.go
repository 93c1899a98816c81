package mysqlproto

import "encoding/binary"

// MariaDB extended capabilities: the high 32 bits of MariaDB's 64-bit
// capability word, carried in the handshake packets' last 4 reserved bytes
// when CLIENT_MYSQL (CLIENT_LONG_PASSWORD) is clear (Handshake.ExtCapabilities,
// HandshakeResponse.ExtCapabilities). Values are those bits shifted down by
// MariaDBExtCapsShift. Source: MariaDB's include/mysql_com.h and
// https://mariadb.com/kb/en/connection/#capabilities.
const (
	// MariaDBClientProgress: the server may send progress reports (an ERR
	// packet with error code 0xFFFF) while a statement runs.
	MariaDBClientProgress uint32 = 1 << 0
	// MariaDBClientComMulti: COM_MULTI (not offered by 10.11).
	MariaDBClientComMulti uint32 = 1 << 1
	// MariaDBClientStmtBulkOperations: COM_STMT_BULK_EXECUTE (array binding).
	MariaDBClientStmtBulkOperations uint32 = 1 << 2
	// MariaDBClientExtendedTypeInfo: column definitions carry a block of
	// extended type information (type names such as "json", "point").
	MariaDBClientExtendedTypeInfo uint32 = 1 << 3
	// MariaDBClientCacheMetadata: a column count is followed by a
	// "metadata follows" byte; COM_STMT_EXECUTE results omit column
	// definitions the client has already seen.
	MariaDBClientCacheMetadata uint32 = 1 << 4
	// MariaDBClientBulkUnitResults: bulk executes return one result per
	// parameter row (MariaDB 11.5).
	MariaDBClientBulkUnitResults uint32 = 1 << 5
)

// ComStmtBulkExecute is MariaDB's COM_STMT_BULK_EXECUTE command byte. Layout:
// command, statement id (4), flags (2: MariaDBBulkAutoID,
// MariaDBBulkSendTypes), [types (2 per parameter) when MariaDBBulkSendTypes],
// rows of parameter values each led by an indicator byte.
// https://mariadb.com/kb/en/com_stmt_bulk_execute/
const ComStmtBulkExecute byte = 0xfa

// Flags of COM_STMT_BULK_EXECUTE.
const (
	MariaDBBulkAutoID    uint16 = 64
	MariaDBBulkSendTypes uint16 = 128
)

// BulkFlags returns the flags of a COM_STMT_BULK_EXECUTE payload (false when
// it is too short to have them).
func BulkFlags(p []byte) (uint16, bool) {
	if len(p) < 7 || p[0] != ComStmtBulkExecute {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[5:]), true
}

// IsProgress reports whether payload p is a MariaDB progress report: an ERR
// packet (0xFF) whose error code is 0xFFFF, sent in the middle of a
// response to a client with MariaDBClientProgress; the response goes on
// after it. https://mariadb.com/kb/en/progress-reporting/
func IsProgress(p []byte) bool {
	return len(p) >= 3 && p[0] == 0xff && p[1] == 0xff && p[2] == 0xff
}

// ColumnCount decodes a result set's column count packet. With cacheMeta
// (MariaDBClientCacheMetadata negotiated) the count is followed by the
// "metadata follows" byte: metadata reports whether column definitions
// follow (always true without cacheMeta). ok is false for a malformed packet.
// https://mariadb.com/kb/en/result-set-packets/#column-count-packet
func ColumnCount(p []byte, cacheMeta bool) (n uint64, metadata, ok bool) {
	n, k, ok := ReadLenEnc(p)
	if !ok {
		return 0, false, false
	}
	if !cacheMeta {
		return n, true, len(p) <= 9
	}
	if len(p) != k+1 || p[k] > 1 {
		return 0, false, false
	}
	return n, p[k] == 1, true
}
