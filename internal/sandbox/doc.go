// Package sandbox owns local MariaDB GTID replication clusters on loopback:
// it installs one datadir per node, starts `mariadbd --defaults-file=F` as a
// detached process per node (its own process group), creates the
// application, monitor and replication accounts on the primary (so they
// replicate and the replicas carry no errant GTIDs), attaches the replicas
// with MASTER_USE_GTID=slave_pos and the heartbeat period and
// slave_net_timeout the controller keeps for the default
// failover.silence_bound (100ms and 3s) and its parallel apply (4
// slave_parallel_threads, optimistic), and writes a
// ready switchyard.yaml and its own state file (sandbox.json) into the
// sandbox directory.
//
// Layout of a sandbox directory D:
//
//	D/sandbox.json        state: nodes, ports, accounts and passwords (mode 0600)
//	D/switchyard.yaml     config for `switchyard up` (mode 0600)
//	D/integrity.key       etcd integrity key, with Options.IntegrityKey (mode 0600)
//	D/nodeN/my.cnf        defaults file, the only option file mariadbd reads
//	D/nodeN/data          datadir (binlogs mariadb-bin.*, relay logs relay-bin.*)
//	D/nodeN/tmp           the node's tmpdir
//	D/nodeN/error.log     mariadbd error log (mariadbd.out: its stdout/stderr)
//	D/nodeN/mariadbd.pid  pid file
//	D/nodeN/mariadbd.sock unix socket (in a short temporary directory instead
//	                      when D is too long for a socket path)
//	D/etcd                data dir configured for the embedded etcd
//	D/tls                 the sandbox's CA, the server certificate (for
//	                      127.0.0.1, ::1, localhost) every mariadbd and the
//	                      rw/ro listeners present, and a client certificate
//	                      (tlscerts.go; TLS offered, not required)
//
// Accounts: mariadb-install-db's anonymous and host-specific root accounts
// are dropped; root@localhost and root@127.0.0.1 get a random password at the
// first Up (recorded in sandbox.json, see Cluster.RootDSN); the package
// itself connects as root over each node's unix socket. The application,
// monitor and replication accounts ("app", "switchyard_monitor", "repl",
// host '%', mysql_native_password) also get random passwords, recorded in
// sandbox.json and switchyard.yaml. Root's set-up runs with sql_log_bin=0 on
// every node; everything else is written on node1 and replicated, so after Up
// every node's gtid_current_pos equals node1's gtid_binlog_pos.
//
// Roles at creation: node1 is the writable primary, the others replicas with
// read_only=ON. Every defaults file says read_only=ON (and, with semi-sync,
// makes every node a semi-sync replica), so any node restarted by StartNode or
// Up comes back read-only — the safe setting, since switchovers move the
// primary. The controller makes the published primary writable again after
// a restart it saw; Up, when it restarted the node that every other node
// replicates from and no node is writable (e.g. after Down), gives it
// read_only=OFF itself, so a sandbox restarted whole takes writes again.
//
// NetLab (netns.go) moves a sandbox's nodes into network namespaces behind
// a bridge, for partitions with dropped packets (scenario tests and
// bench/failover -fault partition; root and iproute2 needed).
//
// The package never reads or writes /etc/mysql, never signals a process it
// cannot prove it started (a live mariadbd whose command line names this
// sandbox's defaults file), and makes no topology decisions after Up:
// switchover, failover and fencing belong to the controller.
package sandbox
