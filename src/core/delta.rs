//! When a lake refresh may merge the new snapshots' own rows onto `fct_orders` instead of
//! reading the table's merged state of the changed keys.
//!
//! Reading the merged state of changed keys opens every data file whose key range holds one of
//! them; on a table that is written often and compacted rarely (every commit adds files, and
//! corrections hit old keys) that is nearly every file, so a refresh of one small commit costs
//! O(table). The delta path reads only the new snapshots' rows and merges them, in commit order,
//! onto the merged rows the layer already holds: what a bounded streaming read of the table
//! gives, which a table streamhouse serves must agree with its batch read on (the tier DDL's
//! contract). It is taken only where that merge is the table's whole merge semantics, decided
//! here from the table's options; anything else takes the merged-state read, which is never
//! wrong.
//!
//! Invariant: `plan` answers `Some` only for deduplicate and partial-update tables with fixed
//! buckets, no changelog producer that rewrites rows (none or input), and no option outside a
//! list of options known not to change which row or value wins.

use std::collections::HashMap;

/// How the delta rows of one key combine with the row the layer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The last row wins; a last `-D`/`-U` deletes the order.
    Deduplicate,
    /// Each column: its last non-NULL value in the delta, else the held row's. Only `+I`/`+U`
    /// rows (a delete needs options this path does not take).
    PartialUpdate,
}

/// Most snapshots applied from their changes; further behind, one read of the whole state is cheaper.
pub const MAX_SNAPSHOTS: i64 = 64;

/// Options that never change which row or value wins a merge: storage, file layout, compaction
/// scheduling, snapshot retention, metadata, and `rowkind.field` (the writer takes each row's
/// kind from that column and stores it; a reader sees the stored kind).
const HARMLESS: [&str; 10] = [
    "bucket",
    "bucket-key",
    "merge-engine",
    "changelog-producer",
    "rowkind.field",
    "file-system",
    "owner",
    "comment",
    "path",
    "type",
];
const HARMLESS_PREFIXES: [&str; 16] = [
    "file.",
    "manifest.",
    "snapshot.",
    "compaction.",
    "full-compaction.",
    "num-sorted-run.",
    "num-levels",
    "target-file-size",
    "write-",
    "commit.",
    "parquet.",
    "orc.",
    "avro.",
    "lookup.",
    "tag.",
    "partition.",
];

/// Why the delta path is not taken for a table, or how its rows merge.
pub fn plan(options: &HashMap<String, String>) -> Result<Merge, String> {
    let merge = match options.get("merge-engine").map(|e| e.to_ascii_lowercase()).as_deref() {
        None | Some("deduplicate") => Merge::Deduplicate,
        Some("partial-update") => Merge::PartialUpdate,
        Some(other) => return Err(format!("merge-engine {other}")),
    };
    match options.get("bucket").and_then(|b| b.trim().parse::<i64>().ok()) {
        Some(n) if n >= 1 => {}
        _ => return Err("no fixed bucket count".into()),
    }
    if let Some(p) = options.get("changelog-producer") {
        if !matches!(p.to_ascii_lowercase().as_str(), "none" | "input") {
            return Err(format!("changelog-producer {p}"));
        }
    }
    let mut keys: Vec<&String> = options.keys().collect();
    keys.sort();
    if let Some(key) = keys.into_iter().find(|k| !harmless(&k.to_ascii_lowercase())) {
        return Err(format!("option {key}"));
    }
    Ok(merge)
}

/// Whether the (lower-case) option `key` is one that never changes which row or value wins.
pub fn harmless(key: &str) -> bool {
    HARMLESS.contains(&key) || HARMLESS_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Whether snapshots of these commit kinds carry only rows added on top of the previous state
/// (an OVERWRITE replaces it: its delta alone says nothing of what vanished).
pub fn additive(kind: &str) -> bool {
    kind.eq_ignore_ascii_case("APPEND") || kind.eq_ignore_ascii_case("COMPACT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn deduplicate_and_partial_update_with_fixed_buckets_merge_their_delta() {
        assert_eq!(plan(&opts(&[("bucket", "4")])), Ok(Merge::Deduplicate));
        assert_eq!(plan(&opts(&[("bucket", "2"), ("merge-engine", "Deduplicate")])), Ok(Merge::Deduplicate));
        let pu = opts(&[("bucket", "4"), ("merge-engine", "partial-update"), ("file.format", "parquet")]);
        assert_eq!(plan(&pu), Ok(Merge::PartialUpdate));
        let harmless = opts(&[
            ("bucket", "1"),
            ("changelog-producer", "input"),
            ("manifest.format", "avro"),
            ("snapshot.num-retained.max", "10"),
            ("write-only", "true"),
            ("commit.force-compact", "true"),
            ("rowkind.field", "op"),
        ]);
        assert_eq!(plan(&harmless), Ok(Merge::Deduplicate));
    }

    #[test]
    fn anything_that_changes_which_row_wins_takes_the_merged_read() {
        let cases: [(&[(&str, &str)], &str); 9] = [
            (&[("bucket", "4"), ("merge-engine", "first-row")], "merge-engine first-row"),
            (&[("bucket", "4"), ("merge-engine", "aggregation")], "merge-engine aggregation"),
            (&[("bucket", "-1")], "no fixed bucket count"),
            (&[], "no fixed bucket count"),
            (&[("bucket", "4"), ("changelog-producer", "lookup")], "changelog-producer lookup"),
            (&[("bucket", "4"), ("sequence.field", "ts")], "option sequence.field"),
            (
                &[("bucket", "4"), ("merge-engine", "partial-update"), ("fields.a.sequence-group", "b")],
                "option fields.a.sequence-group",
            ),
            (&[("bucket", "4"), ("ignore-delete", "true")], "option ignore-delete"),
            (&[("bucket", "4"), ("deletion-vectors.enabled", "true")], "option deletion-vectors.enabled"),
        ];
        for (options, why) in cases {
            assert_eq!(plan(&opts(options)), Err(why.to_string()), "{options:?}");
        }
    }

    #[test]
    fn only_appends_and_compactions_are_additive() {
        assert!(additive("APPEND") && additive("COMPACT"));
        assert!(!additive("OVERWRITE") && !additive("ANALYZE") && !additive(""));
    }
}
