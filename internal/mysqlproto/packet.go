package mysqlproto

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// HeaderSize is the size of a packet header: 3 bytes of little-endian payload
// length and 1 byte of sequence id.
const HeaderSize = 4

// MaxPacketPayload is the largest payload one physical packet carries
// (0xffffff bytes). A logical payload of this size or more is split into
// packets of exactly MaxPacketPayload bytes followed by one shorter packet
// (possibly empty).
const MaxPacketPayload = 1<<24 - 1

// Errors returned by the framing functions. Test with errors.Is.
var (
	// ErrPacketTooLarge: a logical packet is larger than the reader's limit.
	// The stream cannot be resynchronised; close the connection.
	ErrPacketTooLarge = errors.New("mysqlproto: packet larger than the allowed maximum")
	// ErrMalformed: a packet's payload does not have the expected layout.
	ErrMalformed = errors.New("mysqlproto: malformed packet")
)

// Header is the decoded 4-byte header of one physical packet.
type Header struct {
	// Len is the payload length in bytes (0..MaxPacketPayload).
	Len int
	// Seq is the sequence id.
	Seq byte
}

// ParseHeader decodes a packet header from the first 4 bytes of b.
func ParseHeader(b []byte) Header {
	return Header{Len: int(b[0]) | int(b[1])<<8 | int(b[2])<<16, Seq: b[3]}
}

// PutHeader writes the header for a payload of length n (≤ MaxPacketPayload)
// and sequence id seq into the first 4 bytes of b.
func PutHeader(b []byte, n int, seq byte) {
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), seq
}

// ReadPacket reads one logical packet from r, joining continuation packets
// (a physical packet of MaxPacketPayload bytes is followed by more of the same
// payload). The payload is appended to buf[:0] and returned; seq is the
// sequence id of the last physical packet read. A payload larger than max
// bytes returns ErrPacketTooLarge (max ≤ 0 means no limit). A stream that ends
// inside a packet returns io.ErrUnexpectedEOF; one that ends before any byte
// returns io.EOF.
func ReadPacket(r *bufio.Reader, buf []byte, max int) (payload []byte, seq byte, err error) {
	payload = buf[:0]
	first := true
	for {
		hb, err := r.Peek(HeaderSize)
		if err != nil {
			if first && err == io.EOF && len(hb) == 0 {
				return nil, 0, io.EOF
			}
			return nil, 0, unexpected(err)
		}
		h := ParseHeader(hb)
		if _, err := r.Discard(HeaderSize); err != nil {
			return nil, 0, unexpected(err)
		}
		if max > 0 && len(payload)+h.Len > max {
			return nil, h.Seq, fmt.Errorf("%w: %d bytes or more, limit %d", ErrPacketTooLarge, len(payload)+h.Len, max)
		}
		start := len(payload)
		payload = grow(payload, h.Len)
		if _, err := io.ReadFull(r, payload[start:]); err != nil {
			return nil, h.Seq, unexpected(err)
		}
		seq = h.Seq
		first = false
		if h.Len < MaxPacketPayload {
			return payload, seq, nil
		}
	}
}

// WritePacket writes payload as one logical packet starting at sequence id
// seq, splitting it into physical packets when it is MaxPacketPayload bytes
// or larger. It returns the sequence id the next packet must use.
func WritePacket(w io.Writer, seq byte, payload []byte) (next byte, err error) {
	var hdr [HeaderSize]byte
	for {
		n := len(payload)
		if n > MaxPacketPayload {
			n = MaxPacketPayload
		}
		PutHeader(hdr[:], n, seq)
		seq++
		if _, err := w.Write(hdr[:]); err != nil {
			return seq, err
		}
		if _, err := w.Write(payload[:n]); err != nil {
			return seq, err
		}
		payload = payload[n:]
		if n < MaxPacketPayload {
			return seq, nil
		}
	}
}

// AppendPacket appends payload framed as one logical packet starting at
// sequence id seq to b (split like WritePacket) and returns the extended
// buffer and the next sequence id. It lets a caller send header and payload
// with a single write.
func AppendPacket(b []byte, seq byte, payload []byte) ([]byte, byte) {
	var hdr [HeaderSize]byte
	for {
		n := min(len(payload), MaxPacketPayload)
		PutHeader(hdr[:], n, seq)
		seq++
		b = append(b, hdr[:]...)
		b = append(b, payload[:n]...)
		payload = payload[n:]
		if n < MaxPacketPayload {
			return b, seq
		}
	}
}

// Packet describes one physical packet passed through CopyPacket.
type Packet struct {
	Header
	// Payload is the whole payload when the packet fitted in the reader's
	// buffer, else nil. It aliases the reader's buffer and is valid only
	// until the next read from it.
	Payload []byte
	// First is the first payload byte (0 for an empty payload).
	First byte
}

// CopyPacket copies one physical packet (header and payload, unchanged) from
// src to dst without allocating. Packets that fit in src's buffer are written
// with a single Write; larger ones are streamed in buffer-sized chunks. Read
// errors are returned as they are (io.EOF before the first byte,
// io.ErrUnexpectedEOF inside a packet); write errors are wrapped in
// *WriteError so callers can tell which side failed.
func CopyPacket(dst io.Writer, src *bufio.Reader) (Packet, error) {
	hb, err := src.Peek(HeaderSize)
	if err != nil {
		if err == io.EOF && len(hb) == 0 {
			return Packet{}, io.EOF
		}
		return Packet{}, unexpected(err)
	}
	h := ParseHeader(hb)
	total := HeaderSize + h.Len
	if total <= src.Size() {
		b, err := src.Peek(total)
		if err != nil {
			return Packet{Header: h}, unexpected(err)
		}
		p := Packet{Header: h, Payload: b[HeaderSize:]}
		if h.Len > 0 {
			p.First = b[HeaderSize]
		}
		if _, err := dst.Write(b); err != nil {
			return p, &WriteError{Err: err}
		}
		_, _ = src.Discard(total) // cannot fail: total bytes are buffered
		return p, nil
	}
	b, err := src.Peek(HeaderSize + 1)
	if err != nil {
		return Packet{Header: h}, unexpected(err)
	}
	p := Packet{Header: h, First: b[HeaderSize]}
	if err := copyN(dst, src, total); err != nil {
		return p, err
	}
	return p, nil
}

// copyN streams exactly n bytes from src to dst through src's buffer.
func copyN(dst io.Writer, src *bufio.Reader, n int) error {
	for n > 0 {
		k := src.Size()
		if k > n {
			k = n
		}
		b, err := src.Peek(k)
		if len(b) == 0 && err != nil {
			return unexpected(err)
		}
		if len(b) > k {
			b = b[:k]
		}
		if _, werr := dst.Write(b); werr != nil {
			return &WriteError{Err: werr}
		}
		_, _ = src.Discard(len(b))
		n -= len(b)
	}
	return nil
}

// SkipPacket discards one logical packet from r (continuations included)
// without copying it anywhere and returns the number of payload bytes skipped.
func SkipPacket(r *bufio.Reader) (int, error) {
	total := 0
	for {
		hb, err := r.Peek(HeaderSize)
		if err != nil {
			return total, unexpected(err)
		}
		h := ParseHeader(hb)
		if _, err := r.Discard(HeaderSize + h.Len); err != nil {
			return total, unexpected(err)
		}
		total += h.Len
		if h.Len < MaxPacketPayload {
			return total, nil
		}
	}
}

// WriteError wraps an error returned by the destination of CopyPacket, so a
// relay can tell a failed write (the peer it writes to is gone) from a failed
// read.
type WriteError struct{ Err error }

// Error implements error.
func (e *WriteError) Error() string { return "write: " + e.Err.Error() }

// Unwrap returns the underlying write error.
func (e *WriteError) Unwrap() error { return e.Err }

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, len(b)+n+len(b)/4)
	copy(nb, b)
	return nb
}
