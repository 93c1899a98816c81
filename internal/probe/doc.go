// Package probe owns the controller's conversation with one mysqld: it probes
// a node with the monitor account (reachability, server_id, version,
// read_only, replication threads and source, lag, GTID positions, buffer-pool
// pages, connected threads, semi-sync settings and status) into a
// topo.Probe, writes the bounded heartbeat (switchyard.heartbeat) and names
// what blocks writes, checks application logins, checks the monitor account's
// grants, and offers the small set of administrative statements a reparent
// needs (read_only, STOP/START/RESET replica, CHANGE MASTER, MASTER_GTID_WAIT,
// killing client sessions).
//
// Flavor-specific SQL (MariaDB vs MySQL 8) lives behind one small internal
// interface; MariaDB 10.11 is tested against real servers, the MySQL 8 syntax
// follows the MySQL 8 reference manual only.
//
// The package makes no topology decisions (which node is primary, whether a
// replica may serve reads, when to switch over): that belongs to the
// controller. It never logs or returns secrets, and it never opens more than
// a handful of connections per node.
package probe
