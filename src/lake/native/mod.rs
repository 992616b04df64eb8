//! The lake's own data path: paimon-rust plans a read (snapshot, manifests, splits with their
//! files, levels and deletion vectors); this module reads the planned files itself.
//!
//! Per split it decides a route ([`Route`]):
//! - `Files`: every file stands alone (an append table; a deletion-vector or first-row split
//!   Paimon marks raw-convertible, whose files never repeat a live key). Each file is decoded,
//!   deletion vector applied as a row selection, in parallel.
//! - `Files` too: a primary-key split whose files form one sorted run without retractions (a
//!   compacted bucket, or a bucket written once).
//! - `Merge`: any other primary-key split. Its files are grouped into sorted runs; one run (with
//!   retractions) is read file by file in parallel (each file's keys checked unique and added,
//!   else merged), several runs are merged column by column ([`merge`]) — by their sequence
//!   numbers, or, when the runs' sequence ranges are disjoint, by run order and file order,
//!   without reading the sequence column ([`Merge::Ordered`]).
//! - `PaimonRust`: anything this path does not implement (an engine, an option, a file format,
//!   files of an older schema, object storage) is read by paimon-rust's reader, whose merge is
//!   the reference. A file refused at open (a column missing or stored in another type) falls
//!   back the same way, before any of its rows is read.
//!
//! Invariant: a route never changes a result, only its cost; the property test
//! (test/python/lake/test_native_reader.py) holds every route to paimon-rust's and pypaimon's
//! reads.

mod aggregate;
pub mod decode;
mod engine;
pub mod lookup;
pub mod merge;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use paimon::spec::{BinaryRow, DataFileMeta};
use paimon::table::DataSplit;

pub use engine::Engine;

/// What a table is, as far as routing its splits goes.
#[derive(Debug, Clone)]
pub struct Facts {
    pub schema_id: i64,
    /// The primary-key columns' Arrow types (empty: an append table).
    pub key_types: Vec<DataType>,
    pub deletion_vectors: bool,
    pub remote: bool,
    /// How keys merge, or why this path does not merge them.
    pub engine: Result<Engine, String>,
    /// Whether Java Paimon reads the table with its lookup rule ([`lookup::reads_with_rule`]).
    pub lookup: bool,
    /// Where merging a key's value once per level is wrong (a lookup table whose merge is not
    /// idempotent, [`lookup::levels_matter`]): the engine, named for a refusal.
    pub levels_matter: Option<String>,
}

/// Options that never change which row or value a batch read returns. The rest (a sequence
/// field, a field's aggregate function or sequence group, record-level expiry, ...) route the
/// table to paimon-rust.
fn read_neutral(key: &str) -> bool {
    const PREFIXES: [&str; 6] = ["scan.", "read.", "deletion-vectors.", "data-file.", "metadata.", "dynamic-bucket."];
    crate::core::delta::harmless(key)
        || PREFIXES.iter().any(|p| key.starts_with(p))
        || matches!(
            key,
            "ignore-delete"
                | "partial-update.ignore-delete"
                | "first-row.ignore-delete"
                | "index-file-in-data-file-dir"
                | "force-lookup"
        )
}

impl Facts {
    /// The merge of a table with these options and primary key.
    pub fn engine(options: &HashMap<String, String>, primary_key: bool) -> Result<Engine, String> {
        let ignore_delete = paimon::spec::CoreOptions::new(options).ignore_delete();
        let mut read = Vec::new();
        let engine = match options.get("merge-engine").map(|e| e.to_ascii_lowercase()).as_deref() {
            _ if !primary_key => Engine::Deduplicate,
            None | Some("deduplicate") => Engine::Deduplicate,
            Some("partial-update") => {
                let key = "partial-update.remove-record-on-delete";
                let remove = options.iter().find(|(k, _)| k.eq_ignore_ascii_case(key));
                read.extend(remove.map(|(k, _)| k.clone()));
                let remove_on_delete = remove.is_some_and(|(_, v)| v.trim().eq_ignore_ascii_case("true"));
                Engine::PartialUpdate { ignore_delete, remove_on_delete }
            }
            Some("first-row") => Engine::FirstRow { ignore_delete },
            Some("aggregation") => {
                let (agg, keys) = aggregate::Aggregation::from_options(options)?;
                read = keys;
                Engine::Aggregate(Arc::new(agg))
            }
            Some(other) => return Err(format!("merge-engine {other}")),
        };
        let mut keys: Vec<&String> = options.keys().filter(|k| !read.contains(k)).collect();
        keys.sort();
        match keys.into_iter().find(|k| !read_neutral(&k.to_ascii_lowercase())) {
            Some(key) => Err(format!("option {key}")),
            None => Ok(engine),
        }
    }
}

/// How one split is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Files,
    Merge,
    PaimonRust(String),
    /// Read by no reader: paimon-rust would read it wrong ([`lookup::refusal`]).
    Refused(String),
}

impl Route {
    pub fn name(&self) -> &'static str {
        match self {
            Route::Files => "native files",
            Route::Merge => "native merge",
            Route::PaimonRust(_) => "paimon-rust",
            Route::Refused(_) => "refused",
        }
    }
    pub fn reason(&self) -> Option<&str> {
        match self {
            Route::PaimonRust(why) | Route::Refused(why) => Some(why),
            _ => None,
        }
    }
}

/// Whether and how a native unit's rows are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Every row stands: the files are read as they are (only the columns asked for).
    No,
    /// A key's versions are merged by the sequence numbers and row kinds the files hold.
    Versions,
    /// Merged, the runs given in sequence order (their files' sequence ranges do not overlap):
    /// sequence numbers are not read.
    Ordered,
}

/// One reader thread's share of a read.
pub enum Unit {
    /// Files of one split (indices into its files), each file a sorted run: merged when more
    /// than one, checked and passed on when one.
    Native { split: Arc<DataSplit>, runs: Vec<Vec<usize>>, merge: Merge },
    /// One row group of a file that is a unit alone (one sorted run of one file), handed out
    /// by the thread that opened the file: a large file is read by every thread.
    RowGroup { split: Arc<DataSplit>, file: usize, merge: Merge, footer: decode::Footer, row_group: usize },
    /// A split (or one file of it) read by paimon-rust.
    Paimon(DataSplit),
}

/// The route of `split`, and the sorted runs of its files (indices) for a merge.
pub fn route(split: &DataSplit, facts: &Facts) -> (Route, Vec<Vec<usize>>) {
    match route_of(split, facts) {
        (Route::PaimonRust(why), runs) => match lookup::refusal(split, facts.levels_matter.as_deref(), &why) {
            Some(refused) => (Route::Refused(refused), runs),
            None => (Route::PaimonRust(why), runs),
        },
        other => other,
    }
}

fn route_of(split: &DataSplit, facts: &Facts) -> (Route, Vec<Vec<usize>>) {
    let paimon = |why: String| (Route::PaimonRust(why), Vec::new());
    if facts.remote {
        return paimon("object storage (the native path reads local files)".into());
    }
    let engine = match &facts.engine {
        Ok(e) => e,
        Err(why) => return paimon(why.clone()),
    };
    if split.row_ranges().is_some() {
        return paimon("row ranges".into());
    }
    let files = split.data_files();
    if let Some(f) = files.iter().find(|f| !f.file_name.to_ascii_lowercase().ends_with(".parquet")) {
        let format = f.file_name.rsplit('.').next().unwrap_or("?");
        return paimon(format!("file format {format}"));
    }
    if let Some(f) = files.iter().find(|f| f.schema_id != facts.schema_id) {
        return paimon(format!(
            "files written with schema {} (the table reads schema {})",
            f.schema_id, facts.schema_id
        ));
    }
    let each = || (0..files.len()).map(|i| vec![i]).collect::<Vec<_>>();
    if facts.key_types.is_empty() {
        return (Route::Files, each());
    }
    // paimon-rust's rule for reading a split without a merge (Java's `convertToRawFiles`): with
    // deletion vectors, every file compacted (level > 0) and known to hold no retraction;
    // without, a raw-convertible split (first-row's compacted files) whose files all know their
    // retraction count.
    let materialized = if facts.deletion_vectors {
        files.iter().all(|f| f.level != 0 && f.delete_row_count == Some(0))
    } else {
        matches!(engine, Engine::FirstRow { .. }) && files.iter().all(|f| f.delete_row_count.is_some())
    };
    if split.raw_convertible() && materialized {
        return (Route::Files, each());
    }
    let runs = sorted_runs(files, &facts.key_types);
    // One sorted run whose files hold no retraction is the merged state already: a Paimon
    // writer folds a key's versions before it writes a file (Java's write buffer, pypaimon's
    // flush), and a run's files hold disjoint keys. Read without keys, sequence or row kind.
    if runs.len() == 1 && files.iter().all(|f| f.delete_row_count == Some(0)) {
        return (Route::Files, each());
    }
    (Route::Merge, runs)
}

/// A file's first key column bounds, where its type is known here.
#[derive(PartialEq, PartialOrd)]
enum Bound {
    Int(i64),
    Text(String),
}

fn bound(bytes: &[u8], t: &DataType) -> Option<Bound> {
    let row = BinaryRow::from_serialized_bytes(bytes).ok()?;
    if row.is_null_at(0) {
        return None;
    }
    match t {
        DataType::Int64 => row.get_long(0).ok().map(Bound::Int),
        DataType::Int32 | DataType::Date32 => row.get_int(0).ok().map(|v| Bound::Int(v.into())),
        DataType::Int16 => row.get_short(0).ok().map(|v| Bound::Int(v.into())),
        DataType::Int8 => row.get_byte(0).ok().map(|v| Bound::Int(v.into())),
        DataType::Utf8 => row.get_string(0).ok().map(|s| Bound::Text(s.to_string())),
        _ => None,
    }
}

/// The sorted runs of a bucket's files: each level-0 file is one, a deeper level's files are
/// one when their key ranges are known and disjoint (else each file counts as its own run,
/// which merges the same, with more inputs).
pub fn sorted_runs(files: &[DataFileMeta], key_types: &[DataType]) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut levels: Vec<i32> = files.iter().map(|f| f.level).filter(|&l| l > 0).collect();
    levels.sort_unstable();
    levels.dedup();
    for (i, f) in files.iter().enumerate() {
        if f.level <= 0 {
            runs.push(vec![i]);
        }
    }
    for level in levels {
        let members: Vec<usize> = (0..files.len()).filter(|&i| files[i].level == level).collect();
        let ranged: Option<Vec<(Bound, Bound, usize)>> = match key_types {
            [t] => {
                members.iter().map(|&i| Some((bound(&files[i].min_key, t)?, bound(&files[i].max_key, t)?, i))).collect()
            }
            _ => None,
        };
        match ranged {
            Some(mut r) => {
                r.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
                if r.windows(2).all(|w| w[0].1 < w[1].0) {
                    runs.push(r.into_iter().map(|(_, _, i)| i).collect());
                } else {
                    runs.extend(r.into_iter().map(|(_, _, i)| vec![i]));
                }
            }
            None => runs.extend(members.into_iter().map(|i| vec![i])),
        }
    }
    runs
}

/// The work of a planned read: native units where the route allows, paimon-rust's elsewhere;
/// Err: a split no reader here reads right ([`Route::Refused`]).
pub fn units(splits: Vec<DataSplit>, facts: &Facts, native: bool) -> Result<Vec<Unit>, String> {
    let mut out = Vec::new();
    for split in splits {
        if !native {
            if let Some(refused) = lookup::refusal(&split, facts.levels_matter.as_deref(), lookup::PAIMON_RUST) {
                return Err(refused);
            }
            out.push(Unit::Paimon(split));
            continue;
        }
        let (route, runs) = route(&split, facts);
        let split = Arc::new(split);
        match route {
            Route::Refused(why) => return Err(why),
            Route::PaimonRust(_) => out.push(Unit::Paimon(Arc::unwrap_or_clone(split))),
            Route::Files => {
                let n = split.data_files().len();
                out.extend((0..n).map(|i| Unit::Native {
                    split: split.clone(),
                    runs: vec![vec![i]],
                    merge: Merge::No,
                }));
            }
            Route::Merge if runs.len() == 1 => {
                // One sorted run: its files hold disjoint keys, so each is read on its own.
                out.extend(runs[0].iter().map(|&i| Unit::Native {
                    split: split.clone(),
                    runs: vec![vec![i]],
                    merge: Merge::Versions,
                }));
            }
            Route::Merge => match in_sequence_order(split.data_files(), &runs) {
                Some(runs) => out.push(Unit::Native { split, runs, merge: Merge::Ordered }),
                None => out.push(Unit::Native { split, runs, merge: Merge::Versions }),
            },
        }
    }
    Ok(out)
}

/// What `paimon_read_plan` says of a merge of runs in sequence order ([`Merge::Ordered`]).
pub const ORDERED_MERGE: &str = "versions ordered by their run: no sequence column read";

/// `runs` in sequence order, when no two runs' sequence ranges overlap (level-0 files of
/// successive commits; a compacted level below newer level-0 files): then a key's versions are
/// ordered by their run, and within a run by file order (a writer sorts a file by key, then
/// sequence), so the merge needs no sequence column. (Retraction counts cannot stand in for
/// the row-kind column: pypaimon records 0 whatever it wrote.)
pub fn in_sequence_order(files: &[DataFileMeta], runs: &[Vec<usize>]) -> Option<Vec<Vec<usize>>> {
    let range = |run: &Vec<usize>| {
        let lo = run.iter().map(|&i| files[i].min_sequence_number).min()?;
        let hi = run.iter().map(|&i| files[i].max_sequence_number).max()?;
        (lo <= hi).then_some((lo, hi))
    };
    let mut ranged: Vec<((i64, i64), Vec<usize>)> =
        runs.iter().map(|run| range(run).map(|r| (r, run.clone()))).collect::<Option<_>>()?;
    ranged.sort_by_key(|(r, _)| *r);
    if !ranged.windows(2).all(|w| w[0].0 .1 < w[1].0 .0) {
        return None;
    }
    Some(ranged.into_iter().map(|(_, run)| run).collect())
}

/// The local data files of `split` when they may be read as they are by any Parquet reader that
/// selects the table's columns by name (DuckDB's own, for `FROM 'paimon:<dir>'`): the split
/// routes to `Files`, no file has a deletion vector, and every file's footer holds each column
/// of `shape` in the table's type, under a name no other column of the file shares ignoring case.
pub fn plain_files(split: &DataSplit, facts: &Facts, shape: &Shape) -> Option<Vec<String>> {
    if route(split, facts).0 != Route::Files {
        return None;
    }
    let (schema, _) = shape.read(Merge::No);
    (0..split.data_files().len())
        .map(|i| {
            if split.deletion_file_for_data_file_index(i).is_some() {
                return None;
            }
            let footer = decode::footer(&open_file(split, i).ok()?, schema.clone()).ok()?;
            footer.names_distinct_ignoring_case().then(|| local_path(split, i))
        })
        .collect()
}

/// File `i` of `split` as a local path.
fn local_path(split: &DataSplit, i: usize) -> String {
    let path = split.data_file_path(&split.data_files()[i]);
    path.strip_prefix("file://").or_else(|| path.strip_prefix("file:")).unwrap_or(&path).to_string()
}

/// The split paimon-rust reads in place of a native unit refused at open.
pub fn fallback_split(split: &DataSplit, runs: &[Vec<usize>]) -> paimon::Result<DataSplit> {
    let mut files: Vec<usize> = runs.iter().flatten().copied().collect();
    files.sort_unstable();
    if files.len() == split.data_files().len() {
        return Ok(split.clone());
    }
    let mut b = DataSplit::builder()
        .with_snapshot(split.snapshot_id())
        .with_partition(split.partition().clone())
        .with_bucket(split.bucket())
        .with_bucket_path(split.bucket_path().to_string())
        .with_total_buckets(split.total_buckets())
        .with_data_files(files.iter().map(|&i| split.data_files()[i].clone()).collect())
        .with_raw_convertible(files.len() == 1 || split.raw_convertible());
    if let Some(dv) = split.data_deletion_files() {
        b = b.with_data_deletion_files(files.iter().map(|&i| dv.get(i).cloned().flatten()).collect());
    }
    b.build()
}

/// What a native unit reads: the result columns, and for a merge the key columns and system
/// columns after them.
pub struct Shape {
    pub outputs: Vec<Field>,
    /// Key columns, by name, with their types.
    pub keys: Vec<Field>,
}

impl Shape {
    /// The columns read from each file, and where the merge finds keys, sequence and kind.
    pub fn read(&self, merge: Merge) -> (SchemaRef, merge::Layout) {
        let mut fields = self.outputs.clone();
        let mut keys = Vec::new();
        if merge != Merge::No {
            for k in &self.keys {
                match fields.iter().position(|f| f.name() == k.name()) {
                    Some(i) => keys.push(i),
                    None => {
                        keys.push(fields.len());
                        fields.push(k.clone());
                    }
                }
            }
        }
        // After the fields: the sequence number (where the merge reads it), then the row kind.
        let sequence = merge == Merge::Versions;
        let at = fields.len();
        let layout = merge::Layout {
            outputs: self.outputs.len(),
            keys,
            seq: sequence.then_some(at),
            kind: at + usize::from(sequence),
        };
        (decode::read_schema(&fields, sequence, merge != Merge::No), layout)
    }
}

/// Result batches of one native unit, or the refusal that sends it to paimon-rust.
pub type Batches = Box<dyn Iterator<Item = Result<RecordBatch, String>> + Send>;

/// What reading a native unit needs besides the unit.
pub struct Read<'a> {
    pub shape: &'a Shape,
    pub engine: Engine,
    /// Whether the merge takes Java Paimon's lookup rule (`Facts::lookup`).
    pub lookup: bool,
    pub batch_size: usize,
    /// File `i`'s deleted row positions (its deletion vector), if any.
    pub deleted: &'a dyn Fn(usize) -> Result<Option<Vec<u64>>, String>,
}

fn open_file(split: &DataSplit, i: usize) -> Result<std::fs::File, decode::Refusal> {
    let local = local_path(split, i);
    std::fs::File::open(&local).map_err(|e| decode::Refusal::Failed(format!("cannot open data file {local}: {e}")))
}

/// Opens a native unit: every file's footer is read and checked before any row is, so a
/// refusal leaves nothing half-read. A unit of one file with several row groups reads its
/// first and returns the others as units of their own.
pub fn open_unit(
    split: &Arc<DataSplit>,
    runs: &[Vec<usize>],
    merge: Merge,
    read: &Read,
) -> Result<(Batches, Vec<Unit>), decode::Refusal> {
    let (schema, _) = read.shape.read(merge);
    let mut footers: Vec<Vec<(usize, decode::Footer)>> = Vec::with_capacity(runs.len());
    for run in runs {
        let mut files = Vec::with_capacity(run.len());
        for &i in run {
            files.push((i, decode::footer(&open_file(split, i)?, schema.clone())?));
        }
        footers.push(files);
    }
    if let [run] = footers.as_slice() {
        if let [(file, footer)] = run.as_slice() {
            if footer.row_groups() > 1 {
                let rest = (1..footer.row_groups())
                    .map(|g| Unit::RowGroup {
                        split: split.clone(),
                        file: *file,
                        merge,
                        footer: footer.clone(),
                        row_group: g,
                    })
                    .collect();
                return Ok((open_row_group(split, *file, merge, footer, 0, read)?, rest));
            }
        }
    }
    let mut opened: Vec<Vec<decode::FileBatches>> = Vec::with_capacity(runs.len());
    for run in footers {
        let mut files = Vec::with_capacity(run.len());
        for (i, footer) in run {
            let dv = (read.deleted)(i).map_err(decode::Refusal::Failed)?;
            files.push(footer.read(open_file(split, i)?, None, dv.as_deref(), read.batch_size)?);
        }
        opened.push(files);
    }
    let levels = runs.iter().map(|run| run.first().map_or(0, |&i| split.data_files()[i].level)).collect();
    Ok((finish(opened, merge, read, levels), Vec::new()))
}

/// Opens one row group of a file whose footer another unit read.
pub fn open_row_group(
    split: &DataSplit,
    file: usize,
    merge: Merge,
    footer: &decode::Footer,
    row_group: usize,
    read: &Read,
) -> Result<Batches, decode::Refusal> {
    let dv = (read.deleted)(file).map_err(decode::Refusal::Failed)?;
    let batches = footer.read(open_file(split, file)?, Some(row_group), dv.as_deref(), read.batch_size)?;
    Ok(finish(vec![vec![batches]], merge, read, Vec::new()))
}

/// The unit's result: its files' batches as they are, or their runs (at `levels`) merged.
fn finish(opened: Vec<Vec<decode::FileBatches>>, merge: Merge, read: &Read, levels: Vec<i32>) -> Batches {
    if merge == Merge::No {
        return Box::new(opened.into_iter().flatten().flatten());
    }
    let (_, layout) = read.shape.read(merge);
    let out_schema = Arc::new(arrow_schema::Schema::new(read.shape.outputs.clone()));
    let key_types: Vec<DataType> = read.shape.keys.iter().map(|f| f.data_type().clone()).collect();
    let runs: Vec<merge::Run> =
        opened.into_iter().map(|files| Box::new(files.into_iter().flatten()) as merge::Run).collect();
    let merger = merge::Merger::new(runs, layout, read.engine.clone(), &key_types, out_schema);
    Box::new(match read.lookup && levels.len() > 1 {
        true => merger.with_levels(levels),
        false => merger,
    })
}
