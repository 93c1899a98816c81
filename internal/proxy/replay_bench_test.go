package proxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// BenchmarkReplayRecording measures what transaction replay costs on the
// query path, without a database: a loopback backend answers every
// COM_QUERY point select with a canned one-row text result set. "off" has
// failover.transaction_replay off (the default: the statement is not even
// classified for replay); "on-autocommit" has it on with statements
// outside any transaction (classified, not recorded); "on-in-tx" has it on
// inside transactions (every statement copied and its rows hashed; the
// backend ends the transaction every 50 statements, as a COMMIT would).
// cpu-us/op is the CPU of the whole process (client, proxy and fake
// backend) per query.
func BenchmarkReplayRecording(b *testing.B) {
	for _, mode := range []string{"off", "on-autocommit", "on-in-tx"} {
		b.Run(mode, func(b *testing.B) {
			backend := startTxBackend(b, mode == "on-in-tx")
			cfg := &config.Config{
				Users:     []config.User{{Name: "bench", Password: "pw"}},
				Clusters:  []config.Cluster{{Name: "c", Nodes: []config.Node{{Name: "n1", Address: backend}}}},
				Listeners: []config.Listener{{Name: "rw", Address: "127.0.0.1:0", Cluster: "c", Role: "primary"}},
			}
			cfg.Clusters[0].Failover.TransactionReplay = mode != "off"
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
			cmd, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{mysql.COM_QUERY}, "SELECT c FROM bench_t WHERE id=42"...))
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
		})
	}
}

// startTxBackend runs a fake server that answers the proxy's
// session-tracking SET with OK and every later COM_QUERY with one text
// row (DEPRECATE_EOF layout); with inTx the terminator says a transaction
// is open, except every 50th.
func startTxBackend(b *testing.B, inTx bool) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	result := func(status uint16) []byte {
		var resp []byte
		seq := byte(1)
		resp, seq = mysqlproto.AppendPacket(resp, seq, []byte{1})
		coldef := []byte("\x03def\x06sbtest\x07bench_t\x07bench_t\x01c\x01c\x0c\x21\x00\xe0\x01\x00\x00\xfe\x00\x00\x00\x00\x00")
		resp, seq = mysqlproto.AppendPacket(resp, seq, coldef)
		row := append([]byte{120}, make([]byte, 120)...)
		resp, seq = mysqlproto.AppendPacket(resp, seq, row)
		resp, _ = mysqlproto.AppendPacket(resp, seq, mysqlproto.AppendOKTerminator(nil, 0, &mysqlproto.OK{Status: status}))
		return resp
	}
	open, closed := result(mysql.SERVER_STATUS_AUTOCOMMIT), result(mysql.SERVER_STATUS_AUTOCOMMIT)
	if inTx {
		open = result(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveTx(c, open, closed)
		}
	}()
	return l.Addr().String()
}

func serveTx(c net.Conn, open, closed []byte) {
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
	first := true
	for n := 1; ; n++ {
		p, _, err := mysqlproto.ReadPacket(r, buf, 0)
		if err != nil || (len(p) > 0 && p[0] == mysql.COM_QUIT) {
			return
		}
		out := open
		switch {
		case first:
			out, first = ok, false // the proxy's session-tracking SET after login
		case n%50 == 0:
			out = closed
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
