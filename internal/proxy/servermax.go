package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// The server's own connection limit. A pool that may open
// proxy.max_connections_per_backend connections to a server whose
// max_connections is lower would, after a burst of logins, hold every
// connection the server allows and lock everyone else (admins, backups,
// replication, other proxies) out with error 1040. The proxy therefore
// reads @@max_connections on a new connection to the node (the first, and
// again when the value is older than serverMaxRefresh) and caps its
// connections there at max_connections minus a reserve (serverReserve).

// serverMaxRefresh is how often a node's max_connections is read again.
const serverMaxRefresh = 30 * time.Second

// serverReserve returns how many of a server's max connections the proxy
// leaves to others: 10%, at least 10.
func serverReserve(maxConns int) int { return max(maxConns/10, 10) }

// connLimit returns the cap on connections to the node: configured
// (proxy.max_connections_per_backend; <= 0 means none), or the server's
// max_connections less serverReserve when that is known and lower (at
// least 1).
func (p *backendCounter) connLimit(configured int) int {
	sm := int(p.serverMax.Load())
	if sm <= 0 {
		return configured
	}
	c := max(sm-serverReserve(sm), 1)
	if configured <= 0 || c < configured {
		return c
	}
	return configured
}

// wantServerMax reports whether the node's max_connections should be read
// on the next new connection, and if so marks it as being read now.
func (p *backendCounter) wantServerMax(now time.Time) bool {
	last := p.serverMaxAt.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < serverMaxRefresh {
		return false
	}
	return p.serverMaxAt.CompareAndSwap(last, now.UnixNano())
}

// readServerMax sends SELECT @@max_connections on a freshly logged-in
// connection (br reads it) and returns the value. An ERR answer leaves the
// connection usable and returns 0 with no error; a broken exchange returns
// an error (the connection must be closed).
func readServerMax(conn net.Conn, br *bufio.Reader) (int, error) {
	q := append([]byte{mysql.COM_QUERY}, "SELECT @@max_connections"...)
	if err := writePacket(conn, 0, q); err != nil {
		return 0, err
	}
	p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	if err != nil {
		return 0, err
	}
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		return 0, nil
	}
	// One column; with MariaDB's cached metadata (MARIADB_CLIENT_CACHE_METADATA)
	// a second byte says whether its definition follows.
	if len(p) < 1 || len(p) > 2 || p[0] != 1 {
		return 0, fmt.Errorf("unexpected column count packet % x", p)
	}
	if len(p) == 1 || p[1] != 0 {
		if _, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax); err != nil { // the column definition
			return 0, err
		}
	}
	row, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	if err != nil {
		return 0, err
	}
	if len(row) > 0 && row[0] == mysql.EOF_HEADER && len(row) < 9 { // EOF after the columns (no CLIENT_DEPRECATE_EOF)
		if row, _, err = mysqlproto.ReadPacket(br, nil, handshakeMax); err != nil {
			return 0, err
		}
	}
	n, w, ok := mysqlproto.ReadLenEnc(row)
	if !ok || w+int(n) > len(row) {
		return 0, fmt.Errorf("unreadable row % x", row)
	}
	v, err := strconv.Atoi(string(row[w : w+int(n)]))
	if err != nil {
		return 0, fmt.Errorf("max_connections %q: %w", row[w:w+int(n)], err)
	}
	end, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax) // EOF or OK
	if err != nil {
		return 0, err
	}
	if len(end) == 0 || end[0] != mysql.EOF_HEADER {
		return 0, fmt.Errorf("unexpected packet after the row % x", end)
	}
	return v, nil
}
