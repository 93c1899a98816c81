package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// TestSockIOAsConn: sockIO's reads and writes behave as net.Conn's: data
// both ways (a write larger than the socket buffer waits for the reader),
// a read deadline is a timeout, Close ends a waiting read with
// net.ErrClosed, the peer's close is io.EOF, and a write to a reset peer
// fails.
func TestSockIOAsConn(t *testing.T) {
	a, b := tcpPair(t)
	x := newSockIO(a)
	if x == nil {
		t.Fatal("newSockIO: nil for a TCP connection")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: more than the socket buffers
	done := make(chan error, 1)
	go func() {
		got, err := io.ReadAll(io.LimitReader(b, int64(len(big))))
		if err == nil && !bytes.Equal(got, big) {
			err = errors.New("peer read other bytes than written")
		}
		done <- err
	}()
	if n, err := x.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := x.Read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}

	_ = a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := x.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v, want a timeout", err)
	}
	_ = a.SetReadDeadline(time.Time{})

	go func() { time.Sleep(50 * time.Millisecond); b.Close() }()
	if _, err := x.Read(buf); err != io.EOF {
		t.Fatalf("Read after the peer closed: %v, want io.EOF", err)
	}
	var werr error
	for range 50 { // the first write after the peer's close may still succeed (then RST)
		if _, werr = x.Write([]byte("x")); werr != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(werr, &oe) || oe.Op != "write" {
		t.Fatalf("Write to a closed peer: %v, want a write *net.OpError", werr)
	}

	c, d := tcpPair(t)
	y := newSockIO(c)
	go func() { time.Sleep(50 * time.Millisecond); c.Close() }()
	if _, err := y.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a connection closed meanwhile: %v, want net.ErrClosed", err)
	}
	_ = d
}

// TestSockIODeferredWrite: a write deferred to the next Read reaches the
// peer before that Read waits, and its answer is read — also when the
// peer answers at once and when it answers late; a deferred write larger
// than the socket buffers is finished before the read; a Write before the
// Read sends the deferred bytes first; a deferred write to a reset peer
// is returned by the Read as a *mysqlproto.WriteError.
func TestSockIODeferredWrite(t *testing.T) {
	a, b := tcpPair(t)
	x := newSockIO(a)
	buf := make([]byte, 64)
	echo := func(delay time.Duration, n int) <-chan error {
		done := make(chan error, 1)
		go func() {
			got := make([]byte, n)
			if _, err := io.ReadFull(b, got); err != nil {
				done <- err
				return
			}
			time.Sleep(delay)
			_, err := b.Write(got[len(got)-min(len(got), 8):])
			done <- err
		}()
		return done
	}
	for _, delay := range []time.Duration{0, 30 * time.Millisecond} {
		for i := 0; i < 50; i++ {
			done := echo(delay, 5)
			x.deferNextWrite()
			if n, err := x.Write([]byte("ping!")); err != nil || n != 5 {
				t.Fatalf("deferred Write: %d, %v", n, err)
			}
			if n, err := x.Read(buf); err != nil || string(buf[:n]) != "ping!" {
				t.Fatalf("Read after a deferred write (peer delay %s): %q, %v", delay, buf[:n], err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if delay > 0 {
				break
			}
		}
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := echo(0, len(big))
	x.deferNextWrite()
	if _, err := x.Write(big); err != nil {
		t.Fatal(err)
	}
	if n, err := x.Read(buf); err != nil || string(buf[:n]) != "89abcdef" {
		t.Fatalf("Read after a deferred 4 MiB write: %q, %v", buf[:n], err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	done = echo(0, 10)
	x.deferNextWrite()
	_, _ = x.Write([]byte("first"))
	if _, err := x.Write([]byte("secnd")); err != nil {
		t.Fatal(err)
	}
	if n, err := x.Read(buf); err != nil || string(buf[:n]) != "rstsecnd" {
		t.Fatalf("Read after a deferred and a plain write: %q, %v (want the last 8 bytes of firstsecnd)", buf[:n], err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A reset peer: the deferred write (or the read after it) fails, and
	// a failed write is a WriteError.
	b.(*net.TCPConn).SetLinger(0)
	b.Close()
	time.Sleep(20 * time.Millisecond)
	x.deferNextWrite()
	_, _ = x.Write([]byte("lost"))
	_, err := x.Read(buf)
	if err == nil {
		t.Fatal("Read after a deferred write to a reset peer: no error")
	}
	var we *mysqlproto.WriteError
	if !errors.As(err, &we) {
		t.Fatalf("Read after a deferred write to a reset peer: %v (%T), want a *mysqlproto.WriteError", err, err)
	}
}
