#!/usr/bin/python3
"""Switchyard client checks for PyMySQL and mysqlclient (MySQLdb).

Run by tools/compat direct and through the proxy: it reads where to connect
from COMPAT_* variables and prints one JSON object per check,
{"check": "pymysql/name", "status": "pass"|"fail"|"skip", "detail": "..."}.
Every check opens its own connections, so a failure does not leak into the
next check. Debian 12's python3-pymysql (1.0.2) and python3-mysqldb (1.4.6).
"""
import datetime
import decimal
import json
import os
import sys
import threading
import time
import traceback

ENV = os.environ
HOST, PORT = ENV["COMPAT_HOST"], int(ENV["COMPAT_PORT"])
USER, PASSWORD = ENV["COMPAT_USER"], ENV["COMPAT_PASSWORD"]
USER2, PASSWORD2 = ENV["COMPAT_USER2"], ENV["COMPAT_PASSWORD2"]
DB, OTHER_DB = ENV["COMPAT_DB"], ENV["COMPAT_OTHER_DB"]
TMP = ENV.get("COMPAT_TMP", "/tmp")


class Skip(Exception):
    pass


def emit(name, status, detail=""):
    sys.stdout.write(json.dumps({"check": name, "status": status, "detail": detail}) + "\n")
    sys.stdout.flush()


class Driver:
    """What differs between PyMySQL and MySQLdb."""

    def __init__(self, name):
        self.name = name
        if name == "pymysql":
            import pymysql
            import pymysql.constants.CLIENT as CLIENT
            self.mod = pymysql
            self.multi_flag = CLIENT.MULTI_STATEMENTS
        else:
            import MySQLdb
            import MySQLdb.constants.CLIENT as CLIENT
            self.mod = MySQLdb
            self.multi_flag = CLIENT.MULTI_STATEMENTS

    def connect(self, user=USER, password=PASSWORD, db=DB, multi=False, **kw):
        args = dict(host=HOST, port=PORT, user=user, connect_timeout=10)
        if self.name == "pymysql":
            args.update(password=password, database=db, read_timeout=30, write_timeout=30)
        else:
            args.update(passwd=password, db=db, read_timeout=30, write_timeout=30)
        if multi:
            args["client_flag"] = self.multi_flag
        args.update(kw)
        return self.mod.connect(**args)

    def errno(self, exc):
        return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


def one(conn, sql, args=None):
    cur = conn.cursor()
    cur.execute(sql, args)
    row = cur.fetchone()
    cur.close()
    return row


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def expect_error(d, fn, codes):
    try:
        fn()
    except d.mod.Error as e:
        n = d.errno(e)
        expect(n in codes, "error %r, want one of %r" % (e, codes))
        return n
    raise AssertionError("no error, want one of %r" % (codes,))


def check_connect(d):
    c = d.connect()
    expect(one(c, "SELECT 1")[0] == 1, "SELECT 1")
    ver = one(c, "SELECT VERSION()")[0]
    expect("MariaDB" in ver, "version %r" % ver)
    c.close()


def check_wrong_password(d):
    expect_error(d, lambda: d.connect(password="wrong-" + PASSWORD), (1045,))


def check_unknown_database(d):
    expect_error(d, lambda: d.connect(db="compat_no_such_db"), (1044, 1049))


def check_integer_types(d):
    c = d.connect()
    row = one(c, "SELECT CAST(-128 AS SIGNED), 127, 255, -32768, 65535, -8388608, 16777215, "
                 "-2147483648, 4294967295, -9223372036854775808, CAST(18446744073709551615 AS UNSIGNED)")
    expect(list(row) == [-128, 127, 255, -32768, 65535, -8388608, 16777215, -2147483648,
                         4294967295, -9223372036854775808, 18446744073709551615], repr(row))
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_ints (a TINYINT, b SMALLINT UNSIGNED, c MEDIUMINT, d INT, e BIGINT UNSIGNED, f BIT(10))")
    cur.execute("INSERT INTO py_ints VALUES (%s,%s,%s,%s,%s,b'1010101010')", (-5, 65535, -1, 2 ** 31 - 1, 2 ** 64 - 1))
    cur.execute("SELECT a,b,c,d,e,f FROM py_ints")
    row = cur.fetchone()
    expect(list(row[:5]) == [-5, 65535, -1, 2 ** 31 - 1, 2 ** 64 - 1], repr(row))
    expect(row[5] == b"\x02\xaa", "bit %r" % (row[5],))
    c.close()


def check_decimal_float(d):
    c = d.connect()
    row = one(c, "SELECT CAST(12345.6789 AS DECIMAL(10,4)), CAST(1.5 AS FLOAT), CAST(2.25 AS DOUBLE), 1e300")
    expect(row[0] == decimal.Decimal("12345.6789"), repr(row))
    expect(abs(row[1] - 1.5) < 1e-6 and row[2] == 2.25 and row[3] == 1e300, repr(row))
    c.close()


def check_strings_utf8mb4(d):
    c = d.connect(charset="utf8mb4")
    s = "héllo wörld \U0001F600 中文"
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_str (a CHAR(10), b VARCHAR(100), c TEXT, d ENUM('x','y'), e SET('p','q')) CHARSET utf8mb4")
    cur.execute("INSERT INTO py_str VALUES (%s,%s,%s,'y','p,q')", ("abc", s, s * 100))
    cur.execute("SELECT a,b,c,d,e FROM py_str")
    row = cur.fetchone()
    expect(row[0] == "abc" and row[1] == s and row[2] == s * 100 and row[3] == "y", repr(row)[:200])
    expect(row[4] in ("p,q", {"p", "q"}), "set %r" % (row[4],))
    c.close()


def check_binary_blob(d):
    c = d.connect()
    data = bytes(range(256)) * 1000
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_blob (a VARBINARY(16), b BLOB, c LONGBLOB)")
    cur.execute("INSERT INTO py_blob VALUES (%s,%s,%s)", (b"\x00\x01\xff", data[:60000], data))
    cur.execute("SELECT a,b,c FROM py_blob")
    row = cur.fetchone()
    expect(bytes(row[0]) == b"\x00\x01\xff" and bytes(row[1]) == data[:60000] and bytes(row[2]) == data, "blob mismatch")
    c.close()


def check_temporal_types(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("SET time_zone='+00:00'")
    cur.execute("CREATE OR REPLACE TABLE py_time (a DATE, b TIME(3), c DATETIME(6), d TIMESTAMP(6) NULL, e YEAR)")
    dt = datetime.datetime(2024, 2, 29, 23, 59, 58, 123456)
    cur.execute("INSERT INTO py_time VALUES (%s,%s,%s,%s,%s)",
                (datetime.date(1999, 12, 31), "-838:59:59", dt, dt, 2155))
    cur.execute("SELECT a,b,c,d,e FROM py_time")
    row = cur.fetchone()
    expect(row[0] == datetime.date(1999, 12, 31), repr(row))
    expect(row[1] == -datetime.timedelta(hours=838, minutes=59, seconds=59), repr(row))
    expect(row[2] == dt and row[3] == dt and row[4] == 2155, repr(row))
    c.close()


def check_nulls(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_null (a INT, b VARCHAR(5), c DATETIME, d BLOB, e DECIMAL(5,2), f JSON, g POINT)")
    cur.execute("INSERT INTO py_null VALUES (NULL,NULL,NULL,NULL,NULL,NULL,NULL)")
    cur.execute("SELECT * FROM py_null")
    row = cur.fetchone()
    expect(all(v is None for v in row), repr(row))
    c.close()


def check_json(d):
    c = d.connect()
    cur = c.cursor()
    doc = {"a": [1, 2, {"b": "ü"}], "n": None}
    cur.execute("CREATE OR REPLACE TABLE py_json (j JSON)")
    cur.execute("INSERT INTO py_json VALUES (%s)", (json.dumps(doc),))
    cur.execute("SELECT j, JSON_EXTRACT(j, '$.a[2].b') FROM py_json")
    row = cur.fetchone()
    j = row[0].decode() if isinstance(row[0], bytes) else row[0]
    expect(json.loads(j) == doc, repr(row))
    c.close()


def check_geometry(d):
    c = d.connect()
    row = one(c, "SELECT ST_AsText(ST_GeomFromText('POINT(1 2)')), ST_GeomFromText('POINT(1 2)'), ST_SRID(POINT(3,4))")
    expect(row[0] == "POINT(1 2)", repr(row))
    raw = bytes(row[1])
    expect(len(raw) == 25 and raw[:4] == b"\x00\x00\x00\x00", "geometry %r" % raw)
    c.close()


def check_large_row_16mib(d):
    """A 17 MiB value each way: the packets split at 16 MiB - 1."""
    c = d.connect()
    big = (b"0123456789abcdef" * (17 * 1024 * 1024 // 16)) + b"end"
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_big (id INT PRIMARY KEY, b LONGBLOB)")
    cur.execute("INSERT INTO py_big VALUES (1, %s)", (big,))
    cur.execute("SELECT b, LENGTH(b) FROM py_big WHERE id=1")
    row = cur.fetchone()
    expect(row[1] == len(big) and bytes(row[0]) == big, "got %d bytes" % len(row[0]))
    expect(one(c, "SELECT 42")[0] == 42, "after the large row")
    c.close()


def check_multi_statements(d):
    c = d.connect(multi=True)
    cur = c.cursor()
    cur.execute("SELECT 1; SELECT 2, 3; DO 0; SELECT 'x'")
    sets = [cur.fetchall()]
    while cur.nextset():
        sets.append(cur.fetchall())
    got = [tuple(tuple(r) for r in s) if s else () for s in sets]
    expect(got == [((1,),), ((2, 3),), (), (("x",),)], repr(got))
    expect(one(c, "SELECT 5")[0] == 5, "after multi")
    c.close()


def check_multi_statement_error(d):
    c = d.connect(multi=True)
    cur = c.cursor()

    def run():
        cur.execute("SELECT 1; SELECT * FROM no_such_table_py; SELECT 3")
        while cur.nextset():
            pass
    expect_error(d, run, (1146,))
    c.close()
    c = d.connect()
    expect(one(c, "SELECT 6")[0] == 6, "fresh connection after the error")
    c.close()


def check_procedure_out_params(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE PROCEDURE py_proc(IN a INT, OUT b INT, INOUT c VARCHAR(20)) "
                "BEGIN SET b = a * 2; SET c = CONCAT(c, '!'); END")
    cur.callproc("py_proc", (21, 0, "hi"))
    while cur.nextset():
        pass
    cur.execute("SELECT @_py_proc_1, @_py_proc_2")
    row = cur.fetchone()
    expect(row[0] == 42 and row[1] in ("hi!", b"hi!"), repr(row))
    c.close()


def check_procedure_result_sets(d):
    c = d.connect(multi=True)
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE PROCEDURE py_sets() BEGIN SELECT 1 AS a; SELECT 2 AS b, 3 AS c; END")
    cur.execute("CALL py_sets()")
    sets = [cur.fetchall()]
    while cur.nextset():
        sets.append(cur.fetchall())
    rows = [tuple(tuple(r) for r in s) for s in sets if s]
    expect(rows == [((1,),), ((2, 3),)], repr(sets))
    expect(one(c, "SELECT 7")[0] == 7, "after CALL")
    c.close()


def check_cursor_not_atomic(d):
    """A compound statement with a cursor (BEGIN NOT ATOMIC ... FETCH)."""
    c = d.connect()
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_cur (v INT)")
    cur.execute("INSERT INTO py_cur VALUES (1),(2),(3)")
    cur.execute("""BEGIN NOT ATOMIC
  DECLARE done INT DEFAULT 0; DECLARE x INT; DECLARE s INT DEFAULT 0;
  DECLARE cr CURSOR FOR SELECT v FROM py_cur;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  OPEN cr;
  l: LOOP FETCH cr INTO x; IF done THEN LEAVE l; END IF; SET s = s + x; END LOOP;
  CLOSE cr;
  SELECT s;
END""")
    row = cur.fetchone()
    while cur.nextset():
        pass
    expect(row[0] == 6, repr(row))
    expect(one(c, "SELECT 8")[0] == 8, "after the compound statement")
    c.close()


def check_errors(d):
    c = d.connect()
    cur = c.cursor()
    expect_error(d, lambda: cur.execute("SELEC 1"), (1064,))
    cur.execute("CREATE OR REPLACE TABLE py_dup (id INT PRIMARY KEY)")
    cur.execute("INSERT INTO py_dup VALUES (1)")
    expect_error(d, lambda: cur.execute("INSERT INTO py_dup VALUES (1)"), (1062,))
    expect_error(d, lambda: cur.execute("SELECT * FROM no_such_table_py"), (1146,))
    expect_error(d, lambda: cur.execute("SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO=1644, MESSAGE_TEXT='custom'"), (1644,))
    expect(one(c, "SELECT 9")[0] == 9, "after errors")
    c.close()


def check_warnings(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("SET sql_mode='ERROR_FOR_DIVISION_BY_ZERO'")
    cur.execute("SELECT 1/0, CAST('12abc' AS INT)")
    cur.fetchall()
    cur.execute("SHOW WARNINGS")
    ws = cur.fetchall()
    expect(len(ws) == 2 and {w[1] for w in ws} == {1365, 1292}, repr(ws))
    c.close()


def check_transactions(d):
    c = d.connect()
    c2 = d.connect()
    cur, cur2 = c.cursor(), c2.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_tx (id INT PRIMARY KEY) ENGINE=InnoDB")
    c.autocommit(False)
    cur.execute("INSERT INTO py_tx VALUES (1)")
    c.rollback()
    cur.execute("INSERT INTO py_tx VALUES (2)")
    cur2.execute("SELECT COUNT(*) FROM py_tx")
    expect(cur2.fetchone()[0] == 0, "uncommitted row visible")
    c.commit()
    c2.commit()
    cur2.execute("SELECT id FROM py_tx")
    expect([r[0] for r in cur2.fetchall()] == [2], "after commit")
    c.autocommit(True)
    c.close()
    c2.close()


def check_session_state(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("SET @v = 'kept', SESSION sql_mode = 'ANSI_QUOTES', SESSION group_concat_max_len = 12345")
    cur.execute("CREATE TEMPORARY TABLE py_tmp (a INT)")
    cur.execute("INSERT INTO py_tmp VALUES (1)")
    for _ in range(3):
        cur.execute('SELECT @v, @@sql_mode, @@group_concat_max_len, (SELECT COUNT(*) FROM py_tmp)')
        row = cur.fetchone()
        expect(row[0] in ("kept", b"kept") and row[1] == "ANSI_QUOTES" and row[2] == 12345 and row[3] == 1, repr(row))
        time.sleep(0.1)
    c.close()


def check_use_otherdb(d):
    c = d.connect()
    c.select_db(OTHER_DB)
    expect(one(c, "SELECT DATABASE()")[0] == OTHER_DB, "after COM_INIT_DB")
    cur = c.cursor()
    cur.execute("USE " + DB)
    expect(one(c, "SELECT DATABASE()")[0] == DB, "after USE")
    c.close()


def check_insert_id_affected(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    n = cur.execute("INSERT INTO py_ai (v) VALUES (1),(2),(3)")
    expect(n == 3 and cur.lastrowid == 1, "rows %r id %r" % (n, cur.lastrowid))
    n = cur.execute("UPDATE py_ai SET v = v + 1 WHERE id > 1")
    expect(n == 2, "updated %r" % n)
    expect(one(c, "SELECT LAST_INSERT_ID()")[0] == 1, "LAST_INSERT_ID")
    c.close()


def check_executemany_batch(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_many (id INT PRIMARY KEY, s VARCHAR(40))")
    rows = [(i, "row %d" % i) for i in range(20000)]
    cur.executemany("INSERT INTO py_many (id, s) VALUES (%s, %s)", rows)
    c.commit()
    expect(one(c, "SELECT COUNT(*), SUM(id) FROM py_many") == (20000, sum(range(20000))), "count")
    c.close()


def check_large_result_unbuffered(d):
    c = d.connect()
    cur = c.cursor(d.mod.cursors.SSCursor)
    cur.execute("SELECT seq, REPEAT('x', 100) FROM seq_1_to_200000")
    n = 0
    for row in cur:
        n += 1
    expect(n == 200000, "rows %d" % n)
    cur.close()
    expect(one(c, "SELECT 10")[0] == 10, "after streaming")
    c.close()


def check_load_data_local(d):
    path = os.path.join(TMP, "py_%s_%d.csv" % (d.name, os.getpid()))
    with open(path, "w") as f:
        for i in range(1000):
            f.write("%d,line %d\n" % (i, i))
    c = d.connect(local_infile=True)
    cur = c.cursor()
    cur.execute("CREATE OR REPLACE TABLE py_load (id INT, s VARCHAR(20))")
    cur.execute("LOAD DATA LOCAL INFILE %s INTO TABLE py_load FIELDS TERMINATED BY ','", (path,))
    expect(one(c, "SELECT COUNT(*), MAX(s) FROM py_load") == (1000, "line 999"), "loaded")
    c.close()
    os.unlink(path)


def check_ping(d):
    c = d.connect()
    c.ping(False) if d.name == "pymysql" else c.ping()
    expect(one(c, "SELECT 11")[0] == 11, "after ping")
    c.close()


def wait_running(conn, sql, limit=10):
    """Waits until another session runs sql (the processlist shows it)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        n = one(conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = %s", (sql,))[0]
        if n:
            return
        time.sleep(0.05)
    raise AssertionError("%r not running after %ds" % (sql, limit))


def kill_query(d, use_connection_id):
    c, k = d.connect(), d.connect()
    cid = one(c, "SELECT CONNECTION_ID()")[0] if use_connection_id else c.thread_id()
    out = {}

    def sleeper():
        try:
            out["row"] = one(c, "SELECT SLEEP(20)")
        except Exception as e:  # noqa
            out["err"] = e
    th = threading.Thread(target=sleeper)
    start = time.time()
    th.start()
    wait_running(k, "SELECT SLEEP(20)")
    k.cursor().execute("KILL QUERY %d" % cid)
    th.join(15)
    expect(not th.is_alive(), "SLEEP not interrupted")
    expect(time.time() - start < 15, "took %.1fs" % (time.time() - start))
    expect(out.get("row") == (1,) or d.errno(out.get("err")) == 1317, "got %r" % out)
    expect(one(c, "SELECT 12")[0] == 12, "connection usable after KILL QUERY")
    c.close()
    k.close()


def check_kill_query(d):
    """KILL QUERY with the handshake's connection id (what drivers' cancel and mysql_kill() use)."""
    kill_query(d, False)


def check_kill_query_connection_id(d):
    """KILL QUERY with the id SELECT CONNECTION_ID() returned."""
    kill_query(d, True)


def check_kill_connection(d):
    c, k = d.connect(), d.connect()
    k.cursor().execute("KILL CONNECTION %d" % c.thread_id())
    time.sleep(0.3)
    expect_error(d, lambda: one(c, "SELECT 1"), (1927, 2006, 2013, 4031))
    k.close()


def check_wait_timeout_close(d):
    """The server closes an idle session after wait_timeout; the client sees it."""
    c = d.connect()
    c.cursor().execute("SET SESSION wait_timeout = 1")
    time.sleep(3)
    # MariaDB resets the socket without a packet: the next write fails
    # (2006); a stream that merely ends would be 2013 at the read.
    expect_error(d, lambda: one(c, "SELECT 1"), (2006, 4031))


def check_change_user(d):
    if not hasattr(d.mod.connections.Connection, "change_user"):
        raise Skip("no change_user in this driver")
    c = d.connect()
    c.cursor().execute("SET @before = 1")
    c.change_user(USER2, PASSWORD2, DB)
    row = one(c, "SELECT CURRENT_USER(), @before, DATABASE()")
    expect(row[0].split("@")[0] == USER2 and row[1] is None and row[2] == DB, repr(row))
    c.close()


def check_change_user_refused(d):
    """A refused COM_CHANGE_USER (1045), then one that succeeds, on the same connection."""
    if not hasattr(d.mod.connections.Connection, "change_user"):
        raise Skip("no change_user in this driver")
    c = d.connect()
    expect_error(d, lambda: c.change_user(USER2, "wrong-" + PASSWORD2, DB), (1045,))
    c.change_user(USER2, PASSWORD2, DB)
    row = one(c, "SELECT CURRENT_USER(), DATABASE()")
    expect(row[0].split("@")[0] == USER2 and row[1] == DB, repr(row))
    c.close()


def check_time_zone(d):
    c = d.connect()
    cur = c.cursor()
    cur.execute("SET time_zone = '+05:30'")
    cur.execute("CREATE OR REPLACE TABLE py_tz (t TIMESTAMP NULL)")
    cur.execute("INSERT INTO py_tz VALUES ('2020-01-01 12:00:00')")
    cur.execute("SET time_zone = '+00:00'")
    expect(one(c, "SELECT t FROM py_tz")[0] == datetime.datetime(2020, 1, 1, 6, 30), "converted")
    cur.execute("SET time_zone = '-02:00'")
    expect(one(c, "SELECT @@time_zone, TIMESTAMPDIFF(HOUR, UTC_TIMESTAMP(), NOW())") == ("-02:00", -2), "tz")
    c.close()


def check_charset_latin1(d):
    c = d.connect(charset="latin1")
    row = one(c, "SELECT @@character_set_client, @@character_set_results, 'é', HEX('é')")
    expect(row[0] == "latin1" and row[1] == "latin1" and row[2] == "é" and row[3] == "E9", repr(row))
    c.set_charset("utf8mb4") if d.name == "pymysql" else c.set_character_set("utf8mb4")
    row = one(c, "SELECT @@character_set_client, HEX('é')")
    expect(row == ("utf8mb4", "C3A9"), repr(row))
    c.close()


def check_autocommit_status(d):
    c = d.connect()
    c.autocommit(False)
    expect(one(c, "SELECT @@autocommit")[0] == 0, "autocommit off")
    c.autocommit(True)
    expect(one(c, "SELECT @@autocommit")[0] == 1, "autocommit on")
    c.close()


def check_locks(d):
    c, c2 = d.connect(), d.connect()
    expect(one(c, "SELECT GET_LOCK('py_lock', 5)")[0] == 1, "GET_LOCK")
    expect(one(c2, "SELECT GET_LOCK('py_lock', 0)")[0] == 0, "lock not held across connections")
    expect(one(c, "SELECT RELEASE_LOCK('py_lock')")[0] == 1, "RELEASE_LOCK")
    c.close()
    c2.close()


CHECKS = [f for n, f in sorted(globals().items()) if n.startswith("check_")]


def main():
    for name in ("pymysql", "mysqldb"):
        try:
            d = Driver(name)
        except ImportError as e:
            for f in CHECKS:
                emit("%s/%s" % (name, f.__name__[6:]), "fail", "import: %s" % e)
            continue
        for f in CHECKS:
            check = "%s/%s" % (name, f.__name__[6:])
            try:
                f(d)
                emit(check, "pass")
            except Skip as e:
                emit(check, "skip", str(e))
            except Exception as e:  # noqa: every failure is a result
                tb = traceback.extract_tb(e.__traceback__)
                where = "line %d" % tb[-1].lineno if tb else ""
                emit(check, "fail", "%s: %s: %s" % (where, type(e).__name__, e))


if __name__ == "__main__":
    main()
