package proxy

import (
	"context"
	"log/slog"
)

// sessionLog logs for one session through the server's logger with the
// session's attributes (session id, listener, client address). The
// attributes are built only when a record is emitted at an enabled level:
// an idle session holds no logger of its own (slog.Logger.With would
// allocate a handler per session).
type sessionLog struct{ s *session }

func (l sessionLog) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args) }
func (l sessionLog) Info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args) }
func (l sessionLog) Warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args) }
func (l sessionLog) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args) }

// Repeated logs msg like the other methods but through the server's
// aggregating logger under key (logx.Aggregator): the first line at once,
// then one summary per interval with the count held back. For symptoms every
// session of an outage repeats (backend connect failures, refused logins).
func (l sessionLog) Repeated(level slog.Level, key, msg string, args ...any) {
	s := l.s
	if s == nil || s.srv == nil || s.srv.logAgg == nil {
		l.log(level, msg, args)
		return
	}
	attrs := make([]any, 0, 4+len(args))
	if s.l != nil {
		attrs = append(attrs, "listener", s.l.name)
	}
	if s.client != nil {
		attrs = append(attrs, "remote", s.client.RemoteAddr().String())
	}
	s.srv.logAgg.Log(level, key, msg, append(attrs, args...)...)
}

func (l sessionLog) log(level slog.Level, msg string, args []any) {
	s := l.s
	if s == nil || s.srv == nil {
		return
	}
	ctx := context.Background()
	lg := s.srv.log
	if !lg.Enabled(ctx, level) {
		return
	}
	attrs := make([]any, 0, 6+len(args))
	attrs = append(attrs, "session", s.id)
	if s.l != nil {
		attrs = append(attrs, "listener", s.l.name)
	}
	if s.client != nil {
		attrs = append(attrs, "remote", s.client.RemoteAddr().String())
	}
	lg.Log(ctx, level, msg, append(attrs, args...)...)
}
