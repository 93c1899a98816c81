package mysqlproto

import (
	"bytes"
	"encoding/binary"
)

// cursor reads fields from a payload; every method reports false instead of
// panicking when the payload is too short.
type cursor struct {
	b   []byte
	pos int
}

func (c *cursor) left() int { return len(c.b) - c.pos }

func (c *cursor) rest() []byte {
	r := c.b[c.pos:]
	c.pos = len(c.b)
	return r
}

func (c *cursor) byte1() (byte, bool) {
	if c.left() < 1 {
		return 0, false
	}
	v := c.b[c.pos]
	c.pos++
	return v, true
}

func (c *cursor) uint16() (uint16, bool) {
	if c.left() < 2 {
		return 0, false
	}
	v := binary.LittleEndian.Uint16(c.b[c.pos:])
	c.pos += 2
	return v, true
}

func (c *cursor) uint32() (uint32, bool) {
	if c.left() < 4 {
		return 0, false
	}
	v := binary.LittleEndian.Uint32(c.b[c.pos:])
	c.pos += 4
	return v, true
}

func (c *cursor) bytes(n int) ([]byte, bool) {
	if n < 0 || c.left() < n {
		return nil, false
	}
	v := c.b[c.pos : c.pos+n : c.pos+n]
	c.pos += n
	return v, true
}

// nulString reads up to the next NUL byte and skips it.
func (c *cursor) nulString() ([]byte, bool) {
	i := bytes.IndexByte(c.b[c.pos:], 0)
	if i < 0 {
		return nil, false
	}
	v := c.b[c.pos : c.pos+i : c.pos+i]
	c.pos += i + 1
	return v, true
}

// lenenc reads a length-encoded integer. 0xfb (NULL) and 0xff are refused.
func (c *cursor) lenenc() (uint64, bool) {
	v, n, ok := ReadLenEnc(c.b[c.pos:])
	if !ok {
		return 0, false
	}
	c.pos += n
	return v, true
}

func (c *cursor) lenencBytes() ([]byte, bool) {
	n, ok := c.lenenc()
	if !ok || n > uint64(c.left()) {
		return nil, false
	}
	return c.bytes(int(n))
}

// ReadLenEnc decodes a length-encoded integer at the start of b and returns
// its value and size in bytes. ok is false when b is too short or starts with
// 0xfb (NULL) or 0xff (not an integer).
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_dt_integers.html
func ReadLenEnc(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xfb, 0xff:
		return 0, 0, false
	case 0xfc:
		if len(b) < 3 {
			return 0, 0, false
		}
		return uint64(binary.LittleEndian.Uint16(b[1:])), 3, true
	case 0xfd:
		if len(b) < 4 {
			return 0, 0, false
		}
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, true
	case 0xfe:
		if len(b) < 9 {
			return 0, 0, false
		}
		return binary.LittleEndian.Uint64(b[1:]), 9, true
	}
	return uint64(b[0]), 1, true
}
