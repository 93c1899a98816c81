package proxy

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// BenchmarkRelayPointSelect measures a prepared point select (the sysbench
// oltp_point_select statement) against the sandbox primary directly and
// through the proxy, one client, so the difference of ns/op is the latency
// the proxy adds per query. proxy-cpu-us/op is the CPU the whole test process
// used per query minus the direct run's (the proxy's share).
//
// proxy-txpool runs it through a listener with pooling: transaction, where
// every statement (autocommit) takes the session's connection from the
// pool and gives it back: the difference to proxy is the cost of that
// checkout and return.
func BenchmarkRelayPointSelect(b *testing.B) {
	h := txHarness(b, 0)
	setup := h.direct(0)
	mustExec(b, setup, "CREATE TABLE sbtest.bench_t (id INT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60))")
	mustExec(b, setup, "INSERT INTO sbtest.bench_t SELECT seq, seq, REPEAT('c', 120), REPEAT('p', 60) FROM sbtest.seq_1_to_1000")
	var directCPU float64
	for _, target := range []string{"direct", "proxy", "proxy-txpool"} {
		b.Run(target, func(b *testing.B) {
			dsn := h.dsn("rw", "sbtest", nil)
			switch target {
			case "direct":
				dsn = h.c.DSN(0, h.c.AppUser, h.c.AppPassword, "sbtest")
			case "proxy-txpool":
				dsn = h.dsn("rwtx", "sbtest", nil)
			}
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			stmt, err := db.Prepare("SELECT c FROM bench_t WHERE id=?")
			if err != nil {
				b.Fatal(err)
			}
			defer stmt.Close()
			var c string
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := stmt.QueryRow(i%1000 + 1).Scan(&c); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			perOp := float64(processCPU()-cpu0) / float64(b.N) / 1e3
			if target == "direct" {
				directCPU = perOp
			} else {
				b.ReportMetric(perOp-directCPU, "proxy-cpu-us/op")
			}
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSessionRelayInProcess measures the proxy's own work per query
// without a database: a loopback backend answers every COM_STMT_EXECUTE with
// a canned one-row binary result set. allocs/op must stay 0 (client and fake
// backend are allocation-free too).
func BenchmarkSessionRelayInProcess(b *testing.B) { benchSessionRelay(b, 1) }

// BenchmarkSessionRelayRows is BenchmarkSessionRelayInProcess with a
// result of 100 rows of one CHAR(120) column, the shape of sysbench's
// range selects: the cost of relaying rows.
func BenchmarkSessionRelayRows(b *testing.B) { benchSessionRelay(b, 100) }

func benchSessionRelay(b *testing.B, rows int) {
	backend := startCannedBackend(b, rows)
	cfg := &config.Config{
		Users:     []config.User{{Name: "bench", Password: "pw"}},
		Clusters:  []config.Cluster{{Name: "c", Nodes: []config.Node{{Name: "n1", Address: backend}}}},
		Listeners: []config.Listener{{Name: "rw", Address: "127.0.0.1:0", Cluster: "c", Role: "primary"}},
	}
	cfg.ApplyDefaults()
	srv, err := New(Options{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	srv.SetClusterState(topo.ClusterState{Cluster: "c", Primary: "n1", Epoch: 1,
		Nodes: []topo.NodeState{{Name: "n1", Address: backend}}})
	rc, err := dialRaw(b, srv.ListenerAddr("rw"), "bench", "pw", "", mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	_ = rc.c.SetDeadline(time.Time{})
	cmd, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{mysql.COM_STMT_EXECUTE}, executeArgs(1, 0)...))
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-us/op") }()
	for b.Loop() {
		if _, err := rc.c.Write(cmd); err != nil {
			b.Fatal(err)
		}
		for {
			p, _, err := mysqlproto.ReadPacket(rc.r, buf, 0)
			if err != nil {
				b.Fatal(err)
			}
			if p[0] == mysql.EOF_HEADER {
				break
			}
		}
	}
}

// startCannedBackend runs a fake server on loopback that accepts any login,
// answers COM_QUERY with OK (the proxy's session-tracking SET) and every
// other command with the same binary result set (one column, rows rows,
// DEPRECATE_EOF layout).
func startCannedBackend(b *testing.B, rows int) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	var resp []byte
	seq := byte(1)
	resp, seq = mysqlproto.AppendPacket(resp, seq, []byte{1})
	coldef := []byte("\x03def\x06sbtest\x07bench_t\x07bench_t\x01c\x01c\x0c\x21\x00\xe0\x01\x00\x00\xfe\x00\x00\x00\x00\x00")
	resp, seq = mysqlproto.AppendPacket(resp, seq, coldef)
	row := append([]byte{0, 0, 120}, make([]byte, 120)...)
	for range rows {
		resp, seq = mysqlproto.AppendPacket(resp, seq, row)
	}
	resp, _ = mysqlproto.AppendPacket(resp, seq, mysqlproto.AppendOKTerminator(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT}))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveCanned(c, resp)
		}
	}()
	return l.Addr().String()
}

func serveCanned(c net.Conn, resp []byte) {
	defer c.Close()
	hs := mysqlproto.Handshake{ServerVersion: "5.5.5-10.11.0-MariaDB-canned", ConnectionID: 1, Scramble: []byte("abcdefghijklmnopqrst"),
		Capabilities: proxyCaps | relayCaps, Charset: 45, Status: mysql.SERVER_STATUS_AUTOCOMMIT, AuthPlugin: mysql.AUTH_NATIVE_PASSWORD}
	w := bufio.NewWriter(c)
	_, _ = mysqlproto.WritePacket(w, 0, mysqlproto.AppendHandshake(nil, &hs))
	_ = w.Flush()
	r := bufio.NewReader(c)
	if _, _, err := mysqlproto.ReadPacket(r, nil, 0); err != nil {
		return
	}
	_, _ = mysqlproto.WritePacket(w, 2, mysqlproto.AppendOK(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT}))
	_ = w.Flush()
	buf := make([]byte, 0, 4096)
	ok, _ := mysqlproto.AppendPacket(nil, 1, mysqlproto.AppendOK(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT}))
	for {
		p, _, err := mysqlproto.ReadPacket(r, buf, 0)
		if err != nil || (len(p) > 0 && p[0] == mysql.COM_QUIT) {
			return
		}
		out := resp
		if len(p) > 0 && p[0] == mysql.COM_QUERY {
			out = ok // the proxy's session-tracking SET after login
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// BenchmarkTxPoolCheckout measures one autocommit point select through a
// transaction-pooled listener limited to one backend connection per node,
// by what each checkout has to do: "same" (one client: it takes its own
// previous connection back, nothing sent), "clean" (two clients without
// session state alternate on the connection: no reset) and "reset" (two
// clients that each set a session variable alternate: COM_RESET_CONNECTION
// and the client's SET, pipelined, before every statement).
func BenchmarkTxPoolCheckout(b *testing.B) {
	h := txHarness(b, 1)
	mustExec(b, h.direct(0), "CREATE TABLE sbtest.bench_co (id INT PRIMARY KEY, c CHAR(120))")
	mustExec(b, h.direct(0), "INSERT INTO sbtest.bench_co SELECT seq, REPEAT('c', 120) FROM sbtest.seq_1_to_1000")
	for _, kind := range []string{checkoutSame, checkoutClean, checkoutReset} {
		b.Run(kind, func(b *testing.B) {
			clients := []*client{h.client("rwtx", "sbtest")}
			if kind != checkoutSame {
				clients = append(clients, h.client("rwtx", "sbtest"))
			}
			for i, c := range clients {
				defer c.close()
				if kind == checkoutReset {
					c.exec(b, fmt.Sprintf("SET SESSION max_statement_time = %d", 10+i))
				}
			}
			before := h.checkouts("node1", kind)
			var c string
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				cl := clients[i%len(clients)]
				if err := cl.conn.QueryRowContext(context.Background(), fmt.Sprintf("SELECT c FROM bench_co WHERE id = %d", i%1000+1)).Scan(&c); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := h.checkouts("node1", kind) - before; n < b.N/2 {
				b.Fatalf("%d checkouts of kind %s for %d statements", n, kind, b.N)
			}
		})
	}
}

// BenchmarkOKSessionState measures what the proxy does to an OK packet
// that carries session state (a write's last_gtid under the proxy's
// tracking) before relaying it: "strip" for a client without
// CLIENT_SESSION_TRACK, "filter" for one with the server's default
// tracking settings (the entry is dropped), "keep" for one whose settings
// keep it (the block is rebuilt as it was). allocs/op must stay 0.
func BenchmarkOKSessionState(b *testing.B) {
	entry := mysql.AppendLengthEncodedInteger(nil, 9)
	entry = append(entry, "last_gtid"...)
	entry = mysql.AppendLengthEncodedInteger(entry, 8)
	entry = append(entry, "0-1-1234"...)
	state := append([]byte{mysqlproto.SessionTrackSystemVariables}, mysql.AppendLengthEncodedInteger(nil, uint64(len(entry)))...)
	state = append(state, entry...)
	ok := mysqlproto.AppendOK(nil, mysql.CLIENT_SESSION_TRACK, &mysqlproto.OK{AffectedRows: 1,
		Status: mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED, SessionState: state})
	defaults := newTrackSettings("autocommit,character_set_client,character_set_connection,character_set_results,time_zone", "0", "1", "OFF")
	withGTID := newTrackSettings("last_gtid,time_zone", "0", "1", "OFF")
	dst := make([]byte, 0, 256)
	for _, c := range []struct {
		name string
		f    func([]byte) []byte
	}{
		{"strip", func(d []byte) []byte { return stripState(d, ok) }},
		{"filter", func(d []byte) []byte { return defaults.filterState(d, ok) }},
		{"keep", func(d []byte) []byte { return withGTID.filterState(d, ok) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dst = c.f(dst)
			}
		})
	}
}

// BenchmarkRelayResultSet measures the relay of one binary result set of
// 100 rows (one CHAR(120) column, DEPRECATE_EOF layout) from a buffered
// backend reader to a buffered client writer, with no sockets: the
// proxy's own cost per result set (cpu-us/op: CPU time of the process,
// which the machine's load distorts less than ns/op). allocs/op must
// stay 0.
func BenchmarkRelayResultSet(b *testing.B) {
	var resp []byte
	seq := byte(1)
	coldef := []byte("\x03def\x06sbtest\x07bench_t\x07bench_t\x01c\x01c\x0c\x21\x00\xe0\x01\x00\x00\xfe\x00\x00\x00\x00\x00")
	resp, seq = mysqlproto.AppendPacket(resp, seq, coldef)
	row := append([]byte{0, 0, 120}, make([]byte, 120)...)
	for range 100 {
		resp, seq = mysqlproto.AppendPacket(resp, seq, row)
	}
	resp, _ = mysqlproto.AppendPacket(resp, seq, mysqlproto.AppendOKTerminator(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT}))
	src := bytes.NewReader(resp)
	s := &session{caps: mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_DEPRECATE_EOF}
	s.br = bufio.NewReaderSize(src, backendReadBuf)
	s.cw = bufio.NewWriterSize(io.Discard, clientWriteBuf)
	b.ReportAllocs()
	b.SetBytes(int64(len(resp)))
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-us/op") }()
	for b.Loop() {
		src.Reset(resp)
		s.br.Reset(src)
		more, err := s.relayResultSet(1, true)
		if err != nil || more || s.rows != 100 {
			b.Fatalf("relayResultSet: more %v, err %v, %d rows", more, err, s.rows)
		}
	}
}
