// Package proxy owns the MySQL-protocol proxy: listeners, client sessions,
// client authentication, backend connections, routing and the relay of
// commands and responses between them, plus Follow, which keeps the routing
// snapshots current from the topology store and registers the proxy there.
//
// Query path. A session reads one client command, forwards its packets to the
// session's backend connection unchanged, and relays the response as bytes,
// parsing only packet headers, first bytes and the OK/EOF packets that end a
// response (column counts, status flags such as SERVER_STATUS_IN_TRANS and
// SERVER_MORE_RESULTS_EXISTS, prepared statement ids). Rows are never decoded.
// Routing reads an atomic snapshot per cluster; no etcd or controller call
// happens on this path.
//
// Idle sessions (clientread.go, idlepark.go). A session waiting for its next
// command holds no buffer: it waits in the poller and takes a pooled client
// reader when the socket is readable. Once idle for one to two seconds it
// parks: its socket goes into the server's epoll set and its goroutine ends;
// the next readable event (a command, the client's close) or shutdown
// resumes it in a new goroutine with its backend and state. An idle client
// then costs its session struct and sockets, about 4 KB in all. With
// session pooling the idle session's backend socket is watched too: when its
// server closes it (wait_timeout, KILL) while the node stays healthy and
// routed, the client's socket is closed as a direct client's would be
// (idleclose.go).
//
// Routing. A listener of role "primary" sends sessions to the cluster's
// current ClusterState.Primary; one of role "replica" round-robins new
// sessions over nodes with Serving set (as the controller computed it) that
// are not drained, and falls back to the primary when none serves and
// read_routing.fallback_to_primary is true. When a snapshot changes, a
// session whose backend is no longer a valid route moves to the new route at
// its next command if it is idle, keeping its session state (migrate.go:
// default schema, charset, every system variable it set, literal user
// variables, prepared statements and LAST_INSERT_ID(), rebuilt from session
// tracking; ROW_COUNT(), FOUND_ROWS() and warnings are answered or refused
// right after, movediag.go; the client's own session-tracking settings are
// kept apart from the proxy's, trackvars.go), or
// gets one ERR and is closed when its state cannot be rebuilt (temporary
// tables, GET_LOCK, ...). A session in a transaction on a primary listener
// gets one ERR saying its transaction was rolled back and continues. Idle
// sessions' connections to backends that left the route are closed at once
// (the sweeper), so a drained or switched-over node empties.
//
// Pools (pool.go, txpool.go). Backend connections come from a pool per
// node, user, relayed capabilities and login charset, capped per node by
// proxy.max_connections_per_backend (open plus opening; waiters served in
// order). With listener pooling "session" a session holds one from login to
// logout and gives it back reset (COM_RESET_CONNECTION); with
// "transaction" it gives it back at every boundary where it is not pinned
// (transaction open, state that cannot be re-created, pending warnings or
// FOUND_ROWS) and its next command takes one through the same path as a
// move, which re-creates its state there. Idle connections of a node that
// left the route or changed role are closed; a primary's are never used
// when they predate its current spell as primary.
//
// Route fencing (cut.go). When a snapshot says a node is no longer a valid
// route — on primary listeners: not the primary any more (new epoch,
// PhaseFailover, the proxy's own write fence) or quarantined; on replica
// listeners: reported unreachable by the controller or quarantined — every
// command in flight on it is cut before the proxy acknowledges the
// snapshot's epoch: its backend connection is closed, the client gets
// error 1105 saying the outcome is unknown (primary) or the statement was
// abandoned (replica), and the session continues, moving at its next
// command. Writes of a relayed response to the client and the cut are
// serialised per session, so no response of a demoted node reaches a
// client once its epoch is acknowledged. Commands in flight on a node the
// proxy's own check cannot connect to (blackholed) are cut too, and backend
// sockets carry TCP keepalive and TCP_USER_TIMEOUT (tcp.go). Cluster state
// documents are checked (topo.DecodeState) before they are applied; an
// invalid one is not applied and raises an alarm (statealarm.go).
//
// Limits (limits.go, tcp.go). A proxy admits at most
// proxy.max_client_connections sessions over all its listeners (by default
// derived from the process's descriptor budget, two descriptors a session);
// the next client gets MySQL error 1040 after its handshake, as MariaDB
// answers at max_connections, so descriptor exhaustion never reaches the
// rest of the process. accept(2) errors back off and never end a listener.
// A backend connect without an answer after 250 ms is made again on a new
// socket (a SYN dropped by a full listen queue), within
// proxy.connect_timeout.
//
// Store outages (failsafe.go, internal/topo/FAILSAFE.md). A proxy whose
// registration lease is lost keeps routing writes to a cluster's primary
// only while its own checks of every node, made with the monitor account,
// confirm that primary as the only writable node; otherwise its primary
// listeners refuse writes (1290) until it is registered again and has
// re-read every cluster state.
//
// Switchover. During a coordinated switchover (topo.SwitchoverProgress,
// hold.go, coordinate.go) primary listeners hold new statements at
// transaction boundaries within the switchover limits, let open
// transactions finish, acknowledge in the registration, and release held
// statements on the new primary. Read statements are sampled into a
// bounded hot read set (hotreads.go) that the controller replays to warm a
// candidate.
//
// Crash failover (failoverhold.go, txlost.go). When a primary listener
// finds its primary lost — a backend connection closed by the server (seen
// in flight, or by a non-blocking peek before an idle session's next
// command), a refused or timed-out connect, or the cluster state in
// PhaseFailover — and the controller publishes that an automatic failover
// would happen (topo.ClusterState.AutoFailover) or one runs, statements
// not yet sent, new logins and idle sessions wait for the new primary
// (at most clusters[].failover.max_hold) and run there with their session
// state; an autocommit read in flight runs again, a write in flight gets
// an outcome-unknown error, an open transaction one rolled-back error (or
// a replay, below), and the session continues. Where no automatic failover can come (manual
// mode, maintenance, a block, no candidate) the statement fails at once
// with the reason and what an operator must do.
//
// Transaction replay (replay.go, replay_run.go; off unless
// clusters[].failover.transaction_replay). While a primary-listener session
// has a transaction open, the statements it sends and a checksum of each
// result (computed in the relay) are recorded; when its primary is lost the
// transaction is re-executed on the primary the session reaches next and
// continues only if every checksum matches (MaxScale's transaction_replay).
// A COMMIT in flight at the loss is resolved (outcome.go, off with
// failover.commit_outcome unknown): a commit marker row written in its
// transaction, in the same round trip, is read on the new primary — there,
// the client gets the OK; absent, the transaction is replayed and
// committed. Any other statement that ends a transaction in flight, or a
// COMMIT whose marker could not be written, is never replayed: its outcome
// is unknown and the client is told so.
//
// Authentication (auth.go). The greeting announces mysql_native_password;
// once the handshake response names the user, the proxy serves the
// account's plugin (users[].auth_plugin), switching the client to it with
// an AuthSwitchRequest: mysql_native_password, ed25519 (MariaDB's
// client_ed25519: nonce and signature) or caching_sha2_password (fast path
// against a cached verifier, else full authentication by RSA, or in clear
// once sessions run on TLS). Users come from config: with a plaintext
// secret, or with only the mysql_native_password hash, in which case
// SHA1(password) is recovered from the first successful login and kept in
// memory only, so that backend connections for that user can be opened
// (before such a login, none can). With proxy.backend_accounts, accounts
// not in users are looked up in the cluster's own accounts, read from its
// primary (accounts.go). Each session logs into its backend as the
// client's user, answering mysql_native_password or client_ed25519.
//
// Connection ids and KILL (kill.go). The handshake carries the proxy's own
// connection id; SELECT CONNECTION_ID() and SHOW PROCESSLIST show the
// backend's thread id (rewriting results would cost the query path), so
// both are accepted by KILL: KILL [QUERY|CONNECTION] n and
// COM_PROCESS_KILL are answered by the proxy, which resolves n among the
// same user's sessions (proxy id first, then backend thread id), runs
// KILL QUERY on the target's backend node over a short-lived connection as
// that user, or closes the target session (and kills its backend thread).
// Another user's session gets ER_KILL_DENIED_ERROR, an id that names no
// session ER_NO_SUCH_THREAD; the own id closes the session. A KILL never
// reaches a backend with an id the backend would read differently.
//
// TLS (tls.go). A listener with listeners[].tls offers CLIENT_SSL and
// switches a client that sends an SSLRequest to TLS before its
// credentials; a TLS session reads and writes through its *tls.Conn and
// does not park idle. Backend connections of a cluster with clusters[].tls
// send the SSLRequest after the server's greeting and log in over TLS.
//
// Compression (compress.go). CLIENT_COMPRESS (zlib) is offered to every
// client whatever the backend offers: the proxy frames the client side
// itself (mysqlproto.Compressor, Decompressor) once the login OK is sent,
// on top of TLS when both are on, and backend connections stay
// uncompressed, so the relay is the same for every client; an uncompressed
// session carries no compression state. No zstd: MariaDB has none. SHOW
// STATUS LIKE 'Compression' is answered by the proxy for compressed
// sessions (the backend would describe its own connection).
//
// MariaDB extended capabilities. When the backend's greeting clears
// CLIENT_MYSQL the proxy's does too and offers the extended capabilities it
// relays (relayExtCaps: progress reports, bulk execution, extended type
// info, metadata caching); a session logs into its backend with the
// client's choice and pools are keyed by it. Progress reports (ERR 0xFFFF)
// mid-response are relayed without ending it; COM_STMT_BULK_EXECUTE is
// relayed like an execute (statement ids translated, types put back after
// a move) and never replayed; column counts carry the metadata-follows
// byte and executes may omit definitions the client caches, so when a
// statement prepared again on another connection has other result columns
// than the client holds, the proxy puts them into the next execute the
// server sends without them (relayResults, resendMeta).
//
// Not supported yet: COM_MULTI and bulk unit results (not offered),
// authentication plugins towards backends other than mysql_native_password
// and client_ed25519,
// KILL QUERY ID and KILL USER (relayed to the session's backend unchanged),
// and KILL of threads not opened through this proxy.
// Listener changes need a restart (SetConfig applies users and limits only).
//
// This package must not talk to etcd outside Follow, decide topology, or
// modify servers: it routes from the ClusterState the controller publishes.
package proxy
