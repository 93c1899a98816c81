package probe

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

func ns(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

var null = sql.NullString{}

func TestParseReplicaStatus(t *testing.T) {
	mariaCols := []string{"Connection_name", "Slave_SQL_State", "Master_Host", "Master_Port",
		"Slave_IO_Running", "Slave_SQL_Running", "Seconds_Behind_Master", "Last_IO_Error", "Last_SQL_Error", "Gtid_IO_Pos"}
	mysqlCols := []string{"Replica_IO_State", "Source_Host", "Source_Port", "Replica_IO_Running",
		"Replica_SQL_Running", "Seconds_Behind_Source", "Last_IO_Error", "Last_SQL_Error", "Channel_Name"}
	lag := func(n int64) *int64 { return &n }
	tests := []struct {
		name   string
		cols   []string
		rows   [][]sql.NullString
		want   replicaStatus
		wantOK bool
		err    bool
	}{
		{name: "not a replica", cols: mariaCols},
		{
			name: "mariadb running", cols: mariaCols,
			rows: [][]sql.NullString{{ns(""), ns("x"), ns("127.0.0.1"), ns("3306"), ns("Yes"), ns("Yes"), ns("3"), ns(""), ns(""), ns("0-1-5")}},
			want: replicaStatus{SourceHost: "127.0.0.1", SourcePort: 3306, IORunning: "Yes", SQLRunning: true, Lag: lag(3), GTIDIOPos: "0-1-5"}, wantOK: true,
		},
		{
			name: "mariadb IO progress columns",
			cols: append(append([]string(nil), mariaCols...), "Master_Log_File", "Read_Master_Log_Pos", "Slave_received_heartbeats", "Slave_heartbeat_period"),
			rows: [][]sql.NullString{{ns(""), ns("x"), ns("h"), ns("3306"), ns("Yes"), ns("Yes"), ns("0"), ns(""), ns(""), ns("0-1-9"),
				ns("mariadb-bin.000002"), ns("1234"), ns("17"), ns("1.000")}},
			want: replicaStatus{SourceHost: "h", SourcePort: 3306, IORunning: "Yes", SQLRunning: true, Lag: lag(0), GTIDIOPos: "0-1-9",
				SourceLogFile: "mariadb-bin.000002", ReadSourceLogPos: 1234, HeartbeatsReceived: 17, HeartbeatPeriod: 1}, wantOK: true,
		},
		{
			name: "mariadb lag NULL, io connecting", cols: mariaCols,
			rows: [][]sql.NullString{{ns(""), ns(""), ns("h"), ns("3307"), ns("Connecting"), ns("No"), null, ns("io err"), ns("sql err"), ns("")}},
			want: replicaStatus{SourceHost: "h", SourcePort: 3307, IORunning: "Connecting", LastIOError: "io err", LastSQLError: "sql err"}, wantOK: true,
		},
		{
			name: "multi-source prefers the default connection", cols: mariaCols,
			rows: [][]sql.NullString{
				{ns("other"), ns(""), ns("o"), ns("1"), ns("Yes"), ns("Yes"), ns("0"), ns(""), ns(""), ns("")},
				{ns(""), ns(""), ns("d"), ns("2"), ns("No"), ns("Yes"), null, ns(""), ns(""), ns("")},
			},
			want: replicaStatus{SourceHost: "d", SourcePort: 2, IORunning: "No", SQLRunning: true}, wantOK: true,
		},
		{
			name: "mysql 8 names", cols: mysqlCols,
			rows: [][]sql.NullString{{ns("w"), ns("src"), ns("3306"), ns("Yes"), ns("Yes"), ns("0"), ns(""), ns(""), ns("")}},
			want: replicaStatus{SourceHost: "src", SourcePort: 3306, IORunning: "Yes", SQLRunning: true, Lag: lag(0)}, wantOK: true,
		},
		{
			name: "missing columns", cols: []string{"Foo"},
			rows: [][]sql.NullString{{ns("x")}}, err: true,
		},
		{
			name: "bad port", cols: mariaCols,
			rows: [][]sql.NullString{{ns(""), ns(""), ns("h"), ns("port"), ns("Yes"), ns("Yes"), null, ns(""), ns(""), ns("")}}, err: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := parseReplicaStatus(tc.cols, tc.rows)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if tc.err {
				return
			}
			if ok != tc.wantOK || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v ok=%v, want %+v ok=%v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestMissingPrivileges(t *testing.T) {
	req := mariadbDialect{}.requiredPrivileges()
	all := []string{"READ_ONLY ADMIN", "REPLICATION SLAVE ADMIN", "SLAVE MONITOR", "BINLOG MONITOR",
		"REPLICATION MASTER ADMIN", "CONNECTION ADMIN", "PROCESS", "RELOAD"}
	tests := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"usage only", []string{"GRANT USAGE ON *.* TO `mon`@`%` IDENTIFIED BY PASSWORD '*F14C'"}, all},
		{"all privileges", []string{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"}, nil},
		{"super does not imply on 10.11", []string{"GRANT SUPER ON *.* TO `mon`@`%`"}, all},
		{
			"some missing",
			[]string{"GRANT PROCESS, BINLOG MONITOR, READ_ONLY ADMIN, REPLICATION SLAVE ADMIN, SLAVE MONITOR ON *.* TO `mon`@`%` IDENTIFIED BY PASSWORD '*F14C089473F1F12EC52B25E76707571C7365FDD7'"},
			[]string{"REPLICATION MASTER ADMIN", "CONNECTION ADMIN", "RELOAD"},
		},
		{
			"database-level grants do not count",
			[]string{"GRANT USAGE ON *.* TO `mon`@`%`", "GRANT ALL PRIVILEGES ON `test`.* TO `mon`@`%`", "GRANT PROCESS ON `x`.* TO PUBLIC"},
			all,
		},
		{
			"role grants listed by SHOW GRANTS count; aliases accepted",
			[]string{"GRANT `ops` TO `mon`@`%`", "GRANT USAGE ON *.* TO `mon`@`%`",
				"GRANT RELOAD, PROCESS, REPLICATION CLIENT, REPLICA MONITOR, READ_ONLY ADMIN, REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, CONNECTION ADMIN ON *.* TO `ops`"},
			nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := missingPrivileges(tc.lines, req)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("missing = %q, want %q", got, tc.want)
			}
		})
	}
	// MySQL 8 prints dynamic privileges comma-separated without spaces.
	got := missingPrivileges([]string{
		"GRANT PROCESS, RELOAD, REPLICATION CLIENT ON *.* TO `mon`@`%`",
		"GRANT CONNECTION_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `mon`@`%`",
	}, mysqlDialect{}.requiredPrivileges())
	if want := []string{"SYSTEM_VARIABLES_ADMIN"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("mysql missing = %q, want %q", got, want)
	}
}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &netSyscallErr{syscall.ECONNREFUSED}}
	tests := []struct {
		err  error
		want Kind
	}{
		{nil, KindOK},
		{&mysql.MySQLError{Number: 1040, Message: "Too many connections"}, KindTooManyConnections},
		{fmt.Errorf("connect: %w", &mysql.MySQLError{Number: 1045}), KindAccessDenied},
		{&mysql.MySQLError{Number: 1227}, KindPrivilege},
		{&mysql.MySQLError{Number: 1129}, KindHostBlocked},
		{&mysql.MySQLError{Number: 1064}, KindQuery},
		{context.DeadlineExceeded, KindTimeout},
		{refused, KindRefused},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("broken")}, KindNetwork},
		{mysql.ErrInvalidConn, KindNetwork},
	}
	for _, tc := range tests {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	if !connectionLost(KindTooManyConnections) || connectionLost(KindPrivilege) {
		t.Fatal("connectionLost: too many connections must count as unreachable, a privilege error must not")
	}
}

type netSyscallErr struct{ errno syscall.Errno }

func (e *netSyscallErr) Error() string { return e.errno.Error() }
func (e *netSyscallErr) Unwrap() error { return e.errno }

func TestChangeSourceStatement(t *testing.T) {
	q, args, err := mariadbDialect{}.changeSource("127.0.0.1", 3307, "repl", "s3cret", GTIDSlavePos, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := "CHANGE MASTER TO MASTER_HOST = ?, MASTER_PORT = ?, MASTER_USER = ?, MASTER_PASSWORD = ?, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, MASTER_HEARTBEAT_PERIOD = 0.200"
	if q != want || !reflect.DeepEqual(args, []any{"127.0.0.1", 3307, "repl", "s3cret"}) {
		t.Fatalf("got %q %v", q, args)
	}
	// No period set: 1 s, as before the controller managed it.
	if q, _, _ := (mariadbDialect{}).changeSource("h", 1, "u", "p", GTIDSlavePos, 0); !strings.HasSuffix(q, "MASTER_HEARTBEAT_PERIOD = 1.000") {
		t.Fatalf("default heartbeat: got %q", q)
	}
	if got := (mariadbDialect{}).setHeartbeat(1234567 * time.Microsecond); got != "CHANGE MASTER TO MASTER_HEARTBEAT_PERIOD = 1.235" {
		t.Fatalf("setHeartbeat: got %q", got)
	}
	if got := (mariadbDialect{}).setNetTimeout(3); got != "SET GLOBAL slave_net_timeout = 3" {
		t.Fatalf("setNetTimeout: got %q", got)
	}
	if _, _, err := (mariadbDialect{}).changeSource("h", 1, "u", "p", "slave_pos; DROP TABLE x", 0); err == nil {
		t.Fatal("an invalid MASTER_USE_GTID value must be refused")
	}
}

func TestUnknownFlavor(t *testing.T) {
	p := NewProber("127.0.0.1:1", Credentials{User: "u"}, "oracle", 0)
	defer p.Close()
	pr := p.Probe(context.Background())
	if pr.Reachable || pr.Error == "" {
		t.Fatalf("probe with an unknown flavor = %+v, want an error", pr)
	}
	if err := p.SetReadOnly(context.Background(), true); err == nil {
		t.Fatal("SetReadOnly with an unknown flavor must fail")
	}
}

func TestProbeRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	p := NewProber(addr, Credentials{User: "u", Password: "pw"}, FlavorMariaDB, 0)
	defer p.Close()
	r := p.ProbeResult(context.Background())
	if r.Probe.Reachable || r.Kind != KindRefused || r.Probe.Error == "" {
		t.Fatalf("probe of a closed port = %+v kind %s, want unreachable/refused", r.Probe, r.Kind)
	}
}

func TestProbeTimeout(t *testing.T) {
	// A listener that accepts and never speaks: the handshake must time out
	// within the probe timeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	p := NewProber(l.Addr().String(), Credentials{User: "u"}, FlavorMariaDB, 200*1e6)
	defer p.Close()
	r := p.ProbeResult(context.Background())
	if r.Probe.Reachable || r.Kind != KindTimeout {
		t.Fatalf("probe of a silent server = %+v kind %s, want timeout", r.Probe, r.Kind)
	}
	if r.Probe.LatencyMS > 2000 {
		t.Fatalf("probe took %.0f ms with a 200 ms timeout", r.Probe.LatencyMS)
	}
}

func TestHeartbeatGranted(t *testing.T) {
	cases := []struct {
		lines []string
		want  bool
	}{
		{[]string{"GRANT SUPER, PROCESS ON *.* TO `m`@`%`"}, false},
		{[]string{"GRANT SUPER ON *.* TO `m`@`%`", "GRANT SELECT, INSERT, UPDATE, CREATE ON `switchyard`.* TO `m`@`%`"}, true},
		{[]string{"GRANT SELECT, INSERT, UPDATE ON `switchyard`.* TO `m`@`%`"}, false},
		{[]string{"GRANT SELECT, INSERT, UPDATE, CREATE ON *.* TO `m`@`%`"}, true},
		{[]string{"GRANT ALL PRIVILEGES ON `switchyard`.* TO `m`@`%`"}, true},
		{[]string{"GRANT SELECT, INSERT, UPDATE, CREATE ON `other`.* TO `m`@`%`"}, false},
	}
	for _, c := range cases {
		if got := heartbeatGranted(c.lines); got != c.want {
			t.Errorf("heartbeatGranted(%q) = %v, want %v", c.lines, got, c.want)
		}
	}
}
