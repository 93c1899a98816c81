package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// serverState is what a MariaDB test can leave behind on the shared
// sandbox node, for the next test to trip over: databases (with their
// tables, routines and events), accounts and roles, and global variables.
// The MariaDB suites reset the node to the state taken before their first
// test (baseline) before every test, so that each test runs on the same
// server state whatever ran before it and on whichever target, as
// mariadb-test-run's own check-testcase expects of a fresh server.
type serverState struct {
	databases map[string]bool
	accounts  map[string]bool   // 'user'@'host' of mysql.global_priv
	globals   map[string]string // VARIABLE_NAME → VARIABLE_VALUE
}

// Global variables the reset leaves alone: replication positions move
// with every write, and the controller manages the rest on its primary.
var resetSkipGlobals = []string{"GTID_", "RPL_SEMI_SYNC_", "READ_ONLY", "TIMESTAMP", "SERVER_ID"}

func takeServerState(ctx context.Context, conn *sql.Conn) (*serverState, error) {
	st := &serverState{databases: map[string]bool{}, accounts: map[string]bool{}, globals: map[string]string{}}
	if err := scanPairs(ctx, conn, "SELECT SCHEMA_NAME, '' FROM information_schema.SCHEMATA", func(a, _ string) {
		st.databases[a] = true
	}); err != nil {
		return nil, fmt.Errorf("read the databases: %w", err)
	}
	if err := scanPairs(ctx, conn, "SELECT User, Host FROM mysql.global_priv", func(u, h string) {
		st.accounts[accountName(u, h)] = true
	}); err != nil {
		return nil, fmt.Errorf("read the accounts: %w", err)
	}
	if err := scanPairs(ctx, conn, "SELECT VARIABLE_NAME, IFNULL(VARIABLE_VALUE, '') FROM information_schema.GLOBAL_VARIABLES", func(n, v string) {
		st.globals[n] = v
	}); err != nil {
		return nil, fmt.Errorf("read the global variables: %w", err)
	}
	return st, nil
}

// resetServer brings the node back to base: anonymous accounts and
// accounts or roles created since are dropped and the privilege tables
// reloaded (a test that deletes from mysql.user without FLUSH PRIVILEGES
// leaves the server's in-memory accounts out of step with its tables),
// databases created since are dropped and test is emptied, and global
// variables that differ are set back. It returns what it changed, for the
// log, and the SET GLOBAL statements among them; statements the server
// refuses are skipped.
func resetServer(ctx context.Context, conn *sql.Conn, base *serverState) (done, globals []string, err error) {
	now, err := takeServerState(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	exec := func(q string) bool {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return false
		}
		done = append(done, oneLine(q, 80))
		return true
	}
	exec("SET SESSION sql_log_bin=0")
	for acc := range now.accounts {
		if !base.accounts[acc] {
			if _, err := conn.ExecContext(ctx, "DROP USER "+acc); err != nil {
				exec("DROP ROLE " + acc)
			} else {
				done = append(done, "DROP USER "+acc)
			}
		}
	}
	if _, err := conn.ExecContext(ctx, "DELETE FROM mysql.global_priv WHERE User = ''"); err != nil {
		return done, nil, fmt.Errorf("drop anonymous accounts: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "FLUSH PRIVILEGES"); err != nil {
		return done, nil, fmt.Errorf("flush privileges: %w", err)
	}
	for db := range now.databases {
		if !base.databases[db] {
			if err := dropDatabase(ctx, conn, db); err == nil {
				done = append(done, "DROP DATABASE "+quoteIdent(db))
			}
		}
	}
	if base.databases["test"] {
		if err := dropDatabase(ctx, conn, "test"); err != nil {
			return done, nil, fmt.Errorf("empty the test database: %w", err)
		}
		if _, err := conn.ExecContext(ctx, "CREATE DATABASE test"); err != nil {
			return done, nil, fmt.Errorf("empty the test database: %w", err)
		}
	}
	for name, v := range base.globals {
		if now.globals[name] == v || skipGlobal(name) {
			continue
		}
		if q := "SET GLOBAL " + name + " = " + sqlValue(v); exec(q) {
			globals = append(globals, q)
		}
	}
	return done, globals, nil
}

// dropDatabase drops db; when the server cannot remove its directory
// because a test left files there that are no table's (SELECT … INTO
// OUTFILE, 1010 errno 39), it removes them (the sandbox's datadir is
// local) and drops it again.
func dropDatabase(ctx context.Context, conn *sql.Conn, db string) error {
	_, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(db))
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1010 {
		return err
	}
	var datadir string
	if err := conn.QueryRowContext(ctx, "SELECT @@datadir").Scan(&datadir); err != nil {
		return err
	}
	dir := filepath.Join(datadir, db)
	ents, rerr := os.ReadDir(dir)
	if rerr != nil {
		return fmt.Errorf("%w (and reading %s: %v)", err, dir, rerr)
	}
	for _, ent := range ents {
		_ = os.RemoveAll(filepath.Join(dir, ent.Name()))
	}
	_, err = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(db))
	return err
}

func skipGlobal(name string) bool {
	for _, p := range resetSkipGlobals {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func scanPairs(ctx context.Context, conn *sql.Conn, q string, f func(a, b string)) error {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		f(a, b)
	}
	return rows.Err()
}

func accountName(user, host string) string { return sqlString(user) + "@" + sqlString(host) }

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func sqlString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// sqlValue writes a global variable's value as SET GLOBAL takes it back:
// numbers bare (SET GLOBAL refuses a quoted number for a numeric variable),
// anything else as a string.
func sqlValue(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	return sqlString(v)
}

// freshServer resets the node before one test of suite (resetServer) to
// the state taken before that suite's first test, for a test on target t.
// The reset runs on a direct root connection, which the proxy does not
// see: connections it pooled while a test's SET GLOBAL was in force keep
// those values as their session values (max_allowed_packet 1024 after
// main.variables) until a SET GLOBAL relayed through the proxy makes it
// reset them at checkout (README "Connection pooling"). So on a listener
// the reset's SET GLOBAL statements are sent again through it (same
// values): the pool then starts the test from the server's globals, as
// every new direct connection does.
func (e *env) freshServer(ctx context.Context, suite string, conn *sql.Conn, t target) error {
	base := e.baselines[suite]
	if base == nil {
		st, err := takeServerState(ctx, conn)
		if err != nil {
			return err
		}
		e.baselines[suite] = st
		return nil
	}
	done, globals, err := resetServer(ctx, conn, base)
	if len(done) > 1 {
		e.log.Debug("server state reset", "suite", suite, "statements", strings.Join(done[1:], "; "))
	}
	if err != nil || len(globals) == 0 || t.name == "direct" {
		return err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = superUser, e.superPass, "tcp", t.addr
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range globals {
		if _, err := db.ExecContext(ctx, q); err != nil {
			e.log.Warn("reset: SET GLOBAL through the listener failed; its pool may keep old values", "target", t.name, "statement", oneLine(q, 80), "err", err)
			return nil
		}
	}
	return nil
}
