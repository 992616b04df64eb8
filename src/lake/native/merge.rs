//! The merge of a bucket's sorted runs into its merged state, column by column.
//!
//! Every data file of a primary-key table is sorted by key; a bucket's files form sorted runs
//! (each level-0 file one run, each deeper level one run). Rows are merged in rounds: the
//! round's *bound* is the smallest "last key of the loaded batch" over the runs still to be
//! read, so every row with a key below it has all its versions loaded. Those rows are ordered
//! by (key, sequence, add-after-retract) — a stable sort over inputs that are already sorted
//! runs, so it costs a merge, not a sort — and each key's group is resolved by the table's
//! engine ([`super::engine`]: Java Paimon's lookup rule over the runs' levels where the table is
//! read with it, then the winning row, per column for partial-update and aggregation). A round
//! whose rows are one run's unique added keys (a single sorted run, the compacted case) is
//! handed on as a zero-copy slice.
//!
//! Invariants: memory holds one batch per run (plus the rows of a key that straddles batches);
//! the rules per engine are Java Paimon's, which property tests hold us to (paimon-rust's and
//! pypaimon's reads, Java Paimon's own).

use std::cmp::Ordering;
use std::collections::VecDeque;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, SchemaRef};

pub use super::engine::Engine;
use super::engine::{Entry, Gather, FIRST_ROW_RETRACT};

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

pub struct Merger {
    runs: Vec<RunState>,
    layout: Layout,
    engine: Engine,
    schema: SchemaRef,
    /// Per output column: whether it is a key column.
    out_keys: Vec<bool>,
    /// Each run's level, where the table is read with Java Paimon's lookup rule
    /// ([`super::engine::lookup_keep`]).
    levels: Option<Vec<i32>>,
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
        let out_keys = (0..layout.outputs).map(|c| layout.keys.contains(&c)).collect();
        Merger {
            runs,
            layout,
            engine,
            schema,
            out_keys,
            levels: None,
            converter,
            int_key,
            failed: false,
            ready: VecDeque::new(),
        }
    }

    /// Reads with Java Paimon's lookup rule: `levels[r]` is run `r`'s level.
    pub fn with_levels(mut self, levels: Vec<i32>) -> Merger {
        self.levels = Some(levels);
        self
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
            delete: kind[row] == 3,
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
        let mut bounds: Vec<(usize, usize)> = Vec::new();
        let mut g = 0;
        while g < entries.len() {
            let mut h = g + 1;
            while h < entries.len() && same_key(&entries[g], &entries[h]) == Ordering::Equal {
                h += 1;
            }
            bounds.push((g, h));
            g = h;
        }
        let level = |e: &Entry| self.levels.as_ref().map_or(0, |l| l[srcs[e.src as usize].0.run]);
        let level: Option<&dyn Fn(&Entry) -> i32> = self.levels.as_ref().map(|_| &level as &dyn Fn(&Entry) -> i32);
        let gather = Gather { engine: &self.engine, schema: &self.schema, keys: &self.out_keys };
        gather.resolve(&entries, &bounds, level, &batches)
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

    /// A run of versions (key, sequence, kind) with their `values`, cut into batches of `size` rows.
    fn run_of(versions: Vec<(i64, i64, i8)>, values: ArrayRef, size: usize) -> Run {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", values.data_type().clone(), true),
            Field::new("_SEQUENCE_NUMBER", DataType::Int64, false),
            Field::new("_VALUE_KIND", DataType::Int8, false),
        ]));
        let n = versions.len();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(versions.iter().map(|r| r.0).collect::<Vec<_>>())),
            values,
            Arc::new(Int64Array::from(versions.iter().map(|r| r.1).collect::<Vec<_>>())),
            Arc::new(Int8Array::from(versions.iter().map(|r| r.2).collect::<Vec<_>>())),
        ];
        let batch = RecordBatch::try_new(schema, cols).unwrap();
        let batches: Vec<Result<RecordBatch, String>> =
            (0..n).step_by(size).map(|at| Ok(batch.slice(at, size.min(n - at)))).collect();
        Box::new(batches.into_iter())
    }

    /// The versions of one run, cut into batches of `size` rows.
    fn run(rows: &[Version], size: usize) -> Run {
        let values = Arc::new(StringArray::from(rows.iter().map(|r| r.3).collect::<Vec<_>>()));
        run_of(rows.iter().map(|r| (r.0, r.1, r.2)).collect(), values, size)
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
            let pu = merged(make(), Engine::PartialUpdate { ignore_delete: true, remove_on_delete: false }).unwrap();
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
            assert_eq!(
                got(Engine::PartialUpdate { ignore_delete: true, remove_on_delete: false }),
                partial,
                "seed {seed}"
            );
        }
        // A run holding two versions of a key (in file order, across a batch boundary) before
        // a later run: file order decides within the run, the run order across runs.
        let older = [(1, 1, 0i8, Some("a")), (2, 2, 0, Some("old")), (2, 3, 0, None), (3, 4, 0, Some("c"))];
        let newer = [(2, 5, 0i8, None), (3, 6, 0, Some("new")), (4, 7, 0, Some("x")), (4, 8, 3, None)];
        let make = || vec![run(&older, 2), run(&newer, 1)];
        let got =
            merged_as(make(), Engine::PartialUpdate { ignore_delete: true, remove_on_delete: false }, ordered.clone())
                .unwrap();
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
        let e = merged(make(), Engine::PartialUpdate { ignore_delete: false, remove_on_delete: false }).unwrap_err();
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

    /// One version with a number: key, sequence, row kind, value.
    type Numbered = (i64, i64, i8, Option<i64>);

    fn run_of_numbers(rows: &[Numbered], size: usize) -> Run {
        let values = Arc::new(Int64Array::from(rows.iter().map(|r| r.3).collect::<Vec<_>>()));
        run_of(rows.iter().map(|r| (r.0, r.1, r.2)).collect(), values, size)
    }

    /// `v` summed per key (aggregation, `fields.v.aggregate-function = sum`), the runs at
    /// `levels` when read with the lookup rule.
    fn summed(data: &[Vec<Numbered>], size: usize, levels: Option<Vec<i32>>, seq: bool) -> BTreeMap<i64, Option<i64>> {
        let options = [("fields.v.aggregate-function".to_string(), "sum".to_string())].into();
        let (agg, _) = super::super::aggregate::Aggregation::from_options(&options).unwrap();
        let engine = Engine::Aggregate(Arc::new(agg));
        let layout = Layout { outputs: 2, keys: vec![0], seq: seq.then_some(2), kind: 3 };
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
        ]));
        let runs = data.iter().map(|r| run_of_numbers(r, size)).collect();
        let mut merger = Merger::new(runs, layout, engine, &[DataType::Int64], schema);
        if let Some(levels) = levels {
            merger = merger.with_levels(levels);
        }
        let mut out = BTreeMap::new();
        for batch in merger {
            let batch = batch.unwrap();
            let (k, v) = (batch.column(0).as_primitive::<Int64Type>(), batch.column(1).as_primitive::<Int64Type>());
            for i in 0..batch.num_rows() {
                let value = v.is_valid(i).then(|| v.value(i));
                assert!(out.insert(k.value(i), value).is_none(), "key {} emitted twice", k.value(i));
            }
        }
        out
    }

    #[test]
    fn the_lookup_rule_reads_a_key_from_level_zero_and_its_lowest_level() {
        // Java Paimon's layout after a lookup compaction: order 1's merged value (15) in level 4
        // beside level 5's 10; then 5 more in level 0.
        let data = vec![
            vec![(1, 1, 0i8, Some(10)), (2, 2, 0, Some(10))],
            vec![(1, 3, 0, Some(15))],
            vec![(1, 4, 0, Some(5)), (3, 5, 0, Some(7))],
        ];
        let want: BTreeMap<i64, Option<i64>> = [(1, Some(20)), (2, Some(10)), (3, Some(7))].into();
        assert_eq!(summed(&data, 2, Some(vec![5, 4, 0]), true), want);
        assert_eq!(summed(&data, 1, Some(vec![5, 4, 0]), false), want);
        // Every level merged (the rule not applied): level 5's value counted twice.
        assert_eq!(summed(&data, 2, None, true).get(&1), Some(&Some(30)));
    }

    #[test]
    fn aggregation_with_the_lookup_rule_equals_a_replay_of_the_versions_it_keeps() {
        for seed in 0..200u64 {
            let n = 2 + (seed % 4) as usize;
            let data: Vec<Vec<Numbered>> = runs(seed, n)
                .into_iter()
                .map(|r| r.into_iter().map(|(k, s, kind, v)| (k, s, kind, v.map(|t| t.len() as i64 - 2))).collect())
                .collect();
            // Older runs deeper (distinct non-zero levels, or level 0 for the newest ones).
            let zero = (seed % 3) as usize;
            let levels: Vec<i32> =
                (0..n).map(|r| if r + zero >= n { 0 } else { 5 - r as i32 - (seed % 2) as i32 }).collect();
            // The oracle: per key, its versions of level 0 and of the lowest non-zero level, in
            // sequence order; one version passes as it is, several are summed.
            let mut by_key: BTreeMap<i64, Vec<(i32, Numbered)>> = BTreeMap::new();
            for (r, run) in data.iter().enumerate() {
                for &v in run {
                    by_key.entry(v.0).or_default().push((levels[r], v));
                }
            }
            let mut want = BTreeMap::new();
            for (k, versions) in by_key {
                let lowest = versions.iter().map(|v| v.0).filter(|&l| l > 0).min();
                let mut kept: Vec<Numbered> =
                    versions.iter().filter(|v| v.0 == 0 || Some(v.0) == lowest).map(|v| v.1).collect();
                kept.sort_by_key(|v| v.1);
                let add = |kind: i8| kind == 0 || kind == 2;
                if versions.len() == 1 {
                    if add(kept[0].2) {
                        want.insert(k, kept[0].3);
                    }
                    continue;
                }
                let mut acc: Option<i64> = None;
                for (_, _, kind, v) in kept {
                    if let Some(v) = v {
                        acc = Some(match (acc, add(kind)) {
                            (None, true) => v,
                            (None, false) => -v,
                            (Some(a), true) => a + v,
                            (Some(a), false) => a - v,
                        });
                    }
                }
                want.insert(k, acc);
            }
            let size = 1 + (seed % 7) as usize;
            assert_eq!(summed(&data, size, Some(levels.clone()), true), want, "seed {seed}");
            assert_eq!(summed(&data, size, Some(levels), false), want, "seed {seed} (runs in sequence order)");
        }
    }

    #[test]
    fn partial_update_removing_on_delete_starts_over_after_a_delete() {
        let remove = Engine::PartialUpdate { ignore_delete: false, remove_on_delete: true };
        // key 1: a row, its -D, then a row without the value; key 2: an -U changes nothing;
        // key 3: removed last.
        let data = [
            vec![(1, 1, 0i8, Some("a")), (2, 2, 0, Some("b")), (3, 3, 0, Some("c"))],
            vec![(1, 4, 3, Some("a")), (2, 5, 1, Some("b")), (3, 6, 0, None)],
            vec![(1, 7, 0, None), (3, 8, 3, None)],
        ];
        let make = || data.iter().map(|r| run(r, 2)).collect::<Vec<_>>();
        let got = merged(make(), remove.clone()).unwrap();
        assert_eq!(got, [(1, None), (2, Some("b".to_string()))].into());
        // Java Paimon's lookup layout of key 1: level 5 holds "a", level 4 the row merged after
        // the delete (NULL). The rule reads level 4 alone; every level merged would bring "a" back.
        let layout = [vec![(1, 1, 0i8, Some("a"))], vec![(1, 7, 0, None)]];
        let make = || layout.iter().map(|r| run(r, 2)).collect::<Vec<_>>();
        let schema =
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, true)]));
        let layout_of = Layout { outputs: 2, keys: vec![0], seq: Some(2), kind: 3 };
        let merger = Merger::new(make(), layout_of, remove.clone(), &[DataType::Int64], schema).with_levels(vec![5, 4]);
        let batches: Vec<RecordBatch> = merger.map(Result::unwrap).collect();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert!(batches[0].column(1).is_null(0));
        assert_eq!(merged(make(), remove).unwrap(), [(1, Some("a".to_string()))].into());
    }
}
