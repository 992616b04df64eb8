//! The spot check of a union read: the layer a union read loaded, asked about a sample of its
//! orders, against what Fluss's key-value store holds for them now (`fluss::lookup`).
//!
//! Why: a union read trusts the lake snapshot's offsets, and the lake can hold what the log no
//! longer has. A cluster that lost acknowledged records after tiering them (a lone tablet server
//! killed) gives their offsets to new records; once its log has passed the lake's offsets again,
//! Fluss's tiering goes on from them, so the Paimon table keeps the lost records and never gets
//! the new ones that took their offsets. Nothing in the offsets tells; the rows do. A layer order
//! that Fluss does not hold, or holds with other values, is such a disagreement.
//!
//! Invariants: the check only reads (the layer, the changelog, lookups); writes made after the
//! union read's end offsets are told apart by reading the changelog since then, so a busy table
//! is not taken for a diverged one; a sample, not a proof — what it finds is certain, what it
//! misses is a divergence smaller than its sample can see (`SAMPLE` orders of the layer).

use std::collections::HashSet;
use std::time::Duration;

use duckdb::arrow::array::{Array, Int64Array};
use duckdb::arrow::compute::cast;
use duckdb::arrow::datatypes::DataType;
use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::mapping::ColumnMap;
use crate::core::schema::{self, Place, FACT};
use crate::fluss::log::Tail;
use crate::fluss::table::{self, Position};
use crate::fluss::{lookup, Site};
use crate::serving::mapped;
use crate::serving::source::{describe, temp_table_for};

/// How many of the layer's orders are looked up in Fluss.
pub const SAMPLE: usize = 256;
/// Where the sampled orders and Fluss's answers for them are staged.
const SAMPLED: &str = "__sh_fluss_sampled";
const LOOKED: &str = "__sh_fluss_looked";
/// How long the changelog written since the read may take to read back.
const SINCE_LIMIT: Duration = Duration::from_secs(30);
/// A write Fluss's key-value store already answers may reach the log's end offsets a moment
/// later: how long a disagreement is given to show up in the changelog before it counts.
const SETTLE: Duration = Duration::from_millis(300);

/// What a union read loaded, as the spot check asks Fluss about it: the table (its site, the
/// source as given, the column map), the columns read (the key first), its buckets, and the end
/// offsets the changelog was read up to.
pub struct CheckedRead<'a> {
    pub site: &'a Site,
    pub raw: &'a str,
    pub map: Option<&'a ColumnMap>,
    pub columns: &'a [String],
    pub buckets: i32,
    pub end: &'a Position,
}

/// The first order of the layer at `place` (just loaded by the union read `read`) that Fluss
/// holds otherwise or not at all, in words; None when every sampled order agrees (or the key is
/// not an integer column, which lookups here cannot ask for).
pub fn disagreement(conn: &Connection, place: &Place, read: &CheckedRead) -> Result<Option<String>> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: spot-checking the union read against Fluss", &e);
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {SAMPLED} AS SELECT * FROM {} USING SAMPLE reservoir({SAMPLE} ROWS) REPEATABLE (7)",
        place.of(FACT)
    ))
    .map_err(failed)?;
    let keys: Vec<i64> = {
        let mut stmt = conn.prepare(&format!("SELECT order_id FROM {SAMPLED}")).map_err(failed)?;
        let rows = stmt.query_map([], |r| r.get::<_, i64>(0)).map_err(failed)?;
        rows.collect::<std::result::Result<_, _>>().map_err(failed)?
    };
    let outcome = compare(conn, read, &keys);
    let _ = conn.execute_batch(&format!("DROP TABLE IF EXISTS {SAMPLED}; DROP TABLE IF EXISTS {LOOKED}"));
    outcome
}

fn compare(conn: &Connection, read: &CheckedRead, keys: &[i64]) -> Result<Option<String>> {
    if keys.is_empty() {
        return Ok(None);
    }
    let Some(found) = lookup::rows(read.site, read.columns, keys)? else { return Ok(None) };
    let differing = differing(conn, read.raw, read.map, &found)?;
    settled(read.site, &read.columns[0], read.buckets, read.end, differing)
}

/// The first of `differing` (key, the difference in words) that is not explained by a write
/// made after `end`: the changelog since then is read back, and once more after `SETTLE`.
pub fn settled(
    site: &Site,
    key: &str,
    buckets: i32,
    end: &Position,
    differing: Vec<(i64, String)>,
) -> Result<Option<String>> {
    if differing.is_empty() {
        return Ok(None);
    }
    let key = [key.to_string()];
    let mut left = differing;
    for pause in [Duration::ZERO, SETTLE] {
        std::thread::sleep(pause);
        let since = written_since(site, &key, buckets, end)?;
        left.retain(|(k, _)| !since.contains(k));
        if left.is_empty() {
            return Ok(None);
        }
    }
    Ok(left.into_iter().next().map(|(_, why)| why))
}

/// The sampled orders whose row in the layer is not Fluss's answer, with the difference in words.
fn differing(
    conn: &Connection,
    raw: &str,
    map: Option<&ColumnMap>,
    found: &[duckdb::arrow::record_batch::RecordBatch],
) -> Result<Vec<(i64, String)>> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: spot-checking the union read against Fluss", &e);
    let looked = match found.first() {
        Some(first) => {
            conn.execute_batch(&temp_table_for(LOOKED, &first.schema())).map_err(failed)?;
            let mut appender = conn.appender(LOOKED).map_err(failed)?;
            for b in found {
                appender.append_record_batch(b.clone()).map_err(failed)?;
            }
            appender.flush().map_err(failed)?;
            let (relation, columns) = match map {
                Some(map) => {
                    let (relation, _, columns) = mapped::wrap(conn, raw, LOOKED, map)?.into_parts();
                    (relation, columns)
                }
                None => (LOOKED.to_string(), schema::match_columns(raw, &describe(conn, raw, LOOKED)?)?),
            };
            format!("(SELECT {} FROM {relation})", columns.fact_select_list())
        }
        // Fluss holds none of them.
        None => "(SELECT NULL::BIGINT AS order_id, NULL AS company, NULL::DATE AS order_day, NULL::BIGINT AS revenue \
                 WHERE false)"
            .to_string(),
    };
    let sql = format!(
        "SELECT s.order_id, CASE WHEN f.order_id IS NULL THEN 'Fluss holds no such order' \
                 ELSE format('Fluss holds ({{}}, {{}}, {{}})', f.company, f.order_day, f.revenue) END \
             || format(', the lake part gave ({{}}, {{}}, {{}})', s.company, s.order_day, s.revenue) \
         FROM {SAMPLED} s LEFT JOIN {looked} f ON f.order_id = s.order_id \
         WHERE f.order_id IS NULL OR f.company IS DISTINCT FROM s.company OR f.order_day IS DISTINCT FROM s.order_day \
            OR f.revenue IS DISTINCT FROM s.revenue \
         ORDER BY s.order_id"
    );
    let mut stmt = conn.prepare(&sql).map_err(failed)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))).map_err(failed)?;
    let out: Vec<(i64, String)> = rows.collect::<std::result::Result<_, _>>().map_err(failed)?;
    Ok(out.into_iter().map(|(k, what)| (k, format!("order_id {k}: {what}"))).collect())
}

/// The keys of every change the table's log received after `end` (read up to its end now).
fn written_since(site: &Site, columns: &[String], buckets: i32, end: &Position) -> Result<HashSet<i64>> {
    let now = table::end_offsets(site, buckets)?;
    if now.offsets.iter().all(|(b, o)| *o <= end.at(*b)) {
        return Ok(HashSet::new());
    }
    let mut tail = Tail::read_from(site, &columns[..1], buckets, end, None)?;
    let mut keys = HashSet::new();
    for batch in tail.read_until(site, &now, SINCE_LIMIT)? {
        let ids = cast(batch.column(0), &DataType::Int64).map_err(|e| site.err(e))?;
        let ids =
            ids.as_any().downcast_ref::<Int64Array>().ok_or_else(|| site.err("a key column that is not an integer"))?;
        keys.extend((0..ids.len()).filter(|i| ids.is_valid(*i)).map(|i| ids.value(i)));
    }
    Ok(keys)
}
