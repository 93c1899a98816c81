package probe

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// replicaStatus is the part of SHOW ALL SLAVES STATUS / SHOW REPLICA STATUS
// the controller uses.
type replicaStatus struct {
	SourceHost   string
	SourcePort   int
	IORunning    string
	SQLRunning   bool
	Lag          *int64
	LastIOError  string
	LastSQLError string
	// IO-thread progress (MariaDB SHOW ALL SLAVES STATUS; zero when the
	// column is absent, e.g. on MySQL).
	GTIDIOPos          string
	HeartbeatsReceived int64
	HeartbeatPeriod    float64
	SourceLogFile      string
	ReadSourceLogPos   int64
}

// Column names per field, MariaDB name first, then MySQL 8.0.22+ name.
// Columns are found by name because the column sets differ by version.
var (
	colConnection = []string{"Connection_name", "Channel_Name"}
	colHost       = []string{"Master_Host", "Source_Host"}
	colPort       = []string{"Master_Port", "Source_Port"}
	colIO         = []string{"Slave_IO_Running", "Replica_IO_Running"}
	colSQL        = []string{"Slave_SQL_Running", "Replica_SQL_Running"}
	colLag        = []string{"Seconds_Behind_Master", "Seconds_Behind_Source"}
	colIOError    = []string{"Last_IO_Error"}
	colSQLError   = []string{"Last_SQL_Error"}
	colGTIDIO     = []string{"Gtid_IO_Pos"}
	colHeartbeats = []string{"Slave_received_heartbeats"}
	colHBPeriod   = []string{"Slave_heartbeat_period"}
	colLogFile    = []string{"Master_Log_File", "Source_Log_File"}
	colReadPos    = []string{"Read_Master_Log_Pos", "Read_Source_Log_Pos"}
)

// parseReplicaStatus picks the replication connection to report from the
// rows of SHOW ALL SLAVES STATUS (or SHOW REPLICA STATUS): the default
// (unnamed) connection if there is one, otherwise the first row. ok is false
// when there are no rows (the node is not a replica).
// fill copies the replica's status into pr (the node replicates).
func (rs replicaStatus) fill(pr *topo.Probe) {
	pr.Replicating = true
	pr.SourceHost, pr.SourcePort = rs.SourceHost, rs.SourcePort
	pr.IORunning, pr.SQLRunning = rs.IORunning, rs.SQLRunning
	pr.LagSeconds = rs.Lag
	pr.LastIOError, pr.LastSQLError = rs.LastIOError, rs.LastSQLError
	pr.GTIDIO, pr.HeartbeatsReceived, pr.HeartbeatPeriod = rs.GTIDIOPos, rs.HeartbeatsReceived, rs.HeartbeatPeriod
	pr.SourceLogFile, pr.ReadSourceLogPos = rs.SourceLogFile, rs.ReadSourceLogPos
}

func parseReplicaStatus(columns []string, rows [][]sql.NullString) (rs replicaStatus, ok bool, err error) {
	if len(rows) == 0 {
		return replicaStatus{}, false, nil
	}
	idx := func(names []string) int {
		for _, n := range names {
			for i, c := range columns {
				if strings.EqualFold(c, n) {
					return i
				}
			}
		}
		return -1
	}
	row := rows[0]
	if ci := idx(colConnection); ci >= 0 {
		for _, r := range rows {
			if r[ci].String == "" {
				row = r
				break
			}
		}
	}
	get := func(names []string) (sql.NullString, bool) {
		i := idx(names)
		if i < 0 || i >= len(row) {
			return sql.NullString{}, false
		}
		return row[i], true
	}
	host, ok1 := get(colHost)
	io, ok2 := get(colIO)
	sqlRun, ok3 := get(colSQL)
	if !ok1 || !ok2 || !ok3 {
		return replicaStatus{}, false, fmt.Errorf("replica status has no %s/%s/%s column (columns: %d)",
			colHost[0], colIO[0], colSQL[0], len(columns))
	}
	rs.SourceHost = host.String
	rs.IORunning = io.String
	rs.SQLRunning = strings.EqualFold(sqlRun.String, "Yes")
	if p, ok := get(colPort); ok && p.Valid {
		n, err := strconv.Atoi(p.String)
		if err != nil {
			return replicaStatus{}, false, fmt.Errorf("replica status: %s %q is not a number", colPort[0], p.String)
		}
		rs.SourcePort = n
	}
	if l, ok := get(colLag); ok && l.Valid && l.String != "" {
		n, err := strconv.ParseInt(l.String, 10, 64)
		if err != nil {
			return replicaStatus{}, false, fmt.Errorf("replica status: %s %q is not a number", colLag[0], l.String)
		}
		rs.Lag = &n
	}
	if e, ok := get(colIOError); ok {
		rs.LastIOError = e.String
	}
	if e, ok := get(colSQLError); ok {
		rs.LastSQLError = e.String
	}
	// Progress columns are informative: a value that does not parse is
	// left zero rather than failing the probe.
	if v, ok := get(colGTIDIO); ok {
		rs.GTIDIOPos = v.String
	}
	if v, ok := get(colHeartbeats); ok {
		rs.HeartbeatsReceived, _ = strconv.ParseInt(v.String, 10, 64)
	}
	if v, ok := get(colHBPeriod); ok {
		rs.HeartbeatPeriod, _ = strconv.ParseFloat(v.String, 64)
	}
	if v, ok := get(colLogFile); ok {
		rs.SourceLogFile = v.String
	}
	if v, ok := get(colReadPos); ok {
		rs.ReadSourceLogPos, _ = strconv.ParseInt(v.String, 10, 64)
	}
	return rs, true, nil
}

// scanAll reads every row of rows as nullable strings.
func scanAll(rows *sql.Rows) ([]string, [][]sql.NullString, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	var out [][]sql.NullString
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		out = append(out, vals)
	}
	return cols, out, rows.Err()
}
