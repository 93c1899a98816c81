package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// responseKind says how the response to a command is shaped.
type responseKind int

const (
	respNone     responseKind = iota // no response (COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA)
	respResults                      // OK | ERR | LOCAL INFILE | result sets (COM_QUERY)
	respBinary                       // OK | ERR | binary result sets (COM_STMT_EXECUTE)
	respPrepare                      // COM_STMT_PREPARE_OK + definitions | ERR
	respRows                         // rows or definitions until EOF/OK | ERR (COM_STMT_FETCH, COM_FIELD_LIST)
	respSingle                       // one OK/EOF/ERR packet
	respString                       // one packet that is not an OK (COM_STATISTICS)
	respRejected                     // answered by the proxy with an error (rejectError)
)

// kindOf maps a command byte to its response shape. Commands the proxy does
// not relay (replication, shutdown, MariaDB COM_MULTI which is never
// negotiated, commands MariaDB does not know) are rejected (rejectError),
// and so is COM_STMT_BULK_EXECUTE from a client that did not negotiate
// MARIADB_CLIENT_STMT_BULK_OPERATIONS (command); COM_PROCESS_KILL and
// COM_CHANGE_USER are answered by the proxy before kindOf is asked.
func kindOf(cmd byte) responseKind {
	switch cmd {
	case mysql.COM_QUERY, mysql.COM_PROCESS_INFO:
		return respResults
	case mysql.COM_STMT_EXECUTE, mysqlproto.ComStmtBulkExecute:
		return respBinary
	case mysql.COM_STMT_PREPARE:
		return respPrepare
	case mysql.COM_STMT_FETCH, mysql.COM_FIELD_LIST:
		return respRows
	case mysql.COM_INIT_DB, mysql.COM_PING, mysql.COM_STMT_RESET, mysql.COM_SET_OPTION,
		mysql.COM_RESET_CONNECTION, mysql.COM_REFRESH, mysql.COM_DEBUG:
		return respSingle
	case mysql.COM_STATISTICS:
		return respString
	case mysql.COM_STMT_CLOSE, mysql.COM_STMT_SEND_LONG_DATA:
		return respNone
	}
	return respRejected
}

// rejectError is the error a rejected command cmd gets. COM_SHUTDOWN,
// COM_BINLOG_DUMP and COM_REGISTER_SLAVE are never relayed — shutting a
// node down or replicating from it are done on the node, not through the
// proxy that routes around it — and get what MariaDB answers a user
// without the privilege they need, 1227 naming it (SHUTDOWN, REPLICATION
// SLAVE; MariaDB 10.11 answers COM_REGISTER_SLAVE with 1045 instead,
// which through a logged-in session would read as a failed login), with
// the proxy's reason after it. Any other gets ER_UNKNOWN_COM_ERROR, as
// MariaDB answers a command it does not know.
func rejectError(cmd byte) *mysql.MyError {
	priv, what := "", ""
	switch cmd {
	case mysql.COM_SHUTDOWN:
		priv, what = "SHUTDOWN", "COM_SHUTDOWN is not relayed; shut the node down on the node itself"
	case mysql.COM_BINLOG_DUMP, mysql.COM_REGISTER_SLAVE:
		priv, what = "REPLICATION SLAVE", "the replication protocol is not relayed; replicate from the node itself"
	default:
		return mysqlproto.NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command")
	}
	return mysqlproto.NewError(mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR,
		fmt.Sprintf("Access denied; you need (at least one of) the %s privilege(s) for this operation (switchyard: %s)", priv, what))
}

// loop reads client commands until the session ends and returns the
// reason, or sessionParked when the session parked while idle (idlepark.go:
// a new goroutine calls loop again when the client sends something).
func (s *session) loop() string {
	rerouted := false // the pending command was sent back to reroute once
	for {
		if s.replayNow.Swap(false) {
			if reason := s.replayIdleNow(); reason != "" {
				return reason
			}
		}
		if s.awaitCommand() {
			return sessionParked
		}
		if s.cin == nil && s.replayNow.Load() {
			continue // woken to replay (nudgeReplay), nothing read
		}
		if s.idleExpired {
			return s.closeIdle()
		}
		hb, err := s.cr.Peek(mysqlproto.HeaderSize)
		if s.idleDeadline && s.tlsIdleExpired(err, len(hb)) {
			return s.closeIdle()
		}
		if err != nil {
			if len(hb) == 0 && errors.Is(err, io.EOF) {
				s.ended = true
				return closeClientGone
			}
			s.logClientError("reading a command", err)
			return clientReason(err)
		}
		h := mysqlproto.ParseHeader(hb)
		if h.Seq != 0 {
			// As MariaDB answers a packet out of sequence (as packet 0),
			// and closes.
			s.writeError(0, mysqlproto.NewError(mysql.ER_NET_PACKETS_OUT_OF_ORDER, "Got packets out of order"))
			s.log.Info("closing client connection: not a command packet", "seq", h.Seq, "len", h.Len)
			return closeClientProtocol
		}
		if h.Len == 0 {
			// An empty packet: MariaDB answers it as an unknown command
			// and goes on.
			if _, err := s.cr.Discard(mysqlproto.HeaderSize); err != nil {
				return clientReason(err)
			}
			s.writeError(1, mysqlproto.NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command"))
			continue
		}
		if hb, err = s.cr.Peek(mysqlproto.HeaderSize + 1); err != nil {
			s.logClientError("reading a command", err)
			return clientReason(err)
		}
		cmd := hb[mysqlproto.HeaderSize]
		if cmd == mysql.COM_QUIT {
			s.ended = true
			return closeQuit
		}
		if !s.waitStart.IsZero() && time.Since(s.waitStart) >= idleParkAfter {
			// A session that never parks (TLS) and waited as long as a
			// parked one: its server may have closed its idle connection
			// meanwhile (wait_timeout), in or out of a transaction.
			s.waitStart = time.Time{}
			if reason := s.afterIdle(); reason != "" {
				return reason
			}
		}
		if s.txEnded != nil {
			// The proxy ended the transaction while the client sent a
			// command without a response: this command gets its error
			// (a reset or change of user discards it with the session).
			if cmd == mysql.COM_RESET_CONNECTION || cmd == mysql.COM_CHANGE_USER {
				s.txEnded = nil
			} else {
				if reason := s.answerTxEnded(cmd); reason != "" {
					return reason
				}
				continue
			}
		}
		// Mark the session busy before looking at the snapshot: a drain
		// monitor that installed a hold then sees either this command as
		// busy or the session waiting (hold.go).
		if prev := s.busy.Swap(busyCmd | s.txBits()); prev&busyDetached != 0 {
			s.detached = true
		}
		if snap := s.l.route.snap.Load(); snap != s.snap || s.detached {
			answered, reason := s.reroute(cmd)
			if reason != "" {
				return reason
			}
			if answered {
				s.cmdDone()
				s.busy.Store(s.txBits())
				continue
			}
		}
		if answered, reason := s.refuseLost(cmd); reason != "" {
			return reason
		} else if answered {
			s.cmdDone()
			s.busy.Store(s.txBits())
			continue
		}
		if !s.beginRelay() {
			// The route changed between the check above and now: reroute
			// before anything is forwarded (and move, the second time).
			s.snap = nil
			if rerouted {
				s.detached = true
			}
			rerouted = true
			continue
		}
		if s.be != nil && s.l.role == rolePrimary && s.l.route.snap.Load().lossCheck && s.peerGone(s.be) {
			// The server closed this idle connection (it crashed or was
			// killed): nothing was sent; move, holding for a failover.
			s.endRelay()
			s.log.Info("primary connection closed by the server while the session was idle", "node", s.be.t.node)
			s.snap, s.detached, s.beLost = nil, true, true
			continue
		}
		rerouted = false
		reason := s.command(cmd, h)
		if why, _, _ := s.endRelay(); why != "" && reason == "" {
			// Cut after the whole response had reached the client: the
			// backend is closed, move at the next command.
			s.detached = true
		}
		if reason != "" {
			return reason
		}
		s.cmdDone()
		if s.txPool {
			s.txBoundary()
		}
		s.busy.Store(s.txBits())
		if !s.holdStart.IsZero() {
			s.holdStart = time.Time{}
		}
	}
}

// command handles one client command whose header h and first byte cmd are
// buffered in cr.
func (s *session) command(cmd byte, h mysqlproto.Header) string {
	s.cmdStart()
	switch cmd {
	case mysql.COM_CHANGE_USER:
		return s.changeUser()
	case mysql.COM_PROCESS_KILL:
		return s.processKill(h)
	}
	began := time.Now()
	s.rewritten = nil
	kind := kindOf(cmd)
	if cmd == mysqlproto.ComStmtBulkExecute && s.ext&mysqlproto.MariaDBClientStmtBulkOperations == 0 {
		kind = respRejected
	}
	if kind == respRejected {
		if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
			return clientReason(err)
		}
		s.writeError(1, rejectError(cmd))
		return ""
	}
	// Facts needed after the response, taken before the packet is forwarded.
	var schema string
	var trackSchema bool
	var stmt *stmtInfo
	var stmtID uint32
	var payload []byte   // the pending COM_QUERY / COM_STMT_EXECUTE, when it fits in the read buffer
	calc := false        // a SELECT SQL_CALC_FOUND_ROWS (transaction pooling)
	idRewritten := false // CONNECTION_ID() replaced (transaction pooling, connid.go)
	trackSet := false    // a SET that may change the client's tracking settings (trackvars.go)
	s.cls = classOther
	s.execStmt, s.lastExec = nil, nil
	s.cursorReq = false
	switch cmd {
	case mysql.COM_INIT_DB:
		if p := s.peekPayload(h); p != nil {
			schema, trackSchema = string(p[1:]), true
		}
		s.cls = classUse
	case mysql.COM_QUERY:
		if p := s.peekPayload(h); p != nil {
			if s.z != nil && compressionStatusQuery(p[1:]) {
				return s.answerCompressionStatus()
			}
			payload = p
			s.noteQuery(p[1:])
			if s.txPool {
				calc = mentions(p[1:], "sql_calc_found_rows")
				s.rewritten = nil
				if s.diagLost && !s.replayRecords() && readsDiagnostics(p[1:]) {
					s.rewritten = rewriteDiagnostics(p[1:], s.rowCount, s.foundRows)
				}
				if merr := s.beforeStatement(p[1:]); merr != nil {
					return s.refuseCommand(merr)
				}
				if s.rewritten == nil && s.cls != classKill {
					s.rewritten = s.connIDRewrite(p) // connid.go
					idRewritten = s.rewritten != nil
				}
			} else {
				calc = s.cls == classSelect && calcFoundRows(p[1:])
				if s.diagLost {
					// The first statement after a move (movediag.go).
					if merr := s.afterMove(p[1:], true); merr != nil {
						return s.refuseCommand(merr)
					}
				}
			}
			if s.trk != nil && (s.rewritten == nil || idRewritten) && hasTrackRef(p[1:]) {
				q := p[1:]
				if idRewritten {
					q = s.rewritten[1:]
				}
				if out := s.trk.rewriteTrackRefs(q); out != nil || !idRewritten {
					s.rewritten = out
				}
				// With transaction replay on, a SET is never hashed:
				// outside a transaction it is not recorded, inside one
				// it ends the replay (recordBegin).
				trackSet = s.cls == classSet
			}
			s.keepForLoss(p)
			switch s.cls {
			case classUse:
				schema, trackSchema = parseUse(p[1:])
			case classKill:
				if answered, reason := s.killQuery(p[1:]); answered {
					return reason
				}
			}
		} else if b, err := s.cr.Peek(s.cr.Size()); err == nil {
			s.rerun, s.commitSent = s.rerun[:0], false
			// Longer than the read buffer (a bulk INSERT, say): classify
			// by its start. Only a long SET cannot be followed.
			s.cls = classify(b[mysqlproto.HeaderSize+1:])
			if s.cls == classSet {
				s.st.markOpaque("sent a SET statement too long for the proxy to follow")
			}
			if lock, uv := stickyState(b[mysqlproto.HeaderSize+1:]); lock || uv {
				s.st.markOpaque("sent a long statement that may take user locks or set user variables")
			}
		}
	case mysql.COM_STMT_EXECUTE, mysql.COM_STMT_FETCH, mysql.COM_STMT_CLOSE, mysql.COM_STMT_RESET, mysql.COM_STMT_SEND_LONG_DATA,
		mysqlproto.ComStmtBulkExecute:
		p := s.peekPayload(h)
		switch act, n := stmtShort(cmd, h.Len); act {
		case shortMalformed:
			return s.refuseCommand(errMalformedPacket())
		case shortIgnored:
			if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
				return clientReason(err)
			}
			return ""
		case shortPadded:
			s.rewritten = make([]byte, n)
			copy(s.rewritten, p)
			p = s.rewritten
		}
		if p == nil {
			// Only SEND_LONG_DATA, EXECUTE with long values and bulk
			// executes get here; a bulk execute's parameter types are
			// read from the part the buffer holds (bulkTypes).
			n := mysqlproto.HeaderSize + 5
			if cmd == mysqlproto.ComStmtBulkExecute {
				n = s.cr.Size()
			}
			if hb, err := s.cr.Peek(n); err == nil {
				p = hb[mysqlproto.HeaderSize:]
			}
		}
		stmtID, stmt = s.stmtOf(p)
		if cmd == mysql.COM_STMT_EXECUTE {
			s.execStmt, s.lastExec = stmt, stmt
		}
		if s.xlate {
			s.translateID(p)
		}
		if stmt != nil {
			s.noteStmtCommand(cmd, stmtID, stmt, p)
			if s.txPool && (cmd == mysql.COM_STMT_EXECUTE || cmd == mysqlproto.ComStmtBulkExecute) {
				calc = stmt.calcAny
				if merr := s.beforeStatement(stmt.text); merr != nil {
					return s.refuseCommand(merr)
				}
			} else if cmd == mysql.COM_STMT_EXECUTE {
				calc = stmt.calc
				if s.diagLost {
					if merr := s.afterMove(stmt.text, false); merr != nil {
						return s.refuseCommand(merr)
					}
				}
			}
		}
		if cmd == mysql.COM_STMT_EXECUTE && p != nil && mysqlproto.HeaderSize+h.Len <= s.cr.Size() {
			payload = p
		}
		switch cmd {
		case mysql.COM_STMT_EXECUTE:
			s.keepExecForLoss(payload, stmtID, stmt)
			// Command byte, id (4), flags (1): the low three bits of the
			// flags ask for a cursor (https://mariadb.com/kb/en/com_stmt_execute/);
			// a shorter execute was refused above (stmtShort).
			if fb, err := s.cr.Peek(mysqlproto.HeaderSize + 6); err == nil {
				s.cursorReq = fb[mysqlproto.HeaderSize+5]&0x07 != 0
			}
		case mysqlproto.ComStmtBulkExecute:
			s.rerun, s.commitSent = s.rerun[:0], false // a write: never run again
		}
	}
	var text []byte
	switch {
	case cmd == mysql.COM_QUERY && len(payload) > 1:
		text = payload[1:]
	case stmt != nil:
		text = stmt.text
	}
	if s.stmtSent(cmd, text) {
		// A KILL QUERY came before the statement reached the backend.
		s.rewritten = nil
		return s.refuseCommand(errQueryInterrupted())
	}
	// Transaction replay (replay.go): record the statement before it is
	// forwarded.
	long, mark := false, false
	if s.rlog != nil {
		long = s.recordBegin(cmd, payload, stmtID, stmt)
		mark = s.rlog.markCommit() // a commit marker goes with it (outcome.go)
		if s.rlog.replayed && s.rlog.fl.commit && s.rlog.wrote {
			s.awaitReplays()
		}
	}
	s.seq, s.in, s.out, s.lastOK, s.warned, s.results = 0, 0, 0, false, false, 0
	s.seqShift = 0
	var err error
	plain, sent := false, false
	if mark {
		whole := payload != nil && !long && s.rewritten == nil && !(cmd == mysql.COM_STMT_EXECUTE && stmt != nil && stmt.rebind)
		sent, err = s.sendMarker(h, whole)
		plain = whole
		if err != nil && !sent {
			// Nothing of the COMMIT was sent: it is pending (or, too
			// long to stay buffered, consumed and in flight).
			plain = true
			if mysqlproto.HeaderSize+h.Len > s.cr.Size() {
				_, _ = mysqlproto.SkipPacket(s.cr)
			}
		}
	}
	switch {
	case sent || err != nil:
	case cmd == mysql.COM_STMT_PREPARE:
		err = s.readPrepare()
	case cmd == mysql.COM_STMT_EXECUTE && stmt != nil && stmt.rebind:
		err = s.forwardRebound(stmt)
	case cmd == mysqlproto.ComStmtBulkExecute && stmt != nil && stmt.rebind:
		err = s.forwardReboundBulk(stmt)
	case long:
		err = s.forwardRecorded()
	case s.rewritten != nil:
		err = s.forwardRewritten()
	default:
		plain = true
		err = s.forward()
	}
	if err != nil {
		if s.rlog != nil {
			// A packet that fits the read buffer is still there when
			// writing it to the backend failed (CopyPacket).
			s.rlog.fl.pend = plain && mysqlproto.HeaderSize+h.Len <= s.cr.Size()
		}
		return s.failCommand(cmd, err)
	}
	s.stmtWritten()
	s.l.queries.Inc()
	if be := s.be; be != nil {
		be.counter.countQuery()
	}
	if kind == respNone {
		s.srv.bytesIn.Add(float64(s.in))
		return ""
	}
	s.acquire()
	answered := false
	if mark {
		answered, err = s.markAnswer()
	}
	switch {
	case err != nil || answered:
	case trackSet:
		err = s.relayTrackSet()
	default:
		err = s.relay(cmd, kind)
	}
	s.execStmt = nil
	if rerr := s.release(); err == nil {
		err = rerr
	}
	s.srv.bytesIn.Add(float64(s.in))
	s.srv.bytesOut.Add(float64(s.out))
	if (cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_EXECUTE) && s.cls == classSet && setsGlobal(s.setText) {
		// Again once the server answered: a connection reset meanwhile
		// (giveBack) may have read the count before the SET took effect.
		s.srv.globalsGen.Add(1)
	}
	if cap(s.prepPacket) > 4<<10 || cap(s.setText) > 4<<10 || cap(s.rerun) > 4<<10 {
		// Idle sessions keep small buffers only.
		s.prepPacket, s.setText, s.rerun = nil, nil, nil
	}
	if err != nil {
		return s.failCommand(cmd, err)
	}
	s.l.latency.Observe(time.Since(began).Seconds())
	if s.rlog != nil {
		s.recordEnd()
	}
	if cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_EXECUTE {
		s.noteFoundRows(calc)
	}
	s.noteDiagnostics(calc)
	s.ran = true
	if s.retracked {
		s.diagLost, s.retracked = true, false
	}
	if s.lastOK {
		switch {
		case trackSchema:
			s.schema = schema
		case cmd == mysql.COM_RESET_CONNECTION:
			return s.afterReset()
		case cmd == mysql.COM_QUERY:
			s.st.afterStatement(s.cls)
			if s.cls == classSet && s.tracked {
				s.readBackUnscoped() // unscopedset.go
			}
		case cmd == mysql.COM_STMT_EXECUTE && stmt != nil:
			s.st.afterStatement(stmt.class)
			if stmt.class == classSet {
				s.notePreparedSet(stmt.text)
			}
			if stmt.userVar {
				s.st.markOpaque("set a user variable in a prepared statement")
			}
			if stmt.userLock {
				s.st.userLock = true
			}
			if s.cursorReq && s.status&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
				stmt.cursor = true
			}
		case cmd == mysql.COM_STMT_FETCH && stmt != nil:
			if s.status&mysql.SERVER_STATUS_LAST_ROW_SEND != 0 {
				stmt.cursor = false
			}
		}
	}
	return ""
}

// noteQuery classifies a COM_QUERY text before it is forwarded: its class
// (for session tracking), the user locks and user variables tracking does
// not report, and a sample for the hot read set.
func (s *session) noteQuery(q []byte) {
	s.cls = classify(q)
	switch s.cls {
	case classSet:
		s.setText = append(s.setText[:0], q...)
		if setsGlobal(q) {
			// SET GLOBAL x / SET @@global.x: clean pooled connections
			// keep the old values as their session values (pool.go).
			s.srv.globalsGen.Add(1)
		}
		if !s.tracked {
			s.st.markOpaque("set variables on a server without session tracking")
		}
	case classSelect:
		s.sampleQuery(q)
	}
	if lock, uv := stickyState(q); lock || uv {
		if lock {
			s.st.userLock = true
		}
		if uv && s.cls != classSet {
			s.st.markOpaque("set a user variable outside SET")
		}
	}
}

// notePreparedSet records the user variables a prepared SET (text q)
// assigned once it ran, whether or not its OK reported a session-state
// change: literals are kept for replay on another backend connection;
// an expression or a parameter marker (whose value the proxy does not
// read) leaves the session unmigratable, so that transaction pooling
// keeps it on its connection.
func (s *session) notePreparedSet(q []byte) {
	assigns, ok := parseSetUserVars(q)
	if !ok {
		s.st.markOpaque("set a user variable to an expression or a parameter in a prepared statement")
		return
	}
	for _, a := range assigns {
		s.st.setUserVar(a)
	}
}

// noteStmtCommand keeps the bookkeeping of a COM_STMT_* command on
// statement st (client id id; p is the payload, possibly truncated).
func (s *session) noteStmtCommand(cmd byte, id uint32, st *stmtInfo, p []byte) {
	switch cmd {
	case mysql.COM_STMT_EXECUTE:
		st.longData = false
		st.executeTypes(p)
		s.cls = st.class
		if st.class == classSet {
			// The OK's session tracking is read against this text
			// (trackOK), not the last COM_QUERY SET's.
			s.setText = append(s.setText[:0], st.text...)
			if setsGlobal(st.text) {
				s.srv.globalsGen.Add(1)
			}
		}
		if st.class == classSelect {
			s.sampleExecute(st, p)
		}
	case mysqlproto.ComStmtBulkExecute:
		st.longData = false
		st.bulkTypes(p)
		s.cls = st.class
	case mysql.COM_STMT_CLOSE:
		delete(s.stmts, id)
		if len(s.stmts) == 0 {
			s.xlate, s.nextStmtID = false, 0
		}
	case mysql.COM_STMT_RESET:
		st.longData, st.cursor = false, false
	case mysql.COM_STMT_SEND_LONG_DATA:
		st.longData = true
	}
}

// afterReset restores session tracking after COM_RESET_CONNECTION (which
// resets it with everything else) and forgets the session state.
func (s *session) afterReset() string {
	s.st.reset()
	s.dropStmts()
	s.initWaitTimeout(false)
	if !s.be.tracked {
		return ""
	}
	if err := writePacket(s.be.conn, 0, append([]byte{mysql.COM_QUERY}, trackingSQL...)); err != nil {
		return s.failCommand(mysql.COM_RESET_CONNECTION, fail(closeBackendLost, err))
	}
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(s.be.reader())
	p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	br.Reset(nil)
	s.srv.readers.Put(br)
	if err != nil || len(p) == 0 || p[0] != mysql.OK_HEADER {
		s.log.Warn("re-enabling session tracking after COM_RESET_CONNECTION failed; the session will not be moved on a switchover", "err", err)
		s.st.markOpaque("could not re-enable session tracking after COM_RESET_CONNECTION")
	}
	s.initTracking()
	return ""
}

// refuseCommand answers the pending command packet with merr without
// forwarding it.
func (s *session) refuseCommand(merr *mysql.MyError) string {
	if _, err := mysqlproto.SkipPacket(s.cr); err != nil {
		return clientReason(err)
	}
	s.writeError(1, merr)
	return ""
}

// peekPayload returns the buffered payload of the pending command packet
// when it fits in the client read buffer, else nil. Valid until cr is read.
func (s *session) peekPayload(h mysqlproto.Header) []byte {
	if h.Len >= mysqlproto.MaxPacketPayload || mysqlproto.HeaderSize+h.Len > s.cr.Size() {
		return nil
	}
	b, err := s.cr.Peek(mysqlproto.HeaderSize + h.Len)
	if err != nil {
		return nil
	}
	return b[mysqlproto.HeaderSize:]
}

// forward relays the pending command packet(s) from the client to the
// backend unchanged.
func (s *session) forward() error {
	if sio := s.be.plainSock(); sio != nil {
		// A statement's response is read right after it is sent: the
		// write waits for that read (sockIO.deferNextWrite).
		if b, err := s.cr.Peek(mysqlproto.HeaderSize + 1); err == nil &&
			(b[mysqlproto.HeaderSize] == mysql.COM_QUERY || b[mysqlproto.HeaderSize] == mysql.COM_STMT_EXECUTE) {
			sio.deferNextWrite()
		}
	}
	for {
		p, err := mysqlproto.CopyPacket(s.be.writer(), s.cr)
		if err != nil {
			var we *mysqlproto.WriteError
			if errors.As(err, &we) {
				return fail(closeBackendLost, err)
			}
			return fail(clientReason(err), err)
		}
		s.in += mysqlproto.HeaderSize + p.Len
		if p.Len < mysqlproto.MaxPacketPayload {
			return nil
		}
	}
}

// acquire takes a backend reader and a client writer from the pools.
func (s *session) acquire() {
	s.br = s.srv.readers.Get().(*bufio.Reader)
	s.br.Reset(s.be.reader())
	s.cw = s.srv.writers.Get().(*bufio.Writer)
	s.cw.Reset(clientGate{s})
}

// release flushes the client writer and returns both buffers to the pools.
// Data left in the backend reader means the proxy lost track of the
// protocol: the session must end.
func (s *session) release() error {
	err := s.cw.Flush()
	left := s.br.Buffered()
	s.br.Reset(nil)
	s.cw.Reset(nil)
	s.srv.readers.Put(s.br)
	s.srv.writers.Put(s.cw)
	s.br, s.cw = nil, nil
	if err != nil {
		return fail(closeClientGone, err)
	}
	if left > 0 {
		return fail(closeBackendLost, fmt.Errorf("%w: %d bytes", errResponseOverrun, left))
	}
	return nil
}

// errResponseOverrun: the backend sent more than the response the proxy
// parsed. The client already has a complete response, so it gets no extra
// ERR packet; the session is closed because the proxy lost track.
var errResponseOverrun = errors.New("backend sent data beyond the end of the response")

// failCommand ends command cmd after it failed. When the backend failed,
// the client gets ER_UNKNOWN_ERROR saying so (the connection to the client
// itself is intact): on a primary listener, when nothing of the response
// was relayed yet, the session continues (failoverhold.go
// primaryBackendLost: a read may run again on the new primary, a write's
// outcome is unknown, a transaction is rolled back, or replayed with
// transaction replay, replay.go); otherwise the session is closed.
func (s *session) failCommand(cmd byte, err error) string {
	if reason, ok := s.killedReason(); ok {
		return reason
	}
	why, lost, wrote := s.endRelay()
	if why != "" {
		return s.afterCut(cmd, why, lost, wrote)
	}
	reason := clientReason(err)
	if reason == closeBackendLost && s.out == 0 && s.be != nil {
		if seq, payload := s.be.closingError(); payload != nil {
			// The server refused the client's packet and closed the
			// connection, as it does with every client: the client gets
			// the server's error and is closed, as directly.
			s.log.Info("closing session: the server refused the command and closed its connection", "node", s.be.t.node,
				"code", mysqlproto.ParseERR(payload).Code)
			_ = s.writeDirect(seq, payload)
			return closeClientProtocol
		}
	}
	if reason == closeBackendLost && s.rlog != nil && !errors.Is(err, errResponseOverrun) && !errors.Is(err, errBackendProtocol) &&
		!(s.be != nil && s.resendable(cmd, err)) {
		// Transaction replay (replay.go).
		fl := s.rlog.fl
		if handled, answered, r := s.replayOnLoss(fl.cmd, !fl.pend, wrote, nodeName(s.be), "the connection to it broke: "+err.Error()); handled {
			if answered || r != "" {
				return r
			}
			return "" // replayed; the pending command runs next
		}
	}
	switch {
	case errors.Is(err, errResponseOverrun):
		s.log.Warn("closing session: backend protocol out of step", "err", err)
	case reason == closeBackendLost && s.l.role == rolePrimary && s.be != nil && s.out == 0:
		s.log.Warn("backend connection lost", "node", s.be.t.node, "addr", s.be.t.addr, "err", err)
		return s.primaryBackendLost(cmd, err)
	case reason == closeBackendLost:
		node, addr := "", ""
		if s.be != nil {
			node, addr = s.be.t.node, s.be.t.addr
		}
		s.writeError(s.seq+1, errUnknown(fmt.Sprintf(
			"switchyard: lost the connection to backend %s (%s) during the command; the session is closed, reconnect", node, addr)))
		s.log.Warn("backend connection lost", "node", node, "addr", addr, "err", err)
	case reason == closeClientGone:
		s.log.Debug("client went away during a command", "err", err)
	default:
		s.log.Info("closing client connection", "reason", reason, "err", err)
	}
	return reason
}
