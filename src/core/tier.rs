//! Flink/Paimon SQL for the lake table into which Fluss tiers a primary-key table, and for the
//! mart table a streaming job maintains from the fact (`mart_ddl`, `mart_job`).
//!
//! The options are what makes a bounded streaming read equal a batch read: the primary key
//! with `deduplicate` collapses writes per key (latest wins), `changelog-producer = input`
//! gives the streaming scan a well-defined changelog, and one bucket makes the layout and
//! the per-key order deterministic. Pure logic, no FFI.

use crate::core::error::{Error, Result};
use crate::core::quote;

/// The table options, in the order they are rendered.
pub const TIER_OPTIONS: [(&str, &str); 3] =
    [("bucket", "1"), ("merge-engine", "deduplicate"), ("changelog-producer", "input")];

/// `a.b.c` → `` `a`.`b`.`c` ``. Every part must be non-blank; at most catalog.database.table.
pub fn flink_table_name(function: &'static str, name: &str) -> Result<String> {
    let bad = |reason: &str| Error::BadIdentifier { function, name: name.into(), reason: reason.into() };
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 3 {
        return Err(bad("at most three dot-separated parts (catalog.database.table)"));
    }
    if parts.iter().any(|p| p.trim().is_empty()) {
        return Err(bad("a dot-separated part is empty"));
    }
    Ok(parts.iter().map(|p| quote::flink_ident(p)).collect::<Vec<_>>().join("."))
}

pub fn tier_ddl(name: &str) -> Result<String> {
    let table = flink_table_name("paimon_tier_ddl", name)?;
    let options = with_clause(&TIER_OPTIONS);
    Ok(format!(
        "CREATE TABLE {table} (\n  id INT,\n  bal INT,\n  PRIMARY KEY (id) NOT ENFORCED\n) WITH (\n{options}\n)"
    ))
}

pub fn tier_upsert(name: &str, id: i32, bal: i32) -> Result<String> {
    let table = flink_table_name("paimon_tier_upsert", name)?;
    Ok(format!("INSERT INTO {table} (id, bal) VALUES ({id}, {bal})"))
}

/// The mart table's options: one row per (company, order_day), the latest write wins. Not the
/// aggregation merge engine: a retraction it receives can be lost in compaction
/// (apache/paimon#4670), and a streaming GROUP BY upserts whole groups anyway.
pub const MART_OPTIONS: [(&str, &str); 3] =
    [("bucket", "4"), ("merge-engine", "deduplicate"), ("changelog-producer", "input")];

/// The mart table's columns and Paimon types, in table order: what `mart_ddl` renders,
/// `serving_publish` creates and checks, and a replica reads.
pub const MART_COLUMNS: [(&str, &str); 4] =
    [("company", "STRING"), ("order_day", "DATE"), ("revenue", "DECIMAL(38, 0)"), ("orders", "BIGINT")];
/// The mart table's primary key: one row per (company, order_day).
pub const MART_KEY: [&str; 2] = ["company", "order_day"];

fn with_clause(options: &[(&str, &str)]) -> String {
    options.iter().map(|(k, v)| format!("  '{k}' = '{v}'")).collect::<Vec<_>>().join(",\n")
}

/// How fresh Fluss keeps the lake copy of a table unless told (Fluss's own default is 3 min).
pub const DEFAULT_FRESHNESS: &str = "1min";

/// The Fluss SQL (Flink SQL on a Fluss catalog) of the orders fact as a Fluss primary-key table
/// tiered into Paimon: the serving columns, `order_id` the key, lake tiering on with the given
/// `freshness`. What `serving_build('fluss://...')` serves as is (no column map needed).
pub fn fluss_tier_ddl(name: &str, freshness: Option<&str>) -> Result<String> {
    let table = flink_table_name("fluss_tier_ddl", name)?;
    let freshness = freshness.unwrap_or(DEFAULT_FRESHNESS).trim();
    let digits = freshness.trim_end_matches(|c: char| c.is_ascii_alphabetic()).trim();
    let unit = freshness[digits.len()..].trim();
    if digits.parse::<u32>().map_or(true, |n| n == 0) || !["ms", "s", "min", "h"].contains(&unit) {
        return Err(Error::BadArgument {
            function: "fluss_tier_ddl",
            parameter: "freshness",
            value: freshness.to_string(),
            problem: "is not a positive duration in ms, s, min or h (e.g. '1s', '3min')".into(),
        });
    }
    Ok(format!(
        "CREATE TABLE {table} (\n  order_id BIGINT,\n  company STRING,\n  order_day DATE,\n  revenue BIGINT,\n  \
         PRIMARY KEY (order_id) NOT ENFORCED\n) WITH (\n  'bucket.num' = '4',\n  'table.datalake.enabled' = 'true',\n  \
         'table.datalake.freshness' = '{digits}{unit}'\n)"
    ))
}

/// The Paimon mart table a publisher, a Ray job or a Flink job fills and replicas serve.
pub fn mart_ddl(name: &str) -> Result<String> {
    let table = flink_table_name("paimon_mart_ddl", name)?;
    let columns: Vec<String> = MART_COLUMNS
        .iter()
        .map(|(c, t)| if MART_KEY.contains(c) { format!("  {c} {t} NOT NULL") } else { format!("  {c} {t}") })
        .collect();
    Ok(format!(
        "CREATE TABLE {table} (\n{},\n  PRIMARY KEY ({}) NOT ENFORCED\n) WITH (\n{}\n)",
        columns.join(",\n"),
        MART_KEY.join(", "),
        with_clause(&MART_OPTIONS)
    ))
}

/// How often the rendered mart job checkpoints unless told: Paimon's streaming sink commits a
/// snapshot only on a checkpoint, so without one the mart table never changes.
pub const DEFAULT_CHECKPOINT: &str = "10 s";

/// The Flink SQL that keeps `mart` equal to the mart of `fact` as the fact changes: a streaming
/// GROUP BY over the fact's changelog — Flink normalizes a primary-key table's changes into
/// before- and after-images itself, so a corrected or deleted order retracts its old (company,
/// day) contribution, whatever the fact's changelog producer and whatever level its files are
/// at when the job starts — upserting each changed group into the deduplicate mart and deleting
/// a group whose last order left. `checkpoint` (e.g. '10 s', '500 ms') is how often the job
/// commits to the mart table. Tested by running the text on Flink 1.20.3 with Paimon 1.3.1.
pub fn mart_job(fact: &str, mart: &str, checkpoint: Option<&str>) -> Result<String> {
    let fact = flink_table_name("paimon_mart_job", fact)?;
    let mart = flink_table_name("paimon_mart_job", mart)?;
    let checkpoint = checkpoint.unwrap_or(DEFAULT_CHECKPOINT).trim();
    let valid = checkpoint
        .split_once(' ')
        .or_else(|| checkpoint.find(|c: char| c.is_alphabetic()).map(|i| checkpoint.split_at(i)))
        .is_some_and(|(n, unit)| {
            n.trim().parse::<u32>().is_ok_and(|n| n > 0) && ["ms", "s", "min"].contains(&unit.trim())
        });
    if !valid {
        return Err(Error::BadArgument {
            function: "paimon_mart_job",
            parameter: "checkpoint",
            value: checkpoint.to_string(),
            problem: "is not a positive duration in ms, s or min (e.g. '10 s', '500 ms')".into(),
        });
    }
    Ok(format!(
        "SET 'execution.runtime-mode' = 'streaming';\n\
         SET 'execution.checkpointing.interval' = '{checkpoint}';\n\
         INSERT INTO {mart}\n\
         SELECT company, order_day, CAST(SUM(revenue) AS DECIMAL(38, 0)) AS revenue, COUNT(*) AS orders\n\
         FROM {fact}\n\
         GROUP BY company, order_day;"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_has_every_clause() {
        let ddl = tier_ddl("db.acct").unwrap();
        assert!(ddl.starts_with("CREATE TABLE `db`.`acct` ("), "{ddl}");
        for clause in [
            "id INT",
            "bal INT",
            "PRIMARY KEY (id) NOT ENFORCED",
            "'bucket' = '1'",
            "'merge-engine' = 'deduplicate'",
            "'changelog-producer' = 'input'",
        ] {
            assert!(ddl.contains(clause), "missing {clause} in {ddl}");
        }
    }

    #[test]
    fn names_are_quoted_and_checked() {
        assert_eq!(flink_table_name("f", "we`ird").unwrap(), "`we``ird`");
        assert_eq!(flink_table_name("f", "c.d.t").unwrap(), "`c`.`d`.`t`");
        for bad in ["", "a..b", ".t", "t.", "a.b.c.d", " . "] {
            assert!(flink_table_name("f", bad).is_err(), "{bad:?}");
        }
        assert_eq!(tier_upsert("t", -1, 7).unwrap(), "INSERT INTO `t` (id, bal) VALUES (-1, 7)");
    }

    #[test]
    fn fluss_ddl_is_a_tiered_primary_key_table() {
        let ddl = fluss_tier_ddl("shop.orders", Some("1s")).unwrap();
        assert!(ddl.starts_with("CREATE TABLE `shop`.`orders` ("), "{ddl}");
        for clause in [
            "order_id BIGINT",
            "PRIMARY KEY (order_id) NOT ENFORCED",
            "'table.datalake.enabled' = 'true'",
            "'table.datalake.freshness' = '1s'",
        ] {
            assert!(ddl.contains(clause), "missing {clause} in {ddl}");
        }
        assert!(fluss_tier_ddl("o", None).unwrap().contains("'table.datalake.freshness' = '1min'"));
        for bad in ["0s", "soon", "5 d", "1s'); DROP"] {
            let e = fluss_tier_ddl("o", Some(bad)).unwrap_err().to_string();
            assert!(e.contains("parameter 'freshness'"), "{bad}: {e}");
        }
    }

    #[test]
    fn mart_ddl_and_job() {
        let ddl = mart_ddl("lake.mart_daily").unwrap();
        assert!(ddl.starts_with("CREATE TABLE `lake`.`mart_daily` ("), "{ddl}");
        for clause in [
            "company STRING NOT NULL",
            "order_day DATE NOT NULL",
            "revenue DECIMAL(38, 0)",
            "orders BIGINT",
            "PRIMARY KEY (company, order_day) NOT ENFORCED",
            "'merge-engine' = 'deduplicate'",
        ] {
            assert!(ddl.contains(clause), "missing {clause} in {ddl}");
        }
        assert!(!ddl.contains("aggregation"), "{ddl}");
        let job = mart_job("lake.fct_orders", "lake.mart_daily", None).unwrap();
        assert!(!job.contains("ALTER TABLE"), "{job}");
        assert!(job.contains("SET 'execution.checkpointing.interval' = '10 s';"), "{job}");
        let fast = mart_job("f", "m", Some("500 ms")).unwrap();
        assert!(fast.contains("'execution.checkpointing.interval' = '500 ms'"), "{fast}");
        for bad in ["0 s", "ten s", "5 h", "", "5 s'; DROP"] {
            let e = mart_job("f", "m", Some(bad)).unwrap_err().to_string();
            assert!(e.contains("parameter 'checkpoint'"), "{bad}: {e}");
        }
        assert!(job.contains("INSERT INTO `lake`.`mart_daily`\nSELECT company, order_day"), "{job}");
        assert!(job.contains("GROUP BY company, order_day;"), "{job}");
        let err = mart_job("a..b", "m", None).unwrap_err().to_string();
        assert!(err.starts_with("paimon_mart_job: invalid table name 'a..b'"), "{err}");
    }
}
