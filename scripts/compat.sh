#!/usr/bin/env bash
# Real clients direct and through switchyard (tools/compat): a one-node
# MariaDB sandbox, `switchyard up` with a session- and a transaction-pooled
# rw listener, and each client suite run direct and through both listeners,
# compared test by test. Prints the counts per suite and target and a table
# of the tests that pass direct but not through a listener; exits 1 when
# there is one that tools/compat/known.txt does not list. Everything it starts
# (mariadbd, switchyard up, the clients) is stopped by pid and the sandbox
# directory is removed.
#
#   ./scripts/compat.sh [-suites ci|all|gosqldriver,node,python,cli,sysbench,mtr,clienttest]
#                       [-targets direct,session,transaction] [-run REGEXP] [-keep]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin"
GO=${GO:-go}
DIR=${COMPAT_DIR:-.compat}
$GO build -o bin/switchyard ./cmd/switchyard
$GO build -o bin/switchyard-compat ./tools/compat
exec bin/switchyard-compat -dir "$DIR" -switchyard bin/switchyard "$@"
