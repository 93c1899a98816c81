package logx

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is the summary interval of an Aggregator made with
// interval 0.
const DefaultInterval = 10 * time.Second

// MaxKeys bounds the keys an Aggregator tracks at once; a line whose key
// would exceed it is counted under the key "(other)" with its message.
const MaxKeys = 1024

// overflowKey is where lines go once MaxKeys keys are tracked.
const overflowKey = "(other)"

// Aggregator logs the first line of each key at once and then, while the
// key keeps repeating, one summary line per interval: the same message and
// the attributes of the newest line held back, with
//
//	suppressed=<lines held back in the interval> interval=<interval>
//
// A key that was quiet for a whole interval is forgotten: its next line is
// logged at once again. Keys are chosen by the caller (message plus the
// node, listener or reason it is about) and must have bounded cardinality.
// Aggregator is safe for concurrent use.
type Aggregator struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	// after schedules f after d (time.AfterFunc); tests replace it to call
	// Flush themselves.
	after func(d time.Duration, f func())

	mu     sync.Mutex
	keys   map[string]*entry
	timer  bool // a flush is scheduled
	closed bool
}

type entry struct {
	level      slog.Level
	msg        string
	args       []any
	since      time.Time // start of the current interval
	suppressed int64
}

// Options configure an Aggregator. The zero value is usable.
type Options struct {
	// Interval is the summary interval (DefaultInterval when 0).
	Interval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// AfterFunc schedules the next flush (time.AfterFunc when nil). Tests
	// pass a function that does nothing and call Flush.
	AfterFunc func(d time.Duration, f func())
}

// New returns an Aggregator writing to log (discarded when nil).
func New(log *slog.Logger, o Options) *Aggregator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Aggregator{log: log, interval: o.Interval, now: o.Now, after: o.AfterFunc, keys: map[string]*entry{}}
	if a.interval <= 0 {
		a.interval = DefaultInterval
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.after == nil {
		a.after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	return a
}

// Interval is the summary interval.
func (a *Aggregator) Interval() time.Duration { return a.interval }

// Warn logs msg with args at warning level under key (see Log).
func (a *Aggregator) Warn(key, msg string, args ...any) bool {
	return a.Log(slog.LevelWarn, key, msg, args...)
}

// Info logs msg with args at info level under key (see Log).
func (a *Aggregator) Info(key, msg string, args ...any) bool {
	return a.Log(slog.LevelInfo, key, msg, args...)
}

// Log logs msg with args at level now if key is not being held back, and
// otherwise counts it for the key's next summary line. It reports whether
// the line was written.
func (a *Aggregator) Log(level slog.Level, key, msg string, args ...any) bool {
	if !a.log.Enabled(context.Background(), level) {
		return false
	}
	now := a.now()
	a.mu.Lock()
	e, ok := a.keys[key]
	if !ok && len(a.keys) >= MaxKeys {
		key = overflowKey
		e, ok = a.keys[key]
	}
	if ok && a.closed {
		ok = false
	}
	if ok {
		e.suppressed++
		e.level, e.msg, e.args = level, msg, args
		a.mu.Unlock()
		return false
	}
	if !a.closed {
		a.keys[key] = &entry{level: level, msg: msg, since: now}
		a.schedule(a.interval)
	}
	a.mu.Unlock()
	a.log.Log(context.Background(), level, msg, args...)
	return true
}

// schedule arranges a Flush d from now unless one is pending (a.mu held).
func (a *Aggregator) schedule(d time.Duration) {
	if a.timer || a.closed {
		return
	}
	a.timer = true
	a.after(d, func() {
		a.mu.Lock()
		a.timer = false
		a.mu.Unlock()
		a.Flush()
	})
}

// Flush writes the summary line of every key whose interval ended and that
// held lines back, starts a new interval for it, and forgets keys that held
// nothing back. It is called on its own every interval while keys are
// tracked; tests call it with their clock.
func (a *Aggregator) Flush() { a.flush(false) }

// Close writes the summary line of every key that held lines back, whatever
// its interval, and stops tracking: later lines are all written at once.
// Close of a nil Aggregator does nothing.
func (a *Aggregator) Close() {
	if a != nil {
		a.flush(true)
	}
}

func (a *Aggregator) flush(all bool) {
	now := a.now()
	type line struct {
		level slog.Level
		msg   string
		args  []any
	}
	var out []line
	a.mu.Lock()
	if all {
		a.closed = true
	}
	for k, e := range a.keys {
		if !all && now.Sub(e.since) < a.interval {
			continue
		}
		if e.suppressed == 0 {
			delete(a.keys, k)
			continue
		}
		args := append(append([]any{}, e.args...), "suppressed", e.suppressed, "interval", now.Sub(e.since).Round(time.Millisecond).String())
		out = append(out, line{e.level, e.msg, args})
		e.suppressed, e.since = 0, now
		if all {
			delete(a.keys, k)
		}
	}
	next := a.interval
	for _, e := range a.keys {
		next = min(next, max(e.since.Add(a.interval).Sub(now), time.Millisecond))
	}
	if len(a.keys) > 0 {
		a.schedule(next)
	}
	a.mu.Unlock()
	for _, l := range out {
		a.log.Log(context.Background(), l.level, l.msg, l.args...)
	}
}
