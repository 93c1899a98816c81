package main

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/sandbox"
)

// Causes of a rolled-back replay (diagnose).
const (
	causeBeforeCrash = "(a) commit before the crash"
	causeNewPrimary  = "(b) commit on the new primary before the snapshot"
	causeOther       = "(c) other"
	causeUnknown     = "unknown (no snapshot point recorded)"
)

var (
	gtidRe  = regexp.MustCompile(`GTID (\d+)-(\d+)-(\d+)`)
	tableRe = regexp.MustCompile(`\(sbtest\.(sbtest\d+)\)`)
	stmtTab = regexp.MustCompile(`\bsbtest\d+\b`)
)

// diagnose gives each mismatch of tr its cause from the new primary's
// binary log: the transactions that the new primary itself committed
// (its server_id in their GTIDs) up to the replay's snapshot
// (@@gtid_binlog_state then, which the proxy logs), and the sbtest tables
// each wrote. A read that differed although nothing was written to its
// table on the new primary before its snapshot read rows committed before
// the crash after the original's first read: (a). One whose table was
// written there first: (b). A write whose result differed (affected rows,
// a duplicate key) with nothing written to its table there first: (c).
func diagnose(ctx context.Context, sb *sandbox.Cluster, newPrimary string, ms []mismatch) error {
	if len(ms) == 0 {
		return nil
	}
	idx := -1
	for i, n := range sb.Nodes {
		if n.Name == newPrimary {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("diagnose: no node %s", newPrimary)
	}
	old := strconv.FormatUint(uint64(sb.Nodes[0].ServerID), 10)
	own := strconv.FormatUint(uint64(sb.Nodes[idx].ServerID), 10)
	db, err := sql.Open("mysql", sb.RootDSN(idx))
	if err != nil {
		return err
	}
	defer db.Close()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// seq -> sbtest tables written, for the new primary's own transactions.
	written := map[uint64]map[string]bool{}
	var logs []string
	rows, err := db.QueryContext(dctx, "SHOW BINARY LOGS")
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		var size any
		if err := rows.Scan(&name, &size); err != nil {
			rows.Close()
			return err
		}
		logs = append(logs, name)
	}
	rows.Close()
	for _, lg := range logs {
		rows, err := db.QueryContext(dctx, "SHOW BINLOG EVENTS IN '"+lg+"'")
		if err != nil {
			return err
		}
		var cur uint64
		mine := false
		for rows.Next() {
			var name, typ, info string
			var pos, sid, end any
			if err := rows.Scan(&name, &pos, &typ, &sid, &end, &info); err != nil {
				rows.Close()
				return err
			}
			if typ == "Gtid" {
				if m := gtidRe.FindStringSubmatch(info); m != nil {
					cur, _ = strconv.ParseUint(m[3], 10, 64)
					mine = m[2] == own
					if mine {
						written[cur] = map[string]bool{}
					}
				}
				continue
			}
			if mine && typ == "Table_map" {
				if m := tableRe.FindStringSubmatch(info); m != nil {
					written[cur][m[1]] = true
				}
			}
		}
		rows.Close()
	}
	rw, rerr := rowWrites(dctx, db)
	for i := range ms {
		m := &ms[i]
		if m.snapshotGTID == "" {
			m.cause = causeUnknown
			continue
		}
		var base, top uint64
		for _, e := range strings.Split(m.snapshotGTID, ",") {
			p := strings.Split(strings.TrimSpace(e), "-")
			if len(p) != 3 {
				continue
			}
			n, _ := strconv.ParseUint(p[2], 10, 64)
			if p[1] == old {
				base = n
			}
			top = max(top, n)
		}
		tab := stmtTab.FindString(m.stmt)
		same, other := 0, 0
		for seq := base + 1; seq <= top; seq++ {
			switch w := written[seq]; {
			case w[tab]:
				same++
			case len(w) > 0:
				other++
			}
		}
		m.before = fmt.Sprintf("new primary had committed %d transaction(s) of its own (%d writing %s, %d other sbtest tables)",
			top-base, same, tab, other)
		if a := argsRe.FindStringSubmatch(m.args); a != nil && rerr == nil {
			lo, _ := strconv.ParseInt(a[1], 10, 64)
			hi := lo
			if a[2] != "" {
				hi, _ = strconv.ParseInt(a[2], 10, 64)
			}
			// The old primary's last transaction is the last one before
			// the new primary's own.
			if k := lastWriteBefore(rw, base, tab, lo, hi); k >= 0 {
				m.before += fmt.Sprintf("; the last write to %s rows %d..%d before the crash was %d transaction(s) before the last one", tab, lo, hi, k)
			} else {
				m.before += fmt.Sprintf("; no write to %s rows %d..%d in the last 5000 transactions before the crash", tab, lo, hi)
			}
		} else if rerr != nil {
			m.before += "; " + rerr.Error()
		}
		switch {
		case same > 0:
			m.cause = causeNewPrimary
		case strings.HasPrefix(strings.ToUpper(strings.TrimSpace(m.stmt)), "SELECT"):
			m.cause = causeBeforeCrash
		default:
			m.cause = causeOther
		}
	}
	return nil
}

// failoverEvents lists the controller's events from the kill on, with
// their offset from it: where a slow failover spent its time.
func failoverEvents(ctx context.Context, s *stack, killed time.Time) string {
	evs, err := controller.ListEvents(ctx, s.store, s.keys, "main", 0)
	if err != nil {
		return err.Error()
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	var out []string
	for _, ev := range evs {
		if ev.At.Before(killed.Add(-time.Second)) {
			continue
		}
		msg := ev.Message
		if len(msg) > 110 && ev.Code != "failover_done" { // its steps and their durations
			msg = msg[:107] + "..."
		}
		out = append(out, fmt.Sprintf("%+.2fs %s %s", ev.At.Sub(killed).Seconds(), ev.Code, msg))
	}
	return strings.Join(out, "\n    ")
}

// rowWrites reads the new primary's binary logs (mariadb-binlog, rows
// decoded) and returns, for each transaction by GTID sequence number, the
// rows of sbtest tables it wrote: table -> ids (the first column).
func rowWrites(ctx context.Context, db *sql.DB) (map[uint64]map[string][]int64, error) {
	var base string
	if err := db.QueryRowContext(ctx, "SELECT @@log_bin_basename").Scan(&base); err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, err
	}
	var files []string
	for rows.Next() {
		var name string
		var size any
		if err := rows.Scan(&name, &size); err != nil {
			rows.Close()
			return nil, err
		}
		files = append(files, filepath.Join(filepath.Dir(base), name))
	}
	rows.Close()
	out, err := exec.CommandContext(ctx, "mariadb-binlog", append([]string{"--base64-output=decode-rows", "-v"}, files...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("mariadb-binlog: %w", err)
	}
	w := map[uint64]map[string][]int64{}
	var seq uint64
	table := ""
	for _, line := range strings.Split(string(out), "\n") {
		if m := gtidRe.FindStringSubmatch(line); m != nil && strings.HasPrefix(line, "#") {
			seq, _ = strconv.ParseUint(m[3], 10, 64)
			table = ""
			continue
		}
		if m := rowEventRe.FindStringSubmatch(line); m != nil {
			table = m[1]
			continue
		}
		if table != "" && strings.HasPrefix(line, "###   @1=") {
			id, err := strconv.ParseInt(strings.Fields(strings.TrimPrefix(line, "###   @1="))[0], 10, 64)
			if err == nil {
				if w[seq] == nil {
					w[seq] = map[string][]int64{}
				}
				w[seq][table] = append(w[seq][table], id)
			}
		}
	}
	return w, nil
}

var (
	rowEventRe = regexp.MustCompile("^### (?:UPDATE|INSERT INTO|DELETE FROM) `sbtest`\\.`(sbtest\\d+)`")
	argsRe     = regexp.MustCompile(`^\((-?\d+)(?:, (-?\d+))?\)$`)
)

// lastWriteBefore finds, among the transactions up to seq top, the
// latest that wrote a row of table with id in [lo, hi]: how many
// transactions before top it committed (-1: none found).
func lastWriteBefore(w map[uint64]map[string][]int64, top uint64, table string, lo, hi int64) int64 {
	for seq := top; seq > 0 && top-seq < 5000; seq-- {
		for _, id := range w[seq][table] {
			if id >= lo && id <= hi {
				return int64(top - seq)
			}
		}
	}
	return -1
}

// relayBacklog is, for each replica, the number of transactions it had
// received from the primary and not yet applied (Gtid_IO_Pos minus
// @@gtid_slave_pos, domain 0), read right after the kill: what the
// failover's "apply relay log" step has to apply first.
func relayBacklog(ctx context.Context, sb *sandbox.Cluster) string {
	var out []string
	for i := 1; i < len(sb.Nodes); i++ {
		db, err := sql.Open("mysql", sb.RootDSN(i))
		if err != nil {
			out = append(out, sb.Nodes[i].Name+" "+err.Error())
			continue
		}
		var applied string
		var io string
		err = db.QueryRowContext(ctx, "SELECT @@gtid_slave_pos").Scan(&applied)
		if err == nil {
			io, err = ioPos(ctx, db)
		}
		db.Close()
		if err != nil {
			out = append(out, sb.Nodes[i].Name+" "+err.Error())
			continue
		}
		out = append(out, fmt.Sprintf("%s %d", sb.Nodes[i].Name, seqOf(io)-seqOf(applied)))
	}
	return strings.Join(out, ", ")
}

// ioPos reads Gtid_IO_Pos from SHOW SLAVE STATUS.
func ioPos(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	if !rows.Next() {
		return "", fmt.Errorf("not a replica")
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", err
	}
	for i, c := range cols {
		if c == "Gtid_IO_Pos" {
			return string(vals[i]), nil
		}
	}
	return "", fmt.Errorf("no Gtid_IO_Pos")
}

// seqOf is the sequence number of domain 0 in a GTID position.
func seqOf(pos string) int64 {
	for _, e := range strings.Split(pos, ",") {
		p := strings.Split(strings.TrimSpace(e), "-")
		if len(p) == 3 && p[0] == "0" {
			n, _ := strconv.ParseInt(p[2], 10, 64)
			return n
		}
	}
	return 0
}
