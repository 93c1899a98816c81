package proxy

import "testing"

func TestConsistentRead(t *testing.T) {
	for q, want := range map[string]bool{
		// sysbench oltp_read_write's reads
		"SELECT c FROM sbtest1 WHERE id=?":                                   true,
		"SELECT c FROM sbtest3 WHERE id BETWEEN ? AND ?":                     true,
		"SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN ? AND ?":                true,
		"SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c":          true,
		"SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c": true,
		"  select v from t where id = 2 ;  ":                                 true,
		"(SELECT a FROM t) UNION (SELECT b FROM u)":                          true,
		"SELECT COUNT(*), MAX(id) FROM t WHERE id IN (SELECT id FROM u)":     true,
		"SELECT CAST(v AS DECIMAL(10,2)) FROM t":                             true,
		"SELECT v FROM t WHERE name = 'FOR UPDATE' -- FOR UPDATE\n":          true,
		"SELECT v FROM t WHERE name = 'it''s @x := 1'":                       true,
		"SELECT /* plain */ v FROM db.t":                                     true,
		"SELECT t.`for` FROM t":                                              true,
		"SELECT v FROM t FORCE INDEX (PRIMARY) WHERE id = 1":                 true,
		"SELECT v FROM t WHERE id = 1 FOR UPDATE":                            false,
		"SELECT v FROM t WHERE id = 1 for share":                             false,
		"SELECT v FROM t WHERE id = 1 LOCK IN SHARE MODE":                    false,
		"SELECT v INTO @x FROM t WHERE id = 1":                               false,
		"SELECT v FROM t INTO OUTFILE '/tmp/x'":                              false,
		"SELECT @x := v FROM t":                                              false,
		"SELECT @@tx_isolation":                                              true,
		"SELECT f(v) FROM t":                                                 false, // a stored function may write
		"SELECT db.sum(v) FROM t":                                            false,
		"SELECT `sum`(v) FROM t":                                             false,
		"SELECT LAST_INSERT_ID(5)":                                           false,
		"SELECT GET_LOCK('a', 1)":                                            false,
		"SELECT NEXTVAL(s)":                                                  false,
		"SELECT NEXT VALUE FOR s":                                            false,
		"SELECT SLEEP(1)":                                                    false,
		"SELECT 1; UPDATE t SET v = 1":                                       false,
		"SELECT /*! SQL_NO_CACHE */ v FROM t":                                false,
		"SELECT /*M!100000 f() */ 1":                                         false,
		"SELECT v FROM t /* unterminated":                                    false,
		"SELECT 'unterminated":                                               false,
		"UPDATE t SET v = 1":                                                 false,
		"WITH x AS (SELECT 1) SELECT * FROM x":                               false,
		"SHOW TABLES":                                                        false,
		"INSERT INTO t SELECT * FROM u":                                      false,
		"SELECT v FROM t PROCEDURE ANALYSE()":                                false,
		"":                                                                   false,
		// Under NO_BACKSLASH_ESCAPES 'a\' ends at its backslash.
		"SELECT 'a\\', v FROM t WHERE id = 1 FOR UPDATE -- '": false,
		"SELECT 'it\\'s' FROM t":                              false,
		`SELECT "f1"(1)`:                                      false, // ANSI_QUOTES: a call
		`SELECT "a" (1)`:                                      false,
	} {
		if got := consistentRead([]byte(q)); got != want {
			t.Errorf("consistentRead(%q) = %v, want %v", q, got, want)
		}
	}
}

func TestWriteReadsRows(t *testing.T) {
	for q, want := range map[string]bool{
		"INSERT INTO t (a, b) VALUES (?, ?), (3, 4)":                           false,
		"INSERT INTO t VALUES (1, 'select')":                                   false,
		"UPDATE t SET a = a + 1, b = 2 WHERE id = ?":                           false,
		"DELETE FROM t WHERE id IN (1, 2)":                                     false,
		"REPLACE INTO t VALUES (1, 2)":                                         false,
		"INSERT INTO dst SELECT id, v FROM src":                                true,
		"insert into dst (id) (select id from src)":                            true,
		"UPDATE t SET v = (SELECT MAX(v) FROM u) WHERE id = 1":                 true,
		"UPDATE t JOIN u ON t.id = u.id SET t.v = u.v":                         true,
		"UPDATE t STRAIGHT_JOIN u ON t.id = u.id SET t.v = u.v":                true,
		"UPDATE t, u SET t.v = u.v WHERE t.id = u.id":                          true,
		"DELETE t FROM t, u WHERE t.id = u.id":                                 true,
		"DELETE FROM t USING t, u WHERE t.id = u.id":                           true,
		"DELETE FROM t WHERE id IN (SELECT id FROM u)":                         true,
		"INSERT INTO t VALUES (1) /*!ON DUPLICATE KEY UPDATE v = (SELECT 1)*/": true,
		"INSERT INTO t VALUES ('a\\', 1) -- ', (SELECT 1)":                     true,
	} {
		if got := writeReadsRows([]byte(q)); got != want {
			t.Errorf("writeReadsRows(%q) = %v, want %v", q, got, want)
		}
	}
}
