//! What one key's versions merge into, per merge engine, and the gather of a round's merged rows.
//!
//! The merge ([`super::merge`]) hands over a round's versions ordered by (key, sequence,
//! add-after-retract), cut into one group per key. Each group is first narrowed by Java Paimon's
//! lookup rule where the table is read with it ([`lookup_keep`]), then resolved by the engine:
//! deduplicate keeps the latest version (none when it is a retraction), first-row the earliest
//! added, partial-update each column's latest non-NULL value, aggregation each column's fold
//! ([`super::aggregate`]). Winners are gathered with Arrow's `interleave`, one call per column.
//!
//! Invariants: the rules are Java Paimon 1.3's (`MergeFileSplitRead` with the table's merge
//! function, wrapped in `LookupMergeFunction` when `CoreOptions.needLookup()` and not first-row,
//! inside `ReducerMergeFunctionWrapper`): a key's single version passes as it is (dropped when a
//! retraction); several versions go through the merge function, whose aggregation result is an
//! added row whatever its inputs' kinds.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use super::aggregate::{self, Aggregation, Version};

/// How a key's versions merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// The latest version; a latest `-U`/`-D` removes the key.
    Deduplicate,
    /// Per column, the latest non-NULL value of the added versions; with `remove_on_delete`
    /// (`partial-update.remove-record-on-delete`) a `-D` removes the row, later versions start
    /// a new one.
    PartialUpdate { ignore_delete: bool, remove_on_delete: bool },
    /// The earliest added version.
    FirstRow { ignore_delete: bool },
    /// Per value column, its function's fold of the versions.
    Aggregate(Arc<Aggregation>),
}

/// One version of a key in a round.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub key: i64,
    pub seq: i64,
    pub add: bool,
    /// A `-D` (a retraction that is not an `-U`).
    pub delete: bool,
    pub src: u32,
    pub row: u32,
}

/// paimon-rust's refusal, word for word.
pub const FIRST_ROW_RETRACT: &str =
    "merge-engine=first-row does not support DELETE or UPDATE_BEFORE rows; set ignore-delete=true to ignore them";

/// Java Paimon's lookup rule (`LookupMergeFunction`): a table written with lookup compaction
/// holds in each non-zero level a key's value merged with every level above it, so a read
/// takes a key's versions of level 0 (and below: not yet written) and the one version of the
/// lowest non-zero level holding it. None when that is every version.
pub fn lookup_keep<T: Copy>(group: &[T], level: impl Fn(&T) -> i32) -> Option<Vec<T>> {
    let lowest = group.iter().map(&level).filter(|&l| l > 0).min()?;
    let keep = |v: &T| {
        let l = level(v);
        l <= 0 || l == lowest
    };
    if group.iter().all(keep) {
        return None;
    }
    Some(group.iter().copied().filter(keep).collect())
}

/// What a round's rows are merged into: the schema, which output columns are keys.
pub struct Gather<'a> {
    pub engine: &'a Engine,
    pub schema: &'a SchemaRef,
    /// Per output column: whether it is a key column (aggregation copies it from the latest version).
    pub keys: &'a [bool],
}

impl Gather<'_> {
    /// Resolves each group (`bounds` into `entries`, in key order) of versions in `batches`;
    /// `level` gives a version's level where the table is read with the lookup rule.
    pub fn resolve(
        &self,
        entries: &[Entry],
        bounds: &[(usize, usize)],
        level: Option<&dyn Fn(&Entry) -> i32>,
        batches: &[&RecordBatch],
    ) -> Result<Option<RecordBatch>, String> {
        let at = |e: &Entry| (e.src as usize, e.row as usize);
        let mut picks: Vec<(usize, usize)> = Vec::new();
        // Partial-update: each key's added versions, as ranges of `adds`.
        let mut adds: Vec<(usize, usize)> = Vec::new();
        let mut groups: Vec<(usize, usize)> = Vec::new();
        // Aggregation: each key's versions, as ranges of `versions`.
        let mut versions: Vec<Version> = Vec::new();
        for &(g, h) in bounds {
            let all = &entries[g..h];
            let kept;
            let group: &[Entry] = match level.and_then(|l| lookup_keep(all, l)) {
                Some(k) => {
                    kept = k;
                    &kept
                }
                None => all,
            };
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
                Engine::PartialUpdate { ignore_delete, remove_on_delete } => {
                    let from = adds.len();
                    // Java: ignore-delete first; else remove-record-on-delete drops what came
                    // before a -D (and an -U changes nothing); else a retraction is refused.
                    let mut removed = false;
                    for e in group {
                        if e.add {
                            adds.push(at(e));
                            removed = false;
                        } else if *ignore_delete {
                        } else if *remove_on_delete {
                            if e.delete {
                                adds.truncate(from);
                                removed = true;
                            }
                        } else if group.len() > 1 {
                            return Err("merge-engine=partial-update does not support DELETE or UPDATE_BEFORE \
                                        without ignore-delete, sequence-group, or remove-record-on-delete"
                                .into());
                        }
                    }
                    if removed || adds.len() == from {
                        adds.truncate(from);
                    } else {
                        picks.push(adds[adds.len() - 1]);
                        groups.push((from, adds.len()));
                    }
                }
                Engine::Aggregate(_) => {
                    // A single version passes as it is; several are folded into an added row.
                    if all.len() == 1 && !all[0].add {
                        continue;
                    }
                    let from = versions.len();
                    versions.extend(group.iter().map(|e| (e.src as usize, e.row as usize, e.add)));
                    groups.push((from, versions.len()));
                    picks.push(at(&group[group.len() - 1]));
                }
            }
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.keys.len());
        for c in 0..self.keys.len() {
            let values: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            let nulls: Vec<_> = values.iter().map(|v| v.nulls().filter(|n| n.null_count() > 0)).collect();
            let valid = |s: usize, r: usize| nulls[s].is_none_or(|n| n.is_valid(r));
            let column = match self.engine {
                Engine::Aggregate(agg) if !self.keys[c] => {
                    let name = self.schema.field(c).name();
                    let groups: Vec<&[Version]> = groups.iter().map(|&(f, t)| &versions[f..t]).collect();
                    columns.push(aggregate::fold(agg.field(name), name, &values, &groups)?);
                    continue;
                }
                Engine::PartialUpdate { .. } if nulls.iter().any(Option::is_some) => {
                    // The latest non-NULL value of each key's added versions (NULL when none).
                    let per: Vec<(usize, usize)> = groups
                        .iter()
                        .map(|&(from, to)| {
                            adds[from..to].iter().rev().find(|&&(s, r)| valid(s, r)).copied().unwrap_or(adds[to - 1])
                        })
                        .collect();
                    arrow_select::interleave::interleave(&values, &per)
                }
                _ => arrow_select::interleave::interleave(&values, &picks),
            };
            columns.push(column.map_err(|e| format!("gathering merged rows: {e}"))?);
        }
        RecordBatch::try_new(self.schema.clone(), columns).map(Some).map_err(|e| format!("building merged rows: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::lookup_keep;

    #[test]
    fn the_lookup_rule_keeps_level_zero_and_the_lowest_non_zero_level() {
        let level = |v: &(i32, &str)| v.0;
        // level 5's value is merged into level 4's already: only level 4 and level 0 count
        let got = lookup_keep(&[(5, "old"), (4, "merged"), (0, "new"), (0, "newer")], level);
        assert_eq!(got, Some(vec![(4, "merged"), (0, "new"), (0, "newer")]));
        // the write buffer's level (-1) counts like level 0
        assert_eq!(lookup_keep(&[(3, "a"), (1, "b"), (-1, "c")], level), Some(vec![(1, "b"), (-1, "c")]));
        // nothing to drop: one non-zero level, only level 0, one version
        assert_eq!(lookup_keep(&[(5, "a"), (0, "b")], level), None);
        assert_eq!(lookup_keep(&[(0, "a"), (0, "b")], level), None);
        assert_eq!(lookup_keep(&[(2, "a")], level), None);
    }
}
