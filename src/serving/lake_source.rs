//! A Paimon table as the source of a build or refresh: which of its columns are read, what is
//! staged, and the relation the build or refresh SQL then reads.
//!
//! A build reads the merged state of the latest snapshot. A refresh of a layer built from the
//! table at snapshot S stages only the orders changed after S: where the table's merge allows
//! it (`serving::delta`) the new snapshots' rows are merged onto the held rows of their keys;
//! otherwise their keys come from the table's changes after S, their rows from the latest merged
//! state read with a key predicate (Paimon skips files whose key range holds none of them), and
//! a key with no merged row any more is staged as deleted. When S is no longer the table's
//! history (`serving::history`) the latest state is read whole and the caller rebuilds.
//!
//! Only the columns the layer needs are decoded: the four serving columns, or, with a column map
//! (`core::mapping`), the key column and what the map's expressions use. The map is applied last,
//! over what was read or staged (`serving::mapped`), so every path sees the table's own columns.

use std::sync::Arc;

use duckdb::arrow::array::{Array, Int64Array};
use duckdb::arrow::datatypes::{DataType, Schema};
use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::location::same_table;
use crate::core::mapping::ColumnMap;
use crate::core::quote;
use crate::core::schema::{self, META};
use crate::core::source::Origin;
use crate::lake::{Access, LakeTable};
use crate::serving::handoff::{Contents, Parcel, Part};
use crate::serving::meta::not_built;
use crate::serving::source::{duckdb_type_name, AnyOrder, ResolvedSource};
use crate::serving::{delta, history, mapped};

/// Where a Paimon source's merged state is staged for a refresh.
const LAKE_STAGE: &str = "__sh_lake";
const LAKE_KEYS: &str = "__sh_lake_keys";
/// The change set a lake refresh applies: the columns read, then `deleted`.
pub const LAKE_CHANGES: &str = "__sh_lake_changes";

/// The table's columns a read decodes, the key first; refused when the map does not name the
/// key as a plain column (changed orders are found by the table's own key).
fn read_columns(raw: &str, described: &[(String, String)], map: Option<&ColumnMap>) -> Result<Vec<String>> {
    let Some(map) = map else {
        let c = schema::match_columns(raw, described)?;
        return Ok(vec![c.order_id, c.company, c.order_day, c.revenue]);
    };
    let names: Vec<String> = described.iter().map(|(n, _)| n.clone()).collect();
    let Some(key) = map.key_column(&names) else {
        return Err(Error::BadArgument {
            function: "serving_build",
            parameter: "columns",
            value: crate::core::error::shown(map.exprs[0].as_deref().unwrap_or("order_id")),
            problem: format!(
                "for a Paimon table order_id must be one of its columns, by name (its key; the table has {}): \
                 changed orders are found by that column",
                names.join(", ")
            ),
        });
    };
    let mut cols = vec![key.clone()];
    cols.extend(map.inputs(&names).into_iter().filter(|c| *c != key).cloned());
    Ok(cols)
}

/// Resolves the Paimon table at `path` as a build source, or (`allow_deleted`) as a refresh's
/// change set against the snapshot the layer holds.
pub fn resolve(
    conn: &Connection,
    raw: &str,
    table: &LakeTable,
    allow_deleted: bool,
    map: Option<&ColumnMap>,
    access: &Access,
) -> Result<ResolvedSource> {
    let path = table.path();
    let schema = table.schema()?;
    let described: Vec<(String, String)> =
        schema.fields().iter().map(|f| (f.name().clone(), duckdb_type_name(f.data_type()))).collect();
    let read = read_columns(raw, &described, map)?;
    let key = read[0].clone();
    let held = if allow_deleted { built_lake_snapshot(conn, path, access)? } else { None };
    let rebuild = rebuild_reason(table, held)?;
    let since = held.map(|(since, _)| since).filter(|_| rebuild.is_none());
    let finish = |relation: String, snapshot: Option<i64>, read: Option<Parcel>, any_order: bool, staged: bool| {
        let lake_snapshot_millis = history::commit_millis(table, snapshot)?;
        let (relation, tolerant, mut columns) = match map {
            Some(map) => mapped::wrap(conn, raw, &relation, map)?.into_parts(),
            None => (relation, None, schema::match_columns(raw, &described)?),
        };
        if staged {
            columns.deleted = Some(quote::ident("deleted"));
        }
        Ok::<_, Error>(ResolvedSource {
            raw: raw.into(),
            relation,
            tolerant,
            columns,
            lake_snapshot: snapshot,
            lake_snapshot_millis,
            rebuild: rebuild.clone(),
            read,
            any_order,
        })
    };
    let (scan, changed) = match since {
        None => (table.scan(None, None, Some(read.clone()))?, Vec::new()),
        Some(since) => {
            let latest = table.latest_snapshot()?;
            if let Some(latest) = latest.filter(|&l| l > since) {
                let types: Vec<&str> = read
                    .iter()
                    .map(|n| described[schema.index_of(n).expect("a read column exists")].1.as_str())
                    .collect();
                if delta::stage_changes(conn, table, (since, latest), &read, &types, map.is_none(), LAKE_CHANGES)? {
                    return finish(LAKE_CHANGES.into(), Some(latest), None, false, true);
                }
            }
            // The keys changed between the snapshot the mart reflects and the latest one, so
            // that only data files that may hold them are read.
            let at = schema.index_of(&key).expect("the key column exists") + 1; // after rowkind
            let changed = match latest.filter(|&l| l > since) {
                Some(latest) => changed_keys(table, (since, latest), at)?,
                None => Vec::new(),
            };
            (table.scan(latest, Some((&key, &changed)), Some(read.clone()))?, changed)
        }
    };
    let snapshot = scan.snapshot;
    // A full build of a snapshot that needs no merge loads through DuckDB's own Parquet reader
    // (`lake::Scan::plain_sql`).
    if since.is_none() {
        if let Some(sql) = scan.plain_sql()? {
            return finish(format!("({sql})"), snapshot, None, false, false);
        }
    }
    // The read projects exactly the columns read, in that order; DuckDB's threads read it
    // where a statement scans the parcel (no copy of the rows before the load).
    let read_schema = Schema::new(
        read.iter().map(|n| schema.field_with_name(n).expect("a read column exists").clone()).collect::<Vec<_>>(),
    );
    let parcel = Parcel::new(Contents::Lake { scan: Box::new(scan), schema: Arc::new(read_schema) });
    let relation = Part::Lake.scan_of(parcel.id());
    if since.is_none() {
        let any_order = AnyOrder::allowed(conn);
        return finish(relation, snapshot, Some(parcel), any_order, false);
    }
    stage_changed_orders(conn, path, &relation, changed, &read)?;
    finish(LAKE_CHANGES.into(), snapshot, None, false, true)
}

/// Why the snapshot the layer holds (`held`: its id and commit time) is no longer the table's
/// history, if it is not: then the latest state is read whole and the caller rebuilds from it.
fn rebuild_reason(table: &LakeTable, held: Option<(i64, Option<i64>)>) -> Result<Option<String>> {
    let Some((since, millis)) = held else { return Ok(None) };
    match history::rewritten(table, Some(since), millis)? {
        Some(why) => Ok(Some(why)),
        None => delta::overwritten_since(table, since),
    }
}

fn arrow_failed(path: &str) -> impl Fn(duckdb::arrow::error::ArrowError) -> Error + '_ {
    move |e| Error::Internal { function: format!("serving: staging Paimon table '{path}'"), problem: e.to_string() }
}

/// The order keys (column `at` of the changelog) changed in snapshots `since+1..=latest`,
/// sorted, each once.
fn changed_keys(table: &LakeTable, (since, latest): (i64, i64), at: usize) -> Result<Vec<i64>> {
    let mut changed: Vec<i64> = Vec::new();
    for item in table.changes(since + 1, latest) {
        let (_, batch) = item?;
        let keys =
            duckdb::arrow::compute::cast(batch.column(at), &DataType::Int64).map_err(arrow_failed(table.path()))?;
        let keys = keys.as_any().downcast_ref::<Int64Array>().expect("cast to Int64");
        changed.extend(keys.iter().flatten());
    }
    changed.sort_unstable();
    changed.dedup();
    Ok(changed)
}

/// Stages the latest rows of the `changed` orders (read from `relation`, the latest snapshot
/// pruned to them) into `LAKE_CHANGES` as a change set: each changed order's row, or, where the
/// latest snapshot no longer has it, its key marked deleted. `read` are the columns read, the
/// key first.
fn stage_changed_orders(
    conn: &Connection,
    path: &str,
    relation: &str,
    changed: Vec<i64>,
    read: &[String],
) -> Result<()> {
    let failed = |e: duckdb::Error| Error::duckdb(format!("serving: staging Paimon table '{path}'"), &e);
    {
        let _any_order = AnyOrder::set(conn);
        conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE {LAKE_STAGE} AS SELECT * FROM {relation}"))
            .map_err(failed)?;
    }
    conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE {LAKE_KEYS} (order_id BIGINT)")).map_err(failed)?;
    let mut appender = conn.appender(LAKE_KEYS).map_err(failed)?;
    let keys: duckdb::arrow::array::ArrayRef = Arc::new(Int64Array::from(changed));
    appender
        .append_record_batch(
            duckdb::arrow::record_batch::RecordBatch::try_from_iter([("order_id", keys)])
                .map_err(arrow_failed(path))?,
        )
        .map_err(failed)?;
    appender.flush().map_err(failed)?;
    drop(appender);
    let id = quote::ident(&read[0]);
    let others: Vec<String> = read[1..].iter().map(|c| quote::ident(c)).collect();
    let (kept, nulls) = if others.is_empty() {
        (String::new(), String::new())
    } else {
        (format!("{}, ", others.join(", ")), "NULL, ".repeat(others.len()))
    };
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {LAKE_CHANGES} AS
           SELECT {id}, {kept}false AS deleted FROM {LAKE_STAGE}
             WHERE {id} IN (SELECT order_id FROM {LAKE_KEYS})
           UNION ALL
           SELECT k.order_id, {nulls}true FROM {LAKE_KEYS} k
             WHERE k.order_id NOT IN (SELECT {id} FROM {LAKE_STAGE})"
    ))
    .map_err(failed)?;
    Ok(())
}

/// The merged state of the Paimon table at `path` as of `snapshot`, decoding only `read` (the
/// union read of a Fluss table: the snapshot its tiering committed, the table's own columns).
pub fn resolve_at(
    conn: &Connection,
    raw: &str,
    path: &str,
    snapshot: i64,
    read: &[String],
    map: Option<&ColumnMap>,
    access: &Access,
) -> Result<ResolvedSource> {
    let table = LakeTable::open("serving", path, access)?;
    let schema = table.schema()?;
    let described: Vec<(String, String)> = read
        .iter()
        .map(|n| {
            let f = schema.field_with_name(n).map_err(|_| Error::Lake {
                function: "serving",
                path: path.into(),
                problem: format!("the tiered Paimon table has no column '{n}'"),
            })?;
            Ok((f.name().clone(), duckdb_type_name(f.data_type())))
        })
        .collect::<Result<_>>()?;
    let scan = table.scan(Some(snapshot), None, Some(read.to_vec()))?;
    let millis = history::commit_millis(&table, Some(snapshot))?;
    let (relation, parcel, any_order) = match scan.plain_sql()? {
        Some(sql) => (format!("({sql})"), None, false),
        None => {
            let read_schema = Schema::new(
                read.iter().map(|n| schema.field_with_name(n).expect("checked above").clone()).collect::<Vec<_>>(),
            );
            let parcel = Parcel::new(Contents::Lake { scan: Box::new(scan), schema: Arc::new(read_schema) });
            (Part::Lake.scan_of(parcel.id()), Some(parcel), AnyOrder::allowed(conn))
        }
    };
    let (relation, tolerant, columns) = match map {
        Some(map) => mapped::wrap(conn, raw, &relation, map)?.into_parts(),
        None => (relation, None, schema::match_columns(raw, &described)?),
    };
    Ok(ResolvedSource {
        raw: raw.into(),
        relation,
        tolerant,
        columns,
        lake_snapshot: Some(snapshot),
        lake_snapshot_millis: millis,
        rebuild: None,
        read: parcel,
        any_order,
    })
}

/// The lake snapshot the serving layer reflects (0: built from the table while it had none)
/// and its recorded commit time. A lake refresh must read the same Paimon table the serving
/// layer was built from.
fn built_lake_snapshot(conn: &Connection, path: &str, access: &Access) -> Result<Option<(i64, Option<i64>)>> {
    let (snapshot, source, millis): (Option<i64>, Option<String>, Option<i64>) = conn
        .query_row(&format!("SELECT lake_snapshot, source, lake_snapshot_millis FROM {META}"), [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(|e| not_built("serving_refresh", e))?;
    let refuse = |why: String| Error::Refused { function: "serving_refresh", problem: why };
    match source.as_deref().and_then(|s| Origin::lake_path(s, &access.sandbox)) {
        None => Err(refuse(format!(
            "the serving layer was built from '{}', not from a Paimon table; run serving_build('paimon:{path}') first",
            source.unwrap_or_default()
        ))),
        Some(built) if !same_table(&built, path) => Err(refuse(format!(
            "the serving layer reflects the Paimon table '{built}', not '{path}'; rebuild with serving_build to switch tables"
        ))),
        Some(_) => Ok(Some((snapshot.unwrap_or(0), millis))),
    }
}
