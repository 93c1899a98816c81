package probe

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

// Kind classifies the outcome of a probe or an administrative statement. It
// is derived from MySQL error numbers and Go network errors, never from
// message text. Values are stable and used as metric labels.
type Kind string

// The kinds of outcome.
const (
	// KindOK: the probe completed.
	KindOK Kind = "ok"
	// KindRefused: the TCP connection was refused (nothing listens).
	KindRefused Kind = "refused"
	// KindTimeout: the connect or a query did not finish within the timeout.
	KindTimeout Kind = "timeout"
	// KindTooManyConnections: MySQL error 1040 (ER_CON_COUNT_ERROR) or 1203
	// (ER_TOO_MANY_USER_CONNECTIONS). The server is alive but busy.
	KindTooManyConnections Kind = "too_many_connections"
	// KindAccessDenied: MySQL error 1045 (ER_ACCESS_DENIED_ERROR): wrong
	// monitor user or password.
	KindAccessDenied Kind = "access_denied"
	// KindHostBlocked: MySQL error 1129 (ER_HOST_IS_BLOCKED); run
	// FLUSH HOSTS on the server.
	KindHostBlocked Kind = "host_blocked"
	// KindPrivilege: connected, but a statement was refused for lack of a
	// privilege (MySQL errors 1227, 1142, 1044, 1370).
	KindPrivilege Kind = "privilege"
	// KindNetwork: the connection broke or could not be made for another
	// network reason.
	KindNetwork Kind = "network"
	// KindLockWait: MySQL error 1205 (ER_LOCK_WAIT_TIMEOUT): a statement
	// gave up waiting for a lock another session holds.
	KindLockWait Kind = "lock_wait_timeout"
	// KindQuery: connected, but a statement failed for another reason.
	KindQuery Kind = "query_error"
)

// MySQL / MariaDB server error numbers this package classifies (MariaDB
// Knowledge Base, "MariaDB Error Codes"; MySQL 8 "Server Error Message
// Reference").
const (
	erConCount          = 1040
	erAccessDenied      = 1045
	erDBAccessDenied    = 1044
	erNoSuchThread      = 1094
	erHostIsBlocked     = 1129
	erTableAccessDenied = 1142
	erTooManyUserConns  = 1203
	erLockWaitTimeout   = 1205
	erSpecificAccess    = 1227
	erProcAccessDenied  = 1370
)

// Classify names the kind of err. A nil error is KindOK.
func Classify(err error) Kind {
	if err == nil {
		return KindOK
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erConCount, erTooManyUserConns:
			return KindTooManyConnections
		case erAccessDenied:
			return KindAccessDenied
		case erHostIsBlocked:
			return KindHostBlocked
		case erSpecificAccess, erTableAccessDenied, erDBAccessDenied, erProcAccessDenied:
			return KindPrivilege
		case erLockWaitTimeout:
			return KindLockWait
		}
		return KindQuery
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return KindTimeout
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return KindRefused
	}
	var oe *net.OpError
	if errors.As(err, &oe) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return KindNetwork
	}
	return KindQuery
}

// connectionLost reports whether k means the node could not be talked to at
// all (as opposed to a statement failing on a working connection).
func connectionLost(k Kind) bool {
	switch k {
	case KindRefused, KindTimeout, KindTooManyConnections, KindAccessDenied,
		KindHostBlocked, KindNetwork:
		return true
	}
	return false
}

// describe formats err for topo.Probe.Error and logs: the kind in words, the
// MySQL error number when there is one, and the server's message (which
// never contains the password). what names the statement or step that failed.
func describe(what string, err error) string {
	k := Classify(err)
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch k {
		case KindTooManyConnections:
			return fmt.Sprintf("too many connections (MySQL error %d)", me.Number)
		case KindAccessDenied:
			return fmt.Sprintf("access denied for the monitor account (MySQL error %d): check credentials.monitor", me.Number)
		case KindHostBlocked:
			return fmt.Sprintf("host blocked (MySQL error %d): run FLUSH HOSTS on the node", me.Number)
		}
		return fmt.Sprintf("%s: MySQL error %d: %s", what, me.Number, me.Message)
	}
	switch k {
	case KindTimeout:
		return fmt.Sprintf("%s: timeout", what)
	case KindRefused:
		return "connection refused"
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// mysqlErrNo returns the MySQL error number carried by err, or 0.
func mysqlErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
