package proxy

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// TestPacketTooLargeGetsServersError: a statement larger than the
// server's max_allowed_packet gets, through the rw listener as directly,
// the server's ERR 1153 (ER_NET_PACKET_TOO_LARGE, "Got a packet bigger
// than 'max_allowed_packet' bytes") and the connection is closed; not the
// proxy's "primary lost" error, and the proxy goes on serving new
// sessions on that primary.
func TestPacketTooLargeGetsServersError(t *testing.T) {
	h := newHarness(t, nil)
	root := h.direct(0)
	var orig string
	if err := root.QueryRow("SELECT @@global.max_allowed_packet").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	mustExec(t, root, "SET GLOBAL max_allowed_packet = 1048576")
	t.Cleanup(func() { _, _ = root.Exec("SET GLOBAL max_allowed_packet=" + orig) })
	big := append([]byte("SELECT '"), bytes.Repeat([]byte{'x'}, 3<<20)...)
	big = append(big, '\'')
	for _, tc := range []struct{ name, addr string }{
		{"direct", h.c.Nodes[0].Address},
		{"rw", h.srv.ListenerAddr("rw")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dialRaw(t, tc.addr, h.c.AppUser, h.c.AppPassword, "sbtest", 0, "")
			if err != nil {
				t.Fatalf("login: %v", err)
			}
			defer c.Close()
			go func() {
				// The server stops reading: the rest of the write may fail.
				b, _ := mysqlproto.AppendPacket(nil, 0, append([]byte{mysql.COM_QUERY}, big...))
				_, _ = c.c.Write(b)
			}()
			_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			p, _, err := mysqlproto.ReadPacket(c.r, nil, 0)
			if err != nil {
				t.Fatalf("reading the answer: %v, want ERR 1153", err)
			}
			if p[0] != mysql.ERR_HEADER {
				t.Fatalf("answer % x, want ERR 1153", p[:min(len(p), 16)])
			}
			if e := mysqlproto.ParseERR(p); e.Code != mysql.ER_NET_PACKET_TOO_LARGE {
				t.Fatalf("answer %d %s, want ERR 1153", e.Code, e.Message)
			}
			if _, _, err := mysqlproto.ReadPacket(c.r, nil, 0); err == nil {
				t.Fatal("the connection stayed open after ERR 1153")
			} else if err != io.EOF {
				t.Logf("after ERR 1153: %v", err)
			}
		})
	}
	rw := h.db("rw", "sbtest", nil)
	if id := serverID(t, rw); id != 1 {
		t.Fatalf("a new session after the refused packet runs on server_id %d, want 1", id)
	}
}
