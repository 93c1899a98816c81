#!/usr/bin/env bash
# make down: stops what `make demo` started — switchyard up (by its pid file)
# and the sandbox's mariadbd processes (by their pid files) — and removes the
# sandbox data.
set -euo pipefail
cd "$(dirname "$0")/.."
SB=${SANDBOX:-.sandbox}
if [ -f "$SB/switchyard.pid" ]; then
  pid=$(cat "$SB/switchyard.pid")
  if kill -0 "$pid" 2>/dev/null && grep -q switchyard "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "stopped switchyard (pid $pid)"
  fi
  rm -f "$SB/switchyard.pid"
fi
if [ -d "$SB" ]; then
  bin/switchyard sandbox down --dir "$SB" --purge
fi
