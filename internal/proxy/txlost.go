package proxy

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// primaryLostInTx ends the session's transaction after its primary was
// lost (s.lostNode: the backend connection died, or the cluster entered a
// failover) and answers the command cmd with one error: the transaction
// was rolled back by the loss of the primary — or, for a COMMIT in flight
// (inflight and s.commitSent), that its outcome is unknown. With inflight
// the command was already forwarded (its packet is consumed); otherwise
// its packet is consumed here. A session whose state cannot move to
// another connection (temporary tables, a user lock...: unmigratable)
// gets one error saying why and is closed instead (closeUnmovable), as
// when its route changes outside a transaction (migrate). A command
// without a response
// (COM_STMT_CLOSE) cannot carry the error: the client's next command gets
// it (endTx). The backend connection is dropped, the
// session continues and its next command waits for the new primary
// (failoverhold.go). This is the entry point for replaying transactions on
// the new primary instead: it returns answered=true when it answered the
// command, or a close reason.
func (s *session) primaryLostInTx(cmd byte, inflight bool) (answered bool, reason string) {
	if s.rlog != nil {
		// Transaction replay (replay.go): answered=false when the
		// transaction was replayed and the pending command runs next.
		if handled, answered, reason := s.replayOnLoss(cmd, inflight, false, s.lostNode, "its connection died or the cluster is failing over"); handled {
			s.commitSent = false
			return answered, reason
		}
	}
	node := s.lostNode
	if old, _ := s.setBackend(nil); old != nil {
		old.close(false)
	}
	s.status &^= mysql.SERVER_STATUS_IN_TRANS
	s.st.locked = false
	s.snap, s.detached = nil, false
	s.srv.metrics.txAborted.WithLabelValues(s.l.name).Inc()
	if inflight && s.commitSent {
		s.log.Warn("primary connection lost while COMMIT ran; its outcome is unknown", "node", node)
		if reason, closing := s.closeUnmovable(cmd, fmt.Sprintf(
			"the outcome of COMMIT is unknown: the connection to primary %s of cluster %s was lost while it ran; check before retrying",
			orText(node, "(unknown)"), s.l.cluster)); closing {
			s.commitSent = false
			return true, reason
		}
	} else if reason, closing := s.closeUnmovable(cmd, fmt.Sprintf(
		"your transaction was rolled back by the loss of primary %s of cluster %s", orText(node, "(unknown)"), s.l.cluster)); closing {
		s.commitSent = false
		return true, reason
	}
	var e *mysql.MyError
	if inflight && s.commitSent {
		e = errOutcomeUnknown("COMMIT", s.l.cluster, node, "")
	} else {
		s.log.Info("transaction ended by the loss of the primary", "node", node, "in_flight", inflight)
		what := "the statement was not run"
		if inflight {
			what = "the statement was lost with it"
		}
		e = errUnknown(fmt.Sprintf("switchyard: your transaction was rolled back by the loss of primary %s of cluster %s; %s; "+
			"the session continues on the primary the controller names: run the transaction again", orText(node, "(unknown)"), s.l.cluster, what))
	}
	s.commitSent = false
	if inflight {
		if kindOf(cmd) != respNone {
			s.writeError(1, e)
		} else {
			s.log.Info("transaction ended at a command without a response; its error goes to the next command", "command", cmd)
			s.txEnded = e
		}
		return true, ""
	}
	return s.endTx(cmd, e)
}

// endTx answers the pending command cmd with e, the error of the
// transaction the proxy just ended. A command without a response
// (COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA, sent between a transaction's
// statements) cannot carry it: it is consumed and e is kept for the
// client's next command that has a response, which gets e instead of
// running. Otherwise that next command — typically the COMMIT — would run
// outside any transaction on a fresh backend and succeed, acknowledging
// writes the rolled-back transaction never made durable.
func (s *session) endTx(cmd byte, e *mysql.MyError) (bool, string) {
	if s.replayIdle {
		// No command of the client's is concerned: its next one gets e.
		s.txEnded = e
		return true, ""
	}
	if kindOf(cmd) == respNone {
		s.log.Info("transaction ended at a command without a response; its error goes to the next command", "command", cmd)
		s.txEnded = e
	}
	return s.answerCommand(cmd, e)
}

// answerTxEnded answers the pending command cmd with the error of the
// transaction ended while the client sent a command without a response
// (s.txEnded, see endTx); that error is delivered once, to the first
// command that has a response. It reports the close reason.
func (s *session) answerTxEnded(cmd byte) string {
	e := s.txEnded
	if kindOf(cmd) != respNone {
		s.txEnded = nil
	}
	_, reason := s.answerCommand(cmd, e)
	return reason
}

// isCommit reports whether query q is a COMMIT (COMMIT [WORK] ..., not
// COMMITTED in a SET).
func isCommit(q []byte) bool {
	w, _ := firstWord(q)
	return len(w) == 6 && eqFold(w, "commit")
}
