package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// shortCase is one malformed command packet a client sends after login.
type shortCase struct {
	name string
	// payload is the packet's payload (command byte first); empty is a
	// zero-length packet.
	payload []byte
	// prepare prepares "SELECT 1" (statement id 1) first.
	prepare bool
	// ext: log in with these MariaDB extended capabilities.
	ext uint32
	// seq is the packet's sequence number (a command's is 0).
	seq byte
	// proxy is the answers through the proxy where they differ from
	// direct ones on purpose (nil: as direct).
	proxy []string
}

// shortResponse reads one response, its first packet within first and
// the rest within 10 s each, and summarises it: an ERR as its code,
// SQLSTATE and message, a result set as its rows, "none" when nothing
// came, "closed" when the connection ended.
func (rc *rawConn) shortResponse(first time.Duration) string {
	read := func(wait time.Duration) ([]byte, string) {
		_ = rc.c.SetReadDeadline(time.Now().Add(wait))
		p, seq, err := mysqlproto.ReadPacket(rc.r, nil, 0)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			return nil, "none"
		case err != nil:
			return nil, "closed"
		case len(p) == 0:
			return nil, "empty packet"
		case p[0] == mysql.ERR_HEADER:
			e := mysqlproto.ParseERR(p)
			if i := strings.Index(e.Message, " (switchyard: "); i > 0 {
				e.Message = e.Message[:i] // the server's message, and the proxy's hint
			}
			return nil, fmt.Sprintf("ERR %d %s %s (packet %d)", e.Code, e.State, e.Message, seq)
		case p[0] == mysql.OK_HEADER:
			return nil, fmt.Sprintf("OK (packet %d)", seq)
		case p[0] == mysql.EOF_HEADER && len(p) < 9:
			return nil, "EOF"
		case p[0] == 10 && len(p) > 40:
			return nil, "greeting" // MariaDB's answer to an empty COM_CHANGE_USER
		}
		return p, ""
	}
	p, end := read(first)
	if p == nil {
		return end
	}
	out := []string{}
	if len(p) > 4 && string(p[:4]) == "\x03def" {
		// COM_FIELD_LIST: definitions until EOF.
		for p != nil {
			out = append(out, "column")
			p, end = read(10 * time.Second)
		}
		return strings.Join(append(out, end), " ")
	}
	n, _, _ := mysqlproto.ReadLenEnc(p)
	for range n + 1 { // definitions, EOF
		if _, end = read(10 * time.Second); end != "" && end != "EOF" {
			return strings.Join(append(out, "bad result set:", end), " ")
		}
	}
	for {
		p, end = read(10 * time.Second)
		if p == nil {
			return strings.Join(append(out, end), " ")
		}
		out = append(out, fmt.Sprintf("row %q", p))
	}
}

// shortTranscript logs in to addr as the app user, sets @a, sends c, then
// SELECT 1, SELECT @a and SELECT 3, and returns every answer (a
// statement's id in a message as "<id>").
func shortTranscript(t *testing.T, h *harness, addr string, c shortCase) []string {
	var rc *rawConn
	if c.ext != 0 {
		rc = dialExt(t, addr, h.c.AppUser, h.c.AppPassword, 0, c.ext).rawConn
	} else {
		var err error
		if rc, err = dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "sbtest", 0, ""); err != nil {
			t.Fatalf("login to %s: %v", addr, err)
		}
	}
	defer rc.Close()
	rc.query("SET @a = 7")
	payload := c.payload
	idText := ""
	if c.prepare {
		// The statement's id in place of the payload's (as many bytes as
		// it has): ids through the proxy may differ from direct ones.
		id, _ := rc.prepare("SELECT 1")
		payload = append([]byte(nil), payload...)
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], id)
		copy(payload[1:min(len(payload), 5)], b[:])
		idText = fmt.Sprintf("(%d)", id)
	}
	b, _ := mysqlproto.AppendPacket(nil, c.seq, payload)
	if _, err := rc.c.Write(b); err != nil {
		t.Fatal(err)
	}
	// A command the server answers gets its answer within 3 s (MariaDB
	// waits 1 s before answering a refused COM_CHANGE_USER).
	out := []string{rc.shortResponse(3 * time.Second)}
	for _, q := range []string{"SELECT 1", "SELECT @a", "SELECT 3"} {
		b, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{mysql.COM_QUERY}, q...))
		if _, err := rc.c.Write(b); err != nil {
			out = append(out, "closed")
			break
		}
		if out = append(out, rc.shortResponse(10*time.Second)); out[len(out)-1] == "closed" {
			break
		}
	}
	if idText != "" {
		for i := range out {
			out[i] = strings.ReplaceAll(out[i], idText, "(<id>)")
		}
	}
	return out
}

// Commands too short for their fixed fields get, through both kinds of
// listener, what MariaDB answers a direct client (an error, nothing, or
// what it makes of the missing bytes), and the session stays in step: the
// SELECTs after each get their own answers, and @a is kept or lost as
// directly.
func TestShortCommandsAnswerAsDirect(t *testing.T) {
	h := txHarness(t, 0)
	const bulk = mysqlproto.MariaDBClientStmtBulkOperations
	cases := []shortCase{
		{name: "execute 1 byte", payload: []byte{mysql.COM_STMT_EXECUTE, 1}},
		{name: "execute 2 bytes", payload: []byte{mysql.COM_STMT_EXECUTE, 1, 0}},
		{name: "execute 4 bytes", payload: []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0}},
		{name: "execute 5 bytes", payload: []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0}},
		{name: "execute 5 bytes prepared", payload: []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0}, prepare: true},
		{name: "execute 9 bytes prepared", payload: []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0}, prepare: true},
		{name: "execute empty", payload: []byte{mysql.COM_STMT_EXECUTE}},
		{name: "fetch empty", payload: []byte{mysql.COM_STMT_FETCH}},
		{name: "fetch 1 byte", payload: []byte{mysql.COM_STMT_FETCH, 1}},
		{name: "fetch 4 bytes", payload: []byte{mysql.COM_STMT_FETCH, 1, 0, 0, 0}},
		{name: "fetch 1 byte prepared", payload: []byte{mysql.COM_STMT_FETCH, 1}, prepare: true},
		{name: "close empty", payload: []byte{mysql.COM_STMT_CLOSE}},
		{name: "close 1 byte", payload: []byte{mysql.COM_STMT_CLOSE, 1}},
		{name: "close 1 byte prepared", payload: []byte{mysql.COM_STMT_CLOSE, 1}, prepare: true},
		{name: "reset empty", payload: []byte{mysql.COM_STMT_RESET}},
		{name: "reset 1 byte", payload: []byte{mysql.COM_STMT_RESET, 1}},
		{name: "reset 1 byte prepared", payload: []byte{mysql.COM_STMT_RESET, 1}, prepare: true},
		{name: "long data empty", payload: []byte{mysql.COM_STMT_SEND_LONG_DATA}},
		{name: "long data 1 byte", payload: []byte{mysql.COM_STMT_SEND_LONG_DATA, 1}},
		{name: "long data 5 bytes prepared", payload: []byte{mysql.COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0}, prepare: true},
		{name: "init db empty", payload: []byte{mysql.COM_INIT_DB}},
		{name: "field list empty", payload: []byte{mysql.COM_FIELD_LIST}},
		{name: "field list no nul", payload: []byte{mysql.COM_FIELD_LIST, 'f', 't'}},
		{name: "set option empty", payload: []byte{mysql.COM_SET_OPTION}},
		{name: "set option 1 byte", payload: []byte{mysql.COM_SET_OPTION, 1}},
		{name: "prepare empty", payload: []byte{mysql.COM_STMT_PREPARE}},
		{name: "query empty", payload: []byte{mysql.COM_QUERY}},
		{name: "bulk empty", payload: []byte{mysqlproto.ComStmtBulkExecute}, ext: bulk},
		{name: "bulk 4 bytes", payload: []byte{mysqlproto.ComStmtBulkExecute, 1, 0, 0, 0}, ext: bulk},
		{name: "bulk 6 bytes prepared", payload: []byte{mysqlproto.ComStmtBulkExecute, 1, 0, 0, 0, 0}, ext: bulk, prepare: true},
		{name: "kill empty", payload: []byte{mysql.COM_PROCESS_KILL}},
		// Ids no connection has, direct or through the proxy: 0x7fffff.
		{name: "kill 3 bytes", payload: []byte{mysql.COM_PROCESS_KILL, 0xff, 0xff, 0x7f}},
		{name: "kill 8 bytes", payload: []byte{mysql.COM_PROCESS_KILL, 0xff, 0xff, 0x7f, 0, 9, 9, 9, 9}},
		// MariaDB starts a new handshake, which no client follows up (its
		// next command gets 1156 and the connection closes); the proxy
		// answers as to the truncated ones below.
		{name: "change user empty", payload: []byte{mysql.COM_CHANGE_USER}, proxy: []string{
			"ERR 1047 08S01 Unknown command (packet 1)", `row "\x011" EOF`, `row "\xfb" EOF`, `row "\x013" EOF`}},
		{name: "change user no nul", payload: []byte{mysql.COM_CHANGE_USER, 'a', 'p', 'p'}},
		{name: "change user short auth", payload: []byte{mysql.COM_CHANGE_USER, 'a', 'p', 'p', 0, 20, 1, 2}},
		{name: "zero-length packet", payload: []byte{}},
		{name: "packet 5", payload: []byte{mysql.COM_QUERY, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1'}, seq: 5},
		// Never relayed: the server's answer to a user without the
		// privilege (the app user has neither), the proxy's reason after it.
		{name: "shutdown", payload: []byte{mysql.COM_SHUTDOWN, 0}},
		{name: "binlog dump", payload: []byte{mysql.COM_BINLOG_DUMP, 4, 0, 0, 0, 0, 0, 2, 0, 0, 0}},
		// MariaDB answers 1045 (Access denied for user ...), the proxy 1227.
		{name: "register slave", payload: []byte{mysql.COM_REGISTER_SLAVE, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, proxy: []string{
			"ERR 1227 42000 Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation (packet 1)",
			`row "\x011" EOF`, `row "\x017" EOF`, `row "\x013" EOF`}},
		{name: "unknown command", payload: []byte{0x99}},
		{name: "bulk 7 bytes", payload: []byte{mysqlproto.ComStmtBulkExecute, 1, 0, 0, 0, 0, 0}, ext: bulk},
	}
	targets := []struct{ name, addr string }{
		{"direct", h.c.Nodes[0].Address},
		{"rw", h.srv.ListenerAddr("rw")},
		{"rwtx", h.srv.ListenerAddr("rwtx")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want := shortTranscript(t, h, targets[0].addr, c)
			t.Logf("direct: %q", want)
			if c.proxy != nil {
				want = c.proxy
			}
			for _, tg := range targets[1:] {
				if got := shortTranscript(t, h, tg.addr, c); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("through %s: %q, want %q", tg.name, got, want)
				}
			}
		})
	}
}
