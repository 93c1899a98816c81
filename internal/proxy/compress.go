package proxy

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"net"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Protocol compression (CLIENT_COMPRESS, zlib) between clients and the
// proxy. The proxy offers it whatever the backend offers and compresses
// itself: backend connections stay uncompressed (loopback or LAN, where
// zlib costs more CPU than the bytes it saves), so the relay and its
// parsing are the same for every client. MariaDB has no zstd
// (CLIENT_ZSTD_COMPRESSION_ALGORITHM is MySQL 8.0.18's; MariaDB 10.11 does
// not offer it), so neither does the proxy.
//
// A compressed session gets a zlink when its login OK has been sent
// (startCompression): from then on the client reader reads through the
// zlink's Decompressor and every write to the client (clientWrite) is
// framed. The relay writes the client through a 64 KB buffer, so a response
// leaves in frames of up to 64 KB: its packets are coalesced. An
// uncompressed session has no zlink and pays one nil check per write.
// Idle compressed sessions park like the others (clientread.go): the
// decompressor borrows its zlib reader from a pool for one frame at a time
// and the compressor its zlib writer for one write.

// compressLevel is the zlib level of frames sent to clients. BestSpeed: its
// writer resets cheaply (the other levels clear 512 KB of hash table on
// every reset) and it compresses result rows almost as well.
const compressLevel = zlib.BestSpeed

// zlink is the compressed-protocol state of a client connection.
type zlink struct {
	d mysqlproto.Decompressor
	// seen is d.Frames when the last write was framed, wseq the
	// compressed sequence id of the next frame sent: one more than the
	// last frame read (the client's command restarts the count at 0), then
	// counting up.
	seen uint64
	wseq byte
}

// zpools are the server's compression buffers, shared by its sessions.
type zpools struct {
	writers sync.Pool // *mysqlproto.Compressor
	readers sync.Pool // zlib readers (io.ReadCloser), see mysqlproto.Decompressor.Pool
	bufs    sync.Pool // *[]byte output scratch
}

func (z *zpools) init() {
	z.writers.New = func() any {
		c, err := mysqlproto.NewCompressor(compressLevel)
		if err != nil {
			panic(err) // compressLevel is a valid constant
		}
		return c
	}
	z.bufs.New = func() any { b := make([]byte, 0, clientWriteBuf+clientWriteBuf/8); return &b }
}

// startCompression switches the client connection to the compressed
// protocol; called right after the login OK was written. Bytes the reader
// holds already were sent after the OK, so they are frames: they go back in
// front of the source, to be read through the decompressor.
func (s *session) startCompression() {
	z := &zlink{}
	z.d.Pool = &s.srv.zpools.readers
	in := s.cin
	if n := s.cr.Buffered(); n > 0 || in.src.off < in.src.n {
		b, _ := s.cr.Peek(n)
		rest := make([]byte, 0, max(len(in.src.pre), n+in.src.n-in.src.off))
		rest = append(rest, b...)
		rest = append(rest, in.src.pre[in.src.off:in.src.n]...)
		in.src.pre, in.src.off, in.src.n = rest[:cap(rest)], 0, len(rest)
	}
	s.z = z
	z.d.Reset(&in.src)
	in.r.Reset(&z.d)
	s.srv.metrics.compressed.WithLabelValues(s.l.name).Inc()
}

// clientWrite writes p, one or more whole or partial packets, to the
// client: as it is, or as compressed frames (one write either way).
func (s *session) clientWrite(p []byte) (int, error) {
	if s.z == nil {
		if s.cio != nil && s.cio.c == s.client {
			return s.cio.Write(p)
		}
		return s.client.Write(p)
	}
	return s.z.write(s.client, p, &s.srv.zpools)
}

func (z *zlink) write(c net.Conn, p []byte, pools *zpools) (int, error) {
	if z.d.Frames != z.seen {
		z.seen, z.wseq = z.d.Frames, z.d.Seq+1
	}
	comp := pools.writers.Get().(*mysqlproto.Compressor)
	bp := pools.bufs.Get().(*[]byte)
	out, next, err := comp.AppendFrames((*bp)[:0], z.wseq, p)
	pools.writers.Put(comp)
	if err == nil {
		z.wseq = next
		_, err = c.Write(out)
	}
	if cap(out) <= 4*clientWriteBuf {
		*bp = out[:0]
		pools.bufs.Put(bp)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// SHOW STATUS LIKE 'Compression' reports the connection it runs on: relayed,
// it would report the proxy's uncompressed backend connection (OFF) to a
// compressed client. A compressed session gets the answer for its own
// connection from the proxy instead, as MariaDB gives it. Other forms (information_schema.SESSION_STATUS, patterns
// other than the exact name) still reach the backend.

// compressionStatusQuery reports whether q is SHOW [SESSION|LOCAL] STATUS
// LIKE 'Compression' (any letter case and spacing, an optional ';').
func compressionStatusQuery(q []byte) bool {
	words := make([]string, 0, 6)
	for _, f := range bytes.Fields(bytes.TrimRight(bytes.TrimSpace(q), "; \t\r\n")) {
		words = append(words, strings.ToLower(string(f)))
		if len(words) > 5 {
			return false
		}
	}
	if len(words) == 5 && (words[1] == "session" || words[1] == "local") {
		words = append(words[:1], words[2:]...)
	}
	return len(words) == 4 && words[0] == "show" && words[1] == "status" && words[2] == "like" &&
		(words[3] == "'compression'" || words[3] == `"compression"`)
}

// answerCompressionStatus consumes the pending COM_QUERY and answers it
// with the one-row result MariaDB sends for SHOW STATUS LIKE 'Compression'
// on a compressed connection (columns Variable_name, Value of
// information_schema.SESSION_STATUS). It returns the close reason.
func (s *session) answerCompressionStatus() string {
	if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
		return clientReason(err)
	}
	var out, p []byte
	seq := byte(1)
	put := func(payload []byte) { out, seq = mysqlproto.AppendPacket(out, seq, payload) }
	p = mysql.AppendLengthEncodedInteger(p[:0], 2)
	if s.cacheMeta() {
		p = append(p, 1) // metadata follows
	}
	put(p)
	for _, c := range [][2]string{{"Variable_name", "VARIABLE_NAME"}, {"Value", "VARIABLE_VALUE"}} {
		p = p[:0]
		for _, v := range []string{"def", "information_schema", "SESSION_STATUS", "SESSION_STATUS", c[0], c[1]} {
			p = mysql.AppendLengthEncodedInteger(p, uint64(len(v)))
			p = append(p, v...)
		}
		if s.ext&mysqlproto.MariaDBClientExtendedTypeInfo != 0 {
			p = append(p, 0) // no extended type information
		}
		p = append(p, 0x0c)
		p = binary.LittleEndian.AppendUint16(p, uint16(s.charset))
		p = binary.LittleEndian.AppendUint32(p, 4096)
		p = append(p, mysql.MYSQL_TYPE_VAR_STRING)
		p = binary.LittleEndian.AppendUint16(p, mysql.NOT_NULL_FLAG)
		p = append(p, 0, 0, 0) // decimals, filler
		put(p)
	}
	if !s.deprecateEOF() {
		put(mysqlproto.AppendEOF(nil, 0, s.status))
	}
	p = p[:0]
	for _, v := range []string{"Compression", "ON"} {
		p = mysql.AppendLengthEncodedInteger(p, uint64(len(v)))
		p = append(p, v...)
	}
	put(p)
	if s.deprecateEOF() {
		put(mysqlproto.AppendOKTerminator(nil, s.caps, &mysqlproto.OK{Status: s.status}))
	} else {
		put(mysqlproto.AppendEOF(nil, 0, s.status))
	}
	if _, err := s.clientWrite(out); err != nil {
		return closeClientGone
	}
	return ""
}
