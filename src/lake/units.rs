//! A planned read cut into units — a split, or a file of a split that needs no merge — handed
//! out once each to whichever thread asks and read on that thread, batch by batch: by the native
//! path (`native`: our Parquet decode and merge) where it applies, else by paimon-rust's reader,
//! each batch crossing to Arrow 60 (`arrow_bridge`). `paimon_scan` and a build's load read the
//! units on DuckDB's own threads; `Scan::stream` on reader threads of ours (`stream`). Memory
//! stays bounded by the units in flight, whatever the table's size.

use std::sync::{Arc, Condvar, Mutex};

use duckdb::arrow::record_batch::RecordBatch as Batch60;
use futures::StreamExt;
use paimon::spec::Predicate;
use paimon::table::DataSplit;
use paimon::Table;

use super::arrow_bridge::to_arrow60;
use super::native;
use super::site::Site;
use crate::core::error::Result;

/// What the native path needs of a planned read, resolved once.
pub(super) struct NativeRead {
    pub(super) facts: native::Facts,
    pub(super) shape: native::Shape,
    pub(super) batch_size: usize,
}

impl NativeRead {
    fn with<'a>(
        &'a self,
        deleted: &'a dyn Fn(usize) -> std::result::Result<Option<Vec<u64>>, String>,
    ) -> native::Read<'a> {
        native::Read {
            shape: &self.shape,
            engine: self.facts.engine.clone().unwrap_or(native::Engine::Deduplicate),
            lookup: self.facts.lookup,
            batch_size: self.batch_size,
            deleted,
        }
    }
}

/// One unit's batches (never empty ones), read on the thread that pulls them.
pub type UnitBatches = Box<dyn Iterator<Item = Result<Batch60>> + Send>;

/// What opening a unit needs besides the unit.
pub(super) struct UnitContext {
    pub(super) table: Table,
    pub(super) columns: Option<Vec<String>>,
    pub(super) filter: Option<Predicate>,
    pub(super) read: Option<NativeRead>,
    pub(super) place: Site,
    pub(super) remote: bool,
}

/// A planned read cut into units — a split, or a file of a split that needs no merge — handed
/// out once each to whichever thread asks, and read on that thread: `paimon_scan` reads them
/// on DuckDB's own threads (so `threads` bounds the decoding and merging, and batches need no
/// hand-over), as does a build's load (`serving::handoff`); `Scan::stream` on reader threads of
/// its own.
pub struct Units {
    units: Vec<native::Unit>,
    queue: Mutex<Queue>,
    /// Signalled when a unit being opened is open (and what it handed on is queued).
    opened: Condvar,
    ctx: Option<UnitContext>,
}

/// What is left to hand out.
#[derive(Default)]
struct Queue {
    /// The index of the next planned unit.
    next: usize,
    /// Units an opened unit handed on (the other row groups of its file), taken first.
    more: Vec<native::Unit>,
    /// Units being opened now: each may still hand units on, so "no more" waits for them.
    opening: usize,
}

/// A unit being opened: counted until dropped, panics included, so no thread waits forever.
struct Opening<'a>(&'a Units);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.lock().opening -= 1;
        self.0.opened.notify_all();
    }
}

impl Units {
    pub(super) fn new(units: Vec<native::Unit>, ctx: Option<UnitContext>) -> Units {
        Units { units, queue: Mutex::default(), opened: Condvar::new(), ctx }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many units the read is planned as (threads beyond that would idle until a file of
    /// several row groups is opened).
    pub fn len(&self) -> usize {
        self.units.len()
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// The next unit not yet handed out, opened (a native unit has read and checked every
    /// file's footer), or None when all have been — never while another thread is still
    /// opening a unit, which may hand on more.
    pub fn next(&self) -> Option<Result<UnitBatches>> {
        let ctx = self.ctx.as_ref()?;
        let mut queue = self.lock();
        // A unit handed on, or the index of a planned one.
        let taken: std::result::Result<native::Unit, usize> = loop {
            if let Some(unit) = queue.more.pop() {
                break Ok(unit);
            }
            if queue.next < self.units.len() {
                queue.next += 1;
                break Err(queue.next - 1);
            }
            if queue.opening == 0 {
                return None;
            }
            queue = self.opened.wait(queue).unwrap_or_else(|p| p.into_inner());
        };
        queue.opening += 1;
        drop(queue);
        let opening = Opening(self);
        let unit = match &taken {
            Ok(unit) => unit,
            Err(i) => &self.units[*i],
        };
        let opened = ctx.open(unit).map(|(batches, more)| {
            self.lock().more.extend(more);
            batches
        });
        drop(opening);
        Some(opened)
    }
}

impl UnitContext {
    /// Opens `unit`; also returns the units it hands on (see [`native::open_unit`]).
    fn open(&self, unit: &native::Unit) -> Result<(UnitBatches, Vec<native::Unit>)> {
        let paimon = |split: DataSplit| self.paimon(split).map(|b| (b, Vec::new()));
        let read = match (unit, &self.read) {
            (native::Unit::Paimon(split), _) => return paimon(split.clone()),
            (_, Some(read)) => read,
            (_, None) => return Err(self.place.err("internal error: a native unit without its read")),
        };
        let deleted_of = |split: &Arc<DataSplit>| {
            let split = split.clone();
            move |f: usize| deleted_rows(&split, f)
        };
        let opened = match unit {
            native::Unit::Native { split, runs, merge } => {
                let deleted = deleted_of(split);
                match native::open_unit(split, runs, *merge, &read.with(&deleted)) {
                    Err(native::decode::Refusal::Unsupported(why)) => {
                        let split = native::fallback_split(split, runs).map_err(|e| self.place.paimon_err(e))?;
                        if let Some(refused) =
                            native::lookup::refusal(&split, read.facts.levels_matter.as_deref(), &why)
                        {
                            return Err(self.place.err(refused));
                        }
                        return paimon(split);
                    }
                    other => other,
                }
            }
            native::Unit::RowGroup { split, file, merge, footer, row_group } => {
                let deleted = deleted_of(split);
                native::open_row_group(split, *file, *merge, footer, *row_group, &read.with(&deleted))
                    .map(|b| (b, Vec::new()))
            }
            native::Unit::Paimon(_) => unreachable!("handled above"),
        };
        let (batches, more) = opened.map_err(|e| match e {
            native::decode::Refusal::Unsupported(e) | native::decode::Refusal::Failed(e) => self.place.err(e),
        })?;
        let place = self.place.clone();
        let batches: UnitBatches = Box::new(batches.filter_map(move |batch| match batch {
            Ok(b) if b.num_rows() == 0 => None,
            Ok(b) => Some(to_arrow60(&b).map_err(|e| place.err(e))),
            Err(e) => Some(Err(place.err(e))),
        }));
        Ok((batches, more))
    }

    /// A split read by paimon-rust's reader, driven batch by batch on the pulling thread.
    fn paimon(&self, split: DataSplit) -> Result<UnitBatches> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| self.place.err(e))?;
        let open = async {
            let mut rb = self.table.new_read_builder();
            if let Some(columns) = &self.columns {
                let names: Vec<&str> = columns.iter().map(String::as_str).collect();
                rb.with_projection(&names)?;
            }
            if let Some(filter) = &self.filter {
                rb.with_filter(filter.clone());
            }
            rb.new_read()?.to_arrow(std::slice::from_ref(&split))
        };
        let stream = self.place.block_on_in(&rt, self.remote, open)?;
        Ok(Box::new(PaimonBatches { rt, stream, place: self.place.clone(), done: false }))
    }
}

/// paimon-rust's batches of one split, each awaited on a runtime of the unit's own.
struct PaimonBatches {
    rt: tokio::runtime::Runtime,
    stream: paimon::table::ArrowRecordBatchStream,
    place: Site,
    done: bool,
}

impl Iterator for PaimonBatches {
    type Item = Result<Batch60>;
    fn next(&mut self) -> Option<Result<Batch60>> {
        while !self.done {
            let item = match self.rt.block_on(self.stream.next()) {
                None => None,
                Some(Ok(b)) if b.num_rows() == 0 => continue,
                Some(Ok(b)) => Some(to_arrow60(&b).map_err(|e| self.place.err(e))),
                Some(Err(e)) => Some(Err(self.place.paimon_err(e))),
            };
            // An error ends the unit: what follows it is not the split's state.
            self.done = !matches!(item, Some(Ok(_)));
            return item;
        }
        None
    }
}

/// The deleted row positions of file `f` of `split` (its deletion vector), if it has one.
fn deleted_rows(split: &DataSplit, f: usize) -> std::result::Result<Option<Vec<u64>>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let Some(df) = split.deletion_file_for_data_file_index(f) else { return Ok(None) };
    let path = df.path();
    let local = path.strip_prefix("file://").or_else(|| path.strip_prefix("file:")).unwrap_or(path);
    let cannot = |e: std::io::Error| format!("cannot read the deletion vector file {local}: {e}");
    let mut file = std::fs::File::open(local).map_err(cannot)?;
    let offset =
        u64::try_from(df.offset()).map_err(|_| format!("deletion vector offset {} is negative", df.offset()))?;
    let length =
        u64::try_from(df.length()).map_err(|_| format!("deletion vector length {} is negative", df.length()))?;
    file.seek(SeekFrom::Start(offset)).map_err(cannot)?;
    // A v1 entry is followed by 8 bytes its length does not count; a v2 entry counts them.
    let mut bytes = Vec::new();
    file.take(length.saturating_add(8)).read_to_end(&mut bytes).map_err(cannot)?;
    native::decode::deletion_positions(&bytes).map(Some)
}
