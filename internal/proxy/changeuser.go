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
// verification answers ER_ACCESS_DENIED_ERROR and closes the session.
// https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_change_user.html
func (s *session) changeUser() string {
	payload, _, err := mysqlproto.ReadPacket(s.cr, nil, handshakeMax)
	if err != nil {
		s.logClientError("reading COM_CHANGE_USER", err)
		return clientReason(err)
	}
	cu, err := mysqlproto.ParseChangeUser(payload, s.caps)
	if err != nil {
		s.writeError(1, mysqlproto.NewError(mysql.ER_HANDSHAKE_ERROR, "Bad handshake"))
		s.log.Info("closing client connection: bad COM_CHANGE_USER", "err", err)
		return closeClientProtocol
	}
	rc := s.srv.rc.Load()
	auth, seq, reason := s.authClient(rc, cu.User, cu.AuthPlugin, cu.AuthResponse, s.scramble, 1, true)
	if reason != "" {
		return reason
	}
	u, stage1 := auth.u, auth.stage1
	snap := s.l.route.snap.Load()
	t, merr := snap.pick(s.l.role, rc.fallback(s.l.cluster))
	if merr != nil {
		s.writeError(seq, merr)
		return closeNoRoute
	}
	prevUser, prevStage1, prevKey, prevSchema, prevCharset, prevAttrs := s.user, s.stage1, s.edKey, s.schema, s.charset, s.attrs
	s.user, s.stage1, s.edKey, s.schema = u.name, stage1, auth.edKey, cu.Database
	if cu.Charset != 0 {
		s.charset = byte(cu.Charset)
	}
	if cu.Attrs != nil {
		s.attrs = cu.Attrs
	}
	be, okPayload, merr := s.connect(t, snap, rc, false)
	if merr != nil {
		s.user, s.stage1, s.edKey, s.schema, s.charset, s.attrs = prevUser, prevStage1, prevKey, prevSchema, prevCharset, prevAttrs
		s.writeError(seq, merr)
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
	s.srv.setOwner(s, s.user)
	if err := s.writeDirect(seq, s.clientOK(okPayload)); err != nil {
		return closeClientGone
	}
	s.log.Debug("user changed", "user", s.user, "backend", t.node)
	return ""
}
