package topo

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newZapLogger returns a zap logger (what the etcd client and server log
// through) that forwards entries at min level and above to log, with the
// entry's fields as attributes and component naming where they came from.
// A nil log discards everything. demote, if not nil, sends the entries it
// returns true for to debug level (known noise such as shutdown errors).
func newZapLogger(log *slog.Logger, component string, min zapcore.Level, demote func(msg string) bool) *zap.Logger {
	return newZapLoggerFatal(log, component, min, demote, nil)
}

// newZapLoggerFatal is newZapLogger whose Panic and Fatal entries, when
// fatal is not nil, neither panic nor exit the process: the entry is
// logged, fatal is called with its message and error, and the goroutine
// that logged it ends (runtime.Goexit, its deferred calls run). etcd logs
// at Fatal level when it cannot purge old WAL or snapshot files (EMFILE
// under descriptor exhaustion) and at Panic level when it cannot save a
// snapshot; inside `switchyard up` either would end the proxy with it. With
// fatal set the embedded server loses that goroutine instead and its owner
// restarts it (Embedded.Failed).
func newZapLoggerFatal(log *slog.Logger, component string, min zapcore.Level, demote func(msg string) bool, fatal func(msg string, err error)) *zap.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		if fatal == nil {
			return zap.NewNop()
		}
	}
	return zap.New(&slogCore{log: log.With("component", component), min: min, demote: demote, fatal: fatal})
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	log    *slog.Logger
	min    zapcore.Level
	demote func(msg string) bool
	fatal  func(msg string, err error)
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return l >= c.min || (c.fatal != nil && l >= zapcore.DPanicLevel)
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	n := &slogCore{log: c.log, min: c.min, demote: c.demote, fatal: c.fatal}
	n.fields = append(append(n.fields, c.fields...), fields...)
	return n
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	level := slogLevel(e.Level)
	if c.demote != nil && c.demote(e.Message) {
		level = slog.LevelDebug
	}
	c.log.LogAttrs(context.Background(), level, e.Message, attrs...)
	if c.fatal != nil && (e.Level == zapcore.PanicLevel || e.Level == zapcore.FatalLevel) {
		var err error
		if v, ok := enc.Fields["error"].(string); ok {
			err = errors.New(v)
		}
		c.fatal(e.Message, err)
		runtime.Goexit()
	}
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}
