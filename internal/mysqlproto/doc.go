// Package mysqlproto owns the MySQL client/server wire protocol as Switchyard
// needs it: packet framing (3-byte length + sequence id, payloads of 0xffffff
// bytes or more split across several packets), zero-copy relay of one packet
// between buffered streams, builders and parsers for the connection-phase
// packets (HandshakeV10, HandshakeResponse41, AuthSwitchRequest/Response,
// COM_CHANGE_USER) and for OK, ERR and EOF packets, and the
// mysql_native_password arithmetic (verify a scramble against SHA1(SHA1(pw)),
// recover SHA1(pw) from a client's scramble, answer a server's challenge),
// MariaDB's client_ed25519 (ed25519.go: the key derived from SHA-512 of the
// password, nonce signatures) and MySQL's caching_sha2_password (sha2.go:
// the fast-path token and verifier, RSA full authentication).
//
// Protocol constants (capability flags, command bytes, status flags, error
// numbers and SQLSTATEs) come from github.com/go-mysql-org/go-mysql/mysql.
// Layouts follow the MySQL client/server protocol documentation
// (https://dev.mysql.com/doc/dev/mysql-server/latest/PAGE_PROTOCOL.html) and
// MariaDB's (https://mariadb.com/kb/en/clientserver-protocol/).
//
// It must not do network I/O of its own (callers pass readers and writers),
// keep state between calls, log, or make routing decisions. TLS (CLIENT_SSL)
// and protocol compression (CLIENT_COMPRESS) are not implemented.
package mysqlproto
