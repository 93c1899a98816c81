#!/usr/bin/env bash
# make demo: a 3-node MariaDB GTID replication sandbox on loopback, Switchyard
# in front of it, real client traffic, one planned switchover, and a report of
# what the clients saw. Leaves everything running; `make down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
SB=${SANDBOX:-.sandbox}
SY=bin/switchyard
LG=bin/switchyard-loadgen

say() { printf '\n== %s\n' "$*"; }

say "Starting the MariaDB sandbox in $SB"
$SY sandbox up --dir "$SB"
eval "$($SY sandbox env --dir "$SB")"
CFG="$SWITCHYARD_CONFIG"

# The web console and the admin API take an operator token: a random one in
# $SB/admin.token (mode 0600), named by admin.tokens in the sandbox config
# (token_file is relative to the config's directory). Kept across runs.
TOKEN_FILE="$(dirname "$CFG")/admin.token"
if [ ! -s "$TOKEN_FILE" ]; then
  (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN_FILE")
fi
if ! grep -q '^    tokens:' "$CFG"; then
  sed -i '/^admin:$/a\    tokens:\n        - {name: demo, role: operator, token_file: admin.token}' "$CFG"
fi

if [ -f "$SB/switchyard.pid" ] && kill -0 "$(cat "$SB/switchyard.pid")" 2>/dev/null; then
  say "switchyard up is already running (pid $(cat "$SB/switchyard.pid"))"
else
  say "Starting switchyard up (embedded etcd, controller, proxy); log in $SB/switchyard.log"
  nohup $SY up --config "$CFG" --pid-file "$SB/switchyard.pid" >"$SB/switchyard.log" 2>&1 &
fi

# Wait until the controller has published the cluster and the proxy is registered.
for i in $(seq 1 60); do
  if $SY status --config "$CFG" --json 2>/dev/null | grep -q '"primary": "node' &&
     $SY status --config "$CFG" --json 2>/dev/null | grep -q '"proxies": \['; then
    break
  fi
  if [ "$i" = 60 ]; then echo "switchyard did not become ready; see $SB/switchyard.log" >&2; tail -20 "$SB/switchyard.log" >&2; exit 1; fi
  sleep 0.5
done
$SY status --config "$CFG"

RW_HOST=${SWITCHYARD_RW%:*}; RW_PORT=${SWITCHYARD_RW##*:}

if [ -n "${SWITCHYARD_TLS_CA:-}" ]; then
  say "A TLS connection through rw: mariadb --ssl-verify-server-cert with the sandbox CA ($SWITCHYARD_TLS_CA)"
  mariadb --no-defaults -h "$RW_HOST" -P "$RW_PORT" -u "$SWITCHYARD_APP_USER" -p"$SWITCHYARD_APP_PASSWORD" \
    --ssl --ssl-ca="$SWITCHYARD_TLS_CA" --ssl-verify-server-cert -e '\s' | grep -E 'SSL:|Server version:|Current user:' | sed 's/^/    /'
fi
SB_ARGS=(--db-driver=mysql --mysql-host="$RW_HOST" --mysql-port="$RW_PORT" --mysql-user="$SWITCHYARD_APP_USER"
         --mysql-password="$SWITCHYARD_APP_PASSWORD" --mysql-db=sbtest --tables=4 --table-size=10000 --rand-type=uniform)

say "sysbench oltp_read_write through the rw listener ($SWITCHYARD_RW), 10 s, 4 threads, prepared statements"
sysbench oltp_read_write "${SB_ARGS[@]}" cleanup >/dev/null 2>&1 || true
sysbench oltp_read_write "${SB_ARGS[@]}" prepare >/dev/null
sysbench oltp_read_write "${SB_ARGS[@]}" --threads=4 --time=10 --mysql-ignore-errors=none run |
  grep -E 'transactions:|queries:|ignored errors:|reconnects:|95th percentile:' | sed 's/^ */    /'

NAMES=1=node1,2=node2,3=node3
LGARGS=(--rw "$SWITCHYARD_RW" --ro "$SWITCHYARD_RO" --user "$SWITCHYARD_APP_USER" --password "$SWITCHYARD_APP_PASSWORD" --names "$NAMES")

say "Ledger workload (4 writers on rw, 4 readers on ro), before the switchover"
$LG "${LGARGS[@]}" --duration 5s --label before || true

PRIMARY=$($SY status --config "$CFG" --json | sed -n 's/.*"primary": "\(node[0-9]*\)".*/\1/p' | head -1)
TARGET=node2; [ "$PRIMARY" = node2 ] && TARGET=node1
say "Switchover $PRIMARY -> $TARGET while the ledger workload runs"
$LG "${LGARGS[@]}" --duration 10s --label during >"$SB/during.txt" 2>&1 &
LGPID=$!
sleep 3
$SY switchover --config "$CFG" --cluster main --to "$TARGET"
wait $LGPID || true
cat "$SB/during.txt"

say "Ledger workload after the switchover"
$LG "${LGARGS[@]}" --duration 5s --label after || true

say "Crash: kill -9 of the primary ($TARGET) while the ledger workload runs (failover.mode is manual: a human decides)"
$LG "${LGARGS[@]}" --duration 12s --label crash --check=false >"$SB/crash.txt" 2>&1 &
LGPID=$!
sleep 2
TIDX=${TARGET#node}
kill -9 "$(cat "$SB/node$TIDX/mariadbd.pid")"
sleep 2
$SY status --config "$CFG" | sed -n '/^cluster/,/^$/p' | head -12
say "switchyard failover --plan, then switchyard failover"
$SY failover --config "$CFG" --cluster main --plan || true
$SY failover --config "$CFG" --cluster main
wait $LGPID || true
cat "$SB/crash.txt"
say "Restart the crashed node: it comes back read-only and rejoins as a replica"
$SY sandbox up --dir "$SB" >/dev/null
sleep 4

say "Cluster now"
$SY status --config "$CFG"

cat <<TXT

== Everything is still running
  connect (read/write):  mariadb -h${SWITCHYARD_RW%:*} -P${SWITCHYARD_RW##*:} -u$SWITCHYARD_APP_USER -p'$SWITCHYARD_APP_PASSWORD' sbtest
  connect (read-only):   mariadb -h${SWITCHYARD_RO%:*} -P${SWITCHYARD_RO##*:} -u$SWITCHYARD_APP_USER -p'$SWITCHYARD_APP_PASSWORD' sbtest
  status:                $SY status --config $CFG
  switchover:            $SY switchover --config $CFG --cluster main --to node3
  metrics:               curl -s http://$SWITCHYARD_ADMIN/metrics
  web console:           http://$SWITCHYARD_ADMIN/   (log in with the operator token below)
  operator token:        $(cat "$TOKEN_FILE")   (user demo; in $TOKEN_FILE)
  admin API:             curl -s -H "Authorization: Bearer \$(cat $TOKEN_FILE)" http://$SWITCHYARD_ADMIN/api/v1/whoami
  stop everything:       make down
TXT
