package logx

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTest(t *testing.T) (*Aggregator, *fakeClock, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	h := slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	c := &fakeClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	a := New(slog.New(h), Options{Interval: 10 * time.Second, Now: c.now, AfterFunc: func(time.Duration, func()) {}})
	return a, c, &b
}

func lines(b *bytes.Buffer) []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// The first line of a key is written at once, the rest of the interval is
// counted, and one summary per interval carries the count and the newest
// attributes; a quiet interval forgets the key.
func TestAggregatorCountsPerInterval(t *testing.T) {
	a, c, b := newTest(t)
	if !a.Warn("dial|node1", "backend connection failed", "node", "node1", "n", 0) {
		t.Fatal("first line held back")
	}
	for i := 1; i <= 999; i++ {
		c.add(5 * time.Millisecond) // 999 lines over ~5 s
		if a.Warn("dial|node1", "backend connection failed", "node", "node1", "n", i) {
			t.Fatalf("line %d written inside the interval", i)
		}
	}
	// Another key is independent.
	if !a.Info("noroute|main-rw", "client login refused", "reason", "no route") {
		t.Fatal("first line of a second key held back")
	}
	a.Flush() // interval not over: nothing
	if got := lines(b); len(got) != 2 {
		t.Fatalf("before the interval ends: %d lines, want 2:\n%s", len(got), b)
	}
	c.add(5*time.Second + 5*time.Millisecond)
	a.Flush()
	got := lines(b)
	if len(got) != 3 {
		t.Fatalf("after one interval: %d lines, want 3:\n%s", len(got), b)
	}
	for _, w := range []string{"level=WARN", `msg="backend connection failed"`, "node=node1", "n=999", "suppressed=999", "interval=10s"} {
		if !strings.Contains(got[2], w) {
			t.Fatalf("summary %q lacks %q", got[2], w)
		}
	}
	// Still repeating: counted again, one summary next interval.
	for i := range 10 {
		c.add(100 * time.Millisecond)
		if a.Warn("dial|node1", "backend connection failed", "node", "node1", "n", 1000+i) {
			t.Fatal("line written during the second interval")
		}
	}
	c.add(9 * time.Second)
	a.Flush()
	got = lines(b)
	if len(got) != 4 || !strings.Contains(got[3], "suppressed=10 ") {
		t.Fatalf("second interval: want a 4th line with suppressed=10:\n%s", b)
	}
	// A quiet interval: no summary, key forgotten, next line at once.
	c.add(10 * time.Second)
	a.Flush()
	if n := len(lines(b)); n != 4 {
		t.Fatalf("quiet interval wrote %d lines, want 4:\n%s", n, b)
	}
	if !a.Warn("dial|node1", "backend connection failed", "node", "node1", "n", -1) {
		t.Fatal("line after a quiet interval held back")
	}
}

// Close writes what is pending and lets every later line through.
func TestAggregatorClose(t *testing.T) {
	a, c, b := newTest(t)
	a.Warn("k", "m")
	a.Warn("k", "m")
	a.Warn("k", "m")
	c.add(time.Second)
	a.Close()
	got := lines(b)
	if len(got) != 2 || !strings.Contains(got[1], "suppressed=2 interval=1s") {
		t.Fatalf("close: want the first line and a summary of 2 over 1s:\n%s", b)
	}
	if !a.Warn("k", "m") || !a.Warn("k", "m") {
		t.Fatal("lines after Close held back")
	}
}

// Keys beyond MaxKeys share one overflow key instead of growing the map.
func TestAggregatorBoundsKeys(t *testing.T) {
	a, _, b := newTest(t)
	for i := range MaxKeys + 50 {
		a.Warn(strings.Repeat("k", 1)+time.Duration(i).String(), "m")
	}
	if n := len(a.keys); n > MaxKeys+1 {
		t.Fatalf("%d keys tracked, want at most %d", n, MaxKeys+1)
	}
	if n := len(lines(b)); n != MaxKeys+1 {
		t.Fatalf("%d lines, want %d (one per key and one for the overflow)", n, MaxKeys+1)
	}
}

// A disabled level is neither written nor tracked.
func TestAggregatorDisabledLevel(t *testing.T) {
	a, _, b := newTest(t)
	if a.Log(slog.LevelDebug, "k", "m") || len(a.keys) != 0 || b.Len() != 0 {
		t.Fatal("debug line written or tracked with an info logger")
	}
}

// With the real timer the summary comes on its own.
func TestAggregatorTimerFlushes(t *testing.T) {
	var mu sync.Mutex
	var b bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return b.Write(p) })
	a := New(slog.New(slog.NewTextHandler(w, nil)), Options{Interval: 50 * time.Millisecond})
	a.Warn("k", "m")
	a.Warn("k", "m")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		s := b.String()
		mu.Unlock()
		if strings.Contains(s, "suppressed=1") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no summary line within 10 s of a 50 ms interval")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
