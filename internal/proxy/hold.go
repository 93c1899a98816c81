package proxy

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Statement holding (the buffer). While the controller runs a coordinated
// switchover of a cluster (topo.SwitchoverProgress at step hold or fence,
// the cluster state in phase switching), the cluster's primary listeners
// start no new statement on the old primary: a session that is not in a
// transaction waits at its next command, before anything is forwarded,
// until the switchover ends; sessions in a transaction go on until their
// transaction ends (the drain) and then wait at their next command. When
// the new state arrives the waiting sessions move to the new primary (or
// stay, if the switchover rolled back) and their commands run, each
// session's in its own order.
//
// Limits (config switchover.*): a command waits at most max_hold, and never
// past max_duration after this proxy started holding; at most max_held
// commands wait at once per proxy. A command over a limit is not run: the
// client gets MySQL error 1105 saying a switchover is in progress, and the
// session continues. New connections are accepted during a switchover (they
// log into the old primary) and their first command waits like any other.

// busy bits of session.busy, read by the drain monitor and the sweeper.
const (
	busyCmd      = 1 << iota // a command is being forwarded or relayed
	busyTx                   // a transaction is open on the backend
	busyDetached             // the sweeper closed the idle session's backend
)

// holdLimits are the switchover limits a proxy applies.
type holdLimits struct {
	maxHold     time.Duration
	maxHeld     int64
	maxDuration time.Duration
}

func newHoldLimits(c *config.Config) holdLimits {
	sw := c.Switchover
	l := holdLimits{maxHold: sw.MaxHold.D(), maxHeld: int64(sw.MaxHeld), maxDuration: sw.MaxDuration.D()}
	if l.maxHold <= 0 {
		l.maxHold = 10 * time.Second
	}
	if l.maxHeld <= 0 {
		l.maxHeld = 10000
	}
	if l.maxDuration <= 0 {
		l.maxDuration = 20 * time.Second
	}
	return l
}

// holdPeriod is one switchover during which a cluster's primary listeners
// hold statements. It ends (done closed) when a snapshot without it is
// installed.
type holdPeriod struct {
	id, cluster, from, to string
	epoch                 int64
	since                 time.Time // when this proxy started holding
	end                   time.Time // since + max_duration
	done                  chan struct{}
	fenced                atomic.Bool  // the fence step was announced
	fenceApplied          atomic.Bool  // ... and its snapshot installed (sessions see it)
	held                  atomic.Int64 // commands waiting now
}

func (hp *holdPeriod) fencing() bool { return hp.fenced.Load() }

// errSwitchover is the error a held command gets when a limit is reached:
// MySQL error 1105 (ER_UNKNOWN_ERROR, SQLSTATE HY000), the number used for
// proxy conditions.
func errSwitchover(hp *holdPeriod, why string) *mysql.MyError {
	return errUnknown(fmt.Sprintf("switchyard: a switchover of cluster %s is in progress (primary %s → %s, epoch %d); %s; the statement was not run, retry it",
		hp.cluster, hp.from, hp.to, hp.epoch, why))
}

// holdCommand makes the pending command cmd wait until hp ends. It returns
// answered=true when it answered the command itself (with the error of a
// limit), or a close reason.
func (s *session) holdCommand(hp *holdPeriod, cmd byte) (answered bool, reason string) {
	lim := s.srv.limits.Load()
	start := time.Now()
	n := s.srv.heldNow.Add(1)
	hp.held.Add(1)
	defer func() {
		s.srv.heldNow.Add(-1)
		hp.held.Add(-1)
	}()
	if n > lim.maxHeld {
		return s.refuseHeld(hp, cmd, fmt.Sprintf("this proxy already holds %d statements (switchover.max_held)", lim.maxHeld))
	}
	deadline, why := start.Add(lim.maxHold), fmt.Sprintf("it waited %s (switchover.max_hold)", lim.maxHold)
	if hp.end.Before(deadline) {
		deadline, why = hp.end, fmt.Sprintf("the switchover has lasted longer than %s (switchover.max_duration)", lim.maxDuration)
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		return s.refuseHeld(hp, cmd, why)
	}
	s.busy.Store(0) // waiting is idle: the drain does not wait for us
	s.held.Store(true)
	defer s.held.Store(false)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-hp.done:
		s.srv.metrics.holdSeconds.Observe(time.Since(start).Seconds())
		return false, ""
	case <-t.C:
		if prev := s.busy.Swap(busyCmd); prev&busyDetached != 0 {
			s.detached = true // the sweeper closed the backend meanwhile
		}
		return s.refuseHeld(hp, cmd, why)
	case <-s.srv.closing:
		return false, closeServer
	}
}

// refuseHeld answers the pending command with the switchover error (no
// answer for commands that have none) and consumes it.
func (s *session) refuseHeld(hp *holdPeriod, cmd byte, why string) (bool, string) {
	s.srv.metrics.holdRefused.Inc()
	s.log.Warn("statement not held: switchover limit reached", "cluster", hp.cluster, "why", why)
	return s.answerCommand(cmd, errSwitchover(hp, why))
}

// answerCommand consumes the pending command packet(s) and answers them
// with e (nothing for commands without a response). It reports
// answered=true or a close reason.
func (s *session) answerCommand(cmd byte, e *mysql.MyError) (bool, string) {
	if cmd == mysql.COM_STMT_CLOSE {
		// Forget it here; the server-side statement goes with its backend.
		if hb, err := s.cr.Peek(mysqlproto.HeaderSize); err == nil {
			if id, _ := s.stmtOf(s.peekPayload(mysqlproto.ParseHeader(hb))); id != 0 {
				delete(s.stmts, id)
			}
		}
	}
	if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
		return true, clientReason(err)
	}
	if kindOf(cmd) != respNone {
		s.writeError(1, e)
	}
	return true, ""
}
