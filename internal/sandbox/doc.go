// Package sandbox owns local MariaDB GTID replication clusters on loopback:
// it installs one datadir per node, starts `mariadbd --defaults-file=F` as a
// detached process per node, creates the application, monitor and replication
// accounts on the primary (so they replicate and the replicas carry no errant
// GTIDs), attaches the replicas with MASTER_USE_GTID=slave_pos, and writes a
// ready switchyard.yaml and its own state file (sandbox.json) into the
// sandbox directory.
//
// Layout of a sandbox directory D:
//
//	D/sandbox.json        state: nodes, ports, accounts and passwords (mode 0600)
//	D/switchyard.yaml     config for `switchyard up` (mode 0600)
//	D/nodeN/my.cnf        defaults file, the only option file mariadbd reads
//	D/nodeN/data          datadir (binlogs, relay logs)
//	D/nodeN/error.log     mariadbd error log
//	D/nodeN/mariadbd.pid  pid file
//	D/nodeN/mariadbd.sock unix socket (in a short temporary directory instead
//	                      when D is too long for a socket path)
//	D/etcd                data dir configured for the embedded etcd
//
// Accounts: root@localhost and root@127.0.0.1 get a random password at the
// first Up (recorded in sandbox.json); the package itself connects as root over
// the node's unix socket. The application, monitor and replication accounts
// ("app", "switchyard_monitor", "repl", host '%') also get random passwords,
// recorded in sandbox.json and switchyard.yaml.
//
// The package never reads or writes /etc/mysql, never signals a process it
// cannot prove it started (a mariadbd whose command line names this sandbox's
// defaults file), and makes no topology decisions after Up: switchover,
// failover and fencing belong to the controller.
package sandbox
