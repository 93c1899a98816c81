package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// extConn is a raw client that negotiates MariaDB extended capabilities
// and reads responses with its own parser (not the proxy's), so the same
// exchange can be checked straight against a server and through the proxy.
type extConn struct {
	*rawConn
	ext uint32
}

// dialExt logs in like dialRaw with CLIENT_MYSQL clear and asks for ext
// (as far as the greeting offers it).
func dialExt(t *testing.T, addr, user, password string, caps, ext uint32) *extConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	rc := &rawConn{t: t, c: c, r: bufio.NewReader(c)}
	p, _, err := mysqlproto.ReadPacket(rc.r, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := mysqlproto.ParseHandshake(p)
	if err != nil {
		t.Fatal(err)
	}
	rc.greeting = g
	rc.caps = (caps | rawCaps) &^ mysql.CLIENT_LONG_PASSWORD & g.Capabilities
	x := &extConn{rawConn: rc, ext: ext & g.ExtCapabilities}
	resp := mysqlproto.HandshakeResponse{Capabilities: rc.caps, ExtCapabilities: x.ext, MaxPacketSize: 1 << 30, Charset: 45,
		User: user, AuthResponse: mysqlproto.NativeToken(g.Scramble, mysqlproto.NativeStage1(password)), AuthPlugin: mysql.AUTH_NATIVE_PASSWORD}
	rc.write(1, mysqlproto.AppendHandshakeResponse(nil, &resp))
	if p := rc.next(); p[0] != mysql.OK_HEADER {
		t.Fatalf("login to %s: %s", addr, describe(p))
	}
	return x
}

// extResult is one response as the client saw it.
type extResult struct {
	progress int      // progress reports before the result
	meta     bool     // column definitions were sent
	cols     [][]byte // column definitions
	rows     [][]byte
	end      []byte // the OK, EOF or ERR that ended it
}

// result reads one response to COM_QUERY, COM_STMT_EXECUTE or
// COM_STMT_BULK_EXECUTE (a single result).
func (x *extConn) result() extResult {
	x.t.Helper()
	var r extResult
	deprecate := x.caps&mysql.CLIENT_DEPRECATE_EOF != 0
	// Every packet must come in sequence, as the client library checks
	// ("packets out of order"): the proxy puts packets in.
	want := byte(1)
	next := func() []byte {
		x.t.Helper()
		p, seq, err := mysqlproto.ReadPacket(x.r, nil, 0)
		if err != nil {
			x.t.Fatalf("raw read: %v", err)
		}
		if seq != want {
			x.t.Fatalf("packet %x has sequence id %d, want %d", p, seq, want)
		}
		want = seq + 1
		return append([]byte(nil), p...)
	}
	for {
		p := next()
		switch {
		case mysqlproto.IsProgress(p):
			if x.ext&mysqlproto.MariaDBClientProgress == 0 {
				x.t.Fatalf("progress report without MARIADB_CLIENT_PROGRESS: %x", p)
			}
			r.progress++
			continue
		case p[0] == mysql.OK_HEADER || p[0] == mysql.ERR_HEADER:
			r.end = p
			return r
		}
		n, k, ok := mysqlproto.ReadLenEnc(p)
		if !ok {
			x.t.Fatalf("column count %x", p)
		}
		r.meta = true
		if x.ext&mysqlproto.MariaDBClientCacheMetadata != 0 {
			if len(p) != k+1 {
				x.t.Fatalf("column count without the metadata byte: %x", p)
			}
			r.meta = p[k] == 1
		}
		if r.meta {
			for range n {
				r.cols = append(r.cols, next())
			}
		}
		if !deprecate {
			if e := next(); e[0] != mysql.EOF_HEADER {
				x.t.Fatalf("expected EOF after the column definitions, got %s", describe(e))
			}
		}
		for {
			p := next()
			if (p[0] == mysql.EOF_HEADER && len(p) < 0xffffff) || p[0] == mysql.ERR_HEADER {
				r.end = p
				return r
			}
			r.rows = append(r.rows, p)
		}
	}
}

func (x *extConn) run(q string) extResult {
	x.t.Helper()
	x.cmd(mysql.COM_QUERY, []byte(q)...)
	r := x.result()
	if r.end[0] == mysql.ERR_HEADER {
		x.t.Fatalf("%s: %s", q, describe(r.end))
	}
	return r
}

// execInt executes statement id with one BIGINT parameter.
func (x *extConn) execInt(id uint32, v int64) extResult {
	x.t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, id)
	b = append(b, 0)                           // flags: no cursor
	b = binary.LittleEndian.AppendUint32(b, 1) // iterations
	b = append(b, 0, 1, mysql.MYSQL_TYPE_LONGLONG, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(v))
	x.cmd(mysql.COM_STMT_EXECUTE, b...)
	return x.result()
}

// bulkInsert sends COM_STMT_BULK_EXECUTE for a statement with a BIGINT and
// a string parameter, rows ids from..to-1, with or without the types.
func (x *extConn) bulkInsert(id uint32, from, to int, types bool) extResult {
	x.t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, id)
	flags := uint16(0)
	if types {
		flags = mysqlproto.MariaDBBulkSendTypes
	}
	b = binary.LittleEndian.AppendUint16(b, flags)
	if types {
		b = append(b, mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_VAR_STRING, 0)
	}
	for i := from; i < to; i++ {
		b = append(b, 0) // indicator: a value
		b = binary.LittleEndian.AppendUint64(b, uint64(i))
		b = append(b, 0)
		s := fmt.Sprintf("bulk-%d", i)
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(s)))
		b = append(b, s...)
	}
	x.cmd(mysqlproto.ComStmtBulkExecute, b...)
	return x.result()
}

func okAffectedRows(t *testing.T, p []byte) uint64 {
	t.Helper()
	if p[0] != mysql.OK_HEADER {
		t.Fatalf("expected OK, got %s", describe(p))
	}
	return okAffected(p)
}

// MariaDB extended capabilities through the proxy, each side by side with
// the same exchange straight against the primary: the greeting offers the
// backend's extended capabilities; JSON and POINT columns keep their
// extended type names; a prepared SELECT's second execute leaves its
// metadata out (cache metadata) and the relay still finds the result's
// end; a bulk insert of 2000 rows; and, after a reparent moves the session,
// the statements are prepared again on the new primary, which leaves their
// metadata out of the next execute: a session that holds the same
// definitions gets none, one whose definitions predate an ALTER gets the
// new ones put in by the proxy (in sequence), once; and a bulk execute
// without types gets the types put back.
// With and without CLIENT_DEPRECATE_EOF, session and transaction pooling.
func TestMariaDBExtendedCapabilities(t *testing.T) { poolings(t, testMariaDBExtendedCapabilities) }

func testMariaDBExtendedCapabilities(t *testing.T, pooling func(*config.Config)) {
	h := newHarness(t, pooling)
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.ext_t (id INT PRIMARY KEY, j JSON, g POINT, s VARCHAR(20))")
	mustExec(t, root, "INSERT INTO sbtest.ext_t VALUES (1, '{\"a\":1}', POINT(1,2), 'one'), (2, '[2]', POINT(3,4), 'two'), (3, NULL, NULL, 'three')")
	mustExec(t, root, "CREATE TABLE sbtest.ext_b (id BIGINT PRIMARY KEY, s VARCHAR(40))")
	const all = relayExtCaps
	for _, deprecate := range []bool{false, true} {
		t.Run(fmt.Sprintf("deprecate_eof=%v", deprecate), func(t *testing.T) {
			caps := uint32(0)
			if deprecate {
				caps = mysql.CLIENT_DEPRECATE_EOF
			}
			direct := dialExt(t, h.c.Nodes[0].Address, h.c.AppUser, h.c.AppPassword, caps, all)
			via := dialExt(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, caps, all)
			if g, d := via.greeting, direct.greeting; g.ExtCapabilities != d.ExtCapabilities&relayExtCaps || g.Capabilities&mysql.CLIENT_LONG_PASSWORD != 0 {
				t.Fatalf("proxy greeting caps %#x ext %#x; server caps %#x ext %#x", g.Capabilities, g.ExtCapabilities, d.Capabilities, d.ExtCapabilities)
			}
			if via.ext != all {
				t.Fatalf("negotiated extended capabilities %#x, want %#x", via.ext, all)
			}
			const q = "SELECT id, j, g, s FROM sbtest.ext_t ORDER BY id"
			dr, vr := direct.run(q), via.run(q)
			if len(vr.cols) != 4 || !bytes.Contains(vr.cols[1], []byte("json")) || !bytes.Contains(vr.cols[2], []byte("point")) {
				t.Fatalf("column definitions through the proxy lack the extended type names: %q", vr.cols)
			}
			if !equalPackets(dr.cols, vr.cols) || !equalPackets(dr.rows, vr.rows) {
				t.Fatalf("text result differs: direct %q / %q, proxy %q / %q", dr.cols, dr.rows, vr.cols, vr.rows)
			}
			// No metadata caching (relayExtCaps): every execute brings
			// its column definitions, directly as through the proxy.
			const ps = "SELECT id, j, s FROM sbtest.ext_t WHERE id >= ? ORDER BY id"
			did, _ := direct.prepare(ps)
			vid, _ := via.prepare(ps)
			d1, v1 := direct.execInt(did, 1), via.execInt(vid, 1)
			if !d1.meta || !v1.meta || !equalPackets(d1.cols, v1.cols) {
				t.Fatalf("first execute: metadata from the server %v, through the proxy %v", d1.meta, v1.meta)
			}
			if !equalPackets(d1.rows, v1.rows) || len(v1.rows) != 3 {
				t.Fatalf("binary results differ: direct %q, proxy %q", d1.rows, v1.rows)
			}
			width := 30
			if deprecate {
				width = 31
			}
			mustExec(t, root, fmt.Sprintf("ALTER TABLE sbtest.ext_t MODIFY s VARCHAR(%d)", width))
			d2, v2 := direct.execInt(did, 2), via.execInt(vid, 2)
			if !d2.meta || !v2.meta || len(v2.cols) != 3 || !equalPackets(d2.cols, v2.cols) {
				t.Fatalf("execute after ALTER TABLE: metadata sent by the server %v, through the proxy %v (%d columns)", d2.meta, v2.meta, len(v2.cols))
			}
			if !equalPackets(d2.rows, v2.rows) || len(v2.rows) != 2 {
				t.Fatalf("binary results differ: direct %q, proxy %q", d2.rows, v2.rows)
			}
			// Bulk insert.
			mustExec(t, root, "DELETE FROM sbtest.ext_b")
			bid, _ := via.prepare("INSERT INTO sbtest.ext_b (id, s) VALUES (?, ?)")
			if n := okAffectedRows(t, via.bulkInsert(bid, 0, 2000, true).end); n != 2000 {
				t.Fatalf("bulk insert affected %d rows, want 2000", n)
			}
			var count int
			if err := root.QueryRow("SELECT COUNT(*) FROM sbtest.ext_b WHERE s = CONCAT('bulk-', id)").Scan(&count); err != nil || count != 2000 {
				t.Fatalf("rows after the bulk insert: %d %v", count, err)
			}
		})
	}
	// A client asking for metadata caching does not get it through the
	// proxy.
	if c := dialExt(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, 0, all|mysqlproto.MariaDBClientCacheMetadata); c.ext&mysqlproto.MariaDBClientCacheMetadata != 0 {
		t.Fatalf("negotiated extended capabilities %#x: metadata caching offered", c.ext)
	}
	// A session move: the statements are prepared again on node2; every
	// execute there brings the definitions, the ALTER's for both sessions.
	via := dialExt(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, 0, all)
	stale := dialExt(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, 0, all)
	const ps = "SELECT id, s FROM sbtest.ext_t WHERE id >= ? ORDER BY id"
	sid, _ := via.prepare(ps)
	staleID, _ := stale.prepare(ps)
	bid, _ := via.prepare("INSERT INTO sbtest.ext_b (id, s) VALUES (?, ?)")
	okAffectedRows(t, via.bulkInsert(bid, 10000, 10010, true).end)
	mustExec(t, root, "ALTER TABLE sbtest.ext_t MODIFY s VARCHAR(50)")
	altered := via.execInt(sid, 1)
	if !altered.meta || len(altered.cols) != 2 || len(altered.rows) != 3 {
		t.Fatalf("execute after ALTER TABLE: metadata %v, %d rows", altered.meta, len(altered.rows))
	}
	reparent(t, h)
	h.srv.SetClusterState(sandboxState(h.c, 2, 1))
	r := via.execInt(sid, 2)
	if r.end[0] == mysql.ERR_HEADER || !r.meta || !equalPackets(r.cols, altered.cols) || len(r.rows) != 2 {
		t.Fatalf("first execute after the move: %s, metadata %v, %d rows", describe(r.end), r.meta, len(r.rows))
	}
	if r := stale.execInt(staleID, 1); r.end[0] == mysql.ERR_HEADER || !r.meta || !equalPackets(r.cols, altered.cols) || len(r.rows) != 3 {
		t.Fatalf("a session prepared before the ALTER, after the move: %s, metadata %v, columns %q (want %q), %d rows",
			describe(r.end), r.meta, r.cols, altered.cols, len(r.rows))
	}
	if r := stale.execInt(staleID, 2); r.end[0] == mysql.ERR_HEADER || !r.meta || len(r.rows) != 2 {
		t.Fatalf("its next execute: %s, metadata %v, %d rows", describe(r.end), r.meta, len(r.rows))
	}
	if n := okAffectedRows(t, via.bulkInsert(bid, 20000, 20010, false).end); n != 10 {
		t.Fatalf("bulk insert without types after the move affected %d rows", n)
	}
	var count, server int
	n2 := h.direct(1)
	if err := n2.QueryRow("SELECT COUNT(*), @@server_id FROM sbtest.ext_b WHERE id >= 20000").Scan(&count, &server); err != nil || count != 10 || server != 2 {
		t.Fatalf("rows on node2 after the move: %d (server %d) %v", count, server, err)
	}
}

// A progress report (MARIADB_CLIENT_PROGRESS) in the middle of an ALTER
// TABLE reaches the client and the statement's OK still ends the response.
func TestMariaDBProgressReports(t *testing.T) {
	h := newHarness(t, nil)
	root := h.direct(0)
	mustExec(t, root, "CREATE TABLE sbtest.prog_t (id INT PRIMARY KEY, pad VARCHAR(100))")
	mustExec(t, root, "INSERT INTO sbtest.prog_t SELECT seq, REPEAT('p', 100) FROM sbtest.seq_1_to_300000")
	via := dialExt(t, h.srv.ListenerAddr("rw"), h.c.AppUser, h.c.AppPassword, 0, mysqlproto.MariaDBClientProgress)
	if via.ext != mysqlproto.MariaDBClientProgress {
		t.Fatalf("negotiated %#x", via.ext)
	}
	via.run("SET SESSION progress_report_time = 1")
	start := time.Now()
	r := via.run("ALTER TABLE sbtest.prog_t FORCE, ALGORITHM=COPY")
	took := time.Since(start)
	if r.end[0] != mysql.OK_HEADER {
		t.Fatalf("ALTER ended with %s", describe(r.end))
	}
	if r.progress == 0 && took > 2*time.Second {
		t.Fatalf("no progress report in an ALTER TABLE of %s", took)
	}
	if r.progress == 0 {
		t.Skipf("the ALTER TABLE took %s, too short for a report (progress_report_time=1)", took)
	}
	t.Logf("%d progress reports in %s", r.progress, took)
	if rows := via.run("SELECT COUNT(*) FROM sbtest.prog_t").rows; len(rows) != 1 {
		t.Fatalf("after the ALTER: %q", rows)
	}
}

func equalPackets(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
