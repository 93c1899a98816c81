// Runs mariadb-connector-nodejs batch() of ROWS rows against one address
// and prints one JSON line: the time the batch took, the type names the
// connector reads from the extended column metadata, and what a compressed
// connection reports.
// Usage: node batch.js host port user password database rows
'use strict';
const mariadb = require('mariadb');

async function main() {
  const [host, port, user, password, database, rowsArg] = process.argv.slice(2);
  const rows = parseInt(rowsArg, 10);
  const conn = await mariadb.createConnection({ host, port: parseInt(port, 10), user, password, database });
  try {
    const table = 'nb_' + Date.now() + '_' + process.pid;
    await conn.query(`CREATE TABLE ${table} (id INT PRIMARY KEY, s VARCHAR(40), j JSON, g POINT)`);
    const values = [];
    for (let i = 0; i < rows; i++) values.push([i, 'row-' + i]);
    const start = process.hrtime.bigint();
    const res = await conn.batch(`INSERT INTO ${table} (id, s) VALUES (?, ?)`, values);
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    const affected = Array.isArray(res) ? res.reduce((n, r) => n + r.affectedRows, 0) : res.affectedRows;
    await conn.query(`UPDATE ${table} SET j = '{"k": 1}', g = POINT(1, 2) WHERE id = 0`);
    const sel = await conn.query(`SELECT j, g FROM ${table} WHERE id = 0`);
    const types = sel.meta.map((c) => ({ name: c.name(), typeName: c.type, json: c.isDataTypeFormatJson(), dataTypeName: c.dataTypeName || '' }));
    const [{ n }] = await conn.query(`SELECT COUNT(*) AS n FROM ${table}`);
    await conn.query(`DROP TABLE ${table}`);
    // A compressed connection: the status it reports, and a prepared
    // statement's rows over it.
    const zc = await mariadb.createConnection({ host, port: parseInt(port, 10), user, password, database, compress: true });
    let compression, zrows;
    try {
      compression = (await zc.query("SHOW STATUS LIKE 'Compression'"))[0].Value;
      zrows = (await zc.execute('SELECT seq, REPEAT(?, 200) AS pad FROM seq_1_to_3000', ['z'])).length;
    } finally {
      await zc.end();
    }
    console.log(JSON.stringify({ ms, affected, count: Number(n), types, jsonValue: sel[0].j, compression, zrows }));
  } finally {
    await conn.end();
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
