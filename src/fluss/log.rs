//! A Fluss table's changelog as Arrow 60 batches: the table's columns (those asked for), then
//! `__kind` ('+I', '-U', '+U', '-D'), `__bucket` and `__offset`, so the caller can keep the last
//! change per key (a key lives in one bucket, where offsets order its changes).
//!
//! `Tail` is one long-lived scanner from a position: `read_until` drains it up to end offsets
//! taken beforehand (a bounded read: a build finishes), `poll` takes what has arrived (a
//! follower's tick). Records at or past an end offset are never returned by `read_until`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array_59::{Array as _, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array};
use duckdb::arrow::record_batch::RecordBatch as Batch60;
use fluss::client::LogScanner;
use fluss::metadata::TablePath;
use fluss::record::{ChangeType, ScanRecord};

use super::table::Position;
use super::Site;
use crate::core::error::{Error, Result};

/// The columns a changelog batch adds after the table's.
pub const KIND: &str = "__kind";
pub const BUCKET: &str = "__bucket";
pub const OFFSET: &str = "__offset";

/// A scanner of one table's changelog and where each bucket has got to.
pub struct Tail {
    scanner: LogScanner,
    /// The next offset to read, per subscribed bucket.
    pub position: Position,
}

fn kind(c: &ChangeType) -> &'static str {
    match c {
        ChangeType::Insert | ChangeType::AppendOnly => "+I",
        ChangeType::UpdateBefore => "-U",
        ChangeType::UpdateAfter => "+U",
        ChangeType::Delete => "-D",
    }
}

/// Arrow 59 (fluss-rs) → Arrow 60 (DuckDB) through the C Data Interface, without copying.
fn to_arrow60(batch: &RecordBatch) -> std::result::Result<Batch60, String> {
    let as_struct: arrow_array_59::StructArray = batch.clone().into();
    let (array, schema) = arrow_array_59::ffi::to_ffi(&as_struct.to_data()).map_err(|e| e.to_string())?;
    // SAFETY: FFI_ArrowArray / FFI_ArrowSchema are the #[repr(C)] structs of the Arrow C Data
    // Interface; both arrow-rs versions define exactly that layout, so moving them bitwise hands
    // ownership (and the release callback) from one to the other.
    let (array, schema) = unsafe {
        (
            std::mem::transmute::<arrow_array_59::ffi::FFI_ArrowArray, duckdb::arrow::ffi::FFI_ArrowArray>(array),
            std::mem::transmute::<arrow_array_59::ffi::FFI_ArrowSchema, duckdb::arrow::ffi::FFI_ArrowSchema>(schema),
        )
    };
    // SAFETY: `array` and `schema` were just exported by arrow-rs and are valid and unshared.
    let data = unsafe { duckdb::arrow::ffi::from_ffi(array, &schema) }.map_err(|e| e.to_string())?;
    Ok(duckdb::arrow::array::StructArray::from(data).into())
}

/// The records of one bucket as batches: runs of records from the same fetched batch are taken
/// from it by row index, then the kind, bucket and offset columns appended.
fn batches_of(bucket: i32, records: &[ScanRecord]) -> std::result::Result<Vec<Batch60>, String> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let Some(source) = records[start].row().get_record_batch() else {
            return Err("a changelog record without its batch".into());
        };
        let mut end = start + 1;
        while end < records.len() && records[end].row().get_record_batch().is_some_and(|b| std::ptr::eq(b, source)) {
            end += 1;
        }
        let run = &records[start..end];
        let rows = UInt32Array::from(run.iter().map(|r| r.row().get_row_id() as u32).collect::<Vec<_>>());
        let taken = arrow_select_59::take::take_record_batch(source, &rows).map_err(|e| e.to_string())?;
        let mut fields: Vec<arrow_schema_59::Field> =
            taken.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        let mut columns: Vec<ArrayRef> = taken.columns().to_vec();
        fields.push(arrow_schema_59::Field::new(KIND, arrow_schema_59::DataType::Utf8, false));
        columns.push(Arc::new(StringArray::from(run.iter().map(|r| kind(r.change_type())).collect::<Vec<_>>())));
        fields.push(arrow_schema_59::Field::new(BUCKET, arrow_schema_59::DataType::Int32, false));
        columns.push(Arc::new(Int32Array::from(vec![bucket; run.len()])));
        fields.push(arrow_schema_59::Field::new(OFFSET, arrow_schema_59::DataType::Int64, false));
        columns.push(Arc::new(Int64Array::from(run.iter().map(|r| r.offset()).collect::<Vec<_>>())));
        let batch =
            RecordBatch::try_new(Arc::new(arrow_schema_59::Schema::new(fields)), columns).map_err(|e| e.to_string())?;
        debug_assert_eq!(batch.num_rows(), run.len());
        out.push(to_arrow60(&batch)?);
        start = end;
    }
    Ok(out)
}

impl Tail {
    /// A scanner of `columns` subscribed at `from` (buckets missing there start at offset 0).
    pub fn open(site: &Site, columns: &[String], buckets: i32, from: &Position) -> Result<Tail> {
        let conn = site.connection()?;
        let path = TablePath::new(site.address.database.clone(), site.address.table.clone());
        let table = site.block_on(conn.get_table(&path))?;
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        let scanner = site.within(|| table.new_scan().project_by_name(&names)?.create_log_scanner())?;
        let position = Position((0..buckets).map(|b| (b, from.at(b))).collect());
        let start: std::collections::HashMap<i32, i64> = position.0.iter().map(|(b, o)| (*b, *o)).collect();
        site.block_on(scanner.subscribe_buckets(&start))?;
        Ok(Tail { scanner, position })
    }

    /// What has arrived within `wait`, with no end (a follower's tick); advances the position.
    pub fn poll(&mut self, site: &Site, wait: Duration) -> Result<Vec<Batch60>> {
        self.take(site, wait, None)
    }

    /// Everything up to (not including) `end`, polling until every bucket reached it or `limit`
    /// passed (then an error names the buckets still behind).
    pub fn read_until(&mut self, site: &Site, end: &Position, limit: Duration) -> Result<Vec<Batch60>> {
        let started = Instant::now();
        let mut out = Vec::new();
        loop {
            let behind: Vec<i32> = end.0.iter().filter(|(b, e)| self.position.at(**b) < **e).map(|(b, _)| *b).collect();
            if behind.is_empty() {
                return Ok(out);
            }
            if started.elapsed() > limit {
                return Err(site.err(format!(
                    "the changelog of bucket(s) {behind:?} did not reach its end offsets {} within {} s (read up \
                     to {})",
                    end.encode(),
                    limit.as_secs(),
                    self.position.encode()
                )));
            }
            out.extend(self.take(site, Duration::from_millis(200), Some(end))?);
        }
    }

    fn take(&mut self, site: &Site, wait: Duration, end: Option<&Position>) -> Result<Vec<Batch60>> {
        let records = site.block_on_within(wait + super::CALL_TIMEOUT, self.scanner.poll(wait))?;
        let mut out = Vec::new();
        let by_bucket: BTreeMap<i32, Vec<ScanRecord>> =
            records.into_records_by_buckets().into_iter().map(|(b, r)| (b.bucket_id(), r)).collect();
        for (bucket, mut records) in by_bucket {
            if let Some(end) = end {
                let limit = end.at(bucket);
                records.retain(|r| r.offset() < limit);
            }
            // A record at or below the position was read before (a resubscription re-delivers).
            let from = self.position.at(bucket);
            records.retain(|r| r.offset() >= from);
            if let Some(last) = records.last() {
                self.position.0.insert(bucket, last.offset() + 1);
            }
            out.extend(batches_of(bucket, &records).map_err(|e| Error::internal(site.function, e))?);
        }
        Ok(out)
    }
}
