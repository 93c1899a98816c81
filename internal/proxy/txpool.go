package proxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Transaction-level multiplexing (listeners[].pooling: transaction). A
// session holds a backend connection only while it needs that very
// connection; at every other command boundary (txBoundary) the connection
// goes back to its pool (pool.go) and the next command takes one through
// the route check every command starts with (loop → reroute → follow →
// migrate → moveTo → connect with restore): the session's own previous
// connection when it is still idle, else one whose state is re-created
// from the session's tracked state (sessionstate.go, stmts.go). Because
// that path is the one session moves take, a switchover, failover or drain
// needs nothing more: a session between transactions simply takes its
// next connection from the new primary's pool, and held statements wait
// there as they do on session-pooled listeners.
//
// A session keeps (is pinned to) its connection while:
//   - a transaction is open (SERVER_STATUS_IN_TRANS; with autocommit=0
//     every statement opens one), or SET TRANSACTION waits for the next;
//   - its state cannot be re-created elsewhere (unmigratable: LOCK TABLES,
//     GET_LOCK, temporary tables, SQL PREPARE, user variables set from
//     expressions or outside SET, HANDLER, SET ROLE, an open cursor, long
//     data being sent to a prepared statement);
//   - its last statement ended with warnings or an error, until the next
//     statement (SHOW WARNINGS, @@warning_count and GET DIAGNOSTICS read
//     them; ProxySQL keeps the connection the same way);
//   - its last statement was a SELECT SQL_CALC_FOUND_ROWS, until the next
//     statement (FOUND_ROWS() reads it).
//
// LAST_INSERT_ID() is per connection: the session remembers the last
// insert id the server reported to it (the OK packet's last_insert_id,
// which LAST_INSERT_ID(expr) also sets) and, before a statement that reads
// LAST_INSERT_ID on a connection where it has not generated one, runs
// DO LAST_INSERT_ID(n) there. ROW_COUNT() and FOUND_ROWS() without
// SQL_CALC_FOUND_ROWS read the previous statement's diagnostics: the
// session's previous connection is taken again when still idle (other
// sessions take the least recently used idle connection first); after
// that connection went to another session, SELECT ROW_COUNT() and SELECT
// FOUND_ROWS() are answered from the session's own values and other
// statements that read them get an error rather than another session's
// count (movediag.go).

// pinned says why the session must keep its backend connection, or "".
func (s *session) pinned() string {
	if why := s.unmigratable(); why != "" {
		return why
	}
	switch {
	case s.keepNext:
		return "its last statement left diagnostics the next one may read (warnings, an error, SQL_CALC_FOUND_ROWS)"
	case s.status&mysql.SERVER_STATUS_AUTOCOMMIT == 0 && s.status&mysql.SERVER_STATUS_IN_TRANS != 0:
		return "has a transaction open (autocommit=0)"
	}
	return ""
}

// txBoundary gives the session's backend connection back to its pool
// after a command, unless the session is pinned to it (see above).
func (s *session) txBoundary() {
	be := s.be
	if be == nil || s.detached || s.txEnded != nil || be.counter == nil || be.closed.Load() || be.broken() {
		return
	}
	if s.pinned() != "" {
		return
	}
	if _, ok := s.setBackend(nil); !ok {
		return
	}
	be.status = s.status
	be.schema = s.schema
	be.clean = !s.hasState()
	be.owner = s.id
	s.lastBe = be
	s.snap = nil // the next command takes a connection through the route check
	s.returned = true
	be.counter.putIdle(be, time.Now())
}

// noteDiagnostics records, after a command on a transaction-pooled
// listener, what keeps the connection for the next statement (calc: the
// statement was a SELECT SQL_CALC_FOUND_ROWS).
func (s *session) noteDiagnostics(calc bool) {
	// An error is a diagnostic too: SHOW WARNINGS reads it.
	s.keepNext = !s.lastOK || s.warned || calc
	s.diagLost = false
}

// checkedOut records, on a transaction-pooled listener, that the session
// took be from the pool for its next command.
func (s *session) checkedOut(be *backend) {
	s.returned = false
	s.idRestore = s.idRestore || !be.sameState
	s.diagLost = s.diagLost || (!be.sameState && s.ran) // or the proxy ran a statement there (retrack)
}

// readsDiagnostics reports whether q reads the previous statement's
// ROW_COUNT() or FOUND_ROWS().
func readsDiagnostics(q []byte) bool {
	return mentions(q, "row_count") || mentions(q, "found_rows")
}

// beforeStatement runs, on a transaction-pooled listener, before the
// statement q (a COM_QUERY text or a prepared statement's) is forwarded:
// it refuses a statement that reads diagnostics its connection does not
// have and restores LAST_INSERT_ID() on a connection that did not
// generate the session's. It returns an error for the client, or nil.
func (s *session) beforeStatement(q []byte) *mysql.MyError {
	if s.diagLost && s.rewritten == nil && readsDiagnostics(q) {
		return errUnknown("switchyard: ROW_COUNT() and FOUND_ROWS() read the previous statement's result, which ran on a backend connection another session now uses (listener pooling: transaction); " +
			"the proxy answers only SELECT ROW_COUNT() / FOUND_ROWS() [[AS] alias][, ...] itself: run both statements in one transaction")
	}
	if s.idRestore && mentions(q, "last_insert_id") {
		if merr := s.runSetup("DO LAST_INSERT_ID(" + strconv.FormatUint(s.insertID, 10) + ")"); merr != nil {
			return merr
		}
		s.idRestore = false
	}
	return nil
}

// runSetup runs one statement that returns OK on the session's backend
// before the client's command.
func (s *session) runSetup(q string) *mysql.MyError {
	be := s.be
	if err := writePacket(be.conn, 0, append([]byte{mysql.COM_QUERY}, q...)); err != nil {
		return errUnknown(fmt.Sprintf("switchyard: backend %s (%s): %v", be.t.node, be.t.addr, err))
	}
	br := s.srv.readers.Get().(*bufio.Reader)
	br.Reset(be.reader())
	p, _, err := mysqlproto.ReadPacket(br, nil, handshakeMax)
	left := br.Buffered()
	br.Reset(nil)
	s.srv.readers.Put(br)
	switch {
	case err != nil:
		return errUnknown(fmt.Sprintf("switchyard: backend %s (%s): %v", be.t.node, be.t.addr, err))
	case len(p) == 0 || p[0] != mysql.OK_HEADER || left > 0:
		return errUnknown(fmt.Sprintf("switchyard: backend %s (%s) refused %s", be.t.node, be.t.addr, q))
	}
	return nil
}

// okWarnings returns the warning count of an OK payload (0 if malformed).
func okWarnings(p []byte) uint16 {
	if len(p) < 1 {
		return 0
	}
	_, n1, ok1 := mysqlproto.ReadLenEnc(p[1:])
	if !ok1 {
		return 0
	}
	id, n2, ok2 := mysqlproto.ReadLenEnc(p[1+n1:])
	_ = id
	if !ok2 || len(p) < 1+n1+n2+4 {
		return 0
	}
	return binary.LittleEndian.Uint16(p[1+n1+n2+2:])
}

// okInsertID returns the last insert id of an OK payload (0 if none).
func okInsertID(p []byte) uint64 {
	if len(p) < 1 {
		return 0
	}
	_, n1, ok1 := mysqlproto.ReadLenEnc(p[1:])
	if !ok1 {
		return 0
	}
	id, _, ok2 := mysqlproto.ReadLenEnc(p[1+n1:])
	if !ok2 {
		return 0
	}
	return id
}

// forwardRewritten sends s.rewritten (rewriteDiagnostics, rewriteTrackRefs,
// a short COM_STMT_* padded by stmtShort) to the backend in place of the
// pending command, which is read from the client and dropped.
func (s *session) forwardRewritten() error {
	q := s.rewritten
	s.rewritten = nil
	n, err := mysqlproto.SkipPacket(s.cr)
	if err != nil {
		return fail(clientReason(err), err)
	}
	s.in += n + mysqlproto.HeaderSize
	if _, werr := mysqlproto.WritePacket(s.be.conn, 0, q); werr != nil {
		return fail(closeBackendLost, werr)
	}
	return nil
}

// okAffected returns the affected rows of an OK payload (0 if malformed).
func okAffected(p []byte) uint64 {
	if len(p) < 1 {
		return 0
	}
	n, _, _ := mysqlproto.ReadLenEnc(p[1:])
	return n
}

// noteOK records, on a transaction-pooled listener, the warnings, the
// insert id and the affected rows (ROW_COUNT()) of an OK packet ending a
// result.
func (s *session) noteOK(p []byte) {
	s.rowCount = int64(okAffected(p))
	if okWarnings(p) > 0 {
		s.warned = true
	}
	if id := okInsertID(p); id != 0 {
		s.insertID = id
		s.idRestore = false // generated on this connection
	}
}

// noteTerminator records the warnings of the EOF (or, under
// CLIENT_DEPRECATE_EOF, OK) packet that ends a result set.
func (s *session) noteTerminator(p []byte) {
	if s.deprecateEOF() {
		s.noteOK(p)
	} else if w, _, ok := mysqlproto.ParseEOF(p); ok && w > 0 {
		s.warned = true
	}
	s.rowCount = -1 // after a result set (MariaDB KB "ROW_COUNT")
}

// mentions reports whether q contains kw (lower-case ASCII, digits and
// '_') in any letter case.
func mentions(q []byte, kw string) bool {
	for i := 0; i+len(kw) <= len(q); i++ {
		j := 0
		for ; j < len(kw); j++ {
			c := q[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != kw[j] {
				break
			}
		}
		if j == len(kw) {
			return true
		}
	}
	return false
}
