# Switchyard — build, test, demo, benchmark.
GO       ?= go
BIN      := bin/switchyard
SANDBOX  ?= .sandbox
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin

.PHONY: all build deps test test-short lint demo down bench fuzz clean docs compat test-compat-ci

all: build

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/switchyard
	$(GO) build -o bin/switchyard-loadgen ./tools/loadgen

deps:
	./scripts/deps.sh
	$(GO) mod download

# Unit, integration (real mariadbd, embedded etcd) and scenario tests.
# Packages run one at a time (-p 1): the integration and scenario packages
# each start their own MariaDB sandboxes and etcd, and timing-based checks
# (probe timeouts, failure detection) stay meaningful on a small machine.
test: deps build
	$(GO) vet ./...
	$(GO) test -race -p 1 -timeout 25m ./...

# Unit tests only (no mariadbd needed).
test-short:
	$(GO) test -short ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: files above need formatting'; exit 1; }
	$(GO) vet ./...

# Starts a 3-node MariaDB sandbox and Switchyard in the background, drives
# traffic through it, performs one switchover and prints what clients saw.
demo: deps build
	./scripts/demo.sh

# Stops what `make demo` started (by pid) and removes the sandbox data.
down:
	./scripts/down.sh

# Proxy throughput against direct and HAProxy, switchover write pauses and
# warm-vs-cold reads, crash-failover times; each starts its own sandboxes.
bench: deps build
	./bench/proxy.sh
	$(GO) run ./bench/switchover
	$(GO) run ./bench/failover -trials 10

# Real clients direct and through session- and transaction-pooled rw
# listeners of switchyard up (one-node sandbox), compared test by test:
# go-sql-driver/mysql's own suite, the check sets for mysql2, mariadb,
# PyMySQL and mysqlclient, the mariadb client and sysbench. Fails on a test
# that passes direct and not through a listener (tools/compat). Part of CI.
test-compat-ci: deps build
	./scripts/compat.sh -suites ci

# test-compat-ci's suites plus mariadb-test-run (main suite, extern mode,
# also --cursor-protocol) and mariadb-client-test; about 17 minutes on 2 cores.
compat: deps build
	./scripts/compat.sh -suites all

fuzz:
	$(GO) test ./internal/gtid -run '^$$' -fuzz FuzzParseMariaDB -fuzztime 20s
	$(GO) test ./internal/gtid -run '^$$' -fuzz FuzzParseMySQL -fuzztime 20s
	$(GO) test ./internal/config -run '^$$' -fuzz FuzzParse -fuzztime 20s

clean:
	rm -rf bin

# Regenerates the README's configuration reference from the schema's doc comments.
docs:
	./scripts/configref.sh
