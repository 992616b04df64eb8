// Reproducer: with @duckdb/node-api 1.5.6-r.1, closing a file database on which streamhouse was
// LOADed and at once creating a new instance on the same file (DuckDBInstance.create does not use
// the instance cache, like the CLI's `.open` or the C API's duckdb_open) now and then
//   - fails: IO Error: Cannot open file "<db>.wal": No such file or directory, or
//   - opens a database that looks EMPTY; one write to it and its checkpoint then replace the
//     file: every committed table (src, fct_orders, mart_daily, ...) is lost.
// The extension's own connection keeps the old instance open for a few ms after the close, so
// two instances of one file overlap in the process. With `noload` (the same statements without
// the extension) neither ever happens.
// Usage (from test/node, after `make release node-deps`): node repro_reopen.mjs [load|noload] [RUNS=300]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

const [mode = 'load', runs = '300'] = process.argv.slice(2);
const ext = resolve(import.meta.dirname, '../../build/release/streamhouse.duckdb_extension');
const db = join(mkdtempSync(join(tmpdir(), 'repro-')), 'reopen.duckdb');
const cfg = { allow_unsigned_extensions: 'true' };
const tables = async (con) =>
  (await con.runAndReadAll('SELECT table_name FROM duckdb_tables() ORDER BY 1')).getRowsJS().map((r) => r[0]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let ioErrors = 0;
let lost = 0;
for (let run = 1; run <= Number(runs); run++) {
  rmSync(db, { force: true });
  rmSync(db + '.wal', { force: true });
  let inst = await DuckDBInstance.create(db, cfg);
  let con = await inst.connect();
  if (mode === 'load') await con.run(`LOAD '${ext}'`);
  await con.run("CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, " +
    "DATE '2024-01-01' + CAST(i % 5 AS INTEGER) AS order_day, i AS revenue FROM range(2000) t(i)");
  await con.run(mode === 'load' ? "SELECT * FROM serving_build('src')" : 'CREATE TABLE fct_orders AS SELECT * FROM src');
  con.closeSync();
  inst.closeSync();
  let seen;
  try {
    inst = await DuckDBInstance.create(db, cfg);  // at once
    con = await inst.connect();
    seen = await tables(con);
  } catch (e) {
    ioErrors++;
    console.log(`run ${run}: ${e.message}`);
    await sleep(50);
    continue;
  }
  if (!seen.includes('fct_orders')) {
    lost++;
    console.log(`run ${run}: the reopened database holds only [${seen}]; writing one table to it`);
    await con.run('CREATE TABLE written_after_reopen AS SELECT 1 AS x');
    con.closeSync();
    inst.closeSync();
    await sleep(300);
    inst = await DuckDBInstance.create(db, cfg);
    con = await inst.connect();
    console.log(`   a fresh open afterwards finds: [${await tables(con)}]`);
  }
  con.closeSync();
  inst.closeSync();
  await sleep(30);
}
console.log(`${runs} runs (${mode}): ${ioErrors} failed to open, ${lost} opened a database without the committed tables`);
