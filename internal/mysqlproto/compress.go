package mysqlproto

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"sync"
)

// The compressed protocol (CLIENT_COMPRESS) wraps the packet stream, once
// the connection phase is over, in frames of a 7-byte header — 3 bytes of
// little-endian payload length, 1 byte of compressed sequence id, 3 bytes of
// uncompressed length — and a zlib stream of that many bytes (or, when the
// uncompressed length is 0, the bytes as they are). A frame carries any
// number of ordinary packets, or part of one: framing and packets are
// independent layers. The compressed sequence id counts frames and restarts
// at 0 with every command, like the packet sequence id.
// Layout: https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_compression_packet.html
// and https://mariadb.com/kb/en/0-packet/#compressed-packet.

// CompressedHeaderSize is the size of a compressed frame's header in bytes.
const CompressedHeaderSize = 7

// MinCompressLength: payloads shorter than this many bytes are sent
// uncompressed, as MariaDB and MySQL do (MIN_COMPRESS_LENGTH in
// sql/net_serv.cc).
const MinCompressLength = 50

// MaxFramePayload is the largest payload one compressed frame carries, in
// bytes, compressed or not (the header's lengths have 3 bytes).
const MaxFramePayload = 1<<24 - 1

// CompressedHeader is the decoded header of one compressed frame.
type CompressedHeader struct {
	// Len is the length of the frame's payload on the wire, in bytes.
	Len int
	// Seq is the compressed sequence id.
	Seq byte
	// RawLen is the payload's length after decompression, in bytes; 0
	// when the payload is not compressed.
	RawLen int
}

// ParseCompressedHeader decodes the first CompressedHeaderSize bytes of b.
func ParseCompressedHeader(b []byte) CompressedHeader {
	return CompressedHeader{
		Len:    int(b[0]) | int(b[1])<<8 | int(b[2])<<16,
		Seq:    b[3],
		RawLen: int(b[4]) | int(b[5])<<8 | int(b[6])<<16,
	}
}

func putCompressedHeader(b []byte, n int, seq byte, raw int) {
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), seq
	b[4], b[5], b[6] = byte(raw), byte(raw>>8), byte(raw>>16)
}

// appendBuf is an io.Writer appending to b.
type appendBuf struct{ b []byte }

func (a *appendBuf) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// Compressor frames data for the compressed protocol. It holds a zlib
// writer (its state is about 1 MB at the default level, less at
// zlib.BestSpeed): keep one per goroutine or pool them.
type Compressor struct {
	zw  *zlib.Writer
	out appendBuf
}

// NewCompressor returns a Compressor compressing at level (zlib.BestSpeed
// ... zlib.BestCompression, or zlib.DefaultCompression). An invalid level
// returns an error.
func NewCompressor(level int) (*Compressor, error) {
	c := &Compressor{}
	zw, err := zlib.NewWriterLevel(&c.out, level)
	if err != nil {
		return nil, fmt.Errorf("mysqlproto: compression level %d: %w", level, err)
	}
	c.zw = zw
	return c, nil
}

// AppendFrames appends data as compressed frames starting at compressed
// sequence id seq to dst and returns the extended buffer and the sequence id
// of the next frame. data is split into frames of at most MaxFramePayload
// bytes; a part shorter than MinCompressLength, or one that zlib does not
// make smaller, is sent uncompressed (RawLen 0).
func (c *Compressor) AppendFrames(dst []byte, seq byte, data []byte) ([]byte, byte, error) {
	for {
		n := min(len(data), MaxFramePayload)
		part := data[:n]
		start := len(dst)
		dst = append(dst, 0, 0, 0, 0, 0, 0, 0)
		compressed := false
		if n >= MinCompressLength {
			c.out.b = dst
			c.zw.Reset(&c.out)
			_, err := c.zw.Write(part)
			if err == nil {
				err = c.zw.Close()
			}
			dst, c.out.b = c.out.b, nil
			if err != nil {
				return dst[:start], seq, fmt.Errorf("mysqlproto: compressing a frame: %w", err)
			}
			if z := len(dst) - start - CompressedHeaderSize; z < n && z <= MaxFramePayload {
				putCompressedHeader(dst[start:], z, seq, n)
				compressed = true
			} else {
				dst = dst[:start+CompressedHeaderSize]
			}
		}
		if !compressed {
			putCompressedHeader(dst[start:], n, seq, 0)
			dst = append(dst, part...)
		}
		seq++
		data = data[n:]
		if len(data) == 0 {
			return dst, seq, nil
		}
	}
}

// Decompressor reads the packet stream carried by compressed frames: Read
// returns the frames' contents in order. It reads exactly one frame from
// its source at a time (never beyond it), so whatever follows the frame
// stays in the source. Seq is the compressed sequence id of the last frame
// read. Not safe for concurrent use.
type Decompressor struct {
	src  io.Reader
	hdr  [CompressedHeaderSize]byte
	buf  []byte // the current frame's contents
	off  int    // read position in buf
	wire []byte // scratch for a compressed payload
	br   bytes.Reader
	zr   io.ReadCloser
	// Seq is the compressed sequence id of the last frame read.
	Seq byte
	// Frames counts the frames read.
	Frames uint64
	// Pool, when set, lends the zlib reader (about 40 KB of state) for one
	// frame at a time instead of d keeping one: what a reader that waits
	// idle most of the time wants. It holds io.ReadCloser values made by
	// zlib.NewReader (an empty pool is fine).
	Pool *sync.Pool
}

// NewDecompressor returns a Decompressor reading frames from src.
func NewDecompressor(src io.Reader) *Decompressor { return &Decompressor{src: src} }

// Reset makes d read from src, keeping what it buffered.
func (d *Decompressor) Reset(src io.Reader) { d.src = src }

// Buffered returns the number of bytes of the current frame not read yet.
func (d *Decompressor) Buffered() int { return len(d.buf) - d.off }

// Read implements io.Reader. A frame whose compressed payload does not
// decompress to exactly its announced length returns an error wrapping
// ErrMalformed; a stream that ends inside a frame io.ErrUnexpectedEOF; one
// that ends between frames io.EOF.
func (d *Decompressor) Read(p []byte) (int, error) {
	for d.off == len(d.buf) {
		if err := d.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, d.buf[d.off:])
	d.off += n
	if d.off == len(d.buf) && cap(d.buf) > 64<<10 {
		d.buf, d.off = nil, 0 // idle connections keep small buffers only
	}
	return n, nil
}

// next reads one frame into buf.
func (d *Decompressor) next() error {
	if _, err := io.ReadFull(d.src, d.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			if err == io.EOF {
				return io.EOF
			}
			return io.ErrUnexpectedEOF
		}
		return err
	}
	h := ParseCompressedHeader(d.hdr[:])
	d.Seq = h.Seq
	d.Frames++
	if h.RawLen == 0 {
		d.buf = grow(d.buf[:0], h.Len)
		d.off = 0
		if _, err := io.ReadFull(d.src, d.buf); err != nil {
			d.buf = d.buf[:0]
			return unexpected(err)
		}
		return nil
	}
	d.wire = grow(d.wire[:0], h.Len)
	if _, err := io.ReadFull(d.src, d.wire); err != nil {
		return unexpected(err)
	}
	d.br.Reset(d.wire)
	var err error
	if d.zr == nil && d.Pool != nil {
		d.zr, _ = d.Pool.Get().(io.ReadCloser)
	}
	if d.zr == nil {
		d.zr, err = zlib.NewReader(&d.br)
	} else {
		err = d.zr.(zlib.Resetter).Reset(&d.br, nil)
	}
	if err != nil {
		return fmt.Errorf("%w: compressed frame: %v", ErrMalformed, err)
	}
	d.buf = grow(d.buf[:0], h.RawLen)
	d.off = 0
	if _, err := io.ReadFull(d.zr, d.buf); err != nil {
		d.buf = d.buf[:0]
		return fmt.Errorf("%w: compressed frame of %d bytes does not hold %d: %v", ErrMalformed, h.Len, h.RawLen, err)
	}
	var one [1]byte
	k, _ := d.zr.Read(one[:])
	if d.Pool != nil {
		d.Pool.Put(d.zr)
		d.zr = nil
	}
	if k > 0 {
		d.buf = d.buf[:0]
		return fmt.Errorf("%w: compressed frame holds more than its announced %d bytes", ErrMalformed, h.RawLen)
	}
	if cap(d.wire) > 64<<10 {
		d.wire = nil
	}
	return nil
}
