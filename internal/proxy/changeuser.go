package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// changeUser handles COM_CHANGE_USER: the new user is verified by the proxy
// exactly like a login (against the scramble of the initial handshake, or a
// fresh one after switching the client to the account's plugin), then the
// session gets a new backend connection logged in as that user with the
// requested schema and charset — equivalent to the server-side reset that
// COM_CHANGE_USER implies (prepared statements, variables and temporary
// tables are gone). The new user's plugin is served as at login
// (authClient; a switch to another plugin gets a fresh scramble). A failed
// verification answers ER_ACCESS_DENIED_ERROR and keeps the session open
// as the previous user, its state reset on a fresh backend connection with
// its schema and charset, as MariaDB does (sql_parse.cc COM_CHANGE_USER
// resets the session with THD::change_user before acl_authenticate and
// restores the saved security context, schema and charset when that fails);
// so does a change the server refuses after the proxy's verification (the
// server's ERR, e.g. 1049 for a schema that does not exist or 1044 for one
// the account may not use, is relayed).
// A packet the proxy cannot parse (a user name without its NUL, auth data,
// schema or attributes cut short) answers ER_UNKNOWN_COM_ERROR and resets
// the session in the same way, as MariaDB does (sql_acl.cc
// parse_com_change_user_packet, after THD::change_user; checked on
// 10.11). An empty one too, where MariaDB starts a new handshake that no
// client follows up. Protocol or I/O failures during the exchange still
// close it.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_change_user.html
func (s *session) changeUser() string {
	payload, _, err := mysqlproto.ReadPacket(s.cr, nil, handshakeMax)
	if err != nil {
		s.logClientError("reading COM_CHANGE_USER", err)
		return clientReason(err)
	}
	rc := s.srv.rc.Load()
	cu, err := mysqlproto.ParseChangeUser(payload, s.caps)
	if err != nil {
		s.writeError(1, mysqlproto.NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command"))
		s.log.Info("malformed COM_CHANGE_USER refused; the session continues as the previous user", "user", s.user, "err", err)
		return s.relogin(rc, 0, s.user, s.stage1, s.edKey, s.schema, 0, nil, false)
	}
	auth, seq, reason := s.authClient(rc, cu.User, cu.AuthPlugin, cu.AuthResponse, s.scramble, 1, true)
	if reason == closeAuthFailed {
		// The ERR is written; the previous user gets its session reset on a
		// fresh backend connection, with its schema and charset.
		s.log.Info("COM_CHANGE_USER refused; the session continues as the previous user", "user", cu.User, "previous", s.user)
		return s.relogin(rc, seq, s.user, s.stage1, s.edKey, s.schema, 0, nil, false)
	}
	if reason != "" {
		return reason
	}
	reason = s.relogin(rc, seq, auth.u.name, auth.stage1, auth.edKey, cu.Database, cu.Charset, cu.Attrs, true)
	if reason == closeBackendConnect {
		// The server refused the new account's login after the proxy
		// verified it — a schema that does not exist (1049) or that the
		// account may not use (1044) — and its ERR is written: as MariaDB
		// does, the session continues as the previous user (relogin put
		// its user and schema back).
		s.log.Info("COM_CHANGE_USER refused by the server; the session continues as the previous user", "user", cu.User, "previous", s.user)
		return s.relogin(rc, seq, s.user, s.stage1, s.edKey, s.schema, 0, nil, false)
	}
	return reason
}

// relogin gives the session a new backend connection logged in as user
// (stage1, edKey) with schema, charset (0: unchanged) and attrs (nil:
// unchanged), dropping the session state; with answer it writes the OK (or
// the error) at sequence id seq, else the client was already answered.
func (s *session) relogin(rc *runtimeConfig, seq byte, user string, stage1 [mysqlproto.HashLen]byte, edKey *[64]byte,
	schema string, charset uint16, attrs []byte, answer bool) string {
	snap := s.l.route.snap.Load()
	t, merr := snap.pick(s.l.role, rc.fallback(s.l.cluster))
	if merr != nil {
		if answer {
			s.writeError(seq, merr)
		}
		return closeNoRoute
	}
	prevUser, prevStage1, prevKey, prevSchema, prevCharset, prevAttrs := s.user, s.stage1, s.edKey, s.schema, s.charset, s.attrs
	s.user, s.stage1, s.edKey, s.schema = user, stage1, edKey, schema
	if charset != 0 {
		s.charset = byte(charset)
	}
	if attrs != nil {
		s.attrs = attrs
	}
	be, okPayload, merr := s.connect(t, snap, rc, false)
	if merr != nil {
		s.user, s.stage1, s.edKey, s.schema, s.charset, s.attrs = prevUser, prevStage1, prevKey, prevSchema, prevCharset, prevAttrs
		if answer {
			s.writeError(seq, merr)
		}
		return closeBackendConnect
	}
	old, ok := s.setBackend(be)
	if !ok {
		be.close(true)
		return closeServer
	}
	if old != nil {
		// Reset before the OK (giveBack: COM_RESET_CONNECTION, answered
		// once the server has released the old session's user locks and
		// table locks), not closed: a close is seen by the server later,
		// and the client's next statement could still find the old
		// session's GET_LOCK held (mariadb-client-test test_bug31418).
		s.giveBackIn(old, true, prevSchema)
	}
	s.snap = nil // the next command checks the route (and holds during a switchover)
	s.lastBe = be
	s.dropStmts()
	s.st.reset()
	s.setTracking(be, okPayload)
	s.initTracking()
	s.initWaitTimeout(false)
	s.srv.setOwner(s, s.user)
	if !answer {
		return ""
	}
	if err := s.writeDirect(seq, s.clientOK(okPayload)); err != nil {
		return closeClientGone
	}
	s.log.Debug("user changed", "user", s.user, "backend", t.node)
	return ""
}
