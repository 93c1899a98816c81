// Package gtid owns the parsing, canonical formatting and comparison of GTID
// positions and sets for both server flavors:
//
//   - MariaDB: a GTID position such as @@gtid_current_pos, @@gtid_slave_pos or
//     @@gtid_binlog_pos — a comma-separated list of domain-server_id-seqno
//     with at most one entry per replication domain (MariaDBPos).
//   - MySQL: a GTID set such as @@gtid_executed — uuid:interval[:interval...]
//     groups, optionally with MySQL 8.3+ tags (MySQLSet).
//
// Both implement Set, so the controller can order failover candidates, wait
// for catch-up and detect errant transactions without knowing the flavor.
//
// The package is pure: it performs no I/O, talks to no server, keeps no
// package-level state and never logs. Which GTID variable to read and when is
// the probe's business; what to do about an errant GTID is the controller's.
package gtid
