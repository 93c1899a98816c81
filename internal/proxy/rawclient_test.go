package proxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// rawConn is a minimal MySQL client built on mysqlproto, for commands the
// Go driver does not send (COM_RESET_CONNECTION, COM_CHANGE_USER,
// COM_STMT_FETCH with cursors, COM_FIELD_LIST, COM_STATISTICS, ...).
type rawConn struct {
	t        testing.TB
	c        net.Conn
	r        *bufio.Reader
	caps     uint32
	scramble []byte
	greeting *mysqlproto.Handshake
	// loginStatus is the server status of the login OK.
	loginStatus uint16
}

const rawCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION |
	mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_MULTI_RESULTS |
	mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_PS_MULTI_RESULTS

// dialRaw logs in as user/password with caps (plus rawCaps) and plugin (""
// = mysql_native_password). A refused login returns the server's
// *mysql.MyError.
func dialRaw(t testing.TB, addr, user, password, db string, caps uint32, plugin string) (*rawConn, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	rc := &rawConn{t: t, c: c, r: bufio.NewReader(c)}
	p, _, err := mysqlproto.ReadPacket(rc.r, nil, 0)
	if err != nil {
		c.Close()
		return nil, err
	}
	g, err := mysqlproto.ParseHandshake(p)
	if err != nil {
		c.Close()
		return nil, err
	}
	rc.greeting = g
	rc.scramble = g.Scramble
	rc.caps = (caps | rawCaps) & g.Capabilities
	if db != "" {
		rc.caps |= mysql.CLIENT_CONNECT_WITH_DB
	}
	if plugin == "" {
		plugin = mysql.AUTH_NATIVE_PASSWORD
	}
	var token []byte
	if plugin == mysql.AUTH_NATIVE_PASSWORD && password != "" {
		token = mysqlproto.NativeToken(g.Scramble, mysqlproto.NativeStage1(password))
	} else if password != "" {
		token = []byte("not-a-native-token-xx") // what another plugin would send
	}
	resp := mysqlproto.HandshakeResponse{Capabilities: rc.caps, MaxPacketSize: 1 << 30, Charset: 45, User: user,
		AuthResponse: token, Database: db, AuthPlugin: plugin}
	rc.write(1, mysqlproto.AppendHandshakeResponse(nil, &resp))
	for {
		p, seq, err := mysqlproto.ReadPacket(rc.r, nil, 0)
		if err != nil {
			c.Close()
			return nil, err
		}
		switch p[0] {
		case mysql.OK_HEADER:
			rc.loginStatus, _ = mysqlproto.OKStatus(p)
			return rc, nil
		case mysql.ERR_HEADER:
			c.Close()
			return nil, mysqlproto.ParseERR(p)
		case mysql.EOF_HEADER:
			sw, err := mysqlproto.ParseAuthSwitchRequest(p)
			if err != nil || sw.Plugin != mysql.AUTH_NATIVE_PASSWORD {
				c.Close()
				return nil, fmt.Errorf("unexpected auth switch %v %v", sw, err)
			}
			rc.scramble = sw.Data
			var tok []byte
			if password != "" {
				tok = mysqlproto.NativeToken(sw.Data, mysqlproto.NativeStage1(password))
			}
			rc.write(seq+1, tok)
		default:
			c.Close()
			return nil, fmt.Errorf("unexpected login packet %x", p)
		}
	}
}

func (rc *rawConn) Close() { _ = rc.c.Close() }

func (rc *rawConn) write(seq byte, payload []byte) {
	rc.t.Helper()
	b, _ := mysqlproto.AppendPacket(nil, seq, payload)
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatalf("raw write: %v", err)
	}
}

// cmd sends a command packet (sequence 0).
func (rc *rawConn) cmd(command byte, args ...byte) {
	rc.t.Helper()
	rc.write(0, append([]byte{command}, args...))
}

// next reads the next logical packet; a read error fails the test.
func (rc *rawConn) next() []byte {
	rc.t.Helper()
	p, _, err := mysqlproto.ReadPacket(rc.r, nil, 0)
	if err != nil {
		rc.t.Fatalf("raw read: %v", err)
	}
	return append([]byte(nil), p...)
}

// expectOK reads one packet and fails unless it is an OK; returns its status.
func (rc *rawConn) expectOK() uint16 {
	rc.t.Helper()
	p := rc.next()
	if p[0] != mysql.OK_HEADER {
		rc.t.Fatalf("expected OK, got %s", describe(p))
	}
	st, _ := mysqlproto.OKStatus(p)
	return st
}

func describe(p []byte) string {
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		return mysqlproto.ParseERR(p).Error()
	}
	return fmt.Sprintf("%x", p)
}

// textResult reads a text-protocol result set (after COM_QUERY) and returns
// the rows as lists of column values (NULL as "<nil>") and the final status.
func (rc *rawConn) textResult() ([][]string, uint16) {
	rc.t.Helper()
	p := rc.next()
	switch p[0] {
	case mysql.OK_HEADER:
		st, _ := mysqlproto.OKStatus(p)
		return nil, st
	case mysql.ERR_HEADER:
		rc.t.Fatalf("query failed: %s", describe(p))
	}
	n, _, _ := mysqlproto.ReadLenEnc(p)
	for range n {
		rc.next()
	}
	if rc.caps&mysql.CLIENT_DEPRECATE_EOF == 0 {
		rc.next()
	}
	var rows [][]string
	for {
		p := rc.next()
		if p[0] == mysql.EOF_HEADER && len(p) < 0xffffff {
			var st uint16
			if rc.caps&mysql.CLIENT_DEPRECATE_EOF != 0 {
				st, _ = mysqlproto.OKStatus(p)
			} else {
				_, st, _ = mysqlproto.ParseEOF(p)
			}
			return rows, st
		}
		if p[0] == mysql.ERR_HEADER {
			rc.t.Fatalf("row error: %s", describe(p))
		}
		var row []string
		for pos := 0; pos < len(p); {
			if p[pos] == 0xfb {
				row = append(row, "<nil>")
				pos++
				continue
			}
			l, k, _ := mysqlproto.ReadLenEnc(p[pos:])
			row = append(row, string(p[pos+k:pos+k+int(l)]))
			pos += k + int(l)
		}
		rows = append(rows, row)
	}
}

// query runs a single-result text query and returns its rows.
func (rc *rawConn) query(q string) [][]string {
	rc.t.Helper()
	rc.cmd(mysql.COM_QUERY, []byte(q)...)
	rows, _ := rc.textResult()
	return rows
}

// prepare prepares q and returns the statement id and column count.
func (rc *rawConn) prepare(q string) (uint32, int) {
	rc.t.Helper()
	rc.cmd(mysql.COM_STMT_PREPARE, []byte(q)...)
	p := rc.next()
	if p[0] != mysql.OK_HEADER {
		rc.t.Fatalf("prepare %q: %s", q, describe(p))
	}
	ok, err := mysqlproto.ParseStmtPrepareOK(p)
	if err != nil {
		rc.t.Fatal(err)
	}
	for _, n := range []uint16{ok.Params, ok.Columns} {
		for range n {
			rc.next()
		}
		if n > 0 && rc.caps&mysql.CLIENT_DEPRECATE_EOF == 0 {
			rc.next()
		}
	}
	return ok.StatementID, int(ok.Columns)
}

// executeArgs is a COM_STMT_EXECUTE payload without parameters.
func executeArgs(id uint32, flags byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, id)
	b = append(b, flags)
	return binary.LittleEndian.AppendUint32(b, 1)
}
