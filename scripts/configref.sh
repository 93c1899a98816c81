#!/usr/bin/env bash
# Regenerates the configuration reference in README.md (between the
# configref markers) from the doc comments in internal/config/config.go.
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(go run ./tools/configref)
awk -v table="$table" '
  /<!-- configref:begin -->/ { print; print table; skip = 1; next }
  /<!-- configref:end -->/ { skip = 0 }
  !skip { print }
' README.md > README.md.tmp && mv README.md.tmp README.md
