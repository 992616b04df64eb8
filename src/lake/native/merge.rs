//! The merge of a bucket's sorted runs into its merged state, column by column.
//!
//! Every data file of a primary-key table is sorted by key; a bucket's files form sorted runs
//! (each level-0 file one run, each deeper level one run). Rows are merged in rounds: the
//! round's *bound* is the smallest "last key of the loaded batch" over the runs still to be
//! read, so every row with a key below it has all its versions loaded. Those rows are ordered
//! by (key, sequence, add-after-retract) — a stable sort over inputs that are already sorted
//! runs, so it costs a merge, not a sort — and each key's group picks its winning row (per
//! column for partial-update). Winners are gathered with Arrow's `interleave`, one call per
//! column per round: nothing is allocated per key. A round whose rows are one run's unique
//! added keys (a single sorted run, the compacted case) is handed on as a zero-copy slice.
//!
//! Invariants: memory holds one batch per run (plus the rows of a key that straddles batches);
//! the rules per engine are those of paimon-rust's reader, which a property test holds us to.

use std::cmp::Ordering;
use std::collections::VecDeque;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, SchemaRef};

/// Which row of a key's versions wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The latest version; a latest `-U`/`-D` removes the key.
    Deduplicate,
    /// Per column, the latest non-NULL value of the added versions.
    PartialUpdate { ignore_delete: bool },
    /// The earliest added version.
    FirstRow { ignore_delete: bool },
}

/// Where the merge finds its inputs in a batch's columns: the first `outputs` columns are the
/// result, then any key columns not asked for, the sequence number and the row kind.
///
/// Without a sequence column, the runs are given in sequence order (their files' sequence
/// ranges do not overlap) and a run's index is its rows' sequence; within a run, a key's
/// versions are in file order, which a writer sorts by (key, sequence).
#[derive(Debug, Clone)]
pub struct Layout {
    pub outputs: usize,
    pub keys: Vec<usize>,
    pub seq: Option<usize>,
    pub kind: usize,
}

/// A source of one run's batches, in key order.
pub type Run = Box<dyn Iterator<Item = Result<RecordBatch, String>> + Send>;

/// A single integer key compares as i64; anything else through Arrow's row format.
enum Keys {
    /// Zero-copy for an `Int64` key (the decoded column itself).
    Int(Int64Array),
    Rows(Rows),
}

/// One loaded batch of a run, with its rows from `start` on still to merge.
struct Loaded {
    batch: RecordBatch,
    keys: Keys,
    start: usize,
    /// The run the batch is of.
    run: usize,
}

impl Loaded {
    fn len(&self) -> usize {
        self.batch.num_rows()
    }

    fn cmp_rows(&self, i: usize, other: &Loaded, j: usize) -> Ordering {
        match (&self.keys, &other.keys) {
            (Keys::Int(a), Keys::Int(b)) => a.values()[i].cmp(&b.values()[j]),
            (Keys::Rows(a), Keys::Rows(b)) => a.row(i).cmp(&b.row(j)),
            _ => unreachable!("one merge uses one key encoding"),
        }
    }
}

struct RunState {
    source: Run,
    pending: VecDeque<Loaded>,
    exhausted: bool,
}

impl RunState {
    fn remaining(&self) -> bool {
        self.pending.iter().any(|l| l.start < l.len())
    }
    fn last(&self) -> Option<(&Loaded, usize)> {
        self.pending.back().filter(|l| l.len() > 0).map(|l| (l, l.len() - 1))
    }
}

/// One row version in a round.
#[derive(Clone, Copy)]
struct Entry {
    key: i64,
    seq: i64,
    add: bool,
    src: u32,
    row: u32,
}

pub struct Merger {
    runs: Vec<RunState>,
    layout: Layout,
    engine: Engine,
    schema: SchemaRef,
    converter: Option<RowConverter>,
    int_key: bool,
    failed: bool,
    /// Result batches of the last round not yet handed on.
    ready: VecDeque<RecordBatch>,
}

/// The key encoding for these key column types: `true` for one integer column.
pub fn int_key(types: &[DataType]) -> bool {
    matches!(types, [DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Date32])
}

fn int_values(col: &dyn Array) -> Result<Int64Array, String> {
    Ok(match col.data_type() {
        DataType::Int8 => col.as_primitive::<Int8Type>().values().iter().map(|&v| Some(v as i64)).collect(),
        DataType::Int16 => col.as_primitive::<Int16Type>().values().iter().map(|&v| Some(v as i64)).collect(),
        DataType::Int32 | DataType::Date32 => {
            col.as_primitive::<Int32Type>().values().iter().map(|&v| Some(v as i64)).collect()
        }
        DataType::Int64 => col.as_primitive::<Int64Type>().clone(),
        other => return Err(format!("key column of type {other} read as an integer")),
    })
}

/// paimon-rust's refusal, word for word.
const FIRST_ROW_RETRACT: &str =
    "merge-engine=first-row does not support DELETE or UPDATE_BEFORE rows; set ignore-delete=true to ignore them";

/// Paimon's row kinds: 0 +I, 1 -U, 2 +U, 3 -D.
fn is_add(kind: i8) -> bool {
    matches!(kind, 0 | 2)
}

impl Merger {
    /// `schema`: the result's columns (the first `layout.outputs` of every input batch).
    pub fn new(runs: Vec<Run>, layout: Layout, engine: Engine, key_types: &[DataType], schema: SchemaRef) -> Merger {
        let int_key = int_key(key_types);
        let converter = if int_key {
            None
        } else {
            RowConverter::new(key_types.iter().map(|t| SortField::new(t.clone())).collect()).ok()
        };
        let runs =
            runs.into_iter().map(|source| RunState { source, pending: VecDeque::new(), exhausted: false }).collect();
        Merger { runs, layout, engine, schema, converter, int_key, failed: false, ready: VecDeque::new() }
    }

    fn encode(&self, batch: &RecordBatch) -> Result<Keys, String> {
        if self.int_key {
            return int_values(batch.column(self.layout.keys[0]).as_ref()).map(Keys::Int);
        }
        let converter = self.converter.as_ref().ok_or("the key columns have no row encoding")?;
        let cols: Vec<ArrayRef> = self.layout.keys.iter().map(|&k| batch.column(k).clone()).collect();
        converter.convert_columns(&cols).map(Keys::Rows).map_err(|e| e.to_string())
    }

    /// Loads batches into run `r` until it has rows to merge or ends.
    fn fill(&mut self, r: usize) -> Result<(), String> {
        while !self.runs[r].exhausted && !self.runs[r].remaining() {
            self.load(r)?;
        }
        Ok(())
    }

    fn load(&mut self, r: usize) -> Result<(), String> {
        match self.runs[r].source.next() {
            None => self.runs[r].exhausted = true,
            Some(batch) => {
                let batch = batch?;
                if batch.num_rows() > 0 {
                    let keys = self.encode(&batch)?;
                    self.runs[r].pending.push_back(Loaded { batch, keys, start: 0, run: r });
                }
            }
        }
        Ok(())
    }

    /// One round: merges every row below the bound; None when all runs are done.
    fn round(&mut self) -> Result<Option<VecDeque<RecordBatch>>, String> {
        loop {
            for r in 0..self.runs.len() {
                self.fill(r)?;
                let run = &mut self.runs[r];
                while run.pending.front().is_some_and(|l| l.start >= l.len()) {
                    run.pending.pop_front();
                }
            }
            if self.runs.iter().all(|r| r.pending.is_empty()) {
                return Ok(None);
            }
            // The bound: the least last-loaded key over the runs that may hold more rows.
            let mut bound: Option<(usize, usize)> = None;
            for (r, run) in self.runs.iter().enumerate() {
                if run.exhausted {
                    continue;
                }
                if let Some((l, i)) = run.last() {
                    let better = match bound {
                        None => true,
                        Some((br, _)) => {
                            let (bl, bi) = self.runs[br].last().expect("bound run has a batch");
                            l.cmp_rows(i, bl, bi) == Ordering::Less
                        }
                    };
                    if better {
                        bound = Some((r, i));
                    }
                }
            }
            // Per run and pending batch: how many rows lie below the bound.
            let mut ends: Vec<Vec<usize>> = Vec::with_capacity(self.runs.len());
            let mut any = false;
            for run in &self.runs {
                let mut per = Vec::with_capacity(run.pending.len());
                for l in &run.pending {
                    let end = match bound {
                        None => l.len(),
                        Some((br, bi)) => {
                            let bl = self.runs[br].pending.back().expect("bound run has a batch");
                            l.start + partition(l, bl, bi)
                        }
                    };
                    any |= end > l.start;
                    per.push(end);
                }
                ends.push(per);
            }
            if !any {
                // Only rows equal to the bound remain below it: read further in the runs that set it.
                let (br, bi) = bound.expect("rows remain, so a run bounds them");
                let limit: Vec<usize> = (0..self.runs.len())
                    .filter(|&r| {
                        let run = &self.runs[r];
                        !run.exhausted
                            && run.last().is_some_and(|(l, i)| {
                                l.cmp_rows(i, self.runs[br].pending.back().expect("bound batch"), bi) == Ordering::Equal
                            })
                    })
                    .collect();
                for r in limit {
                    self.load(r)?;
                }
                continue;
            }
            let mut out = VecDeque::new();
            self.merge_below(&ends, &mut out)?;
            for (run, per) in self.runs.iter_mut().zip(&ends) {
                for (l, &end) in run.pending.iter_mut().zip(per) {
                    l.start = end;
                }
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }

    /// Merges the rows `[start, end)` of every pending batch; None when no key survives.
    /// Merges the rows `[start, end)` of every pending batch into `out` (nothing when no key
    /// survives).
    fn merge_below(&self, ends: &[Vec<usize>], out: &mut VecDeque<RecordBatch>) -> Result<(), String> {
        let mut srcs: Vec<(&Loaded, usize)> = Vec::new();
        for (run, per) in self.runs.iter().zip(ends) {
            for (l, &end) in run.pending.iter().zip(per) {
                if end > l.start {
                    srcs.push((l, end));
                }
            }
        }
        // A single run's unique, added keys are already the merged state.
        if let [(l, end)] = srcs[..] {
            if self.unique_adds(l, end) {
                out.push_back(self.project(&l.batch.slice(l.start, end - l.start))?);
                return Ok(());
            }
        }
        // The base: the source with the most rows, when its keys are unique integers. Only its
        // rows whose key another source also holds are merged; the rest pass through a filter.
        let base = srcs.iter().enumerate().max_by_key(|(_, (l, end))| end - l.start).map(|(b, _)| b).filter(|&b| {
            let (l, end) = srcs[b];
            matches!(&l.keys, Keys::Int(k) if k.values()[l.start..end].windows(2).all(|w| w[0] < w[1]))
        });
        let mut entries: Vec<Entry> = Vec::new();
        for (s, (l, end)) in srcs.iter().enumerate() {
            if Some(s) != base {
                self.push_entries(&mut entries, s, l, l.start..*end);
            }
        }
        let mut mask = None;
        if let Some(b) = base {
            let (l, end) = srcs[b];
            let Keys::Int(keys) = &l.keys else { unreachable!("the base has integer keys") };
            let keys = &keys.values()[l.start..end];
            // Which base rows another source's key hits. Each source's entries come in key
            // order, so each search gallops on from the last hit (reset where a source starts).
            let mut contested = vec![false; end - l.start];
            let (mut from, mut last) = (0, i64::MIN);
            for e in &entries {
                if e.key < last {
                    from = 0;
                }
                last = e.key;
                match gallop(keys, from, e.key) {
                    Ok(p) => {
                        contested[p] = true;
                        from = p;
                    }
                    Err(p) => from = p,
                }
            }
            let kinds = &self.kinds(l)[l.start..end];
            let add = |i: usize| is_add(kinds[i]);
            if matches!(self.engine, Engine::FirstRow { ignore_delete: false })
                && (0..contested.len()).any(|i| !contested[i] && !add(i))
            {
                return Err(FIRST_ROW_RETRACT.into());
            }
            let keep: Vec<bool> = (0..contested.len()).map(|i| !contested[i] && add(i)).collect();
            let mut bits = arrow_array::builder::BooleanBufferBuilder::new(keep.len());
            bits.append_slice(&keep);
            let keep = arrow_array::BooleanArray::new(bits.finish(), None);
            let rows = contested.iter().enumerate().filter(|(_, &hit)| hit).map(|(i, _)| l.start + i);
            self.push_entries(&mut entries, b, l, rows);
            mask = Some((b, keep));
        }
        if let Some((b, keep)) = mask {
            let (l, end) = srcs[b];
            let slice = self.project(&l.batch.slice(l.start, end - l.start))?;
            let kept = if keep.true_count() == keep.len() {
                slice
            } else {
                arrow_select::filter::filter_record_batch(&slice, &keep).map_err(|e| e.to_string())?
            };
            if kept.num_rows() > 0 {
                out.push_back(kept);
            }
        }
        if let Some(batch) = self.resolve(&srcs, entries)? {
            out.push_back(batch);
        }
        Ok(())
    }

    /// Adds the versions at `rows` (ascending) of source `src`.
    fn push_entries(&self, entries: &mut Vec<Entry>, src: usize, l: &Loaded, rows: impl Iterator<Item = usize>) {
        let seq = self.layout.seq.map(|c| l.batch.column(c).as_primitive::<Int64Type>().values());
        let kind = self.kinds(l);
        let key = |row: usize| match &l.keys {
            Keys::Int(k) => k.values()[row],
            Keys::Rows(_) => 0,
        };
        let src = src as u32;
        entries.extend(rows.map(|row| Entry {
            key: key(row),
            seq: seq.map_or(l.run as i64, |s| s[row]),
            add: is_add(kind[row]),
            src,
            row: row as u32,
        }));
    }

    /// The row kinds of `l`'s batch.
    fn kinds<'a>(&self, l: &'a Loaded) -> &'a [i8] {
        l.batch.column(self.layout.kind).as_primitive::<Int8Type>().values()
    }

    /// Orders `entries` by key, sequence and kind, picks each key's winner(s) and gathers them.
    fn resolve(&self, srcs: &[(&Loaded, usize)], mut entries: Vec<Entry>) -> Result<Option<RecordBatch>, String> {
        if entries.is_empty() {
            return Ok(None);
        }
        let same_key = |a: &Entry, b: &Entry| -> Ordering {
            if self.int_key {
                a.key.cmp(&b.key)
            } else {
                srcs[a.src as usize].0.cmp_rows(a.row as usize, srcs[b.src as usize].0, b.row as usize)
            }
        };
        // Stable, and by source: versions with equal (key, sequence, kind) keep their run order.
        // A retraction sorts before an add of the same sequence number; a sequence taken from
        // the run (none read) leaves versions of one run in file order.
        let by_kind = self.layout.seq.is_some();
        if self.int_key {
            // The same order as a plain key: a stable sort finds the sources' sorted runs and
            // merges them.
            entries.sort_by_key(|e| (e.key, e.seq, by_kind && e.add, e.src));
        } else {
            entries.sort_by(|a, b| {
                let kind = if by_kind { a.add.cmp(&b.add) } else { Ordering::Equal };
                same_key(a, b).then(a.seq.cmp(&b.seq)).then(kind).then(a.src.cmp(&b.src))
            });
        }
        let batches: Vec<&RecordBatch> = srcs.iter().map(|(l, _)| &l.batch).collect();
        let mut picks: Vec<(usize, usize)> = Vec::new();
        // Partial-update: each key's added versions, as ranges of `adds`.
        let mut adds: Vec<(usize, usize)> = Vec::new();
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut g = 0;
        while g < entries.len() {
            let mut h = g + 1;
            while h < entries.len() && same_key(&entries[g], &entries[h]) == Ordering::Equal {
                h += 1;
            }
            let group = &entries[g..h];
            let at = |e: &Entry| (e.src as usize, e.row as usize);
            match self.engine {
                Engine::Deduplicate => {
                    let last = group[group.len() - 1];
                    if last.add {
                        picks.push(at(&last));
                    }
                }
                Engine::FirstRow { ignore_delete } => {
                    if !ignore_delete && group.iter().any(|e| !e.add) {
                        return Err(FIRST_ROW_RETRACT.into());
                    }
                    if let Some(first) = group.iter().find(|e| e.add) {
                        picks.push(at(first));
                    }
                }
                Engine::PartialUpdate { ignore_delete } => {
                    if group.len() == 1 {
                        if group[0].add {
                            picks.push(at(&group[0]));
                            groups.push((adds.len(), adds.len() + 1));
                            adds.push(at(&group[0]));
                        }
                    } else {
                        if !ignore_delete && group.iter().any(|e| !e.add) {
                            return Err("merge-engine=partial-update does not support DELETE or UPDATE_BEFORE \
                                        without ignore-delete, sequence-group, or remove-record-on-delete"
                                .into());
                        }
                        let from = adds.len();
                        adds.extend(group.iter().filter(|e| e.add).map(at));
                        if adds.len() > from {
                            picks.push(adds[adds.len() - 1]);
                            groups.push((from, adds.len()));
                        }
                    }
                }
            }
            g = h;
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.layout.outputs);
        for c in 0..self.layout.outputs {
            let values: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            let nulls: Vec<_> = values.iter().map(|v| v.nulls().filter(|n| n.null_count() > 0)).collect();
            let valid = |s: usize, r: usize| nulls[s].is_none_or(|n| n.is_valid(r));
            let column = if matches!(self.engine, Engine::PartialUpdate { .. }) && nulls.iter().any(Option::is_some) {
                // The latest non-NULL value of each key's added versions (NULL when none).
                let per: Vec<(usize, usize)> = groups
                    .iter()
                    .map(|&(from, to)| {
                        adds[from..to].iter().rev().find(|&&(s, r)| valid(s, r)).copied().unwrap_or(adds[to - 1])
                    })
                    .collect();
                arrow_select::interleave::interleave(&values, &per)
            } else {
                arrow_select::interleave::interleave(&values, &picks)
            };
            columns.push(column.map_err(|e| format!("gathering merged rows: {e}"))?);
        }
        RecordBatch::try_new(self.schema.clone(), columns).map(Some).map_err(|e| format!("building merged rows: {e}"))
    }

    /// Whether rows `[start, end)` of one batch hold strictly increasing keys, all added.
    fn unique_adds(&self, l: &Loaded, end: usize) -> bool {
        let adds = self.kinds(l)[l.start..end].iter().all(|&k| is_add(k));
        adds && match &l.keys {
            Keys::Int(k) => k.values()[l.start..end].windows(2).all(|w| w[0] < w[1]),
            Keys::Rows(rows) => (l.start + 1..end).all(|i| rows.row(i - 1) < rows.row(i)),
        }
    }

    fn project(&self, batch: &RecordBatch) -> Result<RecordBatch, String> {
        let columns: Vec<ArrayRef> = batch.columns()[..self.layout.outputs].to_vec();
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| e.to_string())
    }
}

/// `keys.binary_search(&key)` for a key known to lie at or after `from` (ascending keys):
/// steps of 1, 2, 4, ... from there, then a binary search of the last step.
fn gallop(keys: &[i64], from: usize, key: i64) -> Result<usize, usize> {
    let (mut lo, mut step) = (from, 1);
    let hi = loop {
        if lo >= keys.len() {
            return Err(keys.len());
        }
        let probe = (lo + step - 1).min(keys.len() - 1);
        if keys[probe] < key {
            lo = probe + 1;
            step *= 2;
        } else {
            break probe + 1;
        }
    };
    keys[lo..hi].binary_search(&key).map(|p| lo + p).map_err(|p| lo + p)
}

/// How many rows of `l` from its start have a key below row `bi` of `bound`.
fn partition(l: &Loaded, bound: &Loaded, bi: usize) -> usize {
    let (mut lo, mut hi) = (l.start, l.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if l.cmp_rows(mid, bound, bi) == Ordering::Less {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - l.start
}

impl Iterator for Merger {
    type Item = Result<RecordBatch, String>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(batch) = self.ready.pop_front() {
            return Some(Ok(batch));
        }
        match self.round() {
            Ok(batches) => {
                self.ready = batches?;
                self.ready.pop_front().map(Ok)
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use arrow_array::{Int64Array, Int8Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    /// One version: key, sequence, row kind, value.
    type Version = (i64, i64, i8, Option<&'static str>);

    /// The versions of one run, cut into batches of `size` rows.
    fn run(rows: &[Version], size: usize) -> Run {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new("_SEQUENCE_NUMBER", DataType::Int64, false),
            Field::new("_VALUE_KIND", DataType::Int8, false),
        ]));
        let batches: Vec<Result<RecordBatch, String>> = rows
            .chunks(size)
            .map(|c| {
                let cols: Vec<ArrayRef> = vec![
                    Arc::new(Int64Array::from(c.iter().map(|r| r.0).collect::<Vec<_>>())),
                    Arc::new(StringArray::from(c.iter().map(|r| r.3).collect::<Vec<_>>())),
                    Arc::new(Int64Array::from(c.iter().map(|r| r.1).collect::<Vec<_>>())),
                    Arc::new(Int8Array::from(c.iter().map(|r| r.2).collect::<Vec<_>>())),
                ];
                Ok(RecordBatch::try_new(schema.clone(), cols).unwrap())
            })
            .collect();
        Box::new(batches.into_iter())
    }

    fn merged(runs: Vec<Run>, engine: Engine) -> Result<BTreeMap<i64, Option<String>>, String> {
        merged_as(runs, engine, Layout { outputs: 2, keys: vec![0], seq: Some(2), kind: 3 })
    }

    fn merged_as(runs: Vec<Run>, engine: Engine, layout: Layout) -> Result<BTreeMap<i64, Option<String>>, String> {
        let schema =
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, true)]));
        let mut out = BTreeMap::new();
        for batch in Merger::new(runs, layout, engine, &[DataType::Int64], schema) {
            let batch = batch?;
            let k = batch.column(0).as_primitive::<Int64Type>();
            let v = batch.column(1).as_string::<i32>();
            for i in 0..batch.num_rows() {
                let value = v.is_valid(i).then(|| v.value(i).to_string());
                assert!(out.insert(k.value(i), value).is_none(), "key {} emitted twice", k.value(i));
            }
        }
        Ok(out)
    }

    /// Pseudo-random runs: each a sorted run of unique keys, later runs with higher sequences.
    fn runs(seed: u64, n: usize) -> Vec<Vec<Version>> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let values = [Some("a"), Some("b"), None, Some("ccccccccccccccccccc")];
        let mut seq = 0;
        (0..n)
            .map(|_| {
                let mut keys: Vec<i64> = (0..(next() % 60) as usize).map(|_| (next() % 80) as i64).collect();
                keys.sort_unstable();
                keys.dedup();
                keys.into_iter()
                    .map(|k| {
                        seq += 1;
                        let kind = [0i8, 0, 0, 2, 1, 3][(next() % 6) as usize];
                        (k, seq, kind, values[(next() % 4) as usize])
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_engine_equals_a_replay_of_the_versions_in_sequence_order() {
        for seed in 0..200u64 {
            let data = runs(seed, 1 + (seed % 5) as usize);
            let size = 1 + (seed % 7) as usize;
            let (dedup, first, partial) = replay(data.iter().flatten().copied().collect());
            let make = || data.iter().map(|r| run(r, size)).collect::<Vec<_>>();
            assert_eq!(merged(make(), Engine::Deduplicate).unwrap(), dedup, "seed {seed}");
            assert_eq!(merged(make(), Engine::FirstRow { ignore_delete: true }).unwrap(), first, "seed {seed}");
            let pu = merged(make(), Engine::PartialUpdate { ignore_delete: true }).unwrap();
            assert_eq!(pu, partial, "seed {seed}");
        }
    }

    type State = BTreeMap<i64, Option<String>>;

    /// The versions replayed in sequence order: the deduplicate, first-row and partial-update
    /// states (retractions ignored by the last two, as with ignore-delete).
    fn replay(mut all: Vec<Version>) -> (State, State, State) {
        all.sort_by_key(|r| r.1);
        let (mut dedup, mut first, mut partial) = (State::new(), State::new(), State::new());
        for (k, _, kind, v) in all {
            if kind == 0 || kind == 2 {
                dedup.insert(k, v.map(str::to_string));
                first.entry(k).or_insert(v.map(str::to_string));
                let cur = partial.entry(k).or_insert(None);
                if v.is_some() {
                    *cur = v.map(str::to_string);
                }
            } else {
                dedup.remove(&k);
            }
        }
        (dedup, first, partial)
    }

    #[test]
    fn runs_in_sequence_order_merge_without_sequence_or_kind_columns() {
        // The merge must not look at the sequence column: garbage here (negated).
        let ordered = Layout { outputs: 2, keys: vec![0], seq: None, kind: 3 };
        for seed in 0..200u64 {
            let data: Vec<Vec<Version>> = runs(seed, 2 + (seed % 4) as usize);
            let garbage = |r: &Vec<Version>| r.iter().map(|&(k, s, kind, v)| (k, -s, kind, v)).collect::<Vec<_>>();
            let size = 1 + (seed % 7) as usize;
            let make = || data.iter().map(|r| run(&garbage(r), size)).collect::<Vec<_>>();
            let (dedup, first, partial) = replay(data.iter().flatten().copied().collect());
            let got = |engine| merged_as(make(), engine, ordered.clone()).unwrap();
            assert_eq!(got(Engine::Deduplicate), dedup, "seed {seed}");
            assert_eq!(got(Engine::FirstRow { ignore_delete: true }), first, "seed {seed}");
            assert_eq!(got(Engine::PartialUpdate { ignore_delete: true }), partial, "seed {seed}");
        }
        // A run holding two versions of a key (in file order, across a batch boundary) before
        // a later run: file order decides within the run, the run order across runs.
        let older = [(1, 1, 0i8, Some("a")), (2, 2, 0, Some("old")), (2, 3, 0, None), (3, 4, 0, Some("c"))];
        let newer = [(2, 5, 0i8, None), (3, 6, 0, Some("new")), (4, 7, 0, Some("x")), (4, 8, 3, None)];
        let make = || vec![run(&older, 2), run(&newer, 1)];
        let got = merged_as(make(), Engine::PartialUpdate { ignore_delete: true }, ordered.clone()).unwrap();
        assert_eq!(got.get(&2), Some(&Some("old".to_string())));
        assert_eq!(got.get(&3), Some(&Some("new".to_string())));
        // Key 4: added, then deleted in the same run (file order): gone.
        let got = merged_as(make(), Engine::Deduplicate, ordered.clone()).unwrap();
        assert_eq!((got.get(&2), got.len()), (Some(&None), 3));
    }

    #[test]
    fn gallop_finds_what_binary_search_finds() {
        let keys: Vec<i64> = (0..300).map(|i| i * 8 + (i % 7)).collect();
        for from in [0usize, 1, 5, 64, 150, 299, 300] {
            for key in -2..2500 {
                if from > 0 && keys.get(from - 1).is_some_and(|&k| k >= key) {
                    continue; // gallop's precondition: every key before `from` is below `key`
                }
                let want = keys.binary_search(&key);
                let got = gallop(&keys, from, key);
                match want {
                    Ok(_) => assert_eq!(got.map(|p| keys[p]), Ok(key), "from {from} key {key}"),
                    Err(p) => assert_eq!(got, Err(p), "from {from} key {key}"),
                }
            }
        }
        assert_eq!(gallop(&[], 0, 5), Err(0));
    }

    #[test]
    fn retractions_without_ignore_delete_are_refused_like_paimon() {
        let data = [vec![(1, 1, 0, Some("a"))], vec![(1, 2, 3, None)]];
        let make = || data.iter().map(|r| run(r, 4)).collect::<Vec<_>>();
        let e = merged(make(), Engine::FirstRow { ignore_delete: false }).unwrap_err();
        assert!(e.contains("first-row does not support DELETE"), "{e}");
        let e = merged(make(), Engine::PartialUpdate { ignore_delete: false }).unwrap_err();
        assert!(e.contains("partial-update does not support DELETE"), "{e}");
        assert!(merged(make(), Engine::Deduplicate).unwrap().is_empty());
    }

    #[test]
    fn a_single_sorted_run_passes_through_and_duplicates_in_it_are_merged() {
        let unique: Vec<_> = (0..10).map(|k| (k, k + 1, 0i8, Some("x"))).collect();
        assert_eq!(merged(vec![run(&unique, 3)], Engine::Deduplicate).unwrap().len(), 10);
        // One file holding two versions of a key, across a batch boundary.
        let dup = [(1, 1, 0i8, Some("old")), (2, 2, 0, Some("x")), (2, 3, 0, Some("new")), (3, 4, 0, None)];
        let got = merged(vec![run(&dup, 2)], Engine::Deduplicate).unwrap();
        assert_eq!(got.get(&2), Some(&Some("new".to_string())));
        assert_eq!(got.len(), 3);
    }
}
