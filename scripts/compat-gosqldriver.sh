#!/usr/bin/env bash
# make compat: go-sql-driver/mysql's own test suite (v1.10.1 by default)
# against a one-node MariaDB sandbox, once direct and once through each rw
# listener of a `switchyard up` process — pooling: session and pooling:
# transaction. Prints pass/fail/skip counts per target and the tests that
# pass direct but fail through a listener; exits 1 when there are any.
# Everything it starts (mariadbd, switchyard up) is stopped by pid and the
# sandbox directory is removed (tools/compat).
#
#   ./scripts/compat-gosqldriver.sh [-version v1.10.1] [-run REGEXP] [-targets direct,session,transaction] [-keep]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin"
GO=${GO:-go}
DIR=${COMPAT_DIR:-.compat}
$GO build -o bin/switchyard ./cmd/switchyard
exec $GO run ./tools/compat -dir "$DIR" -switchyard bin/switchyard "$@"
