//! A Fluss table's changelog as Arrow 60 batches: the table's columns (those asked for), then
//! `__kind` ('+I', '-U', '+U', '-D'), `__bucket` and `__offset`, so the caller can keep the last
//! change per key (a key lives in one bucket, where offsets order its changes).
//!
//! `Tail` is one long-lived scanner from a position: `read_until` drains it up to end offsets
//! taken beforehand (a bounded read: a build finishes), `poll` takes what has arrived (a
//! follower's tick). Records at or past an end offset are never returned by `read_until`.
//!
//! Offsets alone do not name records: a cluster that lost acknowledged records gives their
//! offsets to new ones. So the position keeps, per bucket, the mark (offset, commit time) of the
//! last record read below it, and a tail resumed from a recorded position first reads that record
//! again: until every bucket's mark is confirmed nothing is returned, and a mismatch is reported
//! (`Polled::Reused`) instead of records. A build's tail starts a little below its start offsets
//! (`LOOK_BACK`) so the position it records has marks even where the build read nothing new.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array_59::{Array as _, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array};
use duckdb::arrow::record_batch::RecordBatch as Batch60;
use fluss::client::LogScanner;
use fluss::metadata::TablePath;
use fluss::record::{ChangeType, ScanRecord};

use super::table::{Mark, Position};
use super::Site;
use crate::core::error::{Error, Result};

/// The columns a changelog batch adds after the table's.
pub const KIND: &str = "__kind";
pub const BUCKET: &str = "__bucket";
pub const OFFSET: &str = "__offset";

/// How far below a build's start offsets its scanner starts, to find the last record before them
/// (their mark): records there are read, never returned.
const LOOK_BACK: i64 = 64;
/// How long a resumed tail may take to read back the marked records that check its position.
const CHECK_LIMIT: Duration = Duration::from_secs(10);
/// How long a bounded read that reached its end offsets still waits for a bucket's mark (a
/// look-back whose records have not come in; none come when those offsets hold no records).
const MARK_GRACE: Duration = Duration::from_secs(2);

/// A scanner of one table's changelog and where each bucket has got to.
pub struct Tail {
    scanner: LogScanner,
    /// The next offset to read, per subscribed bucket, with the mark of the last record read.
    pub position: Position,
    /// Resumed buckets whose recorded mark has not been read back yet.
    checks: BTreeMap<i32, Mark>,
    /// Resumed buckets whose mark was confirmed: any record between it and the position is one
    /// the layer never saw at an offset it had passed.
    checked: BTreeMap<i32, Mark>,
    /// Records read while checks are pending: returned once every check passed.
    held: Vec<Batch60>,
    /// Set by a read that found the log no longer holds what the position says was read.
    reused: Option<String>,
    /// A bounded read that learns marks: where each bucket was subscribed (below its start).
    learning: Option<BTreeMap<i32, i64>>,
    opened: Instant,
}

/// What a poll of a resumed tail brings.
pub enum Polled {
    Batches(Vec<Batch60>),
    /// The log no longer holds what the position says was read (why, in words).
    Reused(String),
}

/// What a record read back at or after a resumed bucket's mark says about its position.
#[derive(Debug, PartialEq, Eq)]
enum Judged {
    /// Before the mark (a fetch re-delivers from its batch's start): says nothing.
    Earlier,
    /// The marked record itself, unchanged.
    Confirmed,
    Reused(String),
}

/// Judges the first record read at or after `mark` (`at`, committed at `committed`) in a bucket
/// whose check is pending. Pure.
fn judge_mark(bucket: i32, mark: Mark, at: i64, committed: i64) -> Judged {
    let lost = "the cluster lost records the layer had applied and gave their offsets to new ones";
    if at < mark.offset {
        Judged::Earlier
    } else if at == mark.offset && committed == mark.committed {
        Judged::Confirmed
    } else if at == mark.offset {
        Judged::Reused(format!(
            "bucket {bucket}'s record at offset {at} is not the one the layer applied (that was committed at epoch ms \
             {}, this at {committed}): {lost}",
            mark.committed
        ))
    } else {
        Judged::Reused(format!(
            "bucket {bucket} holds no record at offset {} any more (the layer applied one committed at epoch ms {}; \
             the next is at offset {at}): {lost}",
            mark.offset, mark.committed
        ))
    }
}

/// A record at `at` between a confirmed mark and the position: the layer passed that offset
/// when it held no record. Pure.
fn judge_gap(bucket: i32, mark: Mark, position: i64, at: i64) -> Option<String> {
    (at > mark.offset && at < position).then(|| {
        format!(
            "bucket {bucket} holds a record at offset {at}, which the layer's position {position} had passed when the \
             log held none after offset {}: the cluster lost records the layer had read and gave their offsets to \
             new ones",
            mark.offset
        )
    })
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
pub(crate) fn to_arrow60(batch: &RecordBatch) -> std::result::Result<Batch60, String> {
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
    fn open(
        site: &Site,
        columns: &[String],
        subscribe: &BTreeMap<i32, i64>,
        position: Position,
        checks: BTreeMap<i32, Mark>,
    ) -> Result<Tail> {
        let conn = site.connection()?;
        let path = TablePath::new(site.address.database.clone(), site.address.table.clone());
        let table = site.block_on(conn.get_table(&path))?;
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        let scanner = site.within(|| table.new_scan().project_by_name(&names)?.create_log_scanner())?;
        let start: std::collections::HashMap<i32, i64> = subscribe.iter().map(|(b, o)| (*b, *o)).collect();
        site.block_on(scanner.subscribe_buckets(&start))?;
        let (checked, held, reused, learning, opened) = (BTreeMap::new(), Vec::new(), None, None, Instant::now());
        Ok(Tail { scanner, position, checks, checked, held, reused, learning, opened })
    }

    /// A scanner of `columns` for a bounded read from `start` (buckets missing there start at
    /// offset 0). With `look_back` (the log's earliest offsets) it starts up to `LOOK_BACK`
    /// records lower, to learn each bucket's mark.
    pub fn read_from(
        site: &Site,
        columns: &[String],
        buckets: i32,
        start: &Position,
        look_back: Option<&Position>,
    ) -> Result<Tail> {
        let position = Position::of((0..buckets).map(|b| (b, start.at(b))).collect());
        let subscribe: BTreeMap<i32, i64> = position
            .offsets
            .iter()
            .map(|(b, o)| (*b, look_back.map_or(*o, |earliest| (*o - LOOK_BACK).max(earliest.at(*b)).min(*o))))
            .collect();
        let mut tail = Tail::open(site, columns, &subscribe, position, BTreeMap::new())?;
        tail.learning = look_back.map(|_| subscribe);
        Ok(tail)
    }

    /// A scanner of `columns` continuing from a recorded position. With `check`, each marked
    /// bucket from its mark, which is read back and checked before any record is returned.
    pub fn resume(site: &Site, columns: &[String], buckets: i32, recorded: &Position, check: bool) -> Result<Tail> {
        let mut position = Position::of((0..buckets).map(|b| (b, recorded.at(b))).collect());
        position.marks = recorded.marks.clone();
        let checks: BTreeMap<i32, Mark> = recorded
            .marks
            .iter()
            .filter(|(b, _)| check && position.offsets.contains_key(b))
            .map(|(b, m)| (*b, *m))
            .collect();
        let subscribe =
            position.offsets.iter().map(|(b, o)| (*b, checks.get(b).map_or(*o, |m| m.offset.min(*o)))).collect();
        Tail::open(site, columns, &subscribe, position, checks)
    }

    /// What has arrived within `wait`, with no end (a follower's tick); advances the position.
    /// Nothing is returned while a resumed bucket's mark is still to be read back; that taking
    /// longer than `CHECK_LIMIT` is an error naming the bucket.
    pub fn poll(&mut self, site: &Site, wait: Duration) -> Result<Polled> {
        let batches = self.take(site, wait, None)?;
        if let Some(why) = self.reused.take() {
            return Ok(Polled::Reused(why));
        }
        if self.checks.is_empty() {
            let mut out = std::mem::take(&mut self.held);
            out.extend(batches);
            return Ok(Polled::Batches(out));
        }
        self.held.extend(batches);
        if self.opened.elapsed() > CHECK_LIMIT {
            let (bucket, mark) = self.checks.iter().next().expect("a pending check");
            return Err(site.err(format!(
                "bucket {bucket}'s record at offset {} (the last the layer applied) could not be read back within {} \
                 s to check that the log still holds it",
                mark.offset,
                CHECK_LIMIT.as_secs()
            )));
        }
        Ok(Polled::Batches(Vec::new()))
    }

    /// Everything up to (not including) `end`, polling until every bucket reached it or `limit`
    /// passed (then an error names the buckets still behind). A read that learns marks waits
    /// `MARK_GRACE` more for a bucket with offsets read but no record yet (then it has no mark).
    pub fn read_until(&mut self, site: &Site, end: &Position, limit: Duration) -> Result<Vec<Batch60>> {
        let started = Instant::now();
        let mut reached: Option<Instant> = None;
        let mut out = Vec::new();
        loop {
            let behind: Vec<i32> =
                end.offsets.iter().filter(|(b, e)| self.position.at(**b) < **e).map(|(b, _)| *b).collect();
            if behind.is_empty() {
                let unmarked = self.learning.as_ref().is_some_and(|from| {
                    end.offsets
                        .iter()
                        .any(|(b, e)| from.get(b).is_some_and(|f| f < e) && !self.position.marks.contains_key(b))
                });
                if !unmarked || reached.get_or_insert_with(Instant::now).elapsed() > MARK_GRACE {
                    return Ok(out);
                }
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
            let from = self.position.at(bucket);
            let mut kept = Vec::with_capacity(records.len());
            for r in records {
                if let Some(mark) = self.checks.get(&bucket).copied() {
                    match judge_mark(bucket, mark, r.offset(), r.timestamp()) {
                        Judged::Earlier => continue,
                        Judged::Confirmed => {
                            self.checks.remove(&bucket);
                            self.checked.insert(bucket, mark);
                            continue;
                        }
                        Judged::Reused(why) => {
                            self.reused = Some(why);
                            return Ok(Vec::new());
                        }
                    }
                }
                if let Some(why) = self.checked.get(&bucket).and_then(|m| judge_gap(bucket, *m, from, r.offset())) {
                    self.reused = Some(why);
                    return Ok(Vec::new());
                }
                if self.position.marks.get(&bucket).is_none_or(|m| r.offset() >= m.offset) {
                    self.position.marks.insert(bucket, Mark { offset: r.offset(), committed: r.timestamp() });
                }
                // A record below the position was read before (a resubscription re-delivers), or
                // is a build's look-back: only its mark is kept.
                if r.offset() >= from {
                    kept.push(r);
                }
            }
            if let Some(last) = kept.last() {
                self.position.offsets.insert(bucket, last.offset() + 1);
            }
            out.extend(batches_of(bucket, &kept).map_err(|e| Error::internal(site.function, e))?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARK: Mark = Mark { offset: 41, committed: 1_764_900_000_000 };

    #[test]
    fn the_marked_record_confirms_the_position() {
        assert_eq!(judge_mark(2, MARK, 40, 1), Judged::Earlier, "a fetch may re-deliver its batch's start");
        assert_eq!(judge_mark(2, MARK, 41, MARK.committed), Judged::Confirmed);
    }

    #[test]
    fn another_record_at_the_marked_offset_or_none_there_is_reuse() {
        let Judged::Reused(why) = judge_mark(2, MARK, 41, MARK.committed + 15_000) else { panic!("not reuse") };
        assert!(why.contains("bucket 2's record at offset 41 is not the one the layer applied"), "{why}");
        assert!(why.contains("1764900000000") && why.contains("1764900015000"), "{why}");
        let Judged::Reused(why) = judge_mark(2, MARK, 43, MARK.committed) else { panic!("not reuse") };
        assert!(why.contains("no record at offset 41 any more") && why.contains("next is at offset 43"), "{why}");
    }

    #[test]
    fn a_record_where_the_position_had_passed_none_is_reuse() {
        // Marked at 41, position 44: offsets 42 and 43 held no records (empty batches) when recorded.
        assert_eq!(judge_gap(2, MARK, 44, 41), None);
        assert_eq!(judge_gap(2, MARK, 44, 44), None, "at the position: a new record");
        let why = judge_gap(2, MARK, 44, 43).expect("reuse");
        assert!(why.contains("record at offset 43") && why.contains("position 44"), "{why}");
    }
}
