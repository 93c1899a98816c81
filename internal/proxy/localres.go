package proxy

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Local resource errors. A connect to a backend can fail on this proxy's
// own host before a packet leaves it: the process is out of descriptors
// (EMFILE: RLIMIT_NOFILE; ENFILE: the system's file table), the kernel
// has no buffer memory (ENOBUFS, ENOMEM), or no ephemeral port is free for
// the node's address (EADDRNOTAVAIL: net.ipv4.ip_local_port_range in
// TIME_WAIT or in use). None of them says anything about the node: the
// proxy does not hold the statement for a failover, does not report the
// node unreachable (reachability.go), and answers the command with error
// 1040 (ER_CON_COUNT_ERROR, SQLSTATE 08004, what MariaDB answers when it
// is itself out of connections) naming the limit; a logged-in session
// keeps its state and may retry.

// localResource reports whether err is a failure of this host's resources
// rather than an answer (or silence) of the remote node.
func localResource(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.EADDRNOTAVAIL)
}

// errLocalResource is the client's error for a connect to t that failed
// with a local resource error err: MySQL error 1040.
func errLocalResource(t *target, snap *routeSnapshot, err error) *mysql.MyError {
	var what string
	switch {
	case errors.Is(err, syscall.EMFILE):
		what = fmt.Sprintf("this proxy is out of file descriptors (RLIMIT_NOFILE %d)", DescriptorBudget())
	case errors.Is(err, syscall.ENFILE):
		what = "this proxy's host is out of file descriptors (ENFILE: the system file table is full)"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		what = "this proxy's host has no free ephemeral port for that address (EADDRNOTAVAIL)"
	default:
		what = "this proxy's host is out of socket buffer memory (" + errnoName(err) + ")"
	}
	return mysqlproto.NewError(mysql.ER_CON_COUNT_ERROR, fmt.Sprintf(
		"switchyard: %s; cannot open a connection to %s %s (%s); the node was not found at fault and the statement was not run: retry it, lower proxy.max_client_connections or raise the limit",
		what, roleOf(t, snap), t.node, t.addr))
}

// errnoName names an ENOBUFS or ENOMEM error.
func errnoName(err error) string {
	if errors.Is(err, syscall.ENOBUFS) {
		return "ENOBUFS"
	}
	return "ENOMEM"
}
