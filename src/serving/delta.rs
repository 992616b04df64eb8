//! A lake refresh from the new snapshots' own rows, where `core::delta` says the table's merge
//! is one this can do: the rows of snapshots `since+1..=latest` are staged in commit order and
//! merged, per key, onto the row `fct_orders` holds, into the change set a lake refresh applies
//! (the source's columns plus `deleted`). Cost: the new rows, never the table's older files.
//! Anything this path does not take (another merge engine or option, an OVERWRITE, too many
//! snapshots, a delete in a partial-update delta) answers `false`: the caller then reads the
//! merged state of the changed keys instead.

use duckdb::Connection;

use crate::core::delta::{self, Merge};
use crate::core::error::{Error, Result};
use crate::core::quote;
use crate::core::schema::{Place, FACT, META};
use crate::lake::LakeTable;

/// The staged rows of the new snapshots (a temp table of our own connection, dropped after).
const DELTA: &str = "__sh_lake_delta";

/// Whether the snapshots after `since` up to `latest` are few enough and all add rows on top of
/// the previous state (APPEND, COMPACT): then their changes alone are the difference.
pub fn additive_since(table: &LakeTable, since: i64, latest: i64) -> Result<bool> {
    if latest - since > delta::MAX_SNAPSHOTS {
        return Ok(false);
    }
    for id in since + 1..=latest {
        if !delta::additive(&table.commit_kind(id)?) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Why the snapshots after `since` cannot be applied as changes at all: the first of them that
/// replaces the table's content (an OVERWRITE: its changes do not list the rows it drops), so a
/// refresh must read the latest state whole. None when every one adds to the previous state.
pub fn overwritten_since(table: &LakeTable, since: i64) -> Result<Option<String>> {
    let Some(latest) = table.latest_snapshot()? else { return Ok(None) };
    for id in since + 1..=latest {
        let kind = table.commit_kind(id)?;
        if !delta::additive(&kind) {
            return Ok(Some(format!(
                "snapshot {id} is a {kind} commit (it replaces the table's content, so its changes do not list the \
                 rows it drops): the layer was read whole from snapshot {latest}"
            )));
        }
    }
    Ok(None)
}

/// Builds the change set `out` from the delta of `since+1..=latest` when the table's merge
/// allows it; `false` (nothing built) otherwise. `read` are the table's columns the layer reads,
/// its key first, with their DuckDB `types`; `serving_shape` says they are the four serving
/// columns themselves (a partial-update merge completes a row from `fct_orders`, which only
/// then holds the same values).
pub fn stage_changes(
    conn: &Connection,
    table: &LakeTable,
    (since, latest): (i64, i64),
    read: &[String],
    types: &[&str],
    serving_shape: bool,
    out: &str,
) -> Result<bool> {
    let Ok(merge) = delta::plan(&table.options()) else {
        return Ok(false);
    };
    // The appender takes only these types from a changes batch as they come.
    let plain = |t: &&str| {
        let t = t.to_ascii_uppercase();
        [
            "TINYINT",
            "SMALLINT",
            "INTEGER",
            "BIGINT",
            "HUGEINT",
            "UTINYINT",
            "USMALLINT",
            "UINTEGER",
            "UBIGINT",
            "VARCHAR",
            "DATE",
            "BOOLEAN",
            "DOUBLE",
            "FLOAT",
        ]
        .contains(&t.as_str())
            || t.starts_with("DECIMAL(")
    };
    if !types.iter().all(plain) || (matches!(merge, Merge::PartialUpdate) && !serving_shape) {
        return Ok(false);
    }
    if !additive_since(table, since, latest)? {
        return Ok(false);
    }
    let Ok((place, held)) =
        conn.query_row(&format!("SELECT serving_catalog, serving_schema, quarantined FROM {META}"), [], |r| {
            Ok((Place { catalog: r.get(0)?, schema: r.get(1)? }, r.get::<_, Option<i64>>(2)?.unwrap_or(0)))
        })
    else {
        return Ok(false);
    };
    // A partial update completes a row from fct_orders, which has no row of an order held out
    // (`serving::quarantine`): the merged state read of the changed keys is right then.
    if held > 0 && matches!(merge, Merge::PartialUpdate) {
        return Ok(false);
    }
    let failed = |e: duckdb::Error| Error::duckdb(format!("serving: staging the changes of '{}'", table.path()), &e);
    let names: Vec<String> = read.iter().map(|c| quote::ident(c)).collect();
    let ddl = names.iter().zip(types).map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>().join(", ");
    conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE {DELTA} (rowkind VARCHAR, {ddl})")).map_err(failed)?;
    {
        let mut appender = conn.appender(DELTA).map_err(failed)?;
        for item in table.changes(since + 1, latest) {
            let (_, batch) = item?;
            // A changes batch is the row kind, then the table's columns: taken by name.
            let schema = batch.schema();
            let batch = std::iter::once(Ok(0))
                .chain(read.iter().map(|name| schema.index_of(name)))
                .collect::<std::result::Result<Vec<usize>, _>>()
                .and_then(|projection| batch.project(&projection))
                .map_err(|e| Error::internal("serving_refresh", e.to_string()))?;
            appender.append_record_batch(batch).map_err(failed)?;
        }
        appender.flush().map_err(failed)?;
    }
    let id = &names[0];
    let sql = match merge {
        // A temp table's rowid is its insertion order: the order the rows were committed in.
        Merge::Deduplicate => {
            let others: String =
                names[1..].iter().map(|c| format!("CASE WHEN gone THEN NULL ELSE {c} END AS {c}, ")).collect();
            format!(
                "CREATE OR REPLACE TEMP TABLE {out} AS \
                 SELECT {id}, {others}gone AS deleted \
                 FROM (SELECT *, rowkind IN ('-D', '-U') AS gone, \
                           row_number() OVER (PARTITION BY {id} ORDER BY rowid DESC) AS latest FROM {DELTA}) \
                 WHERE latest = 1"
            )
        }
        Merge::PartialUpdate => {
            let deletes: i64 = conn
                .query_row(&format!("SELECT count(*) FROM {DELTA} WHERE rowkind NOT IN ('+I', '+U')"), [], |r| r.get(0))
                .map_err(failed)?;
            if deletes > 0 {
                conn.execute_batch(&format!("DROP TABLE {DELTA}")).map_err(failed)?;
                return Ok(false);
            }
            let (company, day, revenue) = (&names[1], &names[2], &names[3]);
            let (company_t, day_t, revenue_t) = (types[1], types[2], types[3]);
            let fact = place.of(FACT);
            let last = |c: &str| format!("arg_max({c}, seq) FILTER (WHERE {c} IS NOT NULL)");
            format!(
                "CREATE OR REPLACE TEMP TABLE {out} AS \
                 WITH l AS (SELECT {id} AS k, {} AS c, {} AS d, {} AS r \
                            FROM (SELECT rowid AS seq, * FROM {DELTA}) GROUP BY {id}) \
                 SELECT l.k AS {id}, coalesce(l.c, CAST(f.company AS {company_t})) AS {company}, \
                     coalesce(l.d, CAST(f.order_day AS {day_t})) AS {day}, \
                     coalesce(l.r, CAST(f.revenue AS {revenue_t})) AS {revenue}, false AS deleted \
                 FROM l LEFT JOIN {fact} f ON f.order_id = l.k",
                last(company),
                last(day),
                last(revenue)
            )
        }
    };
    conn.execute_batch(&format!("{sql}; DROP TABLE {DELTA}")).map_err(failed)?;
    Ok(true)
}
