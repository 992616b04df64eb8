//! The serving contract: which source columns we need, which types we accept for them, and
//! the SQL that turns a source relation into `fct_orders` rows. Pure logic, unit-tested.

use crate::core::error::{Error, Probe, Result};
use crate::core::quote;

pub const FACT: &str = "fct_orders";
pub const MART: &str = "mart_daily";
pub const META: &str = "serving_meta";
/// Orders per mart group: what tells a refresh that a group became empty (a SUM alone cannot).
pub const COUNTS: &str = "serving_mart_counts";

const INTEGER_TYPES: [&str; 10] =
    ["TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"];
const INTEGER: &str = "an integer type (TINYINT..HUGEINT, or DECIMAL with scale 0)";
/// What to do with a revenue that is not an integer: streamhouse sums exactly, in whole units.
const INTEGER_REVENUE: &str = "an integer type (TINYINT..HUGEINT, or DECIMAL with scale 0); for amounts with \
     decimals build from a view with CAST(round(amount * 100) AS BIGINT) AS revenue (whole cents)";

fn is_integer_type(t: &str) -> bool {
    let t = t.to_ascii_uppercase();
    INTEGER_TYPES.contains(&t.as_str()) || (t.starts_with("DECIMAL(") && t.ends_with(",0)"))
}

/// How `order_day` arrives: already a DATE, or text that must parse as YYYY-MM-DD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayKind {
    Date,
    Text,
}

/// The four serving columns as they are spelled in the source, plus how order_day arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceColumns {
    pub order_id: String,
    pub company: String,
    pub order_day: String,
    pub revenue: String,
    pub day_kind: DayKind,
    /// The SQL (quoted, over the source's columns) that says an order is deleted: refresh
    /// change sets only (`delete_flag`), None when nothing marks deletes.
    pub deleted: Option<String>,
}

/// Matches the described columns `(name, type)` of `source` against the contract.
/// How a change set marks deletes is decided apart (`delete_flag`): `deleted` is left None.
pub fn match_columns(source: &str, described: &[(String, String)]) -> Result<SourceColumns> {
    let find = |column: &'static str| -> Result<(String, String)> {
        described.iter().find(|(n, _)| n.eq_ignore_ascii_case(column)).cloned().ok_or_else(|| Error::MissingColumn {
            source: source.into(),
            column,
            found: described.iter().map(|(n, t)| format!("{n} {t}")).collect(),
        })
    };
    let wrong = |column: &'static str, found: &str, expected: &'static str| Error::WrongType {
        source: source.into(),
        column,
        found: found.into(),
        expected,
    };
    let (order_id, t) = find("order_id")?;
    if !is_integer_type(&t) {
        return Err(wrong("order_id", &t, INTEGER));
    }
    let (company, t) = find("company")?;
    if !t.eq_ignore_ascii_case("VARCHAR") {
        return Err(wrong("company", &t, "VARCHAR"));
    }
    let (order_day, t) = find("order_day")?;
    let day_kind = match t.to_ascii_uppercase().as_str() {
        "DATE" => DayKind::Date,
        "VARCHAR" => DayKind::Text,
        _ => {
            return Err(wrong(
                "order_day",
                &t,
                "DATE or 'YYYY-MM-DD' text (VARCHAR); for a TIMESTAMP build from a view with CAST(ts AS DATE) AS \
                 order_day",
            ))
        }
    };
    let (revenue, t) = find("revenue")?;
    if !is_integer_type(&t) {
        return Err(wrong("revenue", &t, INTEGER_REVENUE));
    }
    Ok(SourceColumns { order_id, company, order_day, revenue, day_kind, deleted: None })
}

/// Column names that suggest a change set marks deletes some other way than a BOOLEAN
/// `deleted`: refused when no `deleted :=` says how, never ignored (the mart would be wrong).
const DELETE_LIKE: [&str; 24] = [
    "op",
    "_op",
    "operation",
    "op_type",
    "optype",
    "row_kind",
    "rowkind",
    "_row_kind",
    "change_type",
    "_change_type",
    "changetype",
    "cdc_op",
    "action",
    "kind",
    "is_deleted",
    "isdeleted",
    "is_delete",
    "delete",
    "deleted_flag",
    "_deleted",
    "__deleted",
    "deleted_at",
    "tombstone",
    "_hoodie_is_deleted",
];

/// How a change set marks a deleted order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteFlag {
    /// Nothing marks deletes: every row is a new or revised order.
    Absent,
    /// A BOOLEAN column of the change set.
    Column(String),
    /// A boolean SQL expression over the change set's columns (its type is checked by DuckDB).
    Expression(String),
}

/// Says how `source` marks deletes: `given` is what `deleted :=` says (None: the default, a
/// BOOLEAN column named `deleted` if there is one). A given name that is a column must be that
/// column; anything else given is an expression. Without `deleted :=`, a column that looks like
/// another kind of delete flag (`op`, `is_deleted`, ...) is refused rather than ignored.
pub fn delete_flag(source: &str, described: &[(String, String)], given: Option<&str>) -> Result<DeleteFlag> {
    let spec = given.unwrap_or("deleted");
    if let Some((name, t)) = described.iter().find(|(n, _)| n.eq_ignore_ascii_case(spec.trim())) {
        if !t.eq_ignore_ascii_case("BOOLEAN") {
            return Err(Error::WrongType {
                source: source.into(),
                column: "deleted",
                found: format!("{t} (column '{name}')"),
                expected: "BOOLEAN; for a flag of another type give a boolean expression, e.g. \
                           deleted := 'op = ''D''' or deleted := 'is_deleted = 1'",
            });
        }
        return Ok(DeleteFlag::Column(name.clone()));
    }
    if let Some(given) = given {
        if given.trim().is_empty() {
            return Err(Error::BadArgument {
                function: "serving_refresh",
                parameter: "deleted",
                value: given.into(),
                problem: "give the BOOLEAN column or the boolean expression that marks a deleted order".into(),
            });
        }
        return Ok(DeleteFlag::Expression(given.to_string()));
    }
    match described.iter().find(|(n, _)| DELETE_LIKE.iter().any(|d| n.eq_ignore_ascii_case(d))) {
        Some((name, t)) => Err(Error::Refused {
            function: "serving_refresh",
            problem: format!(
                "change set '{}' has a column '{name}' ({t}) that looks like a delete flag, but only a BOOLEAN \
                 column named 'deleted' marks deletes by default, so its deletes would be applied as updates. Say \
                 how a deleted order is marked: deleted := '<column or boolean expression>' (e.g. deleted := \
                 '{name} = ''D''' or deleted := '{name} = 1'), or leave the column out of the change set",
                crate::core::error::shown(source)
            ),
        }),
        None => Ok(DeleteFlag::Absent),
    }
}

impl SourceColumns {
    /// SELECT list producing the `fct_orders` shape. Casts are checked: an out-of-range value
    /// or an impossible date fails the statement, and `diagnose_sql` then finds the row.
    pub fn fact_select_list(&self) -> String {
        format!(
            "CAST({} AS BIGINT) AS order_id, {} AS company, CAST({} AS DATE) AS order_day, CAST({} AS BIGINT) AS revenue",
            quote::ident(&self.order_id),
            quote::ident(&self.company),
            quote::ident(&self.order_day),
            quote::ident(&self.revenue),
        )
    }

    /// Whether a row of the source is a deleted order, as SQL (`false` when nothing marks one).
    pub fn deleted_sql(&self) -> String {
        self.deleted.as_deref().map_or("false".to_string(), |d| format!("COALESCE(CAST(({d}) AS BOOLEAN), false)"))
    }

    /// Queries that each find the first offending row `(order_id, value)` and the problem they
    /// detect. Run only after a load failed (a constraint or a checked cast), to say which row.
    /// A deleted order needs only its key: its empty columns are no offence.
    pub fn diagnose_sql(&self, relation: &str) -> Vec<(String, Probe)> {
        let id = quote::ident(&self.order_id);
        let live = format!("NOT {}", self.deleted_sql());
        let mut probes: Vec<(String, Probe)> = [
            ("order_id", &self.order_id, "true"),
            ("company", &self.company, live.as_str()),
            ("order_day", &self.order_day, live.as_str()),
            ("revenue", &self.revenue, live.as_str()),
        ]
        .into_iter()
        .map(|(name, col, rows)| {
            (
                format!(
                    "SELECT CAST(min({id}) AS VARCHAR), CAST(count(*) AS VARCHAR) FROM {relation} \
                     WHERE {} IS NULL AND {rows} HAVING count(*) > 0",
                    quote::ident(col)
                ),
                Probe::Null(name),
            )
        })
        .collect();
        for (col, target, problem) in [
            (&self.order_day, "DATE", "is not a valid YYYY-MM-DD date"),
            (&self.order_id, "BIGINT", "order_id does not fit in BIGINT"),
            (&self.revenue, "BIGINT", "revenue does not fit in BIGINT"),
        ] {
            let col = quote::ident(col);
            probes.push((
                format!(
                    "SELECT CAST({id} AS VARCHAR), CAST({col} AS VARCHAR) FROM {relation} \
                     WHERE {col} IS NOT NULL AND TRY_CAST({col} AS {target}) IS NULL LIMIT 1"
                ),
                Probe::BadValue(problem),
            ));
        }
        probes
    }
}

/// DDL of the fact table. NOT NULL lets DuckDB reject NULL keys while loading, for free.
pub fn fact_ddl(table: &str) -> String {
    format!(
        "CREATE OR REPLACE TABLE {table} (order_id BIGINT NOT NULL, company VARCHAR NOT NULL, \
         order_day DATE NOT NULL, revenue BIGINT NOT NULL)"
    )
}

/// Where the serving tables live: the catalog and schema that were current when they were
/// built. Every statement that writes them names them fully, so a session whose search_path
/// has changed since can never write half of the layer into another schema (or drop another
/// schema's `fct_orders`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub catalog: String,
    pub schema: String,
}

impl Place {
    /// `"catalog"."schema".table`
    pub fn of(&self, table: &str) -> String {
        format!("{}.{}.{table}", quote::ident(&self.catalog), quote::ident(&self.schema))
    }
}

/// The rollup, sorted by company so that a company predicate prunes row groups via zone maps,
/// and its per-group order counts, from one aggregation. The counts are internal bookkeeping,
/// one row per company with aligned lists: a refresh rewrites them, and a few lists are much
/// cheaper to write than a row (and a string) per group.
pub fn mart_ctas(place: &Place) -> String {
    let (fact, mart, counts) = (place.of(FACT), place.of(MART), place.of(COUNTS));
    format!(
        "CREATE OR REPLACE TEMP TABLE __sh_agg AS SELECT company, order_day, \
             CAST(SUM(revenue) AS HUGEINT) AS revenue, count(*) AS orders \
         FROM {fact} GROUP BY company, order_day ORDER BY company, order_day; \
         CREATE OR REPLACE TABLE {mart} AS SELECT company, order_day, revenue FROM __sh_agg; \
         CREATE OR REPLACE TABLE {counts} AS SELECT company, list(order_day ORDER BY order_day) AS order_days, \
             list(orders ORDER BY order_day) AS orders FROM __sh_agg GROUP BY company ORDER BY company; \
         DROP TABLE __sh_agg"
    )
}

/// Bookkeeping of the serving layer: one row, replaced by every build. `fct_rows` is kept by
/// build and refresh (counting a table with scattered deletes costs a scan); `generation` is a
/// random token each build/refresh writes, naming the mart state a refresh may have cached;
/// `serving_catalog`/`serving_schema` are the `Place` of the layer; `mode` is 'fact' or 'mart'
/// (a mart-only replica; a layer of an older release has no such column and is a fact layer);
/// `lake_snapshot_millis` is the commit time of `lake_snapshot` (how a rewritten lake history is
/// told from the one served, `core::lineage`), `rebuilt_because` why the last refresh or follow
/// rebuilt the layer instead of applying changes, `columns` the column map it was built with
/// (`core::mapping`, its `encode`d form), reused by every refresh and follow; for a Fluss
/// source, `stream_position` is each bucket's log offset read up to (`bucket:offset,...`),
/// `stream_lake` the Paimon table of its union read and `stream_read` which lake snapshot that
/// was ('readable', 'latest', or 'log' when the log alone was read); on a replica,
/// `fact_snapshot`/`fact_commit_millis` are the fact state its mart snapshot carries
/// (`core::fact_mark`); `on_bad_rows` is what a
/// refresh does with a bad row ('fail' or 'quarantine', `core::quarantine`) and `quarantined`
/// how many orders `serving_quarantine` holds out (NULL on a replica, which has no such table).
pub fn meta_ddl(place: &Place) -> String {
    format!(
        "CREATE OR REPLACE TABLE {} (built_at TIMESTAMP, source VARCHAR, refreshed_at TIMESTAMP, \
         refresh_source VARCHAR, refreshes BIGINT, lake_snapshot BIGINT, last_reconcile_at TIMESTAMP, \
         last_reconcile_clean BOOLEAN, fct_rows BIGINT, generation BIGINT, serving_catalog VARCHAR, \
         serving_schema VARCHAR, mode VARCHAR, lake_snapshot_millis BIGINT, rebuilt_because VARCHAR, \
         columns VARCHAR, stream_position VARCHAR, stream_lake VARCHAR, stream_read VARCHAR, fact_snapshot BIGINT, \
         fact_commit_millis BIGINT, on_bad_rows VARCHAR, quarantined BIGINT)",
        place.of(META)
    )
}

/// A counts table as one row per group.
pub fn counts_rows(counts: &str) -> String {
    format!("SELECT company, unnest(order_days) AS order_day, unnest(orders) AS orders FROM {counts}")
}

/// Two-way EXCEPT ALL between what is served (mart + counts) and a fresh aggregate of the fact.
pub fn reconcile_sql(place: &Place) -> String {
    let (fact, mart, counts) = (place.of(FACT), place.of(MART), place.of(COUNTS));
    format!(
        "WITH fresh AS MATERIALIZED (SELECT company, order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue, \
                                      count(*) AS orders FROM {fact} GROUP BY company, order_day), \
              served AS MATERIALIZED (SELECT company, order_day, m.revenue, c.orders \
                                      FROM {mart} m FULL OUTER JOIN ({}) c USING (company, order_day)) \
         SELECT * FROM (SELECT 'mart_only' AS side, * FROM (FROM served EXCEPT ALL FROM fresh) \
                        UNION ALL SELECT 'fact_only' AS side, * FROM (FROM fresh EXCEPT ALL FROM served)) \
         ORDER BY company, order_day, side",
        counts_rows(&counts)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn accepts_contract_and_case_insensitive_names() {
        let c = match_columns(
            "s",
            &cols(&[
                ("ORDER_ID", "INTEGER"),
                ("Company", "VARCHAR"),
                ("order_day", "VARCHAR"),
                ("revenue", "DECIMAL(18,0)"),
                ("x", "DOUBLE"),
            ]),
        )
        .unwrap();
        assert_eq!(c.order_id, "ORDER_ID");
        assert_eq!(c.day_kind, DayKind::Text);
        assert!(c.fact_select_list().contains("CAST(\"ORDER_ID\" AS BIGINT) AS order_id"));
    }

    #[test]
    fn refuses_missing_and_wrong_types() {
        let e = match_columns("s", &cols(&[("order_id", "BIGINT")])).unwrap_err();
        assert!(e.to_string().contains("no column 'company'"), "{e}");
        let e = match_columns(
            "s",
            &cols(&[("order_id", "BIGINT"), ("company", "VARCHAR"), ("order_day", "DATE"), ("revenue", "DOUBLE")]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("'revenue'") && e.to_string().contains("DOUBLE"), "{e}");
        let e = match_columns(
            "s",
            &cols(&[("order_id", "VARCHAR"), ("company", "VARCHAR"), ("order_day", "DATE"), ("revenue", "BIGINT")]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("'order_id'"), "{e}");
    }

    #[test]
    fn deleted_column_only_for_refresh() {
        let d = cols(&[
            ("order_id", "BIGINT"),
            ("company", "VARCHAR"),
            ("order_day", "DATE"),
            ("revenue", "BIGINT"),
            ("deleted", "BOOLEAN"),
        ]);
        assert_eq!(match_columns("s", &d).unwrap().deleted, None);
    }

    #[test]
    fn delete_flag_is_a_boolean_column_an_expression_or_refused() {
        let base = [("order_id", "BIGINT"), ("company", "VARCHAR"), ("order_day", "DATE"), ("revenue", "BIGINT")];
        let with = |extra: &[(&str, &str)]| cols(&[&base[..], extra].concat());
        assert_eq!(delete_flag("s", &with(&[]), None).unwrap(), DeleteFlag::Absent);
        assert_eq!(
            delete_flag("s", &with(&[("Deleted", "BOOLEAN")]), None).unwrap(),
            DeleteFlag::Column("Deleted".into())
        );
        assert_eq!(
            delete_flag("s", &with(&[("gone", "BOOLEAN")]), Some("GONE")).unwrap(),
            DeleteFlag::Column("gone".into())
        );
        assert_eq!(
            delete_flag("s", &with(&[("op", "VARCHAR")]), Some("op = 'D'")).unwrap(),
            DeleteFlag::Expression("op = 'D'".into())
        );
        let e = delete_flag("s", &with(&[("op", "VARCHAR")]), None).unwrap_err().to_string();
        assert!(e.contains("column 'op' (VARCHAR) that looks like a delete flag") && e.contains("deleted :="), "{e}");
        let e = delete_flag("s", &with(&[("is_deleted", "INTEGER")]), None).unwrap_err().to_string();
        assert!(e.starts_with("serving_refresh: change set 's'"), "{e}");
        let e = delete_flag("s", &with(&[("deleted", "INTEGER")]), None).unwrap_err().to_string();
        assert!(e.contains("INTEGER (column 'deleted')") && e.contains("boolean expression"), "{e}");
        assert!(delete_flag("s", &with(&[]), Some("  ")).is_err());
    }
}
