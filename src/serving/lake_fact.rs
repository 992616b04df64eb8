//! A Paimon fact table answering for the layer without being loaded: its merged state (latest
//! snapshot, or the one a replica's mart reflects) aggregated into a mart while its batches
//! stream past, so memory grows with the groups, never with the fact. `serving_reconcile(fact := ...)` compares the served mart with
//! it (`reconcile`); `serving_olap(company, fact := ...)` asks it the dashboard's question. How a
//! mart-only replica, which holds no `fct_orders`, checks itself.

use std::collections::{HashMap, HashSet};

use duckdb::arrow::array::{Array, Date32Array, Decimal128Array, Int64Array, StringArray};
use duckdb::arrow::compute::cast;
use duckdb::arrow::datatypes::DataType;
use duckdb::Connection;

use crate::core::dashboard::{DashboardQuery, Relation};
use crate::core::error::{Error, Result};
use crate::core::fact_mark::FactMark;
use crate::core::lineage;
use crate::core::mart::{Group, Mart};
use crate::core::schema;
use crate::core::source::Origin;
use crate::lake::{Access, LakeTable};
use crate::serving::publish::mart_batch;
use crate::serving::read;
use crate::serving::source::duckdb_type_name;

/// `fact :=` names a relation, not a Paimon table.
pub fn not_a_lake_fact(function: &'static str, raw: &str) -> Error {
    Error::Refused {
        function,
        problem: format!("fact := '{raw}' is not a Paimon table: give the lake fact table (paimon:<dir> or s3://...)"),
    }
}

/// The mart of a Paimon fact table's merged state, aggregated while its batches stream past:
/// memory grows with the groups, never with the fact. The state is the latest snapshot, or,
/// when `at` names one (the fact state a replica's mart reflects, `freshness`), that snapshot —
/// refused, saying why, when the table's snapshot of that id is not the one the publisher read
/// (expired, rolled back, another table). The fact's columns are checked against the serving
/// contract as a build checks them; a NULL company, day or revenue is refused naming the
/// source. With `only`, the groups of that company alone. The orders the caller's layer holds
/// out (`serving::quarantine`) are left out, as the layer leaves them out of its mart.
pub fn lake_fact_mart(
    conn: &Connection,
    function: &'static str,
    raw: &str,
    access: &Access,
    only: Option<&str>,
    at: &FactMark,
) -> Result<(Mart, Option<i64>)> {
    let path = match Origin::of(raw, &access.sandbox)? {
        Origin::Lake(path) => path,
        Origin::Relation(_) | Origin::Stream(_) => return Err(not_a_lake_fact(function, raw)),
    };
    let table = LakeTable::open(function, &path, access)?;
    table.check_readable()?;
    let described: Vec<(String, String)> =
        table.schema()?.fields().iter().map(|f| (f.name().clone(), duckdb_type_name(f.data_type()))).collect();
    let columns = schema::match_columns(raw, &described)?;
    let held: HashSet<i64> = crate::serving::quarantine::held_ids(conn).into_iter().collect();
    let mut projection = vec![columns.company.clone(), columns.order_day.clone(), columns.revenue.clone()];
    if !held.is_empty() {
        projection.push(columns.order_id.clone());
    }
    refuse_other_lineage(function, raw, &table, at)?;
    let scan = table.scan(at.snapshot, None, Some(projection))?;
    let snapshot = scan.snapshot;
    // DuckDB's `threads` as our connection sees it (global, so the caller's too).
    let threads = crate::host::settings::threads(conn).map_or(1, |n| n.max(1) as usize);
    // Per company, per day: looked up by the row's &str, so a row allocates nothing.
    let mut sums: HashMap<String, HashMap<i32, (i128, i64)>> = HashMap::new();
    let bad = |problem: String| Error::BadRow { source: raw.into(), problem };
    for batch in scan.stream(threads) {
        let batch = batch?;
        let cast_to = |i: usize, t: &DataType| {
            cast(batch.column(i), t).map_err(|e| bad(format!("column {}: {e}", described_name(&batch, i))))
        };
        let (company, day, revenue) =
            (cast_to(0, &DataType::Utf8)?, cast_to(1, &DataType::Date32)?, cast_to(2, &DataType::Decimal128(38, 0))?);
        let company = company.as_any().downcast_ref::<StringArray>().expect("cast to Utf8");
        let day = day.as_any().downcast_ref::<Date32Array>().expect("cast to Date32");
        let revenue = revenue.as_any().downcast_ref::<Decimal128Array>().expect("cast to Decimal128");
        let ids = match held.is_empty() {
            true => None,
            false => Some(cast_to(3, &DataType::Int64)?),
        };
        let ids = ids.as_ref().map(|a| a.as_any().downcast_ref::<Int64Array>().expect("cast to Int64"));
        for i in 0..batch.num_rows() {
            if ids.is_some_and(|ids| ids.is_valid(i) && held.contains(&ids.value(i))) {
                continue;
            }
            if company.is_null(i) || day.is_null(i) || revenue.is_null(i) {
                return Err(bad(format!(
                    "an order has a NULL {} (the fact's merged state must name a company, a day and a revenue)",
                    ["company", "order_day", "revenue"][[company.is_null(i), day.is_null(i), revenue.is_null(i)]
                        .iter()
                        .position(|n| *n)
                        .expect("one is NULL")]
                )));
            }
            let name = company.value(i);
            if only.is_some_and(|o| o != name) {
                continue;
            }
            let days = match sums.get_mut(name) {
                Some(days) => days,
                None => sums.entry(name.to_string()).or_default(),
            };
            let cell = days.entry(day.value(i)).or_default();
            cell.0 += revenue.value(i);
            cell.1 += 1;
        }
    }
    let groups: Vec<Group<'_>> = sums
        .iter()
        .flat_map(|(c, days)| {
            days.iter().map(move |(d, (r, n))| Group { company: c, day: *d, revenue: *r, orders: *n })
        })
        .collect();
    Ok((Mart::from_groups(&groups), snapshot))
}

/// Refuses a fact table whose history does not hold the snapshot the replica's mart reflects, as
/// its publisher recorded it (`at`): another table, or the fact rolled back or expired since.
fn refuse_other_lineage(function: &'static str, raw: &str, table: &LakeTable, at: &FactMark) -> Result<()> {
    let Some(id) = at.snapshot else { return Ok(()) };
    match lineage::judge(id, at.commit_millis, &table.observe(id)?) {
        None => Ok(()),
        Some(why) => Err(Error::Refused {
            function,
            problem: format!(
                "the replica's mart reflects snapshot {id} of its fact (as its publisher recorded), but in '{raw}' \
                 {why}; either '{raw}' is not the table the mart was published from, or the replica can be \
                 checked once its publisher has published the fact's current state (serving_status shows \
                 fact_snapshot)"
            ),
        }),
    }
}

fn described_name(batch: &duckdb::arrow::record_batch::RecordBatch, i: usize) -> String {
    batch.schema().field(i).name().clone()
}

/// Where `olap_from_lake` stages one company's groups (a temp table of the reader's connection).
const OLAP_STAGE: &str = "__sh_olap_lake";

/// `serving_olap(company, fact := ...)`: the dashboard's question answered from the Paimon fact
/// table itself, aggregated while streaming it (one company's groups kept), then asked with the
/// dashboard's own statement over those groups.
pub fn olap_from_lake(
    conn: &Connection,
    company: &str,
    query: &DashboardQuery,
    fact: &str,
    access: &Access,
) -> Result<read::DayRevenue> {
    let (mart, _) = lake_fact_mart(conn, "serving_olap", fact, access, Some(company), &FactMark::default())?;
    let failed = |e: duckdb::Error| Error::duckdb("serving_olap: staging the lake fact's groups", &e);
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {OLAP_STAGE} (company VARCHAR, order_day DATE, revenue DECIMAL(38, 0), \
         orders BIGINT)"
    ))
    .map_err(failed)?;
    let groups: Vec<Group<'_>> = mart.groups().collect();
    if !groups.is_empty() {
        let mut appender = conn.appender(OLAP_STAGE).map_err(failed)?;
        appender.append_record_batch(mart_batch(&groups)?).map_err(failed)?;
        appender.flush().map_err(failed)?;
    }
    let answer = read::per_company_of(conn, "serving_olap", Relation::Rollup(OLAP_STAGE), company, query);
    // The groups are the answer's input only: a long-lived session keeps none of them.
    conn.execute_batch(&format!("DROP TABLE IF EXISTS {OLAP_STAGE}")).map_err(failed)?;
    answer
}
