//! `on_bad_rows := 'fail' | 'quarantine'`: what a build, refresh or follower does with an order
//! whose row breaks the serving contract (a NULL company, day or revenue, a value that does not
//! convert, a column-map expression that fails, an order_id twice in one change set).
//!
//! 'fail' (the default) refuses the whole change set, naming the order: nothing changes.
//! 'quarantine' applies every other order exactly and holds the bad ones out: an order held is
//! in neither `fct_orders` nor `mart_daily` (its previous version leaves them too, so the mart
//! stays the aggregate of the fact, and `serving_reconcile` stays clean), and is listed in the
//! layer's `serving_quarantine` table (order_id, reason, since) until a good version of it (or
//! its delete) arrives, which applies as usual and releases it. A row without a usable order_id
//! names no order that could be held out: it is refused under either policy.
//!
//! Pure: the policy, the SQL of the tolerant read (every cast tried, the problem of each row
//! in a column), and the sorting of a change set's rows into the applied and the held.

use crate::core::error::{Error, Result};
use crate::core::mapping::PROBLEM_PREFIX;
use crate::core::quote;
use crate::core::schema::SourceColumns;

/// The table of held orders, beside serving_meta in the layer's schema.
pub const QUARANTINE: &str = "serving_quarantine";
/// Its columns as a build creates them (`name TYPE`, in order).
pub const QUARANTINE_SHAPE: &str = "order_id BIGINT, reason VARCHAR, since TIMESTAMP WITH TIME ZONE";
/// How many held order ids `serving_status` lists.
pub const LISTED: usize = 10;

/// What a build, refresh or follower does with a bad row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBadRows {
    #[default]
    Fail,
    Quarantine,
}

impl OnBadRows {
    const CHOICES: [(&'static str, OnBadRows); 2] = [("fail", OnBadRows::Fail), ("quarantine", OnBadRows::Quarantine)];

    /// `on_bad_rows := value` of `function`: one of the choices (any case, spaces trimmed).
    pub fn parse(function: &'static str, value: &str) -> Result<OnBadRows> {
        OnBadRows::CHOICES.iter().find(|(name, _)| name.eq_ignore_ascii_case(value.trim())).map(|(_, p)| *p).ok_or_else(
            || Error::BadArgument {
                function,
                parameter: "on_bad_rows",
                value: value.to_string(),
                problem: "choose 'fail' (refuse the change set, naming the order; the default) or 'quarantine' \
                          (apply every other order and hold the bad ones out, listed in serving_status)"
                    .into(),
            },
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            OnBadRows::Fail => "fail",
            OnBadRows::Quarantine => "quarantine",
        }
    }

    /// The policy serving_meta records (NULL, a replica's, is 'fail').
    pub fn recorded(text: Option<&str>) -> OnBadRows {
        match text {
            Some(t) if t.eq_ignore_ascii_case("quarantine") => OnBadRows::Quarantine,
            _ => OnBadRows::Fail,
        }
    }
}

/// DDL of the table of held orders.
pub fn quarantine_ddl(table: &str) -> String {
    format!("CREATE OR REPLACE TABLE {table} ({QUARANTINE_SHAPE})")
}

/// A `CASE` giving why the value of serving column `serving` (read as `source`) cannot be
/// served, NULL when it can: the mapped expression's problem (`mapped`), a NULL, or a value
/// that does not convert to `target` (the type, and what that failure means).
fn problem_of(serving: &str, source: &str, mapped: bool, target: Option<(&str, &str)>) -> String {
    let x = quote::ident(source);
    let mut arms = Vec::new();
    if mapped {
        let p = quote::ident(&format!("{PROBLEM_PREFIX}{serving}"));
        arms.push(format!("WHEN {p} IS NOT NULL THEN {p}"));
    }
    arms.push(format!("WHEN {x} IS NULL THEN {}", quote::literal(&format!("{serving} is NULL"))));
    if let Some((ty, what)) = target {
        arms.push(format!(
            "WHEN TRY_CAST({x} AS {ty}) IS NULL THEN {} || left(CAST({x} AS VARCHAR), 100) || {}",
            quote::literal(&format!("{serving} '")),
            quote::literal(&format!("' {what}"))
        ));
    }
    format!("CASE {} END", arms.join(" "))
}

/// The read of a change set (or a build's source) under 'quarantine': `order_id, company,
/// order_day, revenue, deleted` as `fact_select_list` gives them but with every conversion
/// tried (a value that does not convert reads NULL), then `problem`, why the row cannot be
/// served (NULL for a good row and for a delete, which needs only its key), and `key_problem`,
/// why it has no usable order_id. `deleted` is the SQL of the delete flag (`false` when none);
/// `mapped` says `relation` is a column map's `tolerant_select_list`.
pub fn tolerant_read(columns: &SourceColumns, relation: &str, deleted: &str, mapped: bool) -> String {
    let id = quote::ident(&columns.order_id);
    let day = quote::ident(&columns.order_day);
    let revenue = quote::ident(&columns.revenue);
    let key = problem_of("order_id", &columns.order_id, mapped, Some(("BIGINT", "does not fit in BIGINT")));
    let company = problem_of("company", &columns.company, mapped, None);
    let order_day =
        problem_of("order_day", &columns.order_day, mapped, Some(("DATE", "is not a valid YYYY-MM-DD date")));
    let revenue_problem = problem_of("revenue", &columns.revenue, mapped, Some(("BIGINT", "does not fit in BIGINT")));
    format!(
        "SELECT order_id, company, order_day, revenue, deleted, \
             CASE WHEN deleted THEN NULL ELSE problem END AS problem, key_problem \
         FROM (SELECT TRY_CAST({id} AS BIGINT) AS order_id, {} AS company, TRY_CAST({day} AS DATE) AS order_day, \
                   TRY_CAST({revenue} AS BIGINT) AS revenue, {deleted} AS deleted, {key} AS key_problem, \
                   coalesce({company}, {order_day}, {revenue_problem}) AS problem \
               FROM {relation}) AS __sh_tolerant",
        quote::ident(&columns.company),
    )
}

/// The reason of an order seen in more than one row of one read, before and after the count.
pub const DUPLICATE: (&str, &str) = ("duplicate order_id (", " rows; the source must have one row per order)");

/// Why an order seen in `rows` rows of one read is held.
pub fn duplicate_reason(rows: usize) -> String {
    format!("{}{rows}{}", DUPLICATE.0, DUPLICATE.1)
}

/// The refusal of rows without a usable order_id: `count` of them, the first one's problem.
pub fn keyless(count: usize, first: &str) -> String {
    format!(
        "{count} row(s) have no usable order_id (e.g. {first}); on_bad_rows := 'quarantine' holds out orders by \
         their order_id, so such a row cannot be held out: fix or leave it out of the source"
    )
}

/// A 'fail' refusal of a bad order, with what 'quarantine' would do instead.
pub fn with_hint(problem: &str) -> String {
    format!("{problem}; on_bad_rows := 'quarantine' would hold such orders out and apply the rest")
}

/// How the rows of one read sort out: which orders are held and why, and which rows apply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// The held orders, by order_id, each with its reason (a duplicate's first).
    pub held: Vec<(i64, String)>,
    /// Per row: whether it applies (its order is not held).
    pub good: Vec<bool>,
}

/// Sorts the rows with keys `ids` and problems `problems` (aligned): an order is held when a
/// row of it has a problem or it has more than one row; every row of a held order is left out.
pub fn sort_out(ids: &[i64], problems: &[Option<&str>]) -> Verdict {
    let mut reasons: std::collections::BTreeMap<i64, String> = std::collections::BTreeMap::new();
    if crate::core::dupcheck::first_duplicate(ids.to_vec()).is_some() {
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        for run in sorted.chunk_by(|a, b| a == b).filter(|r| r.len() > 1) {
            reasons.insert(run[0], duplicate_reason(run.len()));
        }
    }
    for (&id, problem) in ids.iter().zip(problems) {
        if let Some(p) = problem {
            reasons.entry(id).or_insert_with(|| p.to_string());
        }
    }
    let good = ids.iter().map(|id| !reasons.contains_key(id)).collect();
    Verdict { held: reasons.into_iter().collect(), good }
}

/// The first held ids as `serving_status` lists them: `17, 42, 99`.
pub fn listed(ids: &[i64]) -> Option<String> {
    (!ids.is_empty()).then(|| ids.iter().take(LISTED).map(i64::to_string).collect::<Vec<_>>().join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schema::{DayKind, SourceColumns};

    #[test]
    fn policy_parses_by_name_and_refuses_anything_else_naming_the_choices() {
        assert_eq!(OnBadRows::parse("serving_refresh", " Quarantine ").unwrap(), OnBadRows::Quarantine);
        assert_eq!(OnBadRows::parse("serving_refresh", "fail").unwrap(), OnBadRows::Fail);
        let e = OnBadRows::parse("serving_follow", "skip").unwrap_err().to_string();
        assert!(e.starts_with("serving_follow: parameter 'on_bad_rows' = 'skip'"), "{e}");
        assert!(e.contains("'fail'") && e.contains("'quarantine'"), "{e}");
        assert_eq!(OnBadRows::recorded(None), OnBadRows::Fail);
        assert_eq!(OnBadRows::recorded(Some("quarantine")), OnBadRows::Quarantine);
    }

    #[test]
    fn sort_out_holds_problem_rows_and_every_row_of_a_duplicate() {
        let v = sort_out(&[5, 3, 9, 3, 7], &[None, None, Some("revenue is NULL"), Some("company is NULL"), None]);
        assert_eq!(v.held, vec![(3, duplicate_reason(2)), (9, "revenue is NULL".to_string())]);
        assert_eq!(v.good, vec![true, false, false, false, true]);
        assert_eq!(sort_out(&[1, 2], &[None, None]), Verdict { held: vec![], good: vec![true, true] });
    }

    #[test]
    fn sort_out_agrees_with_brute_force() {
        let mut x: u64 = 7;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 33
        };
        for case in 0..200 {
            let n = (next() % 40) as usize;
            let ids: Vec<i64> = (0..n).map(|_| (next() % (5 + case as u64 % 50)) as i64).collect();
            let problems: Vec<Option<&str>> = (0..n).map(|_| (next() % 7 == 0).then_some("bad")).collect();
            let v = sort_out(&ids, &problems);
            for (i, id) in ids.iter().enumerate() {
                let dup = ids.iter().filter(|j| *j == id).count() > 1;
                let bad = ids.iter().zip(&problems).any(|(j, p)| j == id && p.is_some());
                assert_eq!(v.good[i], !(dup || bad), "case {case}: {ids:?} {problems:?}");
                assert_eq!(v.held.iter().any(|(h, _)| h == id), dup || bad);
            }
            assert!(v.held.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }

    #[test]
    fn tolerant_read_tries_every_conversion_and_names_the_problem() {
        let c = SourceColumns {
            order_id: "id".into(),
            company: "Company".into(),
            order_day: "day".into(),
            revenue: "rev".into(),
            day_kind: DayKind::Text,
            deleted: None,
        };
        let sql = tolerant_read(&c, "src", "false", false);
        assert!(sql.contains("TRY_CAST(\"id\" AS BIGINT) AS order_id"), "{sql}");
        assert!(sql.contains("'order_day is NULL'") && sql.contains("is not a valid YYYY-MM-DD date"), "{sql}");
        assert!(!sql.contains(PROBLEM_PREFIX), "{sql}");
        assert!(tolerant_read(&c, "m", "false", true).contains("\"__sh_problem_company\" IS NOT NULL"));
    }

    #[test]
    fn listed_takes_the_first_ids() {
        assert_eq!(listed(&[]), None);
        assert_eq!(listed(&(1..=12).collect::<Vec<_>>()).unwrap(), "1, 2, 3, 4, 5, 6, 7, 8, 9, 10");
    }
}
