// Package logx holds logging helpers on top of log/slog. Its Aggregator
// turns a symptom repeated thousands of times a second (every client of a
// dead backend fails the same way) into one line at once and then one
// summary line per interval with the count of lines it held back, per key.
//
// It owns no output of its own: every line goes to the slog.Logger it was
// given. It must never block the caller on I/O other than that logger's, nor
// keep more than a bounded number of keys.
package logx
