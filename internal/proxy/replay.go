package proxy

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Transaction replay (clusters[].failover.transaction_replay). While a
// session of a primary listener has a transaction open, the proxy records
// the statements it sent (COM_QUERY texts and COM_STMT_EXECUTE packets, by
// client statement id) and a checksum of each statement's result, computed
// while the response is relayed: for a result set its column count and
// every row, for an OK its affected rows and last insert id, for an ERR its
// code. When the primary is lost while the transaction is open (its
// connection broke, it was cut, or the route moved), the session waits for
// the primary (awaitPrimary), logs into it with its state rebuilt (as a
// move does, migrate.go), re-executes the recorded statements one by one
// and goes on only if every one returns the same checksum (with
// failover.replay_checksum no_consistent_reads, plain consistent reads
// excepted: replay_reads.go); the statement in
// flight, if any, then runs there and its answer is relayed as usual. This
// follows MaxScale's readwritesplit transaction_replay (the checksum of
// each result, the replay after a reconnection, the limit on the
// transaction's size: transaction_replay_max_size).
//
// Never replayed: a statement that ends a transaction (COMMIT, XA, a
// statement with an implicit commit) or an autocommit write in flight when
// the primary was lost: it may or may not have been committed, and the
// client gets error 1105 saying its outcome is unknown. A transaction that
// cannot be replayed faithfully (over failover.replay_max_bytes or
// failover.replay_max_statements, COM_STMT_SEND_LONG_DATA, LOAD DATA LOCAL,
// cursors, a change of default schema or session variables in the
// transaction, a prepared statement closed in it) or whose replay returns a
// different result gets one error saying it was rolled back, and the session
// continues on the new primary.
//
// Cost: nothing is recorded or hashed unless the option is on for the
// cluster; with it on, statements are copied and results hashed only while
// a transaction is open (and for the statement that opens one).

// replayLog is what one session recorded of its open transaction.
type replayLog struct {
	maxBytes, maxStmts int
	// relaxReads: failover.replay_checksum is no_consistent_reads (a
	// replayed plain consistent read is not compared, replay_reads.go).
	relaxReads bool

	// The recorded response's results so far and, when the first was an
	// OK, its last insert id (sumFirst; kept in the entry by recordEnd).
	results  int
	okInsert uint64

	buf     []byte // recorded payloads (command byte first), back to back
	entries []replayEntry
	// broken says why the transaction cannot be replayed ("" while it can);
	// limit is set when a size bound was the reason.
	broken string
	limit  bool
	// pre is a SET TRANSACTION sent just before the transaction: it gave
	// the transaction its characteristics, so it is replayed first.
	pre []byte

	// The command being relayed: its entry (-1 when not recorded) and
	// whether its response is hashed.
	cur     int
	hashing bool
	h       maphash.Hash

	// fl describes the command in flight (recorded or not), for the
	// decision when its primary is lost.
	fl flight

	// wrote: a statement of the transaction may have written (anything
	// but reads, BEGIN and ROLLBACK); its COMMIT then gets a commit
	// marker (outcome.go), mk.
	wrote bool
	mk    commitMark
	// replayed: the open transaction was replayed after the loss of its
	// primary; its COMMIT waits for the cluster's other replays
	// (awaitReplays).
	replayed bool
	// pendSnap: the session is counted in its route's unsnapped
	// (replay_snap.go). snapGTID is @@gtid_binlog_state on the new primary
	// when the replay took its snapshot, and mismatchArgs the parameters
	// of the replayed statement whose result differed, for the log.
	pendSnap     bool
	gen          *txGen // where the open transaction is counted (nil: not counted)
	snapGTID     string
	mismatchArgs string
	// errCode is the error code of the last response readSum read (0:
	// none), to say why a replayed statement differed.
	errCode uint16
}

// replayEntry is one recorded statement.
type replayEntry struct {
	off, n int       // payload in buf
	stmtID uint32    // client statement id (COM_STMT_EXECUTE)
	st     *stmtInfo // the statement executed (kept when the client closes it)
	sum    uint64    // checksum of the result
	done   bool      // the response was complete
	// insertID is the last insert id of the result when it was one OK
	// and not 0 (an INSERT that generated an AUTO_INCREMENT value, or
	// named one): the replay makes the server use it again (replayTx).
	insertID uint64
}

// flight is what the proxy knows of the command in flight.
type flight struct {
	cmd    byte
	word   [20]byte // first keyword as sent (at most 20 bytes), for messages
	wlen   int
	kind   stmtKind
	inTx   bool // a transaction was open when it was sent
	commit bool // a plain COMMIT inside a transaction (plainCommit)
	pend   bool // still in the client read buffer (nothing forwarded)
	active bool
}

// stmtKind says what a statement does to the transaction around it, for
// replay decisions.
type stmtKind uint8

const (
	kindRead     stmtKind = iota // SELECT, WITH, SHOW, ...: reads, safe to run again
	kindWrite                    // INSERT/UPDATE/DELETE/REPLACE/...: a write inside the transaction
	kindBegin                    // BEGIN / START TRANSACTION: opens a transaction
	kindRollback                 // ROLLBACK (not ROLLBACK TO): ends it, undoing everything
	kindEnds                     // COMMIT, XA, DDL, LOCK TABLES, SET autocommit, ...: ends it or cannot be known not to
)

func newReplayLog(maxBytes, maxStmts int) *replayLog {
	r := &replayLog{maxBytes: maxBytes, maxStmts: maxStmts, cur: -1}
	r.h.SetSeed(maphash.MakeSeed())
	return r
}

// reset forgets the recorded transaction.
func (r *replayLog) reset() {
	r.fl.active = false
	r.wrote, r.mk.sent, r.mk.answer, r.replayed = false, false, markUnread, false
	r.uncount()
	r.entries = r.entries[:0]
	r.broken, r.limit = "", false
	if cap(r.buf) > 64<<10 {
		r.buf = nil // idle sessions keep small buffers only
	} else {
		r.buf = r.buf[:0]
	}
	if cap(r.entries) > 1024 {
		r.entries = nil
	}
}

// active reports whether a transaction is being recorded.
func (r *replayLog) active() bool { return len(r.entries) > 0 || r.broken != "" }

// breakTx marks the recorded transaction not replayable (the first reason
// is kept).
func (r *replayLog) breakTx(why string) {
	if r.broken == "" {
		r.broken = why
	}
}

// add records one statement's payload; it returns false (and marks the
// transaction not replayable) when a bound is exceeded.
func (r *replayLog) add(payload []byte, stmtID uint32, st *stmtInfo) bool {
	if r.broken != "" {
		return false
	}
	if len(r.entries)+1 > r.maxStmts {
		r.breakTx(fmt.Sprintf("it has more than %d statements (failover.replay_max_statements)", r.maxStmts))
		r.limit = true
		return false
	}
	if len(r.buf)+len(payload) > r.maxBytes {
		r.breakTx(fmt.Sprintf("its statements are larger than %d bytes (failover.replay_max_bytes)", r.maxBytes))
		r.limit = true
		return false
	}
	r.entries = append(r.entries, replayEntry{off: len(r.buf), n: len(payload), stmtID: stmtID, st: st})
	r.buf = append(r.buf, payload...)
	return true
}

func (r *replayLog) payload(e *replayEntry) []byte { return r.buf[e.off : e.off+e.n] }

// recordBegin runs before command cmd (payload p, possibly nil when it does
// not fit in the client read buffer; st the prepared statement it names)
// is forwarded: it starts a new record when no transaction is open and
// records the statement when a transaction is open or the statement may
// open one. long reports that the caller must read the whole COM_QUERY
// packet through forwardRecorded.
func (s *session) recordBegin(cmd byte, p []byte, stmtID uint32, st *stmtInfo) (long bool) {
	r := s.rlog
	r.cur, r.hashing = -1, false
	inTx := s.inTx()
	if !inTx && r.active() {
		r.reset()
	}
	r.fl = flight{cmd: cmd, inTx: inTx, active: true}
	if !inTx || r.replayed {
		// A new transaction or an autocommit statement commits after
		// the replays of the cluster have taken their snapshots; so
		// does a statement of a transaction already replayed, which
		// would otherwise take rows (auto-increment ids) another replay
		// must give its client again, and make that replay wait on its
		// locks.
		s.awaitSnapshots()
	}
	switch cmd {
	case mysql.COM_QUERY, mysql.COM_STMT_EXECUTE:
	case mysql.COM_STMT_SEND_LONG_DATA:
		if inTx {
			r.breakTx("it sent long data to a prepared statement (COM_STMT_SEND_LONG_DATA)")
		}
		r.fl.kind = kindWrite
		return false
	case mysqlproto.ComStmtBulkExecute:
		// Not recorded: its packet is as large as its rows, and its
		// result (one OK for all rows) checksums nothing row by row.
		if inTx {
			r.breakTx("it ran a bulk execute (COM_STMT_BULK_EXECUTE)")
		}
		r.fl.kind = kindWrite
		return false
	case mysql.COM_STMT_FETCH:
		if inTx {
			r.breakTx("it read from a cursor")
		}
		r.fl.kind = kindRead
		return false
	case mysql.COM_INIT_DB, mysql.COM_SET_OPTION:
		if inTx {
			r.breakTx("it changed its session state in the transaction")
		}
		r.fl.kind = kindEnds
		return false
	case mysql.COM_STMT_PREPARE, mysql.COM_STMT_CLOSE, mysql.COM_STMT_RESET, mysql.COM_PING,
		mysql.COM_STATISTICS, mysql.COM_FIELD_LIST:
		r.fl.kind = kindRead
		return false
	default:
		r.fl.kind = kindEnds
		return false
	}
	var text []byte
	if cmd == mysql.COM_QUERY {
		if p != nil {
			text = p[1:]
		} else if b, err := s.cr.Peek(s.cr.Size()); err == nil {
			text = b[mysqlproto.HeaderSize+1:]
		}
	} else if st != nil {
		text = st.text
	}
	kind := txKind(text, &r.fl)
	r.fl.kind = kind
	autocommit := s.status&mysql.SERVER_STATUS_AUTOCOMMIT != 0
	if inTx && kind == kindEnds && plainCommit(text) {
		r.fl.commit = true
	} else if (inTx || !autocommit) && kind != kindRead && kind != kindBegin && kind != kindRollback {
		r.wrote = true
	}
	if !inTx && autocommit && kind != kindBegin {
		// Outside a transaction only a statement that may open one is
		// kept; SET TRANSACTION gives the next one its characteristics.
		// It is kept until a transaction begins: MariaDB keeps it over
		// statements that open none (SET autocommit=0, SELECT 1), and
		// one kept too long only makes the replay stricter.
		if cmd == mysql.COM_QUERY && s.cls == classSetTx && p != nil {
			r.pre = append(r.pre[:0], p...)
		}
		return false
	}
	if !inTx {
		if len(r.pre) > 0 {
			r.add(r.pre, 0, nil)
			r.entries[0].done, r.entries[0].sum = true, okSum(&r.h)
		}
	}
	r.pre = r.pre[:0]
	if eqFold(r.fl.word[:r.fl.wlen], "xa") {
		r.breakTx("it is an XA transaction")
	}
	switch {
	case r.broken != "":
	case cmd == mysql.COM_STMT_EXECUTE:
		if st == nil || p == nil {
			r.breakTx("it executed a prepared statement with a packet too long for the proxy to record")
			break
		}
		if st.class == classSet || st.class == classUse || st.class == classSetOpaque || st.class == classSetStmtState || st.userVar {
			r.breakTx("it changed its session state in the transaction")
			break
		}
		r.addExecute(p, stmtID, st)
	case p == nil:
		long = true
	default:
		if s.cls == classSet || s.cls == classUse || s.cls == classSetOpaque || s.cls == classSetStmtState || s.cls == classLock || s.cls == classHandler {
			r.breakTx("it changed its session state in the transaction")
			break
		}
		r.add(p, 0, nil)
	}
	if r.gen == nil && len(r.entries) > 0 && s.be != nil {
		r.gen = s.l.route.txGenFor(s.be.t.node)
		r.gen.n.Add(1)
	}
	if !long && r.broken == "" {
		r.cur = len(r.entries) - 1
		r.hashing = true
		r.h.Reset()
		r.results, r.okInsert = 0, 0
	}
	return long
}

// addExecute records a COM_STMT_EXECUTE payload p (its statement id is the
// client's, stmtID) with the parameter types always included: on the new
// primary the statement is prepared again and has none.
func (r *replayLog) addExecute(p []byte, stmtID uint32, st *stmtInfo) {
	n := int(st.params)
	off := 10 + (n+7)/8
	if n > 0 && len(p) > off && p[off] == 0 {
		if len(st.types) != 2*n {
			r.breakTx("it executed a prepared statement whose parameter types the proxy does not know")
			return
		}
		start := len(r.buf)
		if !r.add(p[:off], stmtID, st) {
			return
		}
		// add checked the bound for the prefix; check the rest too.
		if len(r.buf)+1+2*n+len(p)-off-1 > r.maxBytes {
			r.entries = r.entries[:len(r.entries)-1]
			r.buf = r.buf[:start]
			r.breakTx(fmt.Sprintf("its statements are larger than %d bytes (failover.replay_max_bytes)", r.maxBytes))
			r.limit = true
			return
		}
		r.buf = append(r.buf, 1)
		r.buf = append(r.buf, st.types...)
		r.buf = append(r.buf, p[off+1:]...)
		r.entries[len(r.entries)-1].n = len(r.buf) - start
	} else if !r.add(p, stmtID, st) {
		return
	}
	binary.LittleEndian.PutUint32(r.buf[r.entries[len(r.entries)-1].off+1:], stmtID)
}

// forwardRecorded reads the whole pending COM_QUERY packet (longer than the
// client read buffer) into the record and forwards it.
func (s *session) forwardRecorded() error {
	r := s.rlog
	start := len(r.buf)
	payload, _, err := mysqlproto.ReadPacket(s.cr, r.buf[start:], maxStmtText)
	if err != nil {
		return fail(clientReason(err), err)
	}
	s.in += mysqlproto.HeaderSize + len(payload)
	if _, werr := mysqlproto.WritePacket(s.be.conn, 0, payload); werr != nil {
		err = fail(closeBackendLost, werr)
	}
	if r.add(payload, 0, nil) { // over a bound, add marks the transaction not replayable
		r.cur = len(r.entries) - 1
		r.hashing = true
		r.h.Reset()
		r.results, r.okInsert = 0, 0
	}
	return err
}

// recordEnd runs after the response to the recorded command was relayed
// completely: it keeps its checksum, or forgets the record when the
// session is no longer in a transaction.
func (s *session) recordEnd() {
	r := s.rlog
	if r.cur >= 0 && r.cur < len(r.entries) {
		e := &r.entries[r.cur]
		e.sum, e.done = r.h.Sum64(), true
		e.insertID = 0
		if r.results == 1 {
			e.insertID = r.okInsert
		}
	}
	r.results, r.okInsert = 0, 0
	r.cur, r.hashing, r.fl.active = -1, false, false
	if !s.inTx() {
		r.reset()
	}
}

// Checksum of a response. The relay (relay.go) and the replay (readSum)
// feed the same items in the same order.

// sumFirst hashes the first packet of a result (relayResults): an OK, an
// ERR, or a column count. A LOCAL INFILE request makes the transaction not
// replayable.
func (r *replayLog) sumFirst(p mysqlproto.Packet, infile bool) {
	r.results++
	switch p.First {
	case mysql.OK_HEADER:
		sumOK(&r.h, p.Payload)
		if r.results == 1 {
			r.okInsert = okInsertID(p.Payload)
		}
	case mysql.ERR_HEADER:
		sumErr(&r.h, p.Payload)
	case mysql.LocalInFile_HEADER:
		r.breakTx("it ran LOAD DATA LOCAL INFILE")
	default:
		if n, _, ok := mysqlproto.ReadLenEnc(p.Payload); ok {
			sumCols(&r.h, n)
		}
	}
}

// sumRowPacket hashes one packet of the rows part of a result set
// (relayRows): a row, or the ERR that ends it; the terminator is not
// hashed. A row longer than the relay buffer makes the transaction not
// replayable (it is streamed, never whole in memory).
func (r *replayLog) sumRowPacket(p mysqlproto.Packet, cont bool) {
	switch {
	case cont || p.Payload == nil || p.Len == mysqlproto.MaxPacketPayload:
		r.breakTx("it read a row larger than the proxy's relay buffer")
	case p.First == mysql.ERR_HEADER:
		sumErr(&r.h, p.Payload)
	case p.First == mysql.EOF_HEADER:
	default:
		sumRow(&r.h, p.Payload)
	}
}

func sumCols(h *maphash.Hash, n uint64) {
	var b [9]byte
	b[0] = 'C'
	binary.LittleEndian.PutUint64(b[1:], n)
	_, _ = h.Write(b[:])
}

func sumRow(h *maphash.Hash, payload []byte) {
	_ = h.WriteByte('R')
	_, _ = h.Write(payload)
}

// sumOK hashes an OK packet's affected rows and last insert id.
func sumOK(h *maphash.Hash, payload []byte) {
	var b [17]byte
	b[0] = 'O'
	if len(payload) > 1 {
		affected, k, ok := mysqlproto.ReadLenEnc(payload[1:])
		if ok {
			insertID, _, _ := mysqlproto.ReadLenEnc(payload[1+k:])
			binary.LittleEndian.PutUint64(b[1:], affected)
			binary.LittleEndian.PutUint64(b[9:], insertID)
		}
	}
	_, _ = h.Write(b[:])
}

func sumErr(h *maphash.Hash, payload []byte) {
	var b [3]byte
	b[0] = 'E'
	if len(payload) >= 3 {
		b[1], b[2] = payload[1], payload[2]
	}
	_, _ = h.Write(b[:])
}

// okSum is the checksum of a lone OK with nothing affected.
func okSum(h *maphash.Hash) uint64 {
	h.Reset()
	sumOK(h, []byte{mysql.OK_HEADER, 0, 0})
	return h.Sum64()
}

// txKind classifies statement text q for replay decisions; fl gets its
// first keyword (for messages).
func txKind(q []byte, fl *flight) stmtKind {
	w, rest := firstWord(q)
	fl.wlen = copy(fl.word[:], w)
	switch {
	case len(w) == 0:
		if i := skipSpace(q); i < len(q) && q[i] == '(' {
			return kindRead
		}
		return kindEnds
	case eqFold(w, "select"), eqFold(w, "with"), eqFold(w, "show"), eqFold(w, "describe"), eqFold(w, "desc"),
		eqFold(w, "explain"), eqFold(w, "values"), eqFold(w, "table"), eqFold(w, "do"), eqFold(w, "help"), eqFold(w, "checksum"):
		return kindRead
	case eqFold(w, "insert"), eqFold(w, "update"), eqFold(w, "delete"), eqFold(w, "replace"),
		eqFold(w, "savepoint"), eqFold(w, "release"):
		return kindWrite
	case eqFold(w, "begin"):
		w2, _ := firstWord(rest)
		if len(w2) == 0 || eqFold(w2, "work") {
			return kindBegin
		}
		return kindEnds // BEGIN NOT ATOMIC (a compound statement)
	case eqFold(w, "start"):
		if w2, _ := firstWord(rest); eqFold(w2, "transaction") {
			return kindBegin
		}
	case eqFold(w, "rollback"):
		w2, rest2 := firstWord(rest)
		if eqFold(w2, "work") {
			w2, _ = firstWord(rest2)
		}
		if eqFold(w2, "to") {
			return kindWrite // ROLLBACK TO SAVEPOINT stays in the transaction
		}
		if eqFold(w2, "and") || eqFold(w2, "release") {
			return kindEnds // AND CHAIN / RELEASE: more than a rollback
		}
		return kindRollback
	}
	return kindEnds
}

// keyword returns the first keyword of the command in flight in upper case
// ("COMMIT"), or a description of the command.
func (fl *flight) keyword() string {
	if fl.wlen == 0 {
		if fl.cmd == mysql.COM_QUERY || fl.cmd == mysql.COM_STMT_EXECUTE {
			return "the statement"
		}
		return fmt.Sprintf("command 0x%02x", fl.cmd)
	}
	b := []byte(string(fl.word[:fl.wlen]))
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}
