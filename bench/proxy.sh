#!/usr/bin/env bash
# Proxy benchmark, all in one run on this machine:
#   (a) sysbench straight to the primary,
#   (b) through HAProxy in TCP mode (an L4 proxy),
#   (c) through Switchyard's rw listener (an L7 proxy): a `switchyard proxy`
#       process of its own (the controller in another process, an external
#       etcd), and then the same through `switchyard up` (proxy, controller
#       and embedded etcd in one process: the "switchyard-up" lines),
#   and, for reference, through bench/l4relay ("go-l4"): the smallest Go
#       TCP relay (a goroutine per direction, net.Conn Read/Write), what
#       Go's netpoller costs before any protocol work (BENCH_GO_L4=0: not run),
#   and with BENCH_GO_EPOLL=1 through bench/l4epoll ("go-epoll"): HAProxy's
#       threading model in Go (an epoll loop per CPU on a locked OS thread,
#       events handled in place, no goroutine woken), nothing of the protocol.
# Workloads: oltp_point_select and oltp_read_write, 8 threads, pre-built
# tables, sysbench's default prepared-statement mode. Prints QPS, p95 latency,
# CPU time per query of each proxy process, and the ratios.
# With --tls (or BENCH_TLS=1) every client connects with --mysql-ssl=on:
# to the primary directly (mariadbd terminates TLS), through HAProxy L4
# (TLS passed through to mariadbd) and through Switchyard (TLS terminated
# at the rw listener, plaintext to the primary, the default clusters[].tls).
# BENCH_COMPRESSION=on runs every client with protocol compression
# (sysbench --mysql-compression=on): the server compresses for direct and
# HAProxy, Switchyard compresses itself (its backend side stays plain).
# BENCH_PS_MODE=disable runs sysbench with --db-ps-mode=disable (text
# queries instead of prepared statements; default auto).
# PROFILE=1 also measures each proxy run: system calls per query (perf stat
# on the proxy's pid for the whole run, by call), and for Switchyard
# allocations per query (go_memstats_mallocs_total from /metrics) and a CPU
# profile of the middle of the run plus an allocation profile from the
# admin endpoint's /debug/pprof (the sandbox config gets admin.pprof: true).
# The profiles are kept in PROFILE_DIR (default /tmp/sy-profile.PID; 30-60
# MB a run, not removed; the files of an earlier run there are removed
# first) and their top functions printed (go tool pprof -top). On a machine
# without hardware counters perf samples on a timer, so the kernel's
# wake-up and task-switch symbols lead its tops for every process.
# BENCH_ROUNDS=N alternates the direct, HAProxy and Switchyard runs N times
# per workload and prints each round's Switchyard/HAProxy ratios and their
# median (default 1).
# BENCH_GOMAXPROCS="1 2" runs the Switchyard proxy once per listed value
# (whole numbers above 0; each value once, in the order given) in each
# round, in place of the plain "switchyard" run: its process restarted
# with that GOMAXPROCS ("switchyard-p1", "switchyard-p2"), and prints each
# round's ratios per value (instead of the medians of BENCH_ROUNDS).
# Every run also prints, for the whole machine, how busy it was, its CPU per
# query (client, servers and proxy), the primary mariadbd's and sysbench's
# CPU per query (sysbench's needs /usr/bin/time), and context switches and
# rescheduling interrupts (a wake-up sent to another CPU) per query.
# SWITCHYARD_BIN runs another build (default bin/switchyard), to compare two.
# BENCH_SECONDS is the length of each run (default 20; the positional
# argument wins), BENCH_THREADS sysbench's threads (default 8),
# BENCH_IDLE_SECONDS how long Switchyard's CPU with no client is measured
# before the runs (default 5; at 100 clock ticks per second, 1 s gives 0 or
# 10 ms/s). Ctrl-C (or SIGTERM) stops the benchmark and everything it
# started once the command in progress returns.
# Usage: bench/proxy.sh [--tls] [seconds-per-run]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^# Usage:/p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
TLS=${BENCH_TLS:-0}
if [ "${1:-}" = "--tls" ]; then TLS=1; shift; fi
SECS=${1:-${BENCH_SECONDS:-20}}
THREADS=${BENCH_THREADS:-8}
COMPRESSION=${BENCH_COMPRESSION:-off}
PS_MODE=${BENCH_PS_MODE:-auto}
ROUNDS=${BENCH_ROUNDS:-1}
PROFILE=${PROFILE:-0}
PROFILE_DIR=${PROFILE_DIR:-/tmp/sy-profile.$$}
positive() { # NAME VALUE: VALUE must be a whole number above 0
  [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || { echo "bench/proxy.sh: $1 must be a whole number above 0, not '$2'" >&2; exit 2; }
}
positive "seconds per run (BENCH_SECONDS or the argument)" "$SECS"
positive BENCH_THREADS "$THREADS"
positive BENCH_ROUNDS "$ROUNDS"
positive BENCH_IDLE_SECONDS "${BENCH_IDLE_SECONDS:-5}"
# BENCH_GOMAXPROCS: whole numbers above 0, each once, in the order given.
PROCS_LIST=""
for v in ${BENCH_GOMAXPROCS:-}; do
  positive "each BENCH_GOMAXPROCS value" "$v"
  case " $PROCS_LIST " in *" $v "*) ;; *) PROCS_LIST="${PROCS_LIST:+$PROCS_LIST }$v" ;; esac
done
SY=${SWITCHYARD_BIN:-$PWD/bin/switchyard}
# An absolute path: --tls changes directory, and cleanup needs the binary.
SY=$(realpath -e "$SY" 2>/dev/null) || { echo "bench/proxy.sh: no switchyard binary at ${SWITCHYARD_BIN:-bin/switchyard} (make build)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/sy-bench.XXXXXX)
HZ=$(getconf CLK_TCK)
SYPID=""; HAPID=""; CTLPID=""; ETCDPID=""; L4PID=""; EPPID=""; PERFPID=""; RECPID=""; SCHEDPID=""; PPROFPID=""; SBPID=""; M0=0
cleanup() {
  trap '' INT TERM
  local p pids=""
  # The profilers' subshells: their perf and curl children first.
  for p in $RECPID $SCHEDPID $PPROFPID; do pkill -P "$p" 2>/dev/null || true; done
  for p in $SBPID $SYPID $CTLPID $ETCDPID $HAPID $L4PID $EPPID $PERFPID $RECPID $SCHEDPID; do
    kill "$p" 2>/dev/null && pids+=" $p"
  done
  # Wait (at most 10 s) until what was signalled has exited.
  for i in $(seq 1 100); do
    local left=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && left+=" $p"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  $SY sandbox down --dir "$WORK/sb" --purge >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "bench/proxy.sh: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

# Below the kernel's ephemeral range: a port picked there can be taken, before
# `switchyard up` binds it minutes later, by a client connection's local
# port (sysbench opens thousands).
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
freeport() {
  while :; do
    p=$(shuf -i "10000-$((EPHEMERAL_LOW - 1))" -n 1)
    ss -Hltn "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
}

echo "== sandbox and switchyard (work dir $WORK)"
$SY sandbox up --dir "$WORK/sb" --rw-address "127.0.0.1:$(freeport)" --ro-address "127.0.0.1:$(freeport)" \
  --admin-address "127.0.0.1:$(freeport)" --etcd-client-address "127.0.0.1:$(freeport)" --etcd-peer-address "127.0.0.1:$(freeport)" >/dev/null
eval "$($SY sandbox env --dir "$WORK/sb")"
if [ "$PROFILE" = 1 ]; then
  mkdir -p "$PROFILE_DIR"
  # A reused directory: drop the files of an earlier run, so that none of
  # them is reported as this run's.
  rm -f "$PROFILE_DIR"/syscalls-*.csv "$PROFILE_DIR"/perf-*.data "$PROFILE_DIR"/sched-*.data "$PROFILE_DIR"/cpu-*.pprof "$PROFILE_DIR"/allocs-*.pprof
  # admin.pprof: true, right after the admin section's address.
  awk '/^[^ ]/ {a=0} /^admin:/ {a=1} a && /^ +pprof:/ {next} {print}
       a && /^ +address:/ {match($0, /^ +/); printf "%*spprof: true\n", RLENGTH, ""}' \
    "$SWITCHYARD_CONFIG" >"$WORK/cfg.tmp" && cat "$WORK/cfg.tmp" >"$SWITCHYARD_CONFIG"
  grep -q 'pprof: true' "$SWITCHYARD_CONFIG" || { echo "PROFILE=1: could not set admin.pprof in $SWITCHYARD_CONFIG" >&2; exit 1; }
fi
# The proxy runs as its own process, as in production: an etcd, a
# `switchyard controller` and a `switchyard proxy`, each a process of its
# own; CPU per query is the proxy process's only. Afterwards the same runs go
# through `switchyard up` (embedded etcd, controller and proxy in one
# process) for comparison ("switchyard-up").
ETCD_CLIENT="127.0.0.1:$(freeport)"; ETCD_PEER="http://127.0.0.1:$(freeport)"
etcd --name bench --data-dir "$WORK/etcd" --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
  --listen-peer-urls "$ETCD_PEER" --initial-advertise-peer-urls "$ETCD_PEER" --initial-cluster "bench=$ETCD_PEER" \
  --log-level error >"$WORK/etcd.log" 2>&1 &
ETCDPID=$!
CTLPID=""
wait_proxy() { # PID LOG [etcd flags...]
  local pid=$1 log=$2; shift 2
  for i in $(seq 1 60); do
    $SY status --config "$SWITCHYARD_CONFIG" "$@" --json 2>/dev/null | grep -q '"proxies": \[' && break
    sleep 0.5
  done
  kill -0 "$pid" 2>/dev/null || { echo "switchyard exited:" >&2; tail -20 "$log" >&2; exit 1; }
  # Registered is not yet routing: wait until a query through rw answers.
  for i in $(seq 1 60); do
    mariadb -h 127.0.0.1 -P "${SWITCHYARD_RW##*:}" -u "$SWITCHYARD_APP_USER" -p"$SWITCHYARD_APP_PASSWORD" -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.5
  done
}
sleep 1
EXT=(--etcd-endpoints "$ETCD_CLIENT")
$SY controller --config "$SWITCHYARD_CONFIG" "${EXT[@]}" --admin-address off --log-level warn >"$WORK/controller.log" 2>&1 &
CTLPID=$!
# The controller writes the config file as revision 1 first; the proxy then
# reads it (both bootstrapping at once would race for revision 1).
for i in $(seq 1 60); do
  ETCDCTL_API=3 etcdctl --endpoints "$ETCD_CLIENT" get /switchyard/config/current --keys-only 2>/dev/null | grep -q . && break
  kill -0 "$CTLPID" 2>/dev/null || break
  sleep 0.5
done
kill -0 "$CTLPID" 2>/dev/null || { echo "switchyard controller exited:" >&2; tail -20 "$WORK/controller.log" >&2; exit 1; }
$SY proxy --config "$SWITCHYARD_CONFIG" "${EXT[@]}" --log-level warn >"$WORK/switchyard.log" 2>&1 &
SYPID=$!
wait_proxy "$SYPID" "$WORK/switchyard.log" "${EXT[@]}"
kill -0 "$CTLPID" 2>/dev/null || { echo "switchyard controller exited:" >&2; tail -20 "$WORK/controller.log" >&2; exit 1; }

HAPORT=$(freeport)
cat >"$WORK/haproxy.cfg" <<CFG
global
  maxconn 4096
defaults
  mode tcp
  timeout connect 1s
  timeout client 1h
  timeout server 1h
listen mysql
  bind 127.0.0.1:$HAPORT
  server primary $SWITCHYARD_PRIMARY check
CFG
haproxy -f "$WORK/haproxy.cfg" -db >"$WORK/haproxy.log" 2>&1 &
HAPID=$!
# start_relay NAME: builds bench/NAME and starts it on a free port in front
# of the primary; sets RELAY_PORT and RELAY_PID.
start_relay() {
  RELAY_PORT=$(freeport)
  go build -o "$WORK/$1" "./bench/$1"
  "$WORK/$1" "127.0.0.1:$RELAY_PORT" "$SWITCHYARD_PRIMARY" >"$WORK/$1.log" 2>&1 &
  RELAY_PID=$!
}
# The reference Go relay (bench/l4relay): goroutines and the netpoller,
# nothing of the protocol. BENCH_GO_L4=0 leaves it out.
GO_L4=${BENCH_GO_L4:-1}
if [ "$GO_L4" = 1 ]; then
  start_relay l4relay
  L4PORT=$RELAY_PORT L4PID=$RELAY_PID
fi
# HAProxy's model in Go (bench/l4epoll), with BENCH_GO_EPOLL=1.
GO_EPOLL=${BENCH_GO_EPOLL:-0}
if [ "$GO_EPOLL" = 1 ]; then
  start_relay l4epoll
  EPPORT=$RELAY_PORT EPPID=$RELAY_PID
fi
sleep 0.5

PRIMARY_PORT=${SWITCHYARD_PRIMARY##*:}
RW_PORT=${SWITCHYARD_RW##*:}
common=(--db-driver=mysql --mysql-host=127.0.0.1 --mysql-user="$SWITCHYARD_APP_USER" --mysql-password="$SWITCHYARD_APP_PASSWORD"
        --mysql-db=sbtest --tables=4 --table-size=10000 --rand-type=uniform)
sysbench oltp_read_write "${common[@]}" --mysql-port="$PRIMARY_PORT" prepare >/dev/null
common+=(--mysql-compression="$COMPRESSION" --db-ps-mode="$PS_MODE")

# sysbench 1.0 with --mysql-ssl=on loads client-key.pem, client-cert.pem
# and cacert.pem from its working directory: the sandbox's own.
SSL=()
if [ "$TLS" = 1 ]; then
  SSL=(--mysql-ssl=on)
  mkdir -p "$WORK/ssl"
  cp "$WORK/sb/tls/client-key.pem" "$WORK/sb/tls/client-cert.pem" "$WORK/ssl/"
  cp "$WORK/sb/tls/ca.pem" "$WORK/ssl/cacert.pem"
  cd "$WORK/ssl"
fi

cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# The machine's busy and total clock ticks (all CPUs, from /proc/stat).
machine() { awk '/^cpu / {t=0; for (i=2; i<=NF; i++) t+=$i; print t-$5-$6, t; exit}' /proc/stat; }
# Context switches (all tasks) and rescheduling interrupts (all CPUs: a
# wake-up of a task on another CPU that must preempt or leave idle there),
# from /proc/stat and /proc/interrupts.
switches() {
  awk '/^ctxt / {print $2; exit}' /proc/stat
  awk '$1 == "RES:" {t=0; for (i=2; i<=NF && $i ~ /^[0-9]+$/; i++) t+=$i; print t; f=1} END {if (!f) print 0}' /proc/interrupts
}
# The primary's mariadbd: the process listening on its port.
SERVERPID=$(ss -Hltnp "sport = :${SWITCHYARD_PRIMARY##*:}" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
usys() { awk '{print $14, $15}' "/proc/$1/stat"; }

SYSCALLS=(raw_syscalls:sys_enter syscalls:sys_enter_read syscalls:sys_enter_write syscalls:sys_enter_recvfrom
          syscalls:sys_enter_sendto syscalls:sys_enter_epoll_pwait syscalls:sys_enter_epoll_wait syscalls:sys_enter_futex
          context-switches cpu-migrations)
# switchyard_proxy NAME: the run is of the `switchyard proxy` process
# (allocations and Go profiles are read from its admin endpoint).
switchyard_proxy() { [[ "$1" == switchyard || "$1" == switchyard-p* ]]; }
# ratio A B: A/B to 3 decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
mallocs() { curl -sf "http://$SWITCHYARD_ADMIN/metrics" | awk '/^go_memstats_mallocs_total / {printf "%d", $2}'; }
# profile_start NAME WL PID: perf stat on the proxy; for Switchyard a
# malloc count and a CPU profile of the middle of the run.
profile_start() {
  local name=$1 wl=$2 pid=$3 ev
  ev=$(IFS=,; echo "${SYSCALLS[*]}")
  perf stat -x, -e "$ev" -p "$pid" -o "$PROFILE_DIR/syscalls-$name-$wl.csv" 2>/dev/null &
  PERFPID=$!
  # perf stat takes a moment to attach; the run must not start before.
  for i in $(seq 1 30); do [ -s "$PROFILE_DIR/syscalls-$name-$wl.csv" ] && break; sleep 0.1; done
  sleep 0.3
  # Where the proxy's CPU goes, kernel included, in the middle of the run.
  (sleep $((SECS / 4)); perf record -q -F 499 -p "$pid" -o "$PROFILE_DIR/perf-$name-$wl.data" -- sleep $((SECS / 2 > 0 ? SECS / 2 : 1)) >/dev/null 2>&1) &
  RECPID=$!
  # Every CPU's task switches for 1 s, to see what ran while a CPU idled.
  (sleep $((SECS / 4)); perf record -q -e sched:sched_switch -a -o "$PROFILE_DIR/sched-$name-$wl.data" -- sleep 1 >/dev/null 2>&1) &
  SCHEDPID=$!
  if switchyard_proxy "$name"; then
    M0=$(mallocs)
    local d=$((SECS / 2)); [ "$d" -lt 1 ] && d=1
    (sleep $((SECS / 4))
     curl -sf -o "$PROFILE_DIR/allocs-$name-$wl.pprof" "http://$SWITCHYARD_ADMIN/debug/pprof/allocs?seconds=$d" &
     curl -sf -o "$PROFILE_DIR/cpu-$name-$wl.pprof" "http://$SWITCHYARD_ADMIN/debug/pprof/profile?seconds=$d"; wait) &
    PPROFPID=$!
  fi
}
# idle_share NAME FILE: from a system-wide sched_switch record, the share
# of CPU time spent idle, the time every CPU idled at once, and what the
# busy CPUs ran meanwhile: a proxy that serialises the work shows up there,
# the other CPU waiting for it.
idle_share() {
  [ -s "$2" ] || return 0
  perf script -i "$2" -F cpu,time,trace 2>/dev/null | awk -v name="$1" '
    match($0, /next_comm=.* next_pid=[0-9]+/) {
      cpu = $1; gsub(/[^0-9]/, "", cpu); t = $2; sub(/:$/, "", t); t += 0
      f = substr($0, RSTART, RLENGTH); pid = f; sub(/.* next_pid=/, "", pid)
      comm = f; sub(/^next_comm=/, "", comm); sub(/ next_pid=[0-9]+$/, "", comm)
      if (last != "") {
        dt = t - last; nidle = 0; nbusy = 0
        for (c in cur) { if (cur[c] == "") nidle++; else nbusy++ }
        idle += dt * nidle; total += dt * (nidle + nbusy)
        if (nidle > 0 && nbusy == 0) allidle += dt
        if (nidle > 0 && nbusy > 0) for (c in cur) if (cur[c] != "") ran[cur[c]] += dt * nidle / nbusy
      }
      last = t; cur[cpu] = (pid == 0) ? "" : comm
    }
    END {
      if (total == 0) exit
      printf "    %-13s CPU idle %.0f %% of CPU time (all CPUs at once %.1f %%)", name, 100 * idle / total, 100 * allidle * length(cur) / total
      n = 0; for (k in ran) n++
      if (n > 0 && idle - allidle * length(cur) > 0) printf "; meanwhile the busy CPUs ran:"; else n = 0
      for (i = 0; i < 4 && n > 0; i++) { b = ""; for (k in ran) if (b == "" || ran[k] > ran[b]) b = k; if (ran[b] <= 0) break; printf " %s %.0f %%", b, 100 * ran[b] / (idle - allidle * length(cur)); ran[b] = -1 }
      printf "\n" }'
}
# profile_end NAME WL QUERIES: per-query figures.
profile_end() {
  local name=$1 wl=$2 q=$3 line
  kill -INT "$PERFPID" 2>/dev/null || true; wait "$PERFPID" 2>/dev/null || true
  wait "$RECPID" 2>/dev/null || true
  wait "$SCHEDPID" 2>/dev/null || true
  idle_share "$name" "$PROFILE_DIR/sched-$name-$wl.data"
  line=$(awk -F, -v q="$q" '$3 ~ /sys_enter|context-switches|cpu-migrations/ && $1 ~ /^[0-9]+$/ && $1 > 0 {
      n=$3; sub(/^(raw_)?syscalls:sys_enter_?/, "", n); if (n == "") n="all";
      printf "%s %.2f  ", n, $1 / q }' "$PROFILE_DIR/syscalls-$name-$wl.csv")
  printf '    %-13s per query (syscalls by call, context switches, migrations): %s\n' "$name" "$line"
  if switchyard_proxy "$name"; then
    local m1; m1=$(mallocs)
    awk -v a="$M0" -v b="$m1" -v q="$q" -v name="$name" 'BEGIN {printf "    %-13s allocations/query: %.1f (the switchyard proxy process)\n", name, (b - a) / q}'
    wait "$PPROFPID" 2>/dev/null || true
  fi
}

# run TARGET_NAME PORT WORKLOAD PID(or empty)
declare -A QPS P95 CPUUS
run() {
  local name=$1 port=$2 wl=$3 pid=$4 out c0 c1 q rc=0
  # The profilers first: the counts below start when the run does.
  [ "$PROFILE" = 1 ] && [ -n "$pid" ] && profile_start "$name" "$wl" "$pid"
  c0=0; [ -n "$pid" ] && c0=$(cpu "$pid")
  local us0="0 0" us1="0 0" t0 t1; t0=$(date +%s.%N)
  [ -n "$pid" ] && us0=$(usys "$pid")
  local m0 m1 sv0=0 sv1=0 x0 x1; m0=$(machine); x0=$(switches | tr '\n' ' '); [ -n "$SERVERPID" ] && sv0=$(cpu "$SERVERPID")
  # /usr/bin/time (when installed) gives the client's own CPU time.
  local timer=(); [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "client-cpu %U %S")
  # In the background and waited for: a Ctrl-C then interrupts the wait and
  # runs its trap at once (a foreground sysbench that exits with an error
  # after it would be taken for the failure).
  ${timer[@]+"${timer[@]}"} sysbench "$wl" "${common[@]}" ${SSL[@]+"${SSL[@]}"} --mysql-port="$port" --threads="$THREADS" --time="$SECS" \
        --mysql-ignore-errors=none --report-interval=0 run >"$WORK/sysbench.out" 2>&1 &
  SBPID=$!
  wait "$SBPID" || rc=$?
  SBPID=""
  out=$(cat "$WORK/sysbench.out")
  if [ "$rc" -ne 0 ]; then echo "sysbench $wl through $name failed:" >&2; echo "$out" >&2; exit 1; fi
  c1=0; [ -n "$pid" ] && c1=$(cpu "$pid")
  t1=$(date +%s.%N)
  [ -n "$pid" ] && us1=$(usys "$pid")
  m1=$(machine); x1=$(switches | tr '\n' ' '); [ -n "$SERVERPID" ] && sv1=$(cpu "$SERVERPID")
  q=$(awk '/queries:/ {print $2; exit}' <<<"$out")
  QPS[$name/$wl]=$(awk -F'[(]' '/queries:/ {split($2,a," "); print a[1]; exit}' <<<"$out")
  P95[$name/$wl]=$(awk '/95th percentile:/ {print $3; exit}' <<<"$out")
  if [ -n "$pid" ] && [ "$q" -gt 0 ]; then
    CPUUS[$name/$wl]=$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v q="$q" 'BEGIN {printf "%.1f", c / hz * 1e6 / q}')
  else
    CPUUS[$name/$wl]="-"
  fi
  local errs; errs=$(awk '/ignored errors:/ {print $3; exit}' <<<"$out")
  printf '  %-13s %-17s qps %10s  p95 %7s ms  proxy cpu/query %6s us  errors %s\n' "$name" "$wl" "${QPS[$name/$wl]}" "${P95[$name/$wl]}" "${CPUUS[$name/$wl]}" "${errs:-0}"
  if [ -n "$pid" ] && [ "$q" -gt 0 ]; then
    # user and system time per query; for Switchyard also net of the
    # background CPU it uses with no client (controller, embedded etcd).
    awk -v a="$us0" -v b="$us1" -v hz="$HZ" -v q="$q" -v name="$name" -v idle="${IDLE:-0}" -v t0="$t0" -v t1="$t1" 'BEGIN {
      split(a, x, " "); split(b, y, " ")
      u = (y[1] - x[1]) / hz * 1e6 / q; s = (y[2] - x[2]) / hz * 1e6 / q
      printf "    %-13s user %.1f us + system %.1f us per query", name, u, s
      if (name == "switchyard") printf "; net of %.1f ms/s idle background: %.1f us", idle, u + s - idle / 1e3 * (t1 - t0) * 1e6 / q
      printf "\n" }'
  fi
  if [ "$q" -gt 0 ]; then
    # Where the whole machine's CPU went: how busy it was, its CPU per
    # query (client, servers and proxy together) and the primary's share.
    awk -v a="$m0" -v b="$m1" -v s0="$sv0" -v s1="$sv1" -v hz="$HZ" -v q="$q" -v name="$name" -v c0="$x0" -v c1="$x1" \
        -v client="$(awk '/^client-cpu / {print $2 + $3}' <<<"$out")" 'BEGIN {
      split(a, x, " "); split(b, y, " "); split(c0, u, " "); split(c1, v, " ")
      printf "    %-13s machine busy %.0f %%, machine CPU %.1f us per query, primary mariadbd %.1f us per query",
        name, 100 * (y[1] - x[1]) / (y[2] - x[2]), (y[1] - x[1]) / hz * 1e6 / q, (s1 - s0) / hz * 1e6 / q
      if (client != "") printf ", sysbench %.1f us per query", client * 1e6 / q
      printf "\n    %-13s per query, whole machine: context switches %.2f, rescheduling interrupts %.2f\n",
        name, (v[1] - u[1]) / q, (v[2] - u[2]) / q }'
  fi
  if [ "$PROFILE" = 1 ] && [ -n "$pid" ]; then profile_end "$name" "$wl" "$q"; fi
}

# The switchyard proxy process's CPU with no client: its backend checks and
# etcd watch (ms of CPU per second).
IDLE_SECS=${BENCH_IDLE_SECONDS:-5}
i0=$(cpu "$SYPID")
if [ "$PROFILE" = 1 ]; then
  curl -sf -o "$PROFILE_DIR/cpu-switchyard-idle.pprof" "http://$SWITCHYARD_ADMIN/debug/pprof/profile?seconds=$IDLE_SECS" || true
else
  sleep "$IDLE_SECS"
fi
i1=$(cpu "$SYPID")
IDLE=$(awk -v c=$((i1 - i0)) -v hz="$HZ" -v s="$IDLE_SECS" 'BEGIN {printf "%.1f", c / hz * 1e3 / s}')
echo "== switchyard idle CPU (no clients, $IDLE_SECS s): $IDLE ms/s"
mode="plaintext"; [ "$TLS" = 1 ] && mode="TLS (--mysql-ssl=on)"
echo "== $SECS s per run, $THREADS threads, --db-ps-mode=$PS_MODE, clients: $mode, compression $COMPRESSION, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# BENCH_ROUNDS=N runs the direct, HAProxy (go-l4) and Switchyard sequence
# N times in turn per workload: a disturbance of the shared machine then
# lands in one round, and the ratios of each round are printed with their
# median (the final ratios below are the last round's).
declare -A RQPS RCPU RP
# start_proxy N: the `switchyard proxy` process again, with GOMAXPROCS=N
# (BENCH_GOMAXPROCS).
start_proxy() {
  kill "$SYPID" 2>/dev/null || true
  wait "$SYPID" 2>/dev/null || true
  GOMAXPROCS=$1 $SY proxy --config "$SWITCHYARD_CONFIG" "${EXT[@]}" --log-level warn >"$WORK/switchyard-p$1.log" 2>&1 &
  SYPID=$!
  wait_proxy "$SYPID" "$WORK/switchyard-p$1.log" "${EXT[@]}"
}
for wl in oltp_point_select oltp_read_write; do
  for round in $(seq 1 "$ROUNDS"); do
    [ "$ROUNDS" -gt 1 ] && echo "  -- $wl round $round of $ROUNDS"
    run direct "$PRIMARY_PORT" "$wl" ""
    run haproxy "$HAPORT" "$wl" "$HAPID"
    [ "$GO_L4" = 1 ] && run go-l4 "$L4PORT" "$wl" "$L4PID"
    [ "$GO_EPOLL" = 1 ] && run go-epoll "$EPPORT" "$wl" "$EPPID"
    if [ -n "$PROCS_LIST" ]; then
      for v in $PROCS_LIST; do
        start_proxy "$v"
        run "switchyard-p$v" "$RW_PORT" "$wl" "$SYPID"
        RP[$v/$wl]+="$(ratio "${QPS[switchyard-p$v/$wl]}" "${QPS[haproxy/$wl]}")/$(ratio "${CPUUS[switchyard-p$v/$wl]}" "${CPUUS[haproxy/$wl]}") "
      done
      continue
    fi
    run switchyard "$RW_PORT" "$wl" "$SYPID"
    RQPS[$wl]+="$(ratio "${QPS[switchyard/$wl]}" "${QPS[haproxy/$wl]}") "
    RCPU[$wl]+="$(ratio "${CPUUS[switchyard/$wl]}" "${CPUUS[haproxy/$wl]}") "
  done
done

# The same through `switchyard up`: its CPU includes the controller and
# the embedded etcd.
kill "$SYPID" "$CTLPID" 2>/dev/null || true
wait "$SYPID" "$CTLPID" 2>/dev/null || true
SYPID=""; CTLPID=""
$SY up --config "$SWITCHYARD_CONFIG" --log-level warn >"$WORK/switchyard-up.log" 2>&1 &
SYPID=$!
wait_proxy "$SYPID" "$WORK/switchyard-up.log"
for wl in oltp_point_select oltp_read_write; do
  run switchyard-up "$RW_PORT" "$wl" "$SYPID"
done

echo
echo "== ratios (qps)"
for wl in oltp_point_select oltp_read_write; do
  # A target that did not run (go-l4 with BENCH_GO_L4=0, switchyard with
  # BENCH_GOMAXPROCS: see its own lines) is left out.
  line="  $(printf '%-17s' "$wl") haproxy/direct $(ratio "${QPS[haproxy/$wl]}" "${QPS[direct/$wl]}")"
  for t in switchyard switchyard-up go-l4 go-epoll; do
    [ -n "${QPS[$t/$wl]:-}" ] || continue
    [ "$t" = switchyard ] && line+="  switchyard/direct $(ratio "${QPS[$t/$wl]}" "${QPS[direct/$wl]}")"
    line+="  $t/haproxy $(ratio "${QPS[$t/$wl]}" "${QPS[haproxy/$wl]}")"
  done
  echo "$line"
done
if [ -n "$PROCS_LIST" ]; then
  echo "== switchyard-pN/haproxy per round (qps ratio/cpu-per-query ratio), by GOMAXPROCS"
  for wl in oltp_point_select oltp_read_write; do
    for v in $PROCS_LIST; do printf '  %-17s GOMAXPROCS=%s  %s\n' "$wl" "$v" "${RP[$v/$wl]}"; done
  done
fi
if [ "$ROUNDS" -gt 1 ] && [ -z "$PROCS_LIST" ]; then
  echo "== switchyard/haproxy per round (qps; cpu per query), median of $ROUNDS rounds"
  med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {printf "%.3f\n", (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
  for wl in oltp_point_select oltp_read_write; do
    printf '  %-17s qps %s (median %s)  cpu/query %s (median %s)\n' "$wl" "${RQPS[$wl]}" "$(med <<<"${RQPS[$wl]}")" \
      "${RCPU[$wl]}" "$(med <<<"${RCPU[$wl]}")"
  done
fi
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$PROFILE" = 1 ]; then
  for f in "$PROFILE_DIR"/perf-*.data; do
    [ -s "$f" ] || continue
    echo
    echo "== perf, top symbols (kernel and user): $f"
    perf report -q -i "$f" --no-children --sort sym 2>/dev/null | grep -v '^$' | head -22 || true # head closes the pipe early (pipefail)
  done
  for f in "$PROFILE_DIR"/cpu-*.pprof; do
    [ -s "$f" ] || continue
    b=$(basename "$f" .pprof); b=${b#cpu-}
    echo
    if [ -s "$PROFILE_DIR/allocs-$b.pprof" ]; then
      echo "== CPU profile, $b ($f; allocations: allocs-$b.pprof)"
    else
      echo "== CPU profile, $b ($f)"
    fi
    go tool pprof -top -nodecount=25 "$SY" "$f" 2>/dev/null | sed -n '1,32p'
    if [ -s "$PROFILE_DIR/allocs-$b.pprof" ]; then
      echo "-- allocations (objects) in the same window"
      go tool pprof -top -sample_index=alloc_objects -nodecount=12 "$SY" "$PROFILE_DIR/allocs-$b.pprof" 2>/dev/null | sed -n '1,18p'
    fi
  done
fi
