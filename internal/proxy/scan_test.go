package proxy

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

func TestClassify(t *testing.T) {
	cases := map[string]sqlClass{
		"SELECT 1": classSelect,
		"  /* app=x */ select c from t where id=1":                                        classSelect,
		"(SELECT 1) UNION (SELECT 2)":                                                     classSelect,
		"WITH a AS (SELECT 1) SELECT * FROM a":                                            classSelect,
		"SET @@session.sql_mode='ANSI'":                                                   classSet,
		"set names utf8mb4":                                                               classSet,
		"SET STATEMENT max_statement_time=1 FOR SELECT 1":                                 classSetStmt,
		"SET STATEMENT max_statement_time=1 FOR SELECT 1 FOR UPDATE":                      classSetStmt,
		"set statement sql_mode='ANSI', lock_wait_timeout=1 for insert into t values (1)": classSetStmt,
		"SET STATEMENT max_statement_time=5 FOR SET @a=7":                                 classSetStmtState,
		"SET STATEMENT max_statement_time=5 FOR SET SESSION sql_mode='ANSI'":              classSetStmtState,
		"SET STATEMENT sql_mode='for' FOR USE otherdb":                                    classSetStmtState,
		"SET STATEMENT sql_mode=(SELECT 'x' FOR UPDATE) FOR LOCK TABLES t READ":           classSetStmtState,
		"SET STATEMENT `for`=1 FOR /*!SET @a=1 */":                                        classSetStmtState,
		"SET STATEMENT x=1 FOR SET STATEMENT y=2 FOR SET @a=1":                            classSetStmtState,
		"SET STATEMENT x=1 FOR SET STATEMENT y=2 FOR DELETE FROM t":                       classSetStmt,
		"SET STATEMENT max_statement_time=1":                                              classSetStmtState,
		"SET TRANSACTION ISOLATION LEVEL READ COMMITTED":                                  classSetTx,
		"SET SESSION TRANSACTION READ ONLY":                                               classSet,
		"SET @@tx_isolation = 'SERIALIZABLE'":                                             classSetTx,
		"set @@TX_READ_ONLY=1, @@transaction_isolation='READ-COMMITTED'":                  classSetTx,
		"SET @@session.tx_isolation = 'SERIALIZABLE'":                                     classSet,
		"SET tx_isolation = 'SERIALIZABLE'":                                               classSet,
		"SET @@tx_isolation = 'SERIALIZABLE', @@sql_mode = ''":                            classSet,
		"SET ROLE r":                  classSetOpaque,
		"use otherdb":                 classUse,
		"LOCK TABLES t WRITE":         classLock,
		"UNLOCK TABLES":               classUnlock,
		"FLUSH TABLES WITH READ LOCK": classLock,
		"FLUSH TABLES":                classOther,
		"BACKUP LOCK t":               classLock,
		"HANDLER t OPEN":              classHandler,
		"INSERT INTO t VALUES (1)":    classOther,
		"-- comment\nSELECT 1":        classSelect,
		"# comment\nUPDATE t SET a=1": classOther,
		"/*!40101 SET NAMES utf8 */":  classSet,
		"":                            classOther,
		"selected":                    classOther,
	}
	for q, want := range cases {
		if got := classify([]byte(q)); got != want {
			t.Errorf("classify(%q) = %d, want %d", q, got, want)
		}
	}
}

func TestStickyState(t *testing.T) {
	cases := []struct {
		q              string
		lock, userVars bool
	}{
		{"SELECT GET_LOCK('a', 10)", true, false},
		{"select get_lock('a', 10)", true, false},
		{"SELECT server_id FROM t WHERE id = ?", false, false},
		{"SELECT @@server_id, @@session.tx_isolation", false, false},
		{"SELECT @x := 1", false, true},
		{"SELECT c INTO @v FROM t", false, true},
		{"SELECT @v", false, false},
		{"SELECT is_free_lock('a')", false, false},
	}
	for _, c := range cases {
		lock, uv := stickyState([]byte(c.q))
		if lock != c.lock || uv != c.userVars {
			t.Errorf("stickyState(%q) = %v, %v; want %v, %v", c.q, lock, uv, c.lock, c.userVars)
		}
	}
}

func TestParseSetUserVars(t *testing.T) {
	got, ok := parseSetUserVars([]byte("SET @a = 1, @`b c`='x,y', sql_mode='ANSI', @c:=-2.5e3, @d = NULL, @e=_utf8mb4'z';"))
	want := []userVarAssign{{"a", "1"}, {"b c", "'x,y'"}, {"c", "-2.5e3"}, {"d", "NULL"}, {"e", "_utf8mb4'z'"}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseSetUserVars = %v, %v; want %v", got, ok, want)
	}
	for _, q := range []string{
		"SET @a = (SELECT 1)",
		"SET @a = 1 + 1",
		"SET @a = NOW()",
		"SET @a = 1; DROP TABLE t",
		"SET @a = 'unterminated",
	} {
		if _, ok := parseSetUserVars([]byte(q)); ok {
			t.Errorf("parseSetUserVars(%q) accepted", q)
		}
	}
	if got, ok := parseSetUserVars([]byte("SET NAMES utf8mb4, autocommit=0")); !ok || len(got) != 0 {
		t.Errorf("system variables only: %v %v", got, ok)
	}
}

func TestNamesCollation(t *testing.T) {
	for q, want := range map[string]string{
		"SET NAMES latin1 COLLATE latin1_bin":               "latin1_bin",
		"set names 'utf8mb4' collate 'utf8mb4_unicode_ci';": "utf8mb4_unicode_ci",
		"SET autocommit=1, NAMES utf8 COLLATE utf8_bin":     "utf8_bin",
		"SET NAMES latin1":                                  "",
	} {
		if got, _ := namesCollation([]byte(q)); got != want {
			t.Errorf("namesCollation(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestDigest(t *testing.T) {
	cases := map[string]string{
		"SELECT c FROM sbtest1 WHERE id=42":                      "SELECT c FROM sbtest1 WHERE id=?",
		"select  c\n from t where id = 'x''y' and k=3.5":         "select c from t where id = ? and k=?",
		"SELECT * FROM t WHERE id IN (1, 2, 3)":                  "SELECT * FROM t WHERE id IN (...)",
		"SELECT c FROM t1 /* hint */ WHERE `a b`=\"q\" LIMIT 10": "SELECT c FROM t1 WHERE `a b`=? LIMIT ?",
	}
	for q, want := range cases {
		if got := string(digestInto(nil, []byte(q))); got != want {
			t.Errorf("digest(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestReplaySQL(t *testing.T) {
	var st sessState
	st.setVar("sql_mode", "ANSI_QUOTES")
	st.setVar("character_set_client", "latin1")
	st.setVar("max_statement_time", "10.000000")
	st.setVar("time_zone", "+02:00")
	st.setVar("collation_connection", "latin1_swedish_ci")
	st.setVar("sql_mode", "O'K") // later change moves it last
	st.setVar("character_set_results", "")
	st.setUserVar(userVarAssign{"x", "5"})
	got := st.replaySQL()
	want := trackingSQL + ", @@session.character_set_client='latin1', @@session.character_set_results=NULL" +
		", @@session.collation_connection='latin1_swedish_ci', @@session.max_statement_time=10.000000" +
		", @@session.time_zone='+02:00', @@session.sql_mode='O\\'K', @`x`=5"
	if got != want {
		t.Fatalf("replaySQL:\n got %s\nwant %s", got, want)
	}
}

func TestStripState(t *testing.T) {
	state := []byte{0, 9, 8, 's', 'q', 'l', '_', 'm', 'o', 'd', 'e', 0} // malformed on purpose is fine: it is dropped
	withInfo := mysqlproto.AppendOK(nil, mysql.CLIENT_SESSION_TRACK, &mysqlproto.OK{AffectedRows: 3, Status: mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED,
		Info: []byte("Rows matched: 3"), SessionState: state})
	got := stripState(nil, withInfo)
	want := mysqlproto.AppendOK(nil, 0, &mysqlproto.OK{AffectedRows: 3, Status: mysql.SERVER_STATUS_AUTOCOMMIT, Info: []byte("Rows matched: 3")})
	if string(got) != string(want) {
		t.Fatalf("strip with info:\n got %x\nwant %x", got, want)
	}
	noInfo := mysqlproto.AppendOK(nil, mysql.CLIENT_SESSION_TRACK, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED, SessionState: state})
	got = stripState(nil, noInfo)
	want = mysqlproto.AppendOK(nil, 0, &mysqlproto.OK{Status: mysql.SERVER_STATUS_AUTOCOMMIT})
	if string(got) != string(want) {
		t.Fatalf("strip without info:\n got %x\nwant %x", got, want)
	}
}

func TestRenderExample(t *testing.T) {
	st := &stmtInfo{text: []byte("SELECT c FROM t WHERE id = ? AND k = ? AND s = '?' AND d IS ?"), params: 3}
	// cmd, id, flags, iterations, null bitmap (param 2 NULL), bound=1, types, values
	p := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0b100, 1,
		mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_STRING, 0, mysql.MYSQL_TYPE_NULL, 0}
	p = binary.LittleEndian.AppendUint64(p, 42)
	p = append(p, 3, 'a', '\'', 'b')
	st.executeTypes(p)
	got, err := st.renderExample(p)
	want := `SELECT c FROM t WHERE id = 42 AND k = 'a\'b' AND s = '?' AND d IS NULL`
	if err != nil || got != want {
		t.Fatalf("renderExample = %q, %v; want %q", got, err, want)
	}
}

func TestHotReadsBounded(t *testing.T) {
	var h hotReads
	h.init()
	for i := range 3 * hotMaxPerCluster {
		h.add("c", hotKey{digest: string(rune('a'+i%26)) + string(rune(i))}, "x")
	}
	for range 50 {
		h.add("c", hotKey{digest: "hot"}, "SELECT 1")
	}
	if n := len(h.byCluster["c"]); n != hotMaxPerCluster {
		t.Fatalf("%d digests kept, want %d", n, hotMaxPerCluster)
	}
	reads, _ := h.snapshot()
	if len(reads) != hotPublishMax || reads[0].Digest != "hot" {
		t.Fatalf("published %d, first %+v", len(reads), reads[0])
	}
}

func TestRewriteRowCount(t *testing.T) {
	for _, c := range []struct{ q, want string }{
		{"SELECT ROW_COUNT()", "SELECT COALESCE(5, ROW_COUNT()) AS `ROW_COUNT()`"},
		{" /* c */ select row_count( ) ;", "SELECT COALESCE(5, ROW_COUNT()) AS `row_count( )`"},
		{"SELECT ROW_COUNT() AS rc", "SELECT COALESCE(5, ROW_COUNT()) AS rc"},
		{"SELECT ROW_COUNT() rc, ROW_COUNT()", "SELECT COALESCE(5, ROW_COUNT()) AS rc, COALESCE(5, ROW_COUNT()) AS `ROW_COUNT()`"},
		{"SELECT ROW_COUNT() + 1", ""},
		{"SELECT ROW_COUNT() FROM t", ""},
		{"SELECT ROW_COUNT() INTO @x", ""},
		{"SELECT ROW_COUNT() AS `rc`", ""},
		{"SELECT ROW_COUNT(), FOUND_ROWS()", ""},
		{"SELECT FOUND_ROWS()", ""},
		{"SELECT ROW_COUNT() LIMIT 1", ""},
		{"SELECT ROW_COUNT(); SELECT 1", ""},
		{"DO ROW_COUNT()", ""},
		{"SELECT ROW_COUNT", ""},
	} {
		got := rewriteRowCount([]byte(c.q), 5)
		g := ""
		if got != nil {
			if got[0] != 0x03 {
				t.Errorf("rewriteRowCount(%q): not a COM_QUERY payload", c.q)
			}
			g = string(got[1:])
		}
		if g != c.want {
			t.Errorf("rewriteRowCount(%q) = %q, want %q", c.q, g, c.want)
		}
	}
}
