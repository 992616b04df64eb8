//! A Fluss primary-key table's current state, read by the same union read a build does: the
//! lake snapshot Fluss tiered (streamhouse's lake reader, at that snapshot), with every key the
//! changelog changed after it replaced by its last change (or removed by a delete). For
//! `fluss_scan('fluss://...')` and `FROM 'fluss://...'`: the table's own columns, Fluss's types.
//!
//! In Rust over Arrow, never staged in DuckDB: the changed keys are compared as Arrow rows
//! (`RowConverter`), so a composite or non-integer key works as the table declares it.

use std::collections::HashMap;
use std::time::Duration;

use duckdb::arrow::array::{Array, BooleanArray, Int64Array, StringArray, UInt32Array};
use duckdb::arrow::compute::{cast, filter_record_batch, take_record_batch};
use duckdb::arrow::datatypes::{DataType, SchemaRef};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::arrow::row::{OwnedRow, RowConverter, Rows, SortField};

use crate::core::error::{Error, Result};
use crate::fluss::log::{Tail, KIND};
use crate::fluss::table;
use crate::fluss::{lookup, Site};
use crate::lake::{Access, LakeTable};
use crate::serving::stream_source::check;

/// How long the changelog read may take.
const LOG_READ_LIMIT: Duration = Duration::from_secs(120);

/// `batch`'s columns of `schema` (by name), each cast to the type `schema` gives it.
fn conform(site: &Site, batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let failed = |e: duckdb::arrow::error::ArrowError| site.err(format!("reading the table: {e}"));
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let at = batch.schema().index_of(f.name()).map_err(failed)?;
            let c = batch.column(at);
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                cast(c, f.data_type()).map_err(failed)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(failed)
}

/// The table's schema and its current state as batches of that schema.
pub fn current_state(
    site: &Site,
    lake: Option<&str>,
    access: &Access,
    threads: usize,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let facts = table::facts(site)?;
    if facts.primary_keys.is_empty() || facts.partitioned {
        return Err(site.err(
            "fluss_scan reads a non-partitioned primary-key table (a log table's changelog is its content: read it \
             with Fluss's own clients)",
        ));
    }
    let schema = table::schema(site)?;
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let keys: Vec<usize> =
        facts.primary_keys.iter().map(|k| schema.index_of(k).map_err(|e| site.err(e))).collect::<Result<_>>()?;
    let (mut start, end, earliest) = table::union_plan(site, &facts)?;
    let converter =
        RowConverter::new(keys.iter().map(|&k| SortField::new(schema.field(k).data_type().clone())).collect())
            .map_err(|e| site.err(e))?;
    let key_rows = |b: &RecordBatch| {
        let cols: Vec<_> =
            keys.iter().map(|&k| b.column(b.schema().index_of(schema.field(k).name()).unwrap_or(k)).clone()).collect();
        converter.convert_columns(&cols).map_err(|e| site.err(e))
    };
    loop {
        let mut lake_batches = Vec::new();
        if let Some(point) = &start.lake {
            let path = crate::serving::stream_source::lake_path(site, lake)?;
            let lake_table = LakeTable::open("fluss_scan", &path, access)?;
            for batch in lake_table.scan(Some(point.snapshot), None, Some(names.clone()))?.stream(threads) {
                lake_batches.push(conform(site, &batch?, &schema)?);
            }
        }
        let mut tail = Tail::read_from(site, &names, facts.buckets, &start.offsets, None)?;
        let log = tail.read_until(site, &end, LOG_READ_LIMIT)?;
        let last = last_changes(site, &log, &key_rows)?;
        let mut out = Vec::new();
        for batch in lake_batches {
            let rows = key_rows(&batch)?;
            let keep: BooleanArray = rows.iter().map(|r| Some(!last.contains_key(&r.owned()))).collect();
            let kept = filter_record_batch(&batch, &keep).map_err(|e| site.err(e))?;
            if kept.num_rows() > 0 {
                out.push(kept);
            }
        }
        // What is left of the lake part, spot-checked against Fluss's lookups (`check`).
        if let Some(point) = &start.lake {
            if let [key] = keys[..] {
                if let Some(why) = spot_check(site, &schema, key, &out, facts.buckets, &end)? {
                    start = table::log_alone(point.snapshot, &earliest, &why).map_err(|p| site.err(p))?;
                    continue;
                }
            }
        }
        let mut by_batch: HashMap<usize, Vec<u32>> = HashMap::new();
        for (bi, ri, gone) in last.into_values() {
            if !gone {
                by_batch.entry(bi).or_default().push(ri as u32);
            }
        }
        for (bi, mut rows) in by_batch {
            rows.sort_unstable();
            let taken = take_record_batch(&log[bi], &UInt32Array::from(rows)).map_err(|e| site.err(e))?;
            out.push(conform(site, &taken, &schema)?);
        }
        return Ok((schema, out));
    }
}

/// The last change of each key in `log`, in log order (a key lives in one bucket, read in offset
/// order): where it is (batch, row) and whether it removes the key.
fn last_changes(
    site: &Site,
    log: &[RecordBatch],
    key_rows: &dyn Fn(&RecordBatch) -> Result<Rows>,
) -> Result<HashMap<OwnedRow, (usize, usize, bool)>> {
    let mut last = HashMap::new();
    for (bi, batch) in log.iter().enumerate() {
        let rows = key_rows(batch)?;
        let kinds = batch
            .column(batch.schema().index_of(KIND).map_err(|e| site.err(e))?)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| Error::internal("fluss_scan", "the change kind is not text"))?
            .clone();
        for (ri, row) in rows.iter().enumerate() {
            let gone = matches!(kinds.value(ri), "-D" | "-U");
            last.insert(row.owned(), (bi, ri, gone));
        }
    }
    Ok(last)
}

/// The first of up to `check::SAMPLE` rows of the lake part (`lake`, evenly spread over
/// it) that Fluss holds otherwise or not at all, in words; None when all agree or the one key
/// `key` is not an integer column.
fn spot_check(
    site: &Site,
    schema: &SchemaRef,
    key: usize,
    lake: &[RecordBatch],
    buckets: i32,
    end: &table::Position,
) -> Result<Option<String>> {
    let total: usize = lake.iter().map(RecordBatch::num_rows).sum();
    if total == 0 {
        return Ok(None);
    }
    let stride = total.div_ceil(check::SAMPLE);
    let picked: Vec<RecordBatch> = {
        let (mut at, mut out) = (0usize, Vec::new());
        for b in lake {
            let rows: Vec<u32> = (0..b.num_rows()).filter(|i| (at + i) % stride == 0).map(|i| i as u32).collect();
            at += b.num_rows();
            out.push(take_record_batch(b, &UInt32Array::from(rows)).map_err(|e| site.err(e))?);
        }
        out
    };
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let ids = |b: &RecordBatch| -> Result<Vec<Option<i64>>> {
        let c = cast(b.column(key), &DataType::Int64).map_err(|e| site.err(e))?;
        let c = c.as_any().downcast_ref::<Int64Array>().ok_or_else(|| site.err("a key that is not an integer"))?;
        Ok((0..c.len()).map(|i| c.is_valid(i).then(|| c.value(i))).collect())
    };
    let mut sampled: Vec<(i64, OwnedRow)> = Vec::new();
    let whole = RowConverter::new(schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())
        .map_err(|e| site.err(e))?;
    for b in &picked {
        let rows = whole.convert_columns(b.columns()).map_err(|e| site.err(e))?;
        for (i, id) in ids(b)?.into_iter().enumerate() {
            if let Some(id) = id {
                sampled.push((id, rows.row(i).owned()));
            }
        }
    }
    let keys: Vec<i64> = sampled.iter().map(|(k, _)| *k).collect();
    let Some(found) = lookup::rows(site, &names, &keys)? else { return Ok(None) };
    let mut held: HashMap<i64, OwnedRow> = HashMap::new();
    for b in &found {
        let b = conform(site, b, schema)?;
        let rows = whole.convert_columns(b.columns()).map_err(|e| site.err(e))?;
        for (i, id) in ids(&b)?.into_iter().enumerate() {
            if let Some(id) = id {
                held.insert(id, rows.row(i).owned());
            }
        }
    }
    let key_name = schema.field(key).name();
    let differing: Vec<(i64, String)> = sampled
        .into_iter()
        .filter_map(|(id, row)| match held.get(&id) {
            None => Some((id, format!("{key_name} {id}: Fluss holds no such row, the lake part has one"))),
            Some(h) if *h != row => Some((id, format!("{key_name} {id}: Fluss holds another row than the lake part"))),
            Some(_) => None,
        })
        .collect();
    check::settled(site, key_name, buckets, end, differing)
}
