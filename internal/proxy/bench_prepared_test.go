package proxy

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// BenchmarkSessionRelayPrepared is BenchmarkSessionRelayInProcess with a
// statement the client really prepared (one parameter, types sent with every
// execute as go-sql-driver does), so the proxy's per-execute bookkeeping
// (statement lookup, parameter types, hot-read sampling) is measured too.
// cpu-us/op is the CPU of the whole process (client, proxy and fake
// backend) per execute.
func BenchmarkSessionRelayPrepared(b *testing.B) { benchRelayPrepared(b, false) }

// BenchmarkSessionRelayPreparedHold is BenchmarkSessionRelayPrepared where
// a failover hold is possible (failover.mode auto, a promotable replica
// published): each autocommit execute is also kept to be sent again if the
// primary is lost before it ran (failoverhold.go keepExecForLoss).
func BenchmarkSessionRelayPreparedHold(b *testing.B) { benchRelayPrepared(b, true) }

func benchRelayPrepared(b *testing.B, hold bool) {
	backend := startPreparedBackend(b)
	cfg := &config.Config{
		Users:     []config.User{{Name: "bench", Password: "pw"}},
		Clusters:  []config.Cluster{{Name: "c", Nodes: []config.Node{{Name: "n1", Address: backend}}}},
		Listeners: []config.Listener{{Name: "rw", Address: "127.0.0.1:0", Cluster: "c", Role: "primary"}},
	}
	if hold {
		cfg.Clusters[0].Failover.Mode = config.FailoverAuto
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
	st := topo.ClusterState{Cluster: "c", Primary: "n1", Epoch: 1,
		Nodes: []topo.NodeState{{Name: "n1", Address: backend}}}
	if hold {
		st.AutoFailover = &topo.AutoFailover{Ready: true, Candidate: "n2"}
	}
	srv.SetClusterState(st)
	rc, err := dialRaw(b, srv.ListenerAddr("rw"), "bench", "pw", "", mysql.CLIENT_DEPRECATE_EOF, "")
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	_ = rc.c.SetDeadline(time.Time{})
	id, _ := rc.prepare("SELECT c FROM bench_t WHERE id=?")
	args := binary.LittleEndian.AppendUint32(nil, id)
	args = append(args, 0)
	args = binary.LittleEndian.AppendUint32(args, 1)
	args = append(args, 0, 1, mysql.MYSQL_TYPE_LONGLONG, 0)
	args = binary.LittleEndian.AppendUint64(args, 42)
	cmd, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{mysql.COM_STMT_EXECUTE}, args...))
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

// startPreparedBackend is startCannedBackend that also answers
// COM_STMT_PREPARE (one parameter, one column).
func startPreparedBackend(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	coldef := []byte("\x03def\x06sbtest\x07bench_t\x07bench_t\x01c\x01c\x0c\x21\x00\xe0\x01\x00\x00\xfe\x00\x00\x00\x00\x00")
	var resp []byte
	seq := byte(1)
	resp, seq = mysqlproto.AppendPacket(resp, seq, []byte{1})
	resp, seq = mysqlproto.AppendPacket(resp, seq, coldef)
	row := append([]byte{0, 0, 120}, make([]byte, 120)...)
	resp, seq = mysqlproto.AppendPacket(resp, seq, row)
	resp, _ = mysqlproto.AppendPacket(resp, seq, mysqlproto.AppendOKTerminator(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT}))
	var prep []byte
	prep, seq = mysqlproto.AppendPacket(nil, 1, mysqlproto.AppendStmtPrepareOK(nil, mysqlproto.StmtPrepareOK{StatementID: 1, Columns: 1, Params: 1}))
	prep, seq = mysqlproto.AppendPacket(prep, seq, coldef) // parameter definition
	prep, _ = mysqlproto.AppendPacket(prep, seq, coldef)   // column definition
	ok, _ := mysqlproto.AppendPacket(nil, 1, mysqlproto.AppendOK(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT}))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
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
				for {
					p, _, err := mysqlproto.ReadPacket(r, buf, 0)
					if err != nil || len(p) == 0 || p[0] == mysql.COM_QUIT {
						return
					}
					out := resp
					switch p[0] {
					case mysql.COM_QUERY:
						out = ok
					case mysql.COM_STMT_PREPARE:
						out = prep
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}
