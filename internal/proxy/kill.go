package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// KILL through the proxy. The connection id a client learns from the
// handshake is the proxy's own (session.id), while SELECT CONNECTION_ID()
// and SHOW PROCESSLIST show backend thread ids. Relaying "KILL n" unchanged
// would make the backend kill whatever thread has that number, another
// session's query or a replication thread. So the proxy answers KILL
// itself (https://mariadb.com/kb/en/kill/):
//
//   - n is resolved among this proxy's sessions of the same user: first as
//     a proxy connection id, then as the backend thread id of a session
//     (what CONNECTION_ID() returned through the proxy; a session on the
//     killer's own backend node is preferred). A session of another user
//     with that id answers ER_KILL_DENIED_ERROR (1095), no match
//     ER_NO_SUCH_THREAD (1094). Threads not opened through this proxy
//     cannot be killed through it.
//   - On a transaction-pooled listener (txpool.go) a backend thread id
//     names no session: the connection goes to another session at the
//     next boundary, so the id CONNECTION_ID() returned a moment ago may
//     now run someone else's statement. There the id is the proxy's
//     connection id only (the handshake's, which mysql_kill() and the
//     drivers' query cancel send; another user's answers
//     ER_KILL_DENIED_ERROR as anywhere); a backend thread id is taken only
//     when it is the killer's own current connection, and any other
//     answers ER_NO_SUCH_THREAD saying so. Sessions of session-pooled listeners
//     keep one backend connection for their whole life and are still
//     found by its thread id, from any listener.
//   - A session whose backend thread the proxy kills is marked first
//     (session.killed): the broken backend connection it then sees is
//     answered with ER_CONNECTION_KILLED (1927, what the server sends to
//     a killed connection's running statement) and the session is closed,
//     never with the failover hold's "connection to the primary was
//     lost" errors.
//   - KILL QUERY of one's own id answers ER_QUERY_INTERRUPTED (1317), as
//     the server does: the statement it interrupts is the KILL itself.
//   - KILL QUERY n runs "KILL QUERY <thread>" on the target's backend node
//     over a short-lived connection logged in as the user, and answers its
//     result; a statement the target session has not yet forwarded is
//     answered ER_QUERY_INTERRUPTED in place of running (killflight.go).
//   - KILL [CONNECTION] n (and COM_PROCESS_KILL) kills the target's
//     backend thread the same way and closes the target session; killing
//     one's own id answers ER_CONNECTION_KILLED and closes the session, as
//     the server does.
//   - KILL QUERY ID <query id> and KILL USER <name> name no connection id:
//     they go to the session's backend unchanged. Other forms (an
//     expression other than a number or CONNECTION_ID()) are refused.
//
// Only COM_QUERY texts whose first word is KILL (classify) get here; the
// query path pays nothing else.

// MariaDB error numbers not in the go-mysql tables.
const errConnectionKilled = 1927 // ER_CONNECTION_KILLED, SQLSTATE 70100

// killStmt is a parsed KILL statement that names a connection id.
type killStmt struct {
	query bool   // KILL QUERY (else CONNECTION)
	id    uint32 // the id given
	self  bool   // CONNECTION_ID(): the session itself
}

// killForm is what parseKill made of a KILL statement.
type killForm int

const (
	killByID    killForm = iota // names a connection id: answered by the proxy
	killRelay                   // KILL QUERY ID / KILL USER: relayed unchanged
	killRefused                 // not understood: refused
)

// parseKill parses "KILL [HARD|SOFT] [CONNECTION|QUERY] {n | CONNECTION_ID()}"
// (q starts with KILL, leading spaces and comments allowed) with an
// optional trailing ";".
func parseKill(q []byte) (killStmt, killForm) {
	var k killStmt
	_, rest := firstWord(q) // KILL
	w, after := firstWord(rest)
	if eqFold(w, "hard") || eqFold(w, "soft") {
		rest = after
		w, after = firstWord(rest)
	}
	switch {
	case eqFold(w, "connection"):
		rest = after
	case eqFold(w, "query"):
		k.query = true
		rest = after
		if w2, _ := firstWord(rest); eqFold(w2, "id") {
			return k, killRelay
		}
	case eqFold(w, "user"):
		return k, killRelay
	}
	i := skipSpace(rest)
	j := i
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if j > i {
		n, err := strconv.ParseUint(string(rest[i:j]), 10, 32)
		if err != nil {
			return k, killRefused
		}
		k.id = uint32(n)
	} else {
		w, after := firstWord(rest)
		if !bytes.EqualFold(w, []byte("connection_id")) {
			return k, killRefused
		}
		a := after[skipSpace(after):]
		if len(a) == 0 || a[0] != '(' {
			return k, killRefused
		}
		a = a[1:]
		a = a[skipSpace(a):]
		if len(a) == 0 || a[0] != ')' {
			return k, killRefused
		}
		k.self = true
		j = len(rest) - len(a) + 1
	}
	for _, c := range rest[j:] {
		if !isSpace(c) && c != ';' {
			return k, killRefused
		}
	}
	return k, killByID
}

// owner is a logged-in session and the user it is logged in as, as other
// sessions see it (Server.owners, under Server.mu).
type owner struct {
	sess *session
	user string
}

// setOwner records (or updates, after COM_CHANGE_USER) the session's user
// for KILL.
func (s *Server) setOwner(sess *session, user string) {
	s.mu.Lock()
	if s.owners == nil {
		s.owners = make(map[uint32]owner)
	}
	s.owners[sess.id] = owner{sess: sess, user: user}
	s.mu.Unlock()
}

// currentBackend returns the session's backend connection (nil between
// backends or once closed).
func (s *session) currentBackend() *backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.be
}

// killTarget resolves id for a KILL by killer (nil in unit tests), logged
// in as user (see the package comment above); near is the node of the
// killer's backend.
func (s *Server) killTarget(killer *session, user string, id uint32, near string) (*session, *mysql.MyError) {
	s.mu.Lock()
	direct, hasDirect := s.owners[id]
	var same, other []*session
	for _, o := range s.owners {
		if o.user == user {
			same = append(same, o.sess)
		} else {
			other = append(other, o.sess)
		}
	}
	s.mu.Unlock()
	if hasDirect && direct.user == user {
		return direct.sess, nil
	}
	var found *session
	pooled := false // id is the thread of a transaction-pooled session's connection
	for _, sess := range same {
		be := sess.currentBackend()
		if be == nil || be.threadID != id {
			continue
		}
		if sess.txPool && sess != killer {
			pooled = true
			continue
		}
		if found == nil || be.t.node == near {
			found = sess
		}
	}
	if found != nil {
		return found, nil
	}
	if hasDirect {
		// The proxy connection id of another user's session, on any
		// listener: the server's answer for another user's thread.
		return nil, mysqlproto.NewError(mysql.ER_KILL_DENIED_ERROR, fmt.Sprintf("You are not owner of thread %d", id))
	}
	if pooled || (killer != nil && killer.txPool) {
		return nil, mysqlproto.NewError(mysql.ER_NO_SUCH_THREAD, fmt.Sprintf(
			"Unknown thread id: %d (switchyard: on a listener with pooling transaction a backend thread id such as CONNECTION_ID() returns "+
				"belongs to a connection that sessions share; KILL takes the proxy's connection id of the session, the one in its handshake, "+
				"which mysql_kill() and driver query cancels send)", id))
	}
	denied := false
	for _, sess := range other {
		if be := sess.currentBackend(); be != nil && be.threadID == id {
			denied = true
		}
	}
	if denied {
		return nil, mysqlproto.NewError(mysql.ER_KILL_DENIED_ERROR, fmt.Sprintf("You are not owner of thread %d", id))
	}
	return nil, mysqlproto.NewError(mysql.ER_NO_SUCH_THREAD, fmt.Sprintf("Unknown thread id: %d", id))
}

// killQuery answers the pending COM_QUERY, a KILL statement q, itself
// (seq 1), or relays it when it names no connection id. It returns the
// close reason ("" to go on) and whether the command was answered.
func (s *session) killQuery(q []byte) (answered bool, reason string) {
	k, form := parseKill(q)
	switch form {
	case killRelay:
		return false, ""
	case killRefused:
		if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
			return true, clientReason(err)
		}
		s.writeError(1, mysqlproto.NewError(mysql.ER_NOT_SUPPORTED_YET,
			"switchyard: KILL through the proxy takes a literal connection id (KILL [QUERY|CONNECTION] <id>) or CONNECTION_ID(); connect to the server directly for other forms"))
		return true, ""
	}
	if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
		return true, clientReason(err)
	}
	if k.self {
		k.id = s.id
	}
	return true, s.kill(k)
}

// processKill handles COM_PROCESS_KILL (a 4-byte connection id; header h):
// KILL CONNECTION by id. As MariaDB reads it (checked on 10.11): bytes
// after the id are ignored, and an id cut short is read with zeros for
// the missing bytes, as on a fresh connection (1094 "Unknown thread id: 1"
// for the one byte 1).
func (s *session) processKill(h mysqlproto.Header) string {
	var id [4]byte
	if b, err := s.cr.Peek(mysqlproto.HeaderSize + min(h.Len, 5)); err == nil {
		copy(id[:], b[mysqlproto.HeaderSize+1:])
	}
	if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
		return clientReason(err)
	}
	return s.kill(killStmt{id: binary.LittleEndian.Uint32(id[:])})
}

// kill carries out k for this session's user and answers the client.
func (s *session) kill(k killStmt) string {
	near := ""
	if s.be != nil {
		near = s.be.t.node
	}
	target, merr := s.srv.killTarget(s, s.user, k.id, near)
	if merr != nil {
		s.writeError(1, merr)
		return ""
	}
	be := target.currentBackend()
	verb, found := "KILL CONNECTION ", ""
	if k.query {
		verb = "KILL QUERY "
		// A statement still on its way is marked instead (killflight.go).
		be, found = target.killQueryTarget()
	}
	s.log.Info("KILL through the proxy", "kill", verb, "id", k.id, "target_session", target.id,
		"node", nodeName(be), "thread", threadOf(be), "statement", found)
	if k.query && target == s {
		// The statement running is the KILL itself: the server
		// interrupts it (ER_QUERY_INTERRUPTED, checked on 10.11) and
		// the session goes on.
		s.writeError(1, mysqlproto.NewError(mysql.ER_QUERY_INTERRUPTED, "Query execution was interrupted"))
		return ""
	}
	if k.query {
		if be != nil {
			if merr := s.runAs(target.l, be.t, verb+strconv.FormatUint(uint64(be.threadID), 10)); merr != nil {
				s.writeError(1, merr)
				return ""
			}
		}
		return s.answerOK()
	}
	if target == s {
		s.writeError(1, &mysql.MyError{Code: errConnectionKilled, State: "70100", Message: "Connection was killed"})
		return closeKilled
	}
	if be != nil {
		// The backend thread first, so a statement it runs stops now; then
		// the session (it may be waiting for the client). Marked before,
		// so that the session answers its broken connection as killed.
		target.killed.Store(true)
		if merr := s.runAs(target.l, be.t, verb+strconv.FormatUint(uint64(be.threadID), 10)); merr != nil &&
			merr.Code != mysql.ER_NO_SUCH_THREAD {
			s.log.Warn("KILL of a backend thread failed; closing the session anyway", "node", be.t.node, "err", merr.Message)
		}
	}
	target.shutdown()
	return s.answerOK()
}

// killedReason answers, in place of the lost-backend errors, a command
// whose backend connection broke after the proxy killed the session
// (KILL CONNECTION from another session): ER_CONNECTION_KILLED as the
// server sends it (MariaDB sql_class.cc, THD::send_kill_message), and the
// session closes. ok is false when the session was not killed.
func (s *session) killedReason() (reason string, ok bool) {
	if !s.killed.Load() {
		return "", false
	}
	s.writeError(s.seq+1, &mysql.MyError{Code: errConnectionKilled, State: "70100", Message: "Connection was killed"})
	return closeKilled, true
}

func threadOf(be *backend) uint32 {
	if be == nil {
		return 0
	}
	return be.threadID
}

// answerOK answers the pending command with a plain OK.
func (s *session) answerOK() string {
	ok := mysqlproto.OK{Status: s.status &^ mysql.SERVER_SESSION_STATE_CHANGED}
	if err := s.writeDirect(1, mysqlproto.AppendOK(nil, s.caps, &ok)); err != nil {
		return closeClientGone
	}
	return ""
}

// runAs runs one statement on node t (of listener l's cluster) over a
// short-lived connection logged in as the session's user, and returns the
// server's error, if any. Bounded by proxy.connect_timeout for the login
// and again for the statement.
func (s *session) runAs(l *listener, t *target, stmt string) *mysql.MyError {
	rc := s.srv.rc.Load()
	tmp := &session{srv: s.srv, l: l, id: s.id, user: s.user, stage1: s.stage1, edKey: s.edKey, charset: s.charset,
		maxPacket: s.maxPacket, log: s.log}
	_, be, merr := tmp.dialAndLogin(t, l.route.snap.Load(), rc, false)
	if merr != nil {
		return merr
	}
	defer func() {
		_, _ = be.conn.Write([]byte{1, 0, 0, 0, mysql.COM_QUIT})
		_ = be.conn.Close()
	}()
	_ = be.conn.SetDeadline(time.Now().Add(rc.connectTimeout))
	if err := writePacket(be.conn, 0, append([]byte{mysql.COM_QUERY}, stmt...)); err != nil {
		return errUnknown(fmt.Sprintf("switchyard: backend %s (%s): sending %s failed: %v", t.node, t.addr, stmt, err))
	}
	p, _, err := mysqlproto.ReadPacket(bufio.NewReaderSize(be.conn, 1024), nil, handshakeMax)
	switch {
	case err != nil:
		return errUnknown(fmt.Sprintf("switchyard: backend %s (%s): no answer to %s: %v", t.node, t.addr, stmt, err))
	case len(p) > 0 && p[0] == mysql.ERR_HEADER:
		e := mysqlproto.ParseERR(p)
		return &mysql.MyError{Code: e.Code, State: e.State, Message: e.Message}
	}
	return nil
}
