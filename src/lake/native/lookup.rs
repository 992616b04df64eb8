//! Java Paimon's lookup rule, as far as choosing a reader goes: which tables Java reads with it,
//! and which reads of them paimon-rust's reader would get wrong.
//!
//! A table that "needs lookup" (Paimon's `CoreOptions.needLookup()`: `changelog-producer =
//! lookup`, deletion vectors, `force-lookup`, or first-row) is compacted by looking each new key
//! up in the levels below level 0: the key's value merged with those levels' is written into a
//! lower non-zero level, beside the upper-level files that still hold its older value. Java
//! reads such a table (except first-row, whose merge it leaves as it is) with
//! `LookupMergeFunction`: a key's level-0 versions and the version of the lowest non-zero level
//! holding it ([`super::engine::lookup_keep`], applied by the native merge). paimon-rust 0.4
//! merges every level, which merges a value into itself once more: harmless for deduplicate and
//! partial-update (latest value, latest non-NULL value per column), wrong for a sum, a count-like
//! fold, or a row removed on delete. Deletion vectors mark the older copy deleted, so there every
//! key lives in one non-zero level and every reader agrees.
//!
//! Invariant: a split read by paimon-rust (by `reader := 'paimon-rust'`, or because the native
//! path does not read it) is refused by name where its table's merge is not idempotent and the
//! split holds more than one non-zero level: never a silently double-counted value.

use std::collections::HashMap;

use paimon::table::DataSplit;

/// Why a split goes to paimon-rust when the caller asked for it (`paimon_scan(reader := ...)`).
pub const PAIMON_RUST: &str = "reader := 'paimon-rust'";

fn option<'a>(options: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    options.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.trim())
}

fn is_true(options: &HashMap<String, String>, key: &str) -> bool {
    option(options, key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Why Java Paimon looks keys up when it compacts this table (None: it does not), without the
/// first-row engine (its merge is not wrapped).
fn lookup_trigger(options: &HashMap<String, String>) -> Option<&'static str> {
    if option(options, "changelog-producer").is_some_and(|p| p.eq_ignore_ascii_case("lookup")) {
        Some("changelog-producer lookup")
    } else if is_true(options, "deletion-vectors.enabled") {
        Some("deletion vectors")
    } else if is_true(options, "force-lookup") {
        Some("force-lookup")
    } else {
        None
    }
}

fn merge_engine(options: &HashMap<String, String>) -> String {
    option(options, "merge-engine").unwrap_or("deduplicate").to_ascii_lowercase()
}

/// Whether Java Paimon reads this table with its lookup rule (`PrimaryKeyFileStoreTable` wraps
/// the merge function in `LookupMergeFunction` when `needLookup()`, except first-row's).
pub fn reads_with_rule(options: &HashMap<String, String>, primary_key: bool) -> bool {
    primary_key && merge_engine(options) != "first-row" && lookup_trigger(options).is_some()
}

/// The table's engine, named, where merging a key's value once per level is wrong: a lookup
/// table without deletion vectors whose merge is not idempotent (aggregation; partial-update
/// that removes rows on delete or aggregates fields).
pub fn levels_matter(options: &HashMap<String, String>, primary_key: bool) -> Option<String> {
    if !reads_with_rule(options, primary_key) || is_true(options, "deletion-vectors.enabled") {
        return None;
    }
    let engine = merge_engine(options);
    let twice_wrong = match engine.as_str() {
        "aggregation" => true,
        "partial-update" => options.keys().map(|k| k.to_ascii_lowercase()).any(|k| {
            k == "partial-update.remove-record-on-delete"
                || k == "partial-update.remove-record-by-sequence-group"
                || k == "fields.default-aggregate-function"
                || (k.starts_with("fields.") && k.ends_with(".aggregate-function"))
        }),
        _ => false,
    };
    let trigger = lookup_trigger(options)?;
    twice_wrong.then(|| format!("merge-engine {engine} with {trigger}"))
}

/// The distinct non-zero levels of a split's files, ascending.
fn levels(split: &DataSplit) -> Vec<i32> {
    let mut levels: Vec<i32> = split.data_files().iter().map(|f| f.level).filter(|&l| l > 0).collect();
    levels.sort_unstable();
    levels.dedup();
    levels
}

/// Why paimon-rust, reading `split` because of `why`, would read it wrong (None: it reads it
/// right); `levels_matter` is the table's [`levels_matter`].
pub fn refusal(split: &DataSplit, levels_matter: Option<&str>, why: &str) -> Option<String> {
    let engine = levels_matter?;
    let levels = levels(split);
    if levels.len() < 2 {
        return None;
    }
    Some(refusal_text(engine, why, split.bucket(), &levels))
}

fn refusal_text(engine: &str, why: &str, bucket: i32, levels: &[i32]) -> String {
    let instead = if why == PAIMON_RUST {
        "read it with the default reader (reader := 'native'), which applies that rule".to_string()
    } else {
        format!(
            "this read would go to paimon-rust ({why}); the native reader applies the rule to local Parquet files \
             of the table's current schema, and a full compaction (one level per bucket) makes any reader right"
        )
    };
    format!(
        "refused: the table ({engine}) is read by Java Paimon with its lookup rule (a key from level 0 and the \
         lowest non-zero level holding it, whose value already merges the levels above), while paimon-rust's reader \
         merges every level and would merge those values twice; bucket {bucket} holds levels {levels:?}: {instead}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn java_reads_with_the_rule_where_it_needs_lookup_except_first_row() {
        let lookup = ("changelog-producer", "lookup");
        assert!(reads_with_rule(&opts(&[lookup]), true));
        assert!(reads_with_rule(&opts(&[("merge-engine", "aggregation"), ("changelog-producer", "LOOKUP")]), true));
        assert!(reads_with_rule(&opts(&[("deletion-vectors.enabled", "true")]), true));
        assert!(reads_with_rule(&opts(&[("force-lookup", "true")]), true));
        assert!(!reads_with_rule(&opts(&[("merge-engine", "first-row"), lookup]), true));
        assert!(!reads_with_rule(&opts(&[("changelog-producer", "input")]), true));
        assert!(!reads_with_rule(&opts(&[("changelog-producer", "full-compaction")]), true));
        assert!(!reads_with_rule(&opts(&[lookup]), false));
    }

    #[test]
    fn levels_matter_where_a_merged_value_merged_again_changes() {
        let agg = ("merge-engine", "aggregation");
        let pu = ("merge-engine", "partial-update");
        let lookup = ("changelog-producer", "lookup");
        let named = |pairs: &[(&str, &str)]| levels_matter(&opts(pairs), true);
        assert_eq!(named(&[agg, lookup]).as_deref(), Some("merge-engine aggregation with changelog-producer lookup"));
        assert_eq!(
            named(&[agg, ("force-lookup", "true")]).as_deref(),
            Some("merge-engine aggregation with force-lookup")
        );
        let removes = ("partial-update.remove-record-on-delete", "true");
        assert!(named(&[pu, lookup, removes]).is_some());
        assert!(named(&[pu, lookup, ("fields.v.aggregate-function", "sum")]).is_some());
        // idempotent merges, deletion vectors (one live copy per key), no lookup, first-row
        assert_eq!(named(&[pu, lookup, ("ignore-delete", "true")]), None);
        assert_eq!(named(&[lookup]), None);
        assert_eq!(named(&[agg, lookup, ("deletion-vectors.enabled", "true")]), None);
        assert_eq!(named(&[agg]), None);
        assert_eq!(named(&[agg, ("changelog-producer", "full-compaction")]), None);
        assert_eq!(named(&[("merge-engine", "first-row"), lookup]), None);
    }

    #[test]
    fn the_refusal_names_the_engine_the_levels_and_what_to_use() {
        let text = refusal_text("merge-engine aggregation with changelog-producer lookup", PAIMON_RUST, 0, &[4, 5]);
        assert!(text.contains("merge-engine aggregation with changelog-producer lookup"), "{text}");
        assert!(text.contains("bucket 0 holds levels [4, 5]"), "{text}");
        assert!(text.contains("reader := 'native'"), "{text}");
        let text = refusal_text("merge-engine aggregation with force-lookup", "file format avro", 2, &[1, 5]);
        assert!(text.contains("(file format avro)") && text.contains("full compaction"), "{text}");
    }
}
