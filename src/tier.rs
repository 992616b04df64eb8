//! Flink/Paimon SQL for the lake table into which Fluss tiers a primary-key table.
//!
//! The options are what makes a bounded streaming read equal a batch read: the primary key
//! with `deduplicate` collapses writes per key (latest wins), `changelog-producer = input`
//! gives the streaming scan a well-defined changelog, and one bucket makes the layout and
//! the per-key order deterministic. Pure logic, no FFI.

use crate::error::{Error, Result};
use crate::quote;

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
    let options = TIER_OPTIONS.iter().map(|(k, v)| format!("  '{k}' = '{v}'")).collect::<Vec<_>>().join(",\n");
    Ok(format!(
        "CREATE TABLE {table} (\n  id INT,\n  bal INT,\n  PRIMARY KEY (id) NOT ENFORCED\n) WITH (\n{options}\n)"
    ))
}

pub fn tier_upsert(name: &str, id: i32, bal: i32) -> Result<String> {
    let table = flink_table_name("paimon_tier_upsert", name)?;
    Ok(format!("INSERT INTO {table} (id, bal) VALUES ({id}, {bal})"))
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
}
