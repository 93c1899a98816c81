package mysqlproto

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// noise returns n bytes zlib cannot shrink.
func noise(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCompressedFramesRoundTrip(t *testing.T) {
	c, err := NewCompressor(zlib.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("switchyard row "), (MaxFramePayload/15)+1000) // > one frame, compressible
	for _, tc := range []struct {
		name   string
		data   []byte
		frames int
		raw    bool // first frame sent uncompressed
	}{
		{"short", []byte("\x01\x00\x00\x00\x0e"), 1, true},
		{"compressible", bytes.Repeat([]byte("a"), 1000), 1, false},
		{"incompressible", noise(300), 1, true},
		{"two frames", big, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire, next, err := c.AppendFrames(nil, 3, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if want := byte(3 + tc.frames); next != want {
				t.Fatalf("next seq %d, want %d", next, want)
			}
			h := ParseCompressedHeader(wire)
			if h.Seq != 3 || (h.RawLen == 0) != tc.raw {
				t.Fatalf("first header %+v, want seq 3 raw=%v", h, tc.raw)
			}
			d := NewDecompressor(bytes.NewReader(wire))
			got, err := io.ReadAll(d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("round trip changed %d bytes into %d", len(tc.data), len(got))
			}
			if d.Frames != uint64(tc.frames) || d.Seq != next-1 {
				t.Fatalf("read %d frames ending at seq %d, want %d ending at %d", d.Frames, d.Seq, tc.frames, next-1)
			}
		})
	}
}

func TestDecompressorRejectsBadFrames(t *testing.T) {
	c, _ := NewCompressor(zlib.BestSpeed)
	good, _, _ := c.AppendFrames(nil, 0, bytes.Repeat([]byte("x"), 200))
	short := append([]byte(nil), good...)
	short[4]++ // announces 201 bytes
	long := append([]byte(nil), good...)
	long[4]-- // announces 199 bytes
	garbage := append([]byte(nil), good[:CompressedHeaderSize]...)
	garbage = append(garbage, bytes.Repeat([]byte{0x55}, len(good)-CompressedHeaderSize)...)
	for name, wire := range map[string][]byte{"short": short, "long": long, "garbage": garbage} {
		_, err := io.ReadAll(NewDecompressor(bytes.NewReader(wire)))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	_, err := io.ReadAll(NewDecompressor(bytes.NewReader(good[:10])))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: err %v, want io.ErrUnexpectedEOF", err)
	}
}

func FuzzDecompressor(f *testing.F) {
	c, _ := NewCompressor(zlib.BestSpeed)
	seed, _, _ := c.AppendFrames(nil, 0, bytes.Repeat([]byte("seed"), 40))
	f.Add(seed)
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, wire []byte) {
		d := NewDecompressor(bytes.NewReader(wire))
		got, err := io.ReadAll(d)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same contents.
		again, _, err := c.AppendFrames(nil, 0, got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(NewDecompressor(bytes.NewReader(again)))
		if err != nil || !bytes.Equal(back, got) {
			t.Fatalf("re-encoded contents differ: %v", err)
		}
	})
}

// BenchmarkAppendFrames: the cost of framing one client write (a response
// or part of one) at zlib.BestSpeed, by size.
func BenchmarkAppendFrames(b *testing.B) {
	c, err := NewCompressor(zlib.BestSpeed)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{100, 400, 4096, 65536} {
		data := bytes.Repeat([]byte("row 12345 abcdefghij "), n/21+1)[:n]
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			var out []byte
			b.SetBytes(int64(n))
			for b.Loop() {
				out, _, _ = c.AppendFrames(out[:0], 1, data)
			}
		})
	}
}
