#!/usr/bin/env bash
# Installs what Switchyard's demo, tests and benchmarks need, only when missing:
# MariaDB server and client, sysbench, HAProxy (benchmarks), iproute2 (partition
# scenarios), etcd server and client (store-outage scenarios, a real
# 3-member cluster), and the clients tools/compat runs direct and through the
# proxy: PyMySQL and mysqlclient for Debian's /usr/bin/python3, Node.js and
# npm (mysql2 and mariadb come from the npm registry at run time, npm ci of
# tools/compat/checks/node's lock file), mariadb-test (mariadb-test-run,
# mariadb-client-test), prometheus for promtool (the alert rules' tests), and time (/usr/bin/time: bench/proxy.sh's client CPU). Debian/Ubuntu only; run as root (or with sudo available).
set -euo pipefail

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
command -v sysbench >/dev/null 2>&1 || need+=(sysbench)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
/usr/bin/python3 -c 'import pymysql' >/dev/null 2>&1 || need+=(python3-pymysql)
/usr/bin/python3 -c 'import MySQLdb' >/dev/null 2>&1 || need+=(python3-mysqldb)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/time ] || need+=(time) # bench/proxy.sh: the client's CPU time
command -v mariadb-client-test >/dev/null 2>&1 || [ -x /usr/share/mysql/mysql-test/mariadb-test-run ] || need+=(mariadb-test)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing ${need[*]}; install them with your package manager" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# The packaged services must not start: the sandbox runs its own mariadbd processes.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
