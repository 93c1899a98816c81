package topo

import (
	"context"

	"go.uber.org/zap"
)

// UpdateSkippingDone is l.Update without the etcd leader's local check of
// Done, so tests can prove the store-side guard alone refuses the write.
func UpdateSkippingDone(ctx context.Context, l Leader, key string, value []byte, expect Version) (Version, error) {
	if el, ok := l.(*etcdLeader); ok {
		return el.guardedUpdate(ctx, key, value, expect)
	}
	return l.Update(ctx, key, value, expect)
}

// LogFatalInEmbedded makes the embedded etcd log msg at Fatal level with
// err, as its file purge does when it cannot read its WAL directory, on a
// goroutine of its own; it returns when that goroutine has ended.
func LogFatalInEmbedded(e *Embedded, msg string, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.logger().Fatal(msg, zap.Error(err))
	}()
	<-done
}
