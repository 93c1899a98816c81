package proxy

// TEMPORARY: a minimal stand-in for the wait primitive of the failover
// hold (failoverhold.go), so that transaction replay works and is tested
// on its own. Delete this file when failoverhold.go is merged.

import (
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// awaitPrimary waits until the cluster's snapshot names a primary other
// than lost (any primary when lost is ""), with no switchover hold and no
// write fence, and returns that snapshot; after switchover.max_hold it
// returns an error for the client.
func (s *session) awaitPrimary(lost string) (*routeSnapshot, *mysql.MyError) {
	lim := s.srv.limits.Load()
	deadline := time.Now().Add(lim.maxHold)
	for {
		snap := s.l.route.snap.Load()
		if p := snap.primary; p != nil && snap.fenced == "" && snap.hold == nil && (lost == "" || p.node != lost) {
			return snap, nil
		}
		if !time.Now().Before(deadline) {
			return nil, errUnknown(fmt.Sprintf("switchyard: no primary of cluster %s was named within %s (switchover.max_hold) after %s was lost",
				s.l.cluster, lim.maxHold, orText(lost, "the primary")))
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-s.srv.closing:
			return nil, errUnknown("switchyard: the proxy is shutting down")
		}
	}
}
