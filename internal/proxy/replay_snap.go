package proxy

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Replays and their snapshots. Under REPEATABLE READ (InnoDB's default) a
// transaction reads from the snapshot taken at its first consistent read.
// Everything committed on the lost primary before the crash is on the new
// one before any replay starts (the failover applies the relay log first),
// so a replay whose snapshot is taken before anything else commits on the
// new primary reads exactly what the original read, unless another
// transaction committed rows it read between its first read and the crash
// (that difference is real, and the replay is refused for it). What the
// proxy can keep out of the replays' snapshots is what commits on the new
// primary after the failover: the statements held during it, the sessions
// that go on there (a COMMIT resolved committed, a replay rolled back), and
// the replays' own COMMITs. So:
//
//   - a session that lost its primary in a transaction it will replay is
//     counted in the cluster route's unsnapped from the loss (before the
//     wait for the new primary) until its replay has taken its snapshot;
//     before it notices the loss (its client has sent nothing since), its
//     open transaction is counted by the node it began on (txGen), which
//     the first session held for the failover marks lost;
//   - a replay whose recorded statements are all plain reads (no write, no
//     locking read: nothing it runs depends on data committed after its
//     snapshot, and nothing reads its own writes) and that was opened by a
//     plain BEGIN / START TRANSACTION is opened with START TRANSACTION WITH
//     CONSISTENT SNAPSHOT instead: its snapshot is taken then
//     (https://mariadb.com/kb/en/start-transaction/; InnoDB ignores the
//     clause, with a warning, outside REPEATABLE READ, where every read
//     takes a fresh view or locks anyway). Any other replay counts as
//     snapshotted only once all its recorded statements have run again;
//   - a statement outside a transaction on a primary listener, and a
//     replayed transaction's COMMIT, wait until no replay of the cluster
//     is unsnapped and no transaction is open on a lost node, at most
//     replaySnapshotWait each; a lost node's open transactions are waited
//     for only until replaySnapshotWait after the first statement that
//     waited for them (a client idle in a transaction delays the others
//     once, not at every statement).
//
// The order only changes for transactions that began after the loss of
// the primary; every replay is still compared with what its client saw.

// replaySnapshotWait bounds how long a statement outside a transaction (or
// a replayed COMMIT) waits for the cluster's replays to take their
// snapshots.
const replaySnapshotWait = time.Second

// pendSnapshot counts the session in its route's unsnapped replays (once).
func (s *session) pendSnapshot() {
	if r := s.rlog; r != nil && !r.pendSnap {
		r.pendSnap = true
		s.l.route.unsnapped.Add(1)
	}
}

// snapTaken ends pendSnapshot (no-op when not counted). The session's
// transaction stops counting among those open on its old node.
func (s *session) snapTaken() {
	r := s.rlog
	if r == nil {
		return
	}
	r.uncount()
	if r.pendSnap {
		r.pendSnap = false
		s.l.route.unsnapped.Add(-1)
	}
}

// txGen counts the sessions of a route with a recorded transaction open
// that began on node. Until the deadline (unix nanoseconds, 0: none yet,
// set by the first statement that waits for it), statements outside
// transactions on another node wait until n is 0: a session in a
// transaction when its primary was lost is counted there from the start,
// even before it notices the loss.
type txGen struct {
	node     string
	n        atomic.Int64
	deadline atomic.Int64
	lost     atomic.Bool // a session held for a failover after losing node (awaitPrimary)
}

// markLost notes that node was lost as the primary (a session waits for
// the failover): its open transactions are replays to come.
func (rt *clusterRoute) markLost(node string) {
	for _, g := range [2]*txGen{rt.txCur.Load(), rt.txPrev.Load()} {
		if g != nil && g.node == node {
			g.lost.Store(true)
		}
	}
}

// txGenFor returns the route's count for transactions beginning on node,
// making it the current one (the one before becomes the previous) when
// the current one is another node's.
func (rt *clusterRoute) txGenFor(node string) *txGen {
	for {
		cur := rt.txCur.Load()
		if cur != nil && cur.node == node {
			return cur
		}
		g := &txGen{node: node}
		if rt.txCur.CompareAndSwap(cur, g) {
			if cur != nil {
				rt.txPrev.Store(cur)
			}
			return g
		}
	}
}

// uncount removes the open transaction from its count.
func (r *replayLog) uncount() {
	if r.gen != nil {
		r.gen.n.Add(-1)
		r.gen = nil
	}
}

// lostOpen reports whether a transaction is counted open on a lost node
// other than node (whatever its deadline).
func (rt *clusterRoute) lostOpen(node string) bool {
	for _, g := range [2]*txGen{rt.txCur.Load(), rt.txPrev.Load()} {
		if g != nil && g.n.Load() > 0 && g.lost.Load() && g.node != node {
			return true
		}
	}
	return false
}

// staleTx is the number of sessions with a transaction open on a lost
// node other than node, counted in a txGen whose deadline has not passed
// (starting it when unset). A planned switchover loses no node: its
// sessions never wait here.
func (rt *clusterRoute) staleTx(node string, now time.Time) int64 {
	var n int64
	for _, g := range [2]*txGen{rt.txCur.Load(), rt.txPrev.Load()} {
		if g == nil || g.node == node || !g.lost.Load() {
			continue
		}
		k := g.n.Load()
		if k <= 0 {
			continue
		}
		d := g.deadline.Load()
		if d == 0 {
			d = now.Add(replaySnapshotWait).UnixNano()
			if !g.deadline.CompareAndSwap(0, d) {
				d = g.deadline.Load()
			}
		}
		if now.UnixNano() < d {
			n += k
		} else {
			g.lost.Store(false) // waited for long enough: no longer looked at
		}
	}
	return n
}

// awaitSnapshots waits, at most replaySnapshotWait, until every replay of
// the session's cluster has taken its snapshot. It reports whether the
// bound ran out first (the statement then goes on anyway).
func (s *session) awaitSnapshots() (timedOut bool) {
	rt := s.l.route
	node := ""
	if s.be != nil {
		node = s.be.t.node
	}
	if rt.unsnapped.Load() <= 0 && !rt.lostOpen(node) {
		return false // the common case: no clock read
	}
	start := time.Now()
	deadline := start.Add(replaySnapshotWait)
	// While a replay is running (its statements are executing: a lock
	// wait among them ends within replayLockWait) the wait goes on, up to
	// failover.max_hold: a replay longer than replaySnapshotWait (a slow
	// statement in the transaction) would otherwise have its ids taken.
	longest := start.Add(max(replaySnapshotWait, s.srv.rc.Load().maxHold(s.l.cluster)))
	for {
		now := time.Now()
		un, stale := rt.unsnapped.Load(), rt.staleTx(node, now)
		if un <= 0 && stale <= 0 {
			return false
		}
		if !now.Before(deadline) && rt.replaying.Load() > 0 && now.Before(longest) {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		if !now.Before(deadline) {
			s.log.Info("statement released before every replay took its snapshot", "cluster", s.l.cluster,
				"unsnapped", un, "open_elsewhere", stale, "waited", now.Sub(start))
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// snapshotOpener returns the index of the recorded statement that opened
// the transaction, a plain BEGIN [WORK] or START TRANSACTION [READ ONLY |
// READ WRITE], as text or prepared (after a SET TRANSACTION, if any):
// found is false for any other start (the first statement under
// autocommit=0, other clauses).
// cs reports that the replay of the first n recorded statements takes its
// snapshot there, with text (WITH CONSISTENT SNAPSHOT added) replayed in
// its place: the statements after it are plain reads.
func (r *replayLog) snapshotOpener(n int) (idx int, text []byte, found, cs bool) {
	if n == 0 {
		return 0, nil, false, false
	}
	if n > 1 && r.entries[0].st == nil && isSetTx(r.entryText(&r.entries[0])) {
		idx = 1
	}
	e := &r.entries[idx]
	if e.st != nil && e.st.params != 0 {
		return 0, nil, false, false
	}
	// A prepared BEGIN (sysbench prepares its BEGIN and COMMIT) is
	// replayed as text in that case: both answer with a plain OK.
	q := strings.ToUpper(strings.Join(strings.Fields(strings.TrimRight(string(r.entryText(e)), "; \t\r\n")), " "))
	switch q {
	case "BEGIN", "BEGIN WORK", "START TRANSACTION":
		q = "START TRANSACTION WITH CONSISTENT SNAPSHOT"
	case "START TRANSACTION READ ONLY", "START TRANSACTION READ WRITE":
		q += ", WITH CONSISTENT SNAPSHOT"
	default:
		return 0, nil, false, false
	}
	var fl flight
	for i := idx + 1; i < n; i++ {
		t := r.entryText(&r.entries[i])
		if txKind(t, &fl) != kindRead || lockingRead(t) {
			return idx, nil, true, false
		}
	}
	return idx, []byte(q), true, true
}

// entryText is the SQL text of recorded statement e (of its prepared
// statement for an execute).
func (r *replayLog) entryText(e *replayEntry) []byte {
	if e.st != nil {
		return e.st.text
	}
	return r.payload(e)[1:]
}

// isSetTx reports whether q sets the next transaction's characteristics
// only (SET TRANSACTION, SET @@tx_isolation, ...: classSetTx).
func isSetTx(q []byte) bool { return classify(q) == classSetTx }

// lockingRead reports whether q has a locking clause (FOR UPDATE, LOCK IN
// SHARE MODE, FOR SHARE) or reads into variables or a file: not a plain
// consistent read.
func lockingRead(q []byte) bool {
	norm := strings.ToUpper(strings.Join(strings.Fields(string(q)), " "))
	return strings.Contains(norm, "FOR UPDATE") || strings.Contains(norm, "LOCK IN SHARE MODE") ||
		strings.Contains(norm, "FOR SHARE") || strings.Contains(norm, " INTO ")
}

// describeArgs renders the parameters of a recorded COM_STMT_EXECUTE (the
// recorded packet always carries their types, addExecute) for the log:
// "(1, 'abc', NULL)", "" for a text statement. Types it does not decode
// end the list with "…".
func (r *replayLog) describeArgs(e *replayEntry) string {
	if e.st == nil || e.st.params == 0 {
		return ""
	}
	p := r.payload(e)
	n := int(e.st.params)
	nullOff := 10
	off := nullOff + (n+7)/8
	if len(p) <= off || p[off] != 1 || len(p) < off+1+2*n {
		return "(?)"
	}
	types := p[off+1 : off+1+2*n]
	v := p[off+1+2*n:]
	var b strings.Builder
	b.WriteByte('(')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		if p[nullOff+i/8]&(1<<(i%8)) != 0 {
			b.WriteString("NULL")
			continue
		}
		unsigned := types[2*i+1]&0x80 != 0
		size := 0
		switch types[2*i] {
		case mysql.MYSQL_TYPE_TINY:
			size = 1
		case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
			size = 2
		case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT:
			size = 4
		case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
			size = 8
		case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_BLOB,
			mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB,
			mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL:
			l, k, ok := mysqlproto.ReadLenEnc(v)
			if !ok || k+int(l) > len(v) {
				b.WriteString("…)")
				return b.String()
			}
			sv := string(v[k : k+int(l)])
			if len(sv) > 24 {
				sv = sv[:21] + "..."
			}
			b.WriteString(strconv.Quote(sv))
			v = v[k+int(l):]
			continue
		default:
			b.WriteString("…)")
			return b.String()
		}
		if len(v) < size {
			b.WriteString("…)")
			return b.String()
		}
		var u uint64
		switch size {
		case 1:
			u = uint64(v[0])
			if !unsigned {
				u = uint64(int64(int8(v[0])))
			}
		case 2:
			u = uint64(binary.LittleEndian.Uint16(v))
			if !unsigned {
				u = uint64(int64(int16(u)))
			}
		case 4:
			u = uint64(binary.LittleEndian.Uint32(v))
			if types[2*i] == mysql.MYSQL_TYPE_FLOAT {
				b.WriteString(strconv.FormatFloat(float64(math.Float32frombits(uint32(u))), 'g', -1, 32))
				v = v[size:]
				continue
			}
			if !unsigned {
				u = uint64(int64(int32(u)))
			}
		case 8:
			u = binary.LittleEndian.Uint64(v)
			if types[2*i] == mysql.MYSQL_TYPE_DOUBLE {
				b.WriteString(strconv.FormatFloat(math.Float64frombits(u), 'g', -1, 64))
				v = v[size:]
				continue
			}
		}
		if unsigned {
			b.WriteString(strconv.FormatUint(u, 10))
		} else {
			b.WriteString(strconv.FormatInt(int64(u), 10))
		}
		v = v[size:]
	}
	b.WriteByte(')')
	return b.String()
}
