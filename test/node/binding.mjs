// The streamhouse extension through the Node binding (@duckdb/node-api: DuckDB 1.5.6, or 1.4.5 when
// DUCKDB_NODE_API=duckdb-node-api-1.4, the alias in package.json), end to end:
// LOAD, build, dashboard, refresh (twice), reconcile, status, errors as JavaScript exceptions, a
// Paimon lake scan and a build from it, close. Run by test/python/bindings/test_node_binding.py:
//   node binding.mjs EXT LAKE_TABLE_DIR
// Orders are generated here (a seeded generator) and every answer is compared with an oracle
// computed here in plain JavaScript (BigInt sums) over those rows; node:assert throws on the first
// mismatch, so the process exits non-zero with the difference on stderr. The lake table was written
// by pypaimon: this script prints `RESULT <json>` with what paimon_scan and the lake build returned,
// and the Python driver compares that with pypaimon's own read.
import assert from 'node:assert/strict';
const { DuckDBInstance, DuckDBDateValue, version } = await import(process.env.DUCKDB_NODE_API || '@duckdb/node-api');

const [ext, lakeTable] = process.argv.slice(2);
assert.ok(ext && lakeTable, 'usage: node binding.mjs EXT LAKE_TABLE_DIR');

const lit = (s) => "'" + s.replaceAll("'", "''") + "'";
const COMPANIES = ['acme', 'Acme', "O'Reilly", '東京商事', 'Café Zürich', "x' OR '1'='1", 'a%b', 'globex', 'initech'];
const BASE_DAY = Date.UTC(2024, 0, 1) / 86_400_000; // days since 1970-01-01
const N_DAYS = 45;
const N_ORDERS = 6000;

// A 64-bit linear congruential generator (Knuth's MMIX constants), high 32 bits out.
function makeRng(seed) {
  const MASK = (1n << 64n) - 1n;
  let s = BigInt(seed) & MASK;
  const next = () => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & MASK;
    return Number(s >> 32n);
  };
  return { int: (n) => next() % n, pick: (arr) => arr[next() % arr.length] };
}
const rng = makeRng(20261201);

function randomRevenue() {
  const r = rng.int(100);
  if (r < 5) return 0n;
  if (r < 25) return -BigInt(1 + rng.int(1_000_000_000));
  if (r < 27) return rng.pick([1n << 62n, -(1n << 62n), (1n << 63n) - 1n, -(1n << 63n)]); // sums need HUGEINT
  return BigInt(1 + rng.int(1_000_000_000));
}
const randomDay = () => BASE_DAY + rng.int(N_DAYS);
// Distinct ids above 2^53: they only survive as BigInt.
const orderId = (i) => (1n << 61n) + BigInt(i) * 2654435761n;

// ---- the oracle: plain arithmetic over the generated rows -------------------------------------
// state: Map order_id -> { company, day, revenue }
function cellsOf(state) {
  const cells = new Map(); // company -> Map(day -> sum)
  for (const { company, day, revenue } of state.values()) {
    if (!cells.has(company)) cells.set(company, new Map());
    const days = cells.get(company);
    days.set(day, (days.get(day) ?? 0n) + revenue);
  }
  return cells;
}
// Top days by revenue for a company: every day, revenue DESC then order_day ASC (README).
function dashboardOracle(cells, company) {
  const rows = [...(cells.get(company) ?? new Map())].map(([day, revenue]) => [day, revenue]);
  return rows.sort((a, b) => (a[1] === b[1] ? a[0] - b[0] : a[1] > b[1] ? -1 : 1));
}
function summaryOracle(state) {
  const cells = cellsOf(state);
  let martRows = 0;
  const days = new Set();
  for (const perDay of cells.values()) {
    martRows += perDay.size;
    for (const d of perDay.keys()) days.add(d);
  }
  let total = 0n;
  for (const o of state.values()) total += o.revenue;
  return { fct_rows: BigInt(state.size), mart_rows: BigInt(martRows), companies: BigInt(cells.size),
    days: BigInt(days.size), total_revenue: state.size ? total : null };
}

// ---- talking to DuckDB ------------------------------------------------------------------------
const rowsOf = async (con, sql, params) => (await con.runAndReadAll(sql, params)).getRows();
const objectsOf = async (con, sql, params) => (await con.runAndReadAll(sql, params)).getRowObjectsJS();
// DATE comes back as DuckDBDateValue (days since the epoch), HUGEINT as BigInt.
const dashboard = async (con, fn, company) =>
  (await rowsOf(con, `SELECT order_day, revenue FROM ${fn}($1)`, [company])).map(([d, r]) => [d.days, r]);

async function checkDashboards(con, state, label) {
  const cells = cellsOf(state);
  for (const company of [...COMPANIES, 'nobody', "acme' --"]) {
    assert.deepEqual(await dashboard(con, 'serving_dashboard', company), dashboardOracle(cells, company),
      `${label}: serving_dashboard(${JSON.stringify(company)})`);
  }
  for (const company of ['acme', '東京商事']) {
    assert.deepEqual(await dashboard(con, 'serving_olap', company), dashboardOracle(cells, company),
      `${label}: serving_olap(${JSON.stringify(company)})`);
  }
}

async function append(con, table, rows) {
  const app = await con.createAppender(table);
  for (const { id, company, day, revenue, deleted } of rows) {
    app.appendBigInt(id);
    if (company === null) {
      app.appendNull();
      app.appendNull();
      app.appendNull();
    } else {
      app.appendVarchar(company);
      app.appendDate(new DuckDBDateValue(day));
      app.appendBigInt(revenue);
    }
    if (deleted !== undefined) app.appendBoolean(deleted);
    app.endRow();
  }
  app.closeSync(); // flushes and commits: streamhouse reads committed data only
}

// One change set: corrections, moves, cancellations, late arrivals and deletes of unknown orders,
// one row per key. Returns the rows and the counts serving_refresh must report.
function changeSet(state, nextId) {
  const live = [...state.keys()];
  const picked = new Set();
  while (picked.size < 500) picked.add(live[rng.int(live.length)]);
  const rows = [];
  let i = 0;
  for (const id of picked) {
    const old = state.get(id);
    switch (i++ % 4) {
      case 0: rows.push({ id, company: old.company, day: old.day, revenue: randomRevenue(), deleted: false }); break;
      case 1: rows.push({ id, company: rng.pick(COMPANIES), day: randomDay(), revenue: randomRevenue(), deleted: false }); break;
      case 2: rows.push({ id, company: null, deleted: true }); break;
      default: rows.push({ id, company: old.company, day: old.day, revenue: 0n, deleted: false });
    }
  }
  for (let k = 0; k < 80; k++) {
    rows.push({ id: orderId(nextId + k), company: rng.pick(COMPANIES), day: randomDay(), revenue: randomRevenue(), deleted: false });
  }
  for (let k = 0; k < 20; k++) rows.push({ id: orderId(nextId + 1_000_000 + k), company: null, deleted: true });
  const counts = { inserted: 0n, updated: 0n, deleted: 0n, ignored_deletes: 0n };
  for (const r of rows) {
    if (r.deleted) {
      counts[state.delete(r.id) ? 'deleted' : 'ignored_deletes'] += 1n;
    } else {
      counts[state.has(r.id) ? 'updated' : 'inserted'] += 1n;
      state.set(r.id, { company: r.company, day: r.day, revenue: r.revenue });
    }
  }
  return { rows, counts };
}

const errorWith = (fragment) => (e) => {
  assert.ok(e instanceof Error, `expected an Error, got ${e}`);
  assert.ok(e.message.includes(fragment), `error message ${JSON.stringify(e.message)} lacks ${JSON.stringify(fragment)}`);
  return true;
};

// ---- the flow ---------------------------------------------------------------------------------
// Without allow_unsigned_extensions DuckDB refuses the unsigned artifact, as a rejected promise.
{
  const plain = await DuckDBInstance.create(':memory:');
  const pc = await plain.connect();
  await assert.rejects(pc.run('LOAD ' + lit(ext)), errorWith('unsigned extensions are disabled'));
  pc.closeSync();
  plain.closeSync();
}

const instance = await DuckDBInstance.create(':memory:', { allow_unsigned_extensions: 'true' });
const con = await instance.connect();
await con.run('LOAD ' + lit(ext));

const state = new Map();
const generated = [];
for (let i = 0; i < N_ORDERS; i++) {
  const o = { id: orderId(i), company: rng.pick(COMPANIES), day: randomDay(), revenue: randomRevenue() };
  generated.push(o);
  state.set(o.id, { company: o.company, day: o.day, revenue: o.revenue });
}
await con.run('CREATE TABLE orders (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)');
await append(con, 'orders', generated);

const [built] = await objectsOf(con, 'SELECT fct_rows, mart_rows, companies, days, total_revenue, source FROM serving_build($1)', ['orders']);
assert.deepEqual(built, { ...summaryOracle(state), source: 'orders' }, 'serving_build summary');
await checkDashboards(con, state, 'after build');

// Errors surface as rejected promises carrying streamhouse's message; the layer is untouched.
await assert.rejects(con.run('SELECT * FROM serving_dashboard(NULL)'),
  errorWith("serving_dashboard: parameter 'company' must not be NULL"));
await assert.rejects(con.run("SELECT * FROM serving_build('no_such_table')"),
  errorWith("serving_build: source 'no_such_table' does not exist"));
await checkDashboards(con, state, 'after the failed build');

await con.run('CREATE TABLE changes (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT, deleted BOOLEAN)');
const refreshes = [];
for (let round = 1; round <= 2; round++) {
  const { rows, counts } = changeSet(state, N_ORDERS + round * 10_000);
  await con.run('DELETE FROM changes');
  await append(con, 'changes', rows);
  const [got] = await objectsOf(con,
    'SELECT inserted, updated, deleted, ignored_deletes, fct_rows, mart_rows FROM serving_refresh($1)', ['changes']);
  const want = summaryOracle(state);
  assert.deepEqual(got, { ...counts, fct_rows: want.fct_rows, mart_rows: want.mart_rows }, `serving_refresh round ${round}`);
  await checkDashboards(con, state, `after refresh ${round}`);
  assert.deepEqual(await rowsOf(con, 'SELECT * FROM serving_reconcile()'), [], `serving_reconcile after refresh ${round}`);
  refreshes.push(Object.fromEntries(Object.entries(got).map(([k, v]) => [k, Number(v)])));
}
const [status] = await objectsOf(con, 'SELECT refreshes, last_reconcile_clean, fct_rows FROM serving_status()');
assert.deepEqual(status, { refreshes: 2n, last_reconcile_clean: true, fct_rows: BigInt(state.size) }, 'serving_status');
const [ddl] = (await rowsOf(con, 'SELECT paimon_tier_ddl($1)', ['lake.accounts']))[0];
assert.match(ddl, /^CREATE TABLE `lake`\.`accounts`/);

// The lake: the merged state of the pypaimon-written table, then a build from it.
const lakeScan = (await rowsOf(con, 'SELECT order_id, company, order_day, revenue FROM paimon_scan($1) ORDER BY order_id',
  [lakeTable])).map(([id, company, day, revenue]) => [String(id), company, day.toString(), String(revenue)]);
const [lakeBuild] = await objectsOf(con, 'SELECT fct_rows, lake_snapshot FROM serving_build($1)', ['paimon:' + lakeTable]);
const lakeCompanies = (await rowsOf(con, 'SELECT DISTINCT company FROM fct_orders ORDER BY 1')).map((r) => r[0]);
const lakeDashboards = {};
for (const company of lakeCompanies) {
  lakeDashboards[company] = (await rowsOf(con, 'SELECT order_day, revenue FROM serving_dashboard($1)', [company]))
    .map(([d, r]) => [d.toString(), String(r)]);
}

con.closeSync();
instance.closeSync();

process.stdout.write('RESULT ' + JSON.stringify({
  version: version().replace(/^v/, ''),
  orders: N_ORDERS,
  refreshes,
  lake_scan: lakeScan,
  lake_build: { fct_rows: Number(lakeBuild.fct_rows), lake_snapshot: Number(lakeBuild.lake_snapshot) },
  lake_dashboards: lakeDashboards,
}) + '\n');
