package mysqlproto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func frame(seq byte, payloads ...[]byte) []byte {
	var buf bytes.Buffer
	for _, p := range payloads {
		next, err := WritePacket(&buf, seq, p)
		if err != nil {
			panic(err)
		}
		seq = next
	}
	return buf.Bytes()
}

func TestReadPacketRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 250, 4096, MaxPacketPayload - 1, MaxPacketPayload, MaxPacketPayload + 1, 2*MaxPacketPayload + 7}
	for _, n := range sizes {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		wire := frame(3, payload)
		wantPackets := n/MaxPacketPayload + 1
		if got := countPackets(t, wire); got != wantPackets {
			t.Fatalf("size %d: %d physical packets, want %d", n, got, wantPackets)
		}
		r := bufio.NewReaderSize(bytes.NewReader(wire), 4096)
		got, seq, err := ReadPacket(r, nil, 0)
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("size %d: payload differs", n)
		}
		if want := byte(3 + wantPackets - 1); seq != want {
			t.Fatalf("size %d: last seq %d, want %d", n, seq, want)
		}
		if _, _, err := ReadPacket(r, nil, 0); err != io.EOF {
			t.Fatalf("size %d: after last packet got %v, want io.EOF", n, err)
		}
	}
}

func countPackets(t *testing.T, wire []byte) int {
	t.Helper()
	n := 0
	for len(wire) > 0 {
		h := ParseHeader(wire)
		wire = wire[HeaderSize+h.Len:]
		n++
	}
	return n
}

func TestAppendPacketMatchesWritePacket(t *testing.T) {
	for _, n := range []int{0, 5, MaxPacketPayload, MaxPacketPayload + 2} {
		payload := bytes.Repeat([]byte{9}, n)
		got, next := AppendPacket([]byte("x"), 7, payload)
		var want bytes.Buffer
		wnext, _ := WritePacket(&want, 7, payload)
		if !bytes.Equal(got[1:], want.Bytes()) || next != wnext {
			t.Fatalf("size %d: AppendPacket differs from WritePacket", n)
		}
	}
}

func TestReadPacketLimitsAndTruncation(t *testing.T) {
	wire := frame(0, make([]byte, 100))
	r := bufio.NewReader(bytes.NewReader(wire))
	if _, _, err := ReadPacket(r, nil, 99); !errors.Is(err, ErrPacketTooLarge) {
		t.Fatalf("limit: got %v, want ErrPacketTooLarge", err)
	}
	for cut := 1; cut < len(wire); cut++ {
		r := bufio.NewReader(bytes.NewReader(wire[:cut]))
		if _, _, err := ReadPacket(r, nil, 0); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: got %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestCopyPacketSmallAndLarge(t *testing.T) {
	small := []byte{0x03, 's', 'e', 'l'}
	large := bytes.Repeat([]byte{0xab}, 100_000)
	huge := bytes.Repeat([]byte{0xcd}, MaxPacketPayload+10)
	wire := frame(1, small, large, huge)
	src := bufio.NewReaderSize(bytes.NewReader(wire), 16<<10)
	var dst bytes.Buffer
	var seen []Packet
	for {
		p, err := CopyPacket(&dst, src)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p.Payload = append([]byte(nil), p.Payload...)
		seen = append(seen, p)
	}
	if !bytes.Equal(dst.Bytes(), wire) {
		t.Fatal("copied bytes differ from source")
	}
	if len(seen) != 4 {
		t.Fatalf("saw %d physical packets, want 4", len(seen))
	}
	if !bytes.Equal(seen[0].Payload, small) || seen[0].First != 0x03 || seen[0].Seq != 1 {
		t.Fatalf("small packet: %+v", seen[0])
	}
	if seen[1].Payload != nil || seen[1].First != 0xab || seen[1].Len != len(large) {
		t.Fatalf("large packet: len %d first %x payload %v", seen[1].Len, seen[1].First, seen[1].Payload != nil)
	}
	if seen[2].Len != MaxPacketPayload || seen[3].Len != 10 || seen[3].Seq != 4 {
		t.Fatalf("split packet: %d/%d seq %d", seen[2].Len, seen[3].Len, seen[3].Seq)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("peer gone") }

func TestCopyPacketWriteErrorIsMarked(t *testing.T) {
	for _, n := range []int{10, 100_000} {
		src := bufio.NewReaderSize(bytes.NewReader(frame(0, make([]byte, n))), 4096)
		_, err := CopyPacket(failWriter{}, src)
		var we *WriteError
		if !errors.As(err, &we) {
			t.Fatalf("size %d: got %v, want *WriteError", n, err)
		}
	}
	src := bufio.NewReaderSize(bytes.NewReader(frame(0, make([]byte, 100))[:50]), 4096)
	_, err := CopyPacket(io.Discard, src)
	var we *WriteError
	if errors.As(err, &we) || err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated source: got %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestSkipPacket(t *testing.T) {
	wire := frame(0, make([]byte, MaxPacketPayload+3), []byte{1, 2})
	r := bufio.NewReader(bytes.NewReader(wire))
	n, err := SkipPacket(r)
	if err != nil || n != MaxPacketPayload+3 {
		t.Fatalf("skip: %d, %v", n, err)
	}
	p, _, err := ReadPacket(r, nil, 0)
	if err != nil || !bytes.Equal(p, []byte{1, 2}) {
		t.Fatalf("after skip: %v %v", p, err)
	}
}

// FuzzReadPacket: arbitrary bytes never panic; whatever ReadPacket accepts,
// written back with WritePacket and read again, gives the same payload.
func FuzzReadPacket(f *testing.F) {
	f.Add(frame(0, []byte("select 1")))
	f.Add(frame(0, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0x00, 1, 2, 3})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for {
			p, _, err := ReadPacket(r, nil, 1<<20)
			if err != nil {
				return
			}
			var buf bytes.Buffer
			if _, err := WritePacket(&buf, 0, p); err != nil {
				t.Fatal(err)
			}
			q, _, err := ReadPacket(bufio.NewReader(&buf), nil, 0)
			if err != nil || !bytes.Equal(p, q) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}

// FuzzSplitPacketReassembly: any payload (with split set, one around the
// 16 MiB split boundary), read back through partial reads and any buffer
// size, reassembles to itself, and CopyPacket relays the
// exact bytes.
func FuzzSplitPacketReassembly(f *testing.F) {
	f.Add([]byte("abc"), uint16(1), uint16(7), false)
	f.Add([]byte("xyz"), uint16(3), uint16(900), true)
	f.Fuzz(func(t *testing.T, seed []byte, extra uint16, bufSize uint16, split bool) {
		n := int(extra)
		if split { // around the 16 MiB boundary: one or two physical packets
			n = MaxPacketPayload - 2 + n%5
		}
		payload := bytes.Repeat(append(seed, 1), 1+n/(len(seed)+1))[:n]
		wire := frame(0, payload)
		size := 16 + int(bufSize)%4096
		r := bufio.NewReaderSize(iotestHalf(wire), size)
		got, _, err := ReadPacket(r, nil, 0)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("reassembly: %v", err)
		}
		var dst bytes.Buffer
		src := bufio.NewReaderSize(iotestHalf(wire), size)
		for {
			if _, err := CopyPacket(&dst, src); err != nil {
				if err == io.EOF {
					break
				}
				t.Fatal(err)
			}
		}
		if !bytes.Equal(dst.Bytes(), wire) {
			t.Fatal("relay changed bytes")
		}
	})
}

// iotestHalf returns a reader that yields at most 3 bytes per Read, to
// exercise partial reads.
func iotestHalf(b []byte) io.Reader { return &slowReader{b: b} }

type slowReader struct{ b []byte }

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := min(3, len(p), len(s.b))
	copy(p, s.b[:n])
	s.b = s.b[n:]
	return n, nil
}
