#!/usr/bin/env node
// Switchyard client checks for the mysql2 and mariadb Node.js connectors.
//
// Run by tools/compat direct and through the proxy: where to connect comes
// from COMPAT_* variables, and each check prints one JSON object,
// {"check": "mysql2/name", "status": "pass"|"fail"|"skip", "detail": "..."}.
// Every check opens its own connections, so a failure does not leak into the
// next one. Versions are pinned in package-lock.json (mysql2 3.24.6,
// mariadb 3.5.4); tools/compat installs them with npm ci.
'use strict';
const fs = require('fs');
const path = require('path');

const E = process.env;
const HOST = E.COMPAT_HOST, PORT = Number(E.COMPAT_PORT);
const USER = E.COMPAT_USER, PASSWORD = E.COMPAT_PASSWORD;
const USER2 = E.COMPAT_USER2, PASSWORD2 = E.COMPAT_PASSWORD2;
const DB = E.COMPAT_DB, OTHER_DB = E.COMPAT_OTHER_DB;
const TMP = E.COMPAT_TMP || '/tmp';

class Skip extends Error {}

function emit(check, status, detail) {
  process.stdout.write(JSON.stringify({ check, status, detail: detail || '' }) + '\n');
}

function expect(cond, msg) {
  if (!cond) throw new Error('assertion: ' + msg);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// norm turns a value either driver returns into a comparable string.
function norm(v) {
  if (v === null || v === undefined) return null;
  if (Buffer.isBuffer(v)) return 'hex:' + v.toString('hex');
  if (typeof v === 'bigint' || typeof v === 'number') return String(v);
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

// Driver adapters: what differs between mysql2 and mariadb.
const drivers = {
  mysql2: {
    lib: () => require('mysql2/promise'),
    async connect(o = {}) {
      const opts = {
        host: HOST, port: PORT, user: o.user || USER, password: o.password !== undefined ? o.password : PASSWORD,
        database: o.database !== undefined ? o.database : DB, connectTimeout: 10000,
        multipleStatements: !!o.multi, dateStrings: true, supportBigNumbers: true, bigNumberStrings: true,
      };
      if (o.charset) opts.charset = o.charset;
      if (o.infile) opts.infileStreamFactory = (p) => fs.createReadStream(p);
      return this.lib().createConnection(opts);
    },
    async query(c, sql, params) { const [rows] = await c.query({ sql, rowsAsArray: true }, params); return rows; },
    async execute(c, sql, params) { const [rows] = await c.execute({ sql, rowsAsArray: true }, params); return rows; },
    async raw(c, sql, params) { const [res] = await c.query(sql, params); return res; },
    threadId: (c) => c.threadId,
    async batch(c, sql, rows) { throw new Skip('no batch() in mysql2'); },
    currentDb: () => { throw new Skip('mysql2 does not track the current database'); },
  },
  mariadb: {
    lib: () => require('mariadb'),
    async connect(o = {}) {
      const opts = {
        host: HOST, port: PORT, user: o.user || USER, password: o.password !== undefined ? o.password : PASSWORD,
        database: o.database !== undefined ? o.database : DB, connectTimeout: 10000,
        multipleStatements: !!o.multi, dateStrings: true, bigIntAsNumber: false, decimalAsNumber: false,
        permitLocalInfile: !!o.infile,
      };
      if (o.charset) opts.charset = o.charset;
      return this.lib().createConnection(opts);
    },
    async query(c, sql, params) { return c.query({ sql, rowsAsArray: true }, params); },
    async execute(c, sql, params) { return c.execute({ sql, rowsAsArray: true }, params); },
    async raw(c, sql, params) { return c.query(sql, params); },
    threadId: (c) => c.threadId,
    async batch(c, sql, rows) { return c.batch(sql, rows); },
    currentDb: (c) => c.info.database,
  },
};

// waitRunning waits until another session runs sql (the processlist shows it).
async function waitRunning(d, conn, sql, limitMs = 10000) {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    const rows = await d.query(conn, 'SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = ?', [sql]);
    if (norm(rows[0][0]) !== '0') return;
    await sleep(50);
  }
  throw new Error(`${sql} not running after ${limitMs} ms`);
}

async function withConn(d, o, fn) {
  const c = await d.connect(o);
  try { return await fn(c); } finally { try { await c.end(); } catch (e) { c.destroy && c.destroy(); } }
}

async function expectError(fn, codes) {
  try { await fn(); } catch (e) {
    expect(codes.includes(e.errno), `error ${e.errno} ${e.code}: ${e.message}; want one of ${codes}`);
    return e;
  }
  throw new Error('no error, want one of ' + codes);
}

// Value checks shared by the text protocol (query) and the binary one (execute).
const valueSets = {
  integer_types: {
    sql: 'SELECT CAST(-128 AS SIGNED), 255, -32768, 16777215, -2147483648, 4294967295, -9223372036854775808, ' +
      'CAST(18446744073709551615 AS UNSIGNED), CAST(? AS SIGNED)',
    params: [123],
    want: ['-128', '255', '-32768', '16777215', '-2147483648', '4294967295', '-9223372036854775808', '18446744073709551615', '123'],
  },
  decimal_float: {
    sql: 'SELECT CAST(12345.6789 AS DECIMAL(10,4)), CAST(2.25 AS DOUBLE), CAST(? AS DECIMAL(6,2))',
    params: ['12.5'],
    want: ['12345.6789', '2.25', '12.50'],
  },
  strings_utf8mb4: {
    sql: "SELECT CAST('abc' AS CHAR(10)), ?, REPEAT(?, 300)",
    params: ['héllo \u{1F600} 中文', 'ü'],
    want: ['abc', 'héllo \u{1F600} 中文', 'ü'.repeat(300)],
  },
  temporal_types: {
    sql: "SELECT DATE('1999-12-31'), CAST('-838:59:59' AS TIME), CAST('2024-02-29 23:59:58.123456' AS DATETIME(6)), CAST(? AS DATETIME)",
    params: ['2001-02-03 04:05:06'],
    want: ['1999-12-31', '-838:59:59', '2024-02-29 23:59:58.123456', '2001-02-03 04:05:06'],
  },
  nulls: {
    sql: 'SELECT NULL, CAST(NULL AS SIGNED), CAST(NULL AS DATETIME), CAST(NULL AS BINARY), CAST(NULL AS DECIMAL(5,2)), ?',
    params: [null],
    want: [null, null, null, null, null, null],
  },
  binary: {
    sql: 'SELECT UNHEX(\'0001FF\'), ?',
    params: [Buffer.from([0, 1, 2, 255])],
    want: ['hex:0001ff', 'hex:000102ff'],
  },
};

function valueCheck(kind, set) {
  return async (d) => withConn(d, {}, async (c) => {
    const rows = await d[kind](c, set.sql, set.params);
    const got = rows[0].map(norm);
    expect(JSON.stringify(got) === JSON.stringify(set.want), `got ${JSON.stringify(got).slice(0, 300)}`);
  });
}

const checks = {
  async connect(d) {
    await withConn(d, {}, async (c) => {
      const rows = await d.query(c, 'SELECT 1, VERSION()');
      expect(norm(rows[0][0]) === '1' && /MariaDB/.test(rows[0][1]), JSON.stringify(rows[0]));
    });
  },
  async wrong_password(d) {
    await expectError(() => d.connect({ password: 'wrong-' + PASSWORD }).then((c) => c.end()), [1045]);
  },
  async unknown_database(d) {
    await expectError(() => d.connect({ database: 'compat_no_such_db' }).then((c) => c.end()), [1044, 1049]);
  },
  async table_types_text_and_prepared(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE TABLE js_types (a TINYINT, b BIGINT UNSIGNED, c DECIMAL(8,3), d DOUBLE, ' +
        "e VARCHAR(20), f TEXT, g BLOB, h DATE, i DATETIME(3), j TIMESTAMP(6) NULL, k YEAR, l ENUM('x','y'), m SET('p','q'), n BIT(8))");
      await d.execute(c, "INSERT INTO js_types VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,b'10100101')",
        [-5, '18446744073709551615', '12345.678', 1.5, 'vé', 't'.repeat(1000), Buffer.from('blob'), '2020-01-02',
          '2020-01-02 03:04:05.678', '2021-01-01 00:00:00.000001', 2024, 'y', 'p,q']);
      const want = ['-5', '18446744073709551615', '12345.678', '1.5', 'vé', 't'.repeat(1000), 'hex:626c6f62', '2020-01-02',
        '2020-01-02 03:04:05.678', '2021-01-01 00:00:00.000001', '2024', 'y', 'p,q', 'hex:a5'];
      for (const kind of ['query', 'execute']) {
        const rows = await d[kind](c, 'SELECT * FROM js_types');
        // mariadb returns a SET column as an array of its members.
        const got = rows[0].map((v) => (Array.isArray(v) ? v.join(',') : norm(v)));
        const bad = want.map((w, i) => (got[i] === w ? null : `#${i} ${JSON.stringify(got[i]).slice(0, 40)} want ${JSON.stringify(w).slice(0, 40)}`)).filter((x) => x);
        expect(bad.length === 0, `${kind}: ${bad.join('; ')}`);
      }
    });
  },
  async json(d) {
    await withConn(d, {}, async (c) => {
      const doc = { a: [1, 2, { b: 'ü' }], n: null };
      await d.raw(c, 'CREATE OR REPLACE TABLE js_json (j JSON)');
      await d.execute(c, 'INSERT INTO js_json VALUES (?)', [JSON.stringify(doc)]);
      for (const kind of ['query', 'execute']) {
        const rows = await d[kind](c, "SELECT j, JSON_VALUE(j, '$.a[2].b') FROM js_json");
        const j = typeof rows[0][0] === 'string' ? JSON.parse(rows[0][0]) : rows[0][0];
        expect(JSON.stringify(j) === JSON.stringify(doc) && rows[0][1] === 'ü', `${kind}: ${JSON.stringify(rows[0])}`);
      }
    });
  },
  async geometry(d) {
    await withConn(d, {}, async (c) => {
      for (const kind of ['query', 'execute']) {
        const rows = await d[kind](c, "SELECT ST_AsText(ST_GeomFromText('POINT(1 2)')), ST_GeomFromText('POINT(1 2)')");
        const g = rows[0][1];
        const xy = g && (g.coordinates ? g.coordinates : [g.x, g.y]);
        expect(rows[0][0] === 'POINT(1 2)' && xy && xy[0] === 1 && xy[1] === 2, `${kind}: ${JSON.stringify(rows[0])}`);
      }
    });
  },
  async large_row_16mib(d) {
    // 17 MiB each way: the packets split at 16 MiB - 1.
    await withConn(d, {}, async (c) => {
      const big = Buffer.alloc(17 * 1024 * 1024 + 3, 'abcdefgh');
      await d.raw(c, 'CREATE OR REPLACE TABLE js_big (id INT PRIMARY KEY, b LONGBLOB)');
      await d.execute(c, 'INSERT INTO js_big VALUES (1, ?)', [big]);
      for (const kind of ['query', 'execute']) {
        const rows = await d[kind](c, 'SELECT b, LENGTH(b) FROM js_big WHERE id = 1');
        expect(norm(rows[0][1]) === String(big.length) && big.equals(rows[0][0]), `${kind}: ${rows[0][0] && rows[0][0].length} bytes`);
      }
      const rows = await d.query(c, 'SELECT 42');
      expect(norm(rows[0][0]) === '42', 'after the large row');
    });
  },
  async multi_statements(d) {
    await withConn(d, { multi: true }, async (c) => {
      const res = await d.raw(c, "SELECT 1 AS a; SELECT 2 AS b, 3 AS c; DO 0; SELECT 'x' AS d");
      const sets = res.filter((r) => Array.isArray(r)).map((r) => JSON.stringify(r.map((row) => Object.values(row).map(norm))));
      expect(JSON.stringify(sets) === JSON.stringify(['[["1"]]', '[["2","3"]]', '[["x"]]']), JSON.stringify(sets));
      const rows = await d.query(c, 'SELECT 5');
      expect(norm(rows[0][0]) === '5', 'after multi');
    });
  },
  async multi_statement_error(d) {
    await withConn(d, { multi: true }, async (c) => {
      await expectError(() => d.raw(c, 'SELECT 1; SELECT * FROM no_such_table_js; SELECT 3'), [1146]);
      const rows = await d.query(c, 'SELECT 6');
      expect(norm(rows[0][0]) === '6', 'after the error');
    });
  },
  async procedure_out_params_prepared(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE PROCEDURE js_proc(IN a INT, OUT b INT, INOUT s VARCHAR(20)) BEGIN SET b = a * 2; SET s = CONCAT(s, \'!\'); END');
      await d.raw(c, "SET @s = 'hi'");
      await d.raw(c, 'CALL js_proc(21, @b, @s)');
      const rows = await d.query(c, 'SELECT @b, @s');
      expect(norm(rows[0][0]) === '42' && rows[0][1] === 'hi!', 'text CALL: ' + JSON.stringify(rows[0].map(norm)));
      // CALL as a prepared statement, OUT parameters into user variables.
      await d.execute(c, 'CALL js_proc(?, @b, @s)', [5]);
      const again = await d.query(c, 'SELECT @b, @s');
      expect(norm(again[0][0]) === '10' && again[0][1] === 'hi!!', 'prepared CALL: ' + JSON.stringify(again[0].map(norm)));
      if (d.name === 'mariadb') {
        // OUT parameters as placeholders: they come back as a result set
        // flagged SERVER_PS_OUT_PARAMS (mysql2 does not read it).
        const res = await c.execute('CALL js_proc(?, ?, ?)', [5, null, 'yo']);
        const flat = JSON.stringify(res, (k, v) => (typeof v === 'bigint' ? String(v) : v));
        expect(/10/.test(flat) && /yo!/.test(flat), 'prepared CALL with OUT placeholders: ' + flat.slice(0, 300));
      }
      const after = await d.query(c, 'SELECT 7');
      expect(norm(after[0][0]) === '7', 'after CALL');
    });
  },
  async procedure_result_sets(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE PROCEDURE js_sets() BEGIN SELECT 1 AS a; SELECT 2 AS b, 3 AS c; END');
      for (const kind of ['query', 'execute']) {
        const res = kind === 'query' ? await d.raw(c, 'CALL js_sets()') : (d === drivers.mysql2 ? (await c.execute('CALL js_sets()'))[0] : await c.execute('CALL js_sets()'));
        const sets = res.filter((r) => Array.isArray(r)).map((r) => r.map((row) => Object.values(row).map(norm)));
        expect(JSON.stringify(sets) === '[[["1"]],[["2","3"]]]', `${kind}: ${JSON.stringify(sets)}`);
      }
      const rows = await d.query(c, 'SELECT 8');
      expect(norm(rows[0][0]) === '8', 'after CALL');
    });
  },
  async cursor_not_atomic(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE TABLE js_cur (v INT)');
      await d.raw(c, 'INSERT INTO js_cur VALUES (1),(2),(3)');
      const res = await d.raw(c, `BEGIN NOT ATOMIC
  DECLARE done INT DEFAULT 0; DECLARE x INT; DECLARE s INT DEFAULT 0;
  DECLARE cr CURSOR FOR SELECT v FROM js_cur;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  OPEN cr;
  l: LOOP FETCH cr INTO x; IF done THEN LEAVE l; END IF; SET s = s + x; END LOOP;
  CLOSE cr;
  SELECT s;
END`);
      const flat = JSON.stringify(res, (k, v) => (typeof v === 'bigint' ? String(v) : v));
      expect(/"s":"?6"?/.test(flat), flat.slice(0, 200));
      const rows = await d.query(c, 'SELECT 9');
      expect(norm(rows[0][0]) === '9', 'after the compound statement');
    });
  },
  async errors(d) {
    await withConn(d, {}, async (c) => {
      await expectError(() => d.query(c, 'SELEC 1'), [1064]);
      await expectError(() => d.execute(c, 'SELEC ?', [1]), [1064]);
      await d.raw(c, 'CREATE OR REPLACE TABLE js_dup (id INT PRIMARY KEY)');
      await d.raw(c, 'INSERT INTO js_dup VALUES (1)');
      const e = await expectError(() => d.execute(c, 'INSERT INTO js_dup VALUES (?)', [1]), [1062]);
      expect(e.sqlState === '23000', 'sqlState ' + e.sqlState);
      await expectError(() => d.query(c, "SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO=1644, MESSAGE_TEXT='custom'"), [1644]);
      const rows = await d.query(c, 'SELECT 10');
      expect(norm(rows[0][0]) === '10', 'after errors');
    });
  },
  async warnings(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, "SET sql_mode = 'ERROR_FOR_DIVISION_BY_ZERO'");
      await d.raw(c, 'CREATE OR REPLACE TABLE js_warn (a TINYINT)');
      const res = await d.raw(c, 'INSERT IGNORE INTO js_warn VALUES (1000), (-1000)');
      expect(res.warningStatus === 2, 'warningStatus ' + res.warningStatus);
      const ws = await d.query(c, 'SHOW WARNINGS');
      expect(ws.length === 2 && norm(ws[0][1]) === '1264', JSON.stringify(ws));
    });
  },
  async transactions(d) {
    await withConn(d, {}, async (c) => withConn(d, {}, async (c2) => {
      await d.raw(c, 'CREATE OR REPLACE TABLE js_tx (id INT PRIMARY KEY) ENGINE=InnoDB');
      await c.beginTransaction();
      await d.execute(c, 'INSERT INTO js_tx VALUES (?)', [1]);
      await c.rollback();
      await c.beginTransaction();
      await d.execute(c, 'INSERT INTO js_tx VALUES (?)', [2]);
      let rows = await d.query(c2, 'SELECT COUNT(*) FROM js_tx');
      expect(norm(rows[0][0]) === '0', 'uncommitted row visible');
      await c.commit();
      rows = await d.query(c2, 'SELECT id FROM js_tx');
      expect(JSON.stringify(rows.map((r) => norm(r[0]))) === '["2"]', 'after commit ' + JSON.stringify(rows));
    }));
  },
  async session_state(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, "SET @v = 'kept', SESSION sql_mode = 'ANSI_QUOTES', SESSION group_concat_max_len = 12345");
      await d.raw(c, 'CREATE TEMPORARY TABLE js_tmp (a INT)');
      await d.raw(c, 'INSERT INTO js_tmp VALUES (1)');
      for (let i = 0; i < 3; i++) {
        const rows = await d.query(c, 'SELECT @v, @@sql_mode, @@group_concat_max_len, (SELECT COUNT(*) FROM js_tmp)');
        expect(JSON.stringify(rows[0].map(norm)) === '["kept","ANSI_QUOTES","12345","1"]', JSON.stringify(rows[0].map(norm)));
        await sleep(100);
      }
    });
  },
  async use_otherdb(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'USE ' + OTHER_DB);
      const rows = await d.query(c, 'SELECT DATABASE()');
      expect(rows[0][0] === OTHER_DB, 'DATABASE() ' + rows[0][0]);
    });
  },
  async use_otherdb_info_database(d) {
    // mariadb reads the schema change from the OK packet's session-state
    // information (CLIENT_SESSION_TRACK) into conn.info.database.
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'USE ' + OTHER_DB);
      expect(d.currentDb(c) === OTHER_DB, 'info.database ' + d.currentDb(c));
    });
  },
  async change_user(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'SET @before = 1');
      await c.changeUser({ user: USER2, password: PASSWORD2, database: DB });
      const rows = await d.query(c, 'SELECT CURRENT_USER(), @before, DATABASE()');
      expect(rows[0][0].split('@')[0] === USER2 && rows[0][1] === null && rows[0][2] === DB, JSON.stringify(rows[0]));
      await c.changeUser({ user: USER, password: PASSWORD, database: DB });
      const back = await d.query(c, 'SELECT CURRENT_USER()');
      expect(back[0][0].split('@')[0] === USER, JSON.stringify(back[0]));
    });
  },
  async reset_connection(d) {
    await withConn(d, {}, async (c) => {
      if (typeof c.reset !== 'function') throw new Skip('no reset()');
      await d.raw(c, "SET @v = 'x'");
      await d.raw(c, 'CREATE TEMPORARY TABLE js_reset_tmp (a INT)');
      await c.reset();
      const rows = await d.query(c, "SELECT @v, (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'js_reset_tmp' AND TABLE_TYPE LIKE '%TEMPORARY%')");
      expect(rows[0][0] === null && norm(rows[0][1]) === '0', JSON.stringify(rows[0].map(norm)));
      await expectError(() => d.query(c, 'SELECT * FROM js_reset_tmp'), [1146]);
    });
  },
  async prepared_reuse(d) {
    await withConn(d, {}, async (c) => {
      const stmt = await c.prepare('SELECT ? + 1, CONCAT(?, "-")');
      for (let i = 0; i < 50; i++) {
        const res = await stmt.execute([i, 's' + i]);
        const rows = Array.isArray(res[0]) && !Array.isArray(res[0][0]) && res.length === 2 && res[1] && res[1][0] && res[1][0].name !== undefined ? res[0] : res;
        const v = Object.values(rows[0]).map(norm);
        expect(v[0] === String(i + 1) && v[1] === 's' + i + '-', JSON.stringify(v));
      }
      await stmt.close();
      const rows = await d.query(c, 'SELECT 11');
      expect(norm(rows[0][0]) === '11', 'after close');
    });
  },
  async load_data_local(d) {
    const file = path.join(TMP, `js_${d.name}_${process.pid}.csv`);
    fs.writeFileSync(file, Array.from({ length: 1000 }, (_, i) => `${i},line ${i}\n`).join(''));
    try {
      await withConn(d, { infile: true }, async (c) => {
        await d.raw(c, 'CREATE OR REPLACE TABLE js_load (id INT, s VARCHAR(20))');
        await d.raw(c, `LOAD DATA LOCAL INFILE '${file}' INTO TABLE js_load FIELDS TERMINATED BY ','`);
        const rows = await d.query(c, 'SELECT COUNT(*), MAX(id) FROM js_load');
        expect(JSON.stringify(rows[0].map(norm)) === '["1000","999"]', JSON.stringify(rows[0].map(norm)));
      });
    } finally { fs.unlinkSync(file); }
  },
  async ping(d) {
    await withConn(d, {}, async (c) => {
      await c.ping();
      const rows = await d.query(c, 'SELECT 12');
      expect(norm(rows[0][0]) === '12', 'after ping');
    });
  },
  async kill_query(d) {
    // KILL QUERY with the handshake's connection id (what the connectors'
    // query timeouts and mysql_kill() use).
    await withConn(d, {}, async (c) => withConn(d, {}, async (k) => {
      const start = Date.now();
      const p = d.query(c, 'SELECT SLEEP(20)').then((r) => ({ rows: r }), (e) => ({ err: e }));
      await waitRunning(d, k, 'SELECT SLEEP(20)');
      await d.raw(k, 'KILL QUERY ' + d.threadId(c));
      const out = await p;
      expect(Date.now() - start < 15000, 'took ' + (Date.now() - start) + ' ms');
      expect((out.rows && norm(out.rows[0][0]) === '1') || (out.err && out.err.errno === 1317), 'got ' + (out.err ? out.err.message : JSON.stringify(out.rows)));
      const rows = await d.query(c, 'SELECT 13');
      expect(norm(rows[0][0]) === '13', 'after KILL QUERY');
    }));
  },
  async kill_connection(d) {
    await withConn(d, {}, async (k) => {
      const c = await d.connect();
      c.on && c.on('error', () => {});
      await d.raw(k, 'KILL CONNECTION ' + d.threadId(c));
      await sleep(300);
      await expectError(() => d.query(c, 'SELECT 1'), [1927, 2006, 2013, 4031, 45009, 45013, 45025, undefined]);
      c.destroy && c.destroy();
    });
  },
  async wait_timeout_close(d) {
    // The server closes an idle session after wait_timeout; the client sees it.
    const c = await d.connect();
    c.on && c.on('error', () => {});
    await d.raw(c, 'SET SESSION wait_timeout = 1');
    await sleep(3000);
    let failed = false;
    try { await d.query(c, 'SELECT 1'); } catch (e) { failed = true; }
    c.destroy && c.destroy();
    expect(failed, 'the connection still answers after wait_timeout');
  },
  async batch_insert(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE TABLE js_batch (id INT PRIMARY KEY, s VARCHAR(40), b BLOB)');
      const rows = Array.from({ length: 20000 }, (_, i) => [i, 'row ' + i, i % 100 === 0 ? null : Buffer.from([i & 255])]);
      await d.batch(c, 'INSERT INTO js_batch VALUES (?, ?, ?)', rows);
      const got = await d.query(c, 'SELECT COUNT(*), SUM(id), COUNT(b) FROM js_batch');
      expect(JSON.stringify(got[0].map(norm)) === JSON.stringify(['20000', String(20000 * 19999 / 2), '19800']), JSON.stringify(got[0].map(norm)));
    });
  },
  async bulk_values_insert(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE TABLE js_bulk (id INT PRIMARY KEY, s VARCHAR(40))');
      const rows = Array.from({ length: 5000 }, (_, i) => [i, 'row ' + i]);
      const values = rows.map(() => '(?, ?)').join(',');
      await d.raw(c, 'INSERT INTO js_bulk VALUES ' + values, rows.flat());
      const got = await d.query(c, 'SELECT COUNT(*) FROM js_bulk');
      expect(norm(got[0][0]) === '5000', norm(got[0][0]));
    });
  },
  async large_result(d) {
    await withConn(d, {}, async (c) => {
      const rows = await d.query(c, "SELECT seq, REPEAT('x', 100) FROM seq_1_to_100000");
      expect(rows.length === 100000 && norm(rows[99999][0]) === '100000', 'rows ' + rows.length);
    });
  },
  async time_zone(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, "SET time_zone = '+05:30'");
      await d.raw(c, 'CREATE OR REPLACE TABLE js_tz (t TIMESTAMP NULL)');
      await d.raw(c, "INSERT INTO js_tz VALUES ('2020-01-01 12:00:00')");
      await d.raw(c, "SET time_zone = '+00:00'");
      for (const kind of ['query', 'execute']) {
        const rows = await d[kind](c, 'SELECT t FROM js_tz');
        expect(norm(rows[0][0]) === '2020-01-01 06:30:00', `${kind}: ${norm(rows[0][0])}`);
      }
      const rows = await d.query(c, "SELECT @@time_zone");
      expect(rows[0][0] === '+00:00', rows[0][0]);
    });
  },
  async charset_latin1(d) {
    await withConn(d, { charset: 'latin1' }, async (c) => {
      const rows = await d.query(c, "SELECT @@character_set_client, @@character_set_results, 'é', HEX('é')");
      expect(JSON.stringify(rows[0]) === '["latin1","latin1","é","E9"]', JSON.stringify(rows[0]));
      await d.raw(c, 'SET NAMES utf8mb4');
      const r2 = await d.query(c, "SELECT @@character_set_client, HEX('é')");
      expect(JSON.stringify(r2[0]) === '["utf8mb4","C3A9"]', JSON.stringify(r2[0]));
    });
  },
  async locks(d) {
    await withConn(d, {}, async (c) => withConn(d, {}, async (c2) => {
      let r = await d.query(c, "SELECT GET_LOCK('js_lock', 5)");
      expect(norm(r[0][0]) === '1', 'GET_LOCK');
      r = await d.query(c2, "SELECT GET_LOCK('js_lock', 0)");
      expect(norm(r[0][0]) === '0', 'lock not held across connections');
      r = await d.query(c, "SELECT RELEASE_LOCK('js_lock')");
      expect(norm(r[0][0]) === '1', 'RELEASE_LOCK');
    }));
  },
  async insert_id_affected(d) {
    await withConn(d, {}, async (c) => {
      await d.raw(c, 'CREATE OR REPLACE TABLE js_ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)');
      const res = await d.raw(c, 'INSERT INTO js_ai (v) VALUES (1),(2),(3)');
      expect(res.affectedRows === 3 && norm(res.insertId) === '1', JSON.stringify(res, (k, v) => (typeof v === 'bigint' ? String(v) : v)));
      const up = await d.raw(c, 'UPDATE js_ai SET v = v + 1 WHERE id > 1');
      expect(up.affectedRows === 2, 'updated ' + up.affectedRows);
    });
  },
};
for (const [name, set] of Object.entries(valueSets)) {
  checks['text_' + name] = valueCheck('query', set);
  checks['prepared_' + name] = valueCheck('execute', set);
}

async function main() {
  for (const name of ['mysql2', 'mariadb']) {
    const d = drivers[name];
    d.name = name;
    for (const check of Object.keys(checks).sort()) {
      const full = `${name}/${check}`;
      try {
        await Promise.race([checks[check](d), sleep(60000).then(() => { throw new Error('no answer within 60 s'); })]);
        emit(full, 'pass');
      } catch (e) {
        if (e instanceof Skip) emit(full, 'skip', e.message);
        else emit(full, 'fail', `${e.errno ? e.errno + ' ' : ''}${e.message}`.slice(0, 500));
      }
    }
  }
  process.exit(0);
}
process.on('unhandledRejection', () => {});
main();
