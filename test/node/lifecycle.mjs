// One step of a lifecycle scenario through @duckdb/node-api (DuckDB 1.5.6; DuckDB 1.4.5 when
// DUCKDB_NODE_API=duckdb-node-api-1.4, the alias in package.json), run in a fresh `node` process by
// test/python/host/test_lifecycle_matrix.py; the same steps as test/python/support/matrix_child.py.
// Usage: node lifecycle.mjs STEP EXT DB [ARGS...]
// Prints one line `RESULT <json>`; exits 0 unless something unexpected happens.
import { existsSync } from 'node:fs';
const { DuckDBInstance, version } = await import(process.env.DUCKDB_NODE_API || '@duckdb/node-api');

const CFG = { allow_unsigned_extensions: 'true' };
const COLUMNS = "{'order_id': 'BIGINT', 'company': 'VARCHAR', 'order_day': 'DATE', 'revenue': 'BIGINT'}";
const DASH = 'SELECT CAST(order_day AS VARCHAR), CAST(revenue AS VARCHAR) FROM serving_dashboard($1)';
const SUMMARY = 'SELECT fct_rows, mart_rows, companies, days, CAST(total_revenue AS VARCHAR) FROM serving_build($1)';
const bigSource = (n) =>
  "CREATE OR REPLACE TABLE big AS SELECT i AS order_id, 'b' || (i % 97) AS company, " +
  "DATE '2024-01-01' + CAST(i % 365 AS INTEGER) AS order_day, (i % 1000) - 300 AS revenue " +
  `FROM range(${n}) t(i)`;

const lit = (s) => "'" + s.replaceAll("'", "''") + "'";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const plain = (v) => (typeof v === 'bigint' ? (Number.isSafeInteger(Number(v)) ? Number(v) : String(v)) : v);

const json = (v) => JSON.stringify(v, (_k, x) => plain(x));

function done(obj) {
  process.stdout.write('RESULT ' + json({ version: version().replace(/^v/, ''), ...obj }) + '\n');
}

async function open(db) {
  const instance = await DuckDBInstance.create(db, CFG);
  return { instance, con: await instance.connect() };
}

const rows = async (con, sql, params) => (await con.runAndReadAll(sql, params)).getRowsJS();
const one = async (con, sql, params) => (await rows(con, sql, params))[0];
const load = (con, ext) => con.run('LOAD ' + lit(ext));
const loadSrc = (con, csv) => con.run('CREATE OR REPLACE TABLE src AS SELECT * FROM read_csv(' + lit(csv) +
  `, header = true, quote = '"', escape = '"', columns = ${COLUMNS})`);
const ourFunctions = async (con) => (await rows(con,
  "SELECT DISTINCT function_name FROM duckdb_functions() " +
  "WHERE function_name LIKE 'serving\\_%' ESCAPE '\\' OR function_name LIKE 'paimon\\_%' ESCAPE '\\' " +
  "OR function_name LIKE 'fluss\\_%' ESCAPE '\\' ORDER BY 1"))
  .map((r) => r[0]);
const companiesOf = async (con, table) =>
  (await rows(con, `SELECT DISTINCT company FROM ${table} ORDER BY 1`)).map((r) => r[0]);

async function dashboards(con, companies) {
  const out = {};
  for (const co of [...companies, 'nobody']) out[co] = await rows(con, DASH, [co]);
  return out;
}

async function servingState(con) {
  return {
    fct: await one(con, 'SELECT count(*), CAST(sum(revenue::HUGEINT) AS VARCHAR) FROM fct_orders'),
    mart: await rows(con, 'SELECT company, CAST(order_day AS VARCHAR), CAST(revenue AS VARCHAR) ' +
      'FROM mart_daily ORDER BY ALL'),
    source: (await rows(con, 'SELECT source FROM serving_meta')).map((r) => r[0]),
  };
}

function close({ instance, con }) {
  con.closeSync();
  instance.closeSync();
}

async function waitNoWal(db, ms = 2000) {
  const deadline = Date.now() + ms;
  while (existsSync(db + '.wal') && Date.now() < deadline) await sleep(5);
  return !existsSync(db + '.wal');
}

const steps = {
  // (a) load only; "noclose" leaves the process with everything open.
  async load_only(ext, db, how) {
    const h = await open(db);
    await load(h.con, ext);
    done({ functions: await ourFunctions(h.con) });
    if (how === 'close') close(h);
  },

  // (b) load and use; with a file database and "noclose" also (d)'s first process.
  async use(ext, db, csv, how) {
    const h = await open(db);
    await load(h.con, ext);
    await loadSrc(h.con, csv);
    const summary = await one(h.con, SUMMARY, ['src']);
    done({
      summary,
      dash: await dashboards(h.con, await companiesOf(h.con, 'src')),
      ddl: (await one(h.con, "SELECT paimon_tier_ddl('lake.accounts')"))[0],
      upsert: (await one(h.con, "SELECT paimon_tier_upsert('lake.accounts', 7, -3)"))[0],
      reconcile: (await one(h.con, 'SELECT count(*) FROM serving_reconcile()'))[0],
    });
    if (how === 'close') close(h);
  },

  // (c) build, then CYCLES times: close, at once open the file again as a new instance (as an
  // application that reopens does; DuckDBInstance.create shares nothing), read it, LOAD, serve,
  // rebuild (so the next reopen has a WAL to replay). Finally let it settle, close, reopen.
  async close_reopen(ext, db, csv, cycles = '1', gapMs = '0') {
    let h = await open(db);
    await load(h.con, ext);
    await loadSrc(h.con, csv);
    const summary = await one(h.con, SUMMARY, ['src']);
    const companies = await companiesOf(h.con, 'src');
    const before = await dashboards(h.con, companies);
    const first = json(await servingState(h.con));
    const mismatches = [];
    for (let cycle = 1; cycle <= Number(cycles); cycle++) {
      close(h);
      if (Number(gapMs) > 0) await sleep(Number(gapMs));
      try {
        h = await open(db);
        const state = await servingState(h.con);
        await load(h.con, ext);
        if (json(state) !== first) mismatches.push(`cycle ${cycle}: the reopened file differs`);
        if (json(await dashboards(h.con, companies)) !== json(before)) {
          mismatches.push(`cycle ${cycle}: the dashboard differs`);
        }
        await h.con.run(SUMMARY, ['src']);
      } catch (e) {
        throw new Error(`close and reopen, cycle ${cycle} of ${cycles}: ${e.message}`);
      }
    }
    // Connected, streamhouse checkpoints its own writes soon after its last call (README).
    const settled = await waitNoWal(db, 3000);
    close(h);
    h = await open(db);
    const state = await servingState(h.con);
    await load(h.con, ext);
    const after = await dashboards(h.con, companies);
    const reconcile = (await one(h.con, 'SELECT count(*) FROM serving_reconcile()'))[0];
    close(h);
    done({ summary, before, after, state, reconcile, settled, mismatches });
  },

  // Strict reopen: build a layer from the Parquet orders, then CYCLES times: commit a row of the
  // user's own and a one-order refresh, close, at once create a new instance of the file (no
  // pause), check that every row so far is there, LOAD again. Nothing may be lost or fail; a
  // fresh process checks the file again afterwards (test_reopen_strict.py).
  async reopen_strict(ext, db, parquet, cycles) {
    let h = await open(db);
    await load(h.con, ext);
    await h.con.run(`CREATE TABLE orders AS SELECT * FROM read_parquet(${lit(parquet)})`);
    await h.con.run("SELECT * FROM serving_build('orders')");
    await h.con.run('CREATE TABLE marks (cycle INTEGER)');
    const [rows0, sum0] = await one(h.con, 'SELECT count(*), CAST(sum(revenue) AS VARCHAR) FROM fct_orders');
    const problems = [];
    for (let cycle = 1; cycle <= Number(cycles); cycle++) {
      await h.con.run(`INSERT INTO marks VALUES (${cycle})`);
      await h.con.run('CREATE OR REPLACE TABLE changes AS SELECT order_id, company, order_day, revenue + 1 AS revenue ' +
        `FROM fct_orders WHERE order_id = ${cycle}`);
      await h.con.run("SELECT * FROM serving_refresh('changes')");
      close(h);
      try {
        h = await open(db);
        const [marks, marked] = await one(h.con, 'SELECT count(*), coalesce(sum(cycle), 0) FROM marks');
        const [n, sum] = await one(h.con, 'SELECT count(*), CAST(sum(revenue) AS VARCHAR) FROM fct_orders');
        if (Number(marks) !== cycle || Number(marked) !== (cycle * (cycle + 1)) / 2) {
          problems.push(`cycle ${cycle}: marks ${marks} (sum ${marked}) after the reopen`);
        }
        if (Number(n) !== Number(rows0) || BigInt(sum) !== BigInt(sum0) + BigInt(cycle)) {
          problems.push(`cycle ${cycle}: fct_orders ${n} rows, sum ${sum} after the reopen`);
        }
        await load(h.con, ext);
      } catch (e) {
        problems.push(`cycle ${cycle}: ${e.message}`);
        break;
      }
    }
    try {
      close(h);
    } catch (e) {
      problems.push(`final close: ${e.message}`);
    }
    done({ problems });
  },

  // The second process of (d)/(e).
  async reopen(ext, db, table) {
    const h = await open(db);
    const state = await servingState(h.con);
    state.tables = {};
    for (const [n] of await rows(h.con, 'SELECT table_name FROM duckdb_tables() WHERE NOT temporary')) {
      state.tables[n] = (await one(h.con, `SELECT count(*) FROM ${n}`))[0];
    }
    await load(h.con, ext);
    state.dash = await dashboards(h.con, await companiesOf(h.con, table));
    state.reconcile = (await one(h.con, 'SELECT count(*) FROM serving_reconcile()'))[0];
    close(h);
    done(state);
  },

  // (e) build src (committed), start a build of a big table without awaiting it, and
  // process.exit(0) while it runs on libuv's thread pool.
  async exit_during_build(ext, db, csv, bigRows) {
    const h = await open(db);
    await load(h.con, ext);
    await loadSrc(h.con, csv);
    const first = await one(h.con, SUMMARY, ['src']);
    await h.con.run(bigSource(Number(bigRows)));
    const other = await h.instance.connect();
    let finished = false;
    const errors = [];
    other.run("SELECT * FROM serving_build('big')").then(
      () => { finished = true; },
      (e) => { errors.push(String(e)); finished = true; });
    await sleep(50);
    done({ first, finished_at_exit: finished, errors });
    process.exit(0);
  },
};

const [step, ...args] = process.argv.slice(2);
await steps[step](...args);
