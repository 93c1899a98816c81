package proxy

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// maxShownStatement is how much of the statement being run SessionInfo
// shows (bytes; a longer one is cut).
const maxShownStatement = 200

// Session states (SessionInfo.State).
const (
	SessionIdle          = "idle"
	SessionQuery         = "query"
	SessionInTransaction = "in_transaction"
	SessionHeld          = "held"
)

// SessionInfo describes one client session of the proxy, for the admin
// API. It is a snapshot: the session goes on meanwhile.
type SessionInfo struct {
	// ID is the proxy's connection id of the session (the id in its
	// handshake, which KILL takes).
	ID         string `json:"id"`
	User       string `json:"user"`
	ClientAddr string `json:"client_addr"`
	Listener   string `json:"listener"`
	// Cluster is the listener's cluster.
	Cluster string `json:"cluster"`
	// BackendNode is the node of the session's backend connection ("" when
	// it has none at the moment: before login, transaction pooling between
	// transactions, moving).
	BackendNode string `json:"backend_node"`
	// AgeS is how long the session has been open, in seconds.
	AgeS float64 `json:"age_s"`
	// State is idle, query (a command is being run), in_transaction (a
	// transaction is open, no command running) or held (a command waits
	// for a switchover or failover to finish).
	State string `json:"state"`
	// CurrentStatement is the start of the statement being run (at most
	// 200 bytes), "" when none or not known (a long packet).
	CurrentStatement string `json:"current_statement"`
	InTransaction    bool   `json:"in_transaction"`
}

// Sessions returns a snapshot of the client sessions, in connection id
// order. It reads what the sessions publish for other goroutines (their
// busy bits, their backend and statement under their own lock): nothing is
// added to the path of a query.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	list := make([]*session, 0, len(s.sessions))
	users := make(map[*session]string, len(s.owners))
	for sess := range s.sessions {
		list = append(list, sess)
	}
	for _, o := range s.owners {
		users[o.sess] = o.user
	}
	s.mu.Unlock()
	now := time.Now()
	out := make([]SessionInfo, 0, len(list))
	for _, sess := range list {
		busy := sess.busy.Load()
		info := SessionInfo{ID: strconv.FormatUint(uint64(sess.id), 10), User: users[sess], ClientAddr: sess.addr,
			Listener: sess.l.name, Cluster: sess.l.cluster, AgeS: now.Sub(sess.began).Seconds(), InTransaction: busy&busyTx != 0}
		sess.mu.Lock()
		if sess.closed {
			sess.mu.Unlock()
			continue
		}
		info.BackendNode = nodeName(sess.be)
		if sess.curStmtN > 0 {
			info.CurrentStatement = validPrefix(sess.curStmt[:sess.curStmtN])
		}
		sess.mu.Unlock()
		switch {
		case sess.held.Load():
			info.State = SessionHeld
		case busy&busyCmd != 0:
			info.State = SessionQuery
		case info.InTransaction:
			info.State = SessionInTransaction
		default:
			info.State = SessionIdle
		}
		out = append(out, info)
	}
	sortSessions(out)
	return out
}

// validPrefix is b as a string without a UTF-8 sequence cut at its end.
func validPrefix(b []byte) string {
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	return string(b)
}

func sortSessions(list []SessionInfo) {
	id := func(i int) uint64 { v, _ := strconv.ParseUint(list[i].ID, 10, 32); return v }
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && id(j) < id(j-1); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

// ErrNoSession is returned (wrapped) by KillSession for an id that is no
// session of this proxy.
var ErrNoSession = errors.New("no such session")

// KillSession ends session id (SessionInfo.ID) as KILL CONNECTION through
// the proxy does: its backend thread is killed, then the session is
// closed. With queryOnly it is KILL QUERY: only the statement being run is
// interrupted (one not yet sent is marked and answered as interrupted),
// the session goes on. It returns what it did, for the log and the
// answer. Errors wrap ErrNoSession, or say why the backend KILL failed.
func (s *Server) KillSession(id string, queryOnly bool) (string, error) {
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return "", fmt.Errorf("session %q: %w (ids are the numbers the session list shows)", id, ErrNoSession)
	}
	s.mu.Lock()
	var target *session
	for sess := range s.sessions {
		if sess.id == uint32(n) {
			target = sess
		}
	}
	user := s.owners[uint32(n)].user
	s.mu.Unlock()
	if target == nil {
		return "", fmt.Errorf("session %s: %w (it may have ended)", id, ErrNoSession)
	}
	if queryOnly {
		be, found := target.killQueryTarget()
		if be == nil {
			return fmt.Sprintf("session %s: statement %s", id, found), nil
		}
		if found == "idle" {
			return fmt.Sprintf("session %s: no statement running", id), nil
		}
		as := &session{srv: s, l: target.l, id: target.id, user: user, stage1: target.stage1, edKey: target.edKey,
			charset: target.charset, maxPacket: target.maxPacket, log: target.log}
		if merr := as.runAs(target.l, be.t, "KILL QUERY "+strconv.FormatUint(uint64(be.threadID), 10)); merr != nil {
			return "", fmt.Errorf("session %s: KILL QUERY %d on %s: %s", id, be.threadID, be.t.node, merr.Message)
		}
		return fmt.Sprintf("session %s: statement interrupted (KILL QUERY %d on %s)", id, be.threadID, be.t.node), nil
	}
	be := target.currentBackend()
	msg := fmt.Sprintf("session %s closed", id)
	if be != nil {
		target.killed.Store(true)
		as := &session{srv: s, l: target.l, id: target.id, user: user, stage1: target.stage1, edKey: target.edKey,
			charset: target.charset, maxPacket: target.maxPacket, log: target.log}
		if merr := as.runAs(target.l, be.t, "KILL CONNECTION "+strconv.FormatUint(uint64(be.threadID), 10)); merr != nil {
			msg += fmt.Sprintf(" (KILL of backend thread %d on %s failed: %s)", be.threadID, be.t.node, merr.Message)
		} else {
			msg += fmt.Sprintf(" (backend thread %d on %s killed)", be.threadID, be.t.node)
		}
	}
	target.shutdown()
	return msg, nil
}
