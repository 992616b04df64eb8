//! The question a revenue dashboard asks of one company: an optional `order_day` window, a grain
//! (day, ISO week, month, quarter, year) and the top N periods. Checks the named parameters and
//! writes the SQL for each query *shape* (which parameters are present, and the grain): every
//! value is bound as a parameter, so the text depends only on the shape and a connection keeps
//! one prepared statement per shape. Pure logic, unit-tested.

use duckdb::types::Value;

use crate::core::error::{Error, Result};
use crate::core::schema::{Place, FACT, MART};

/// How days are grouped into the periods the dashboard ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grain {
    #[default]
    Day,
    /// ISO weeks: a period starts on a Monday.
    Week,
    Month,
    Quarter,
    Year,
}

impl Grain {
    pub const ALL: [Grain; 5] = [Grain::Day, Grain::Week, Grain::Month, Grain::Quarter, Grain::Year];

    /// The name users write (in any case) and `date_trunc` takes.
    pub fn name(self) -> &'static str {
        match self {
            Grain::Day => "day",
            Grain::Week => "week",
            Grain::Month => "month",
            Grain::Quarter => "quarter",
            Grain::Year => "year",
        }
    }

    pub fn parse(function: &'static str, text: &str) -> Result<Grain> {
        Grain::ALL.into_iter().find(|g| g.name().eq_ignore_ascii_case(text)).ok_or_else(|| Error::BadArgument {
            function,
            parameter: "grain",
            value: text.into(),
            problem: format!("not one of {} (in any case)", Grain::ALL.map(Grain::name).join(", ")),
        })
    }
}

/// A DATE argument: days since 1970-01-01, and DuckDB's text of it for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayArg {
    pub days: i32,
    pub text: String,
}

/// Which relation a statement reads: the rollup (what is served), the fact (the oracle), or
/// another table of the rollup's shape (one row per company and day: a lake fact aggregated
/// while streaming, for `serving_olap(..., fact := ...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Mart,
    Fact,
    Rollup(&'static str),
}

impl Relation {
    fn table(self) -> &'static str {
        match self {
            Relation::Mart => MART,
            Relation::Fact => FACT,
            Relation::Rollup(table) => table,
        }
    }
}

/// One dashboard question, checked. `Default` is the whole history by day, every row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DashboardQuery {
    /// Keep the first N rows of the order (revenue DESC, period ASC); always positive.
    pub top: Option<i64>,
    /// Inclusive bounds on `order_day`, in days since 1970-01-01; `from_day <= to_day`.
    pub from_day: Option<i32>,
    pub to_day: Option<i32>,
    pub grain: Grain,
}

impl DashboardQuery {
    /// Checks the named parameters of `function` (NULLs are refused before this, by the binder).
    pub fn parse(
        function: &'static str,
        top: Option<i64>,
        from_day: Option<DayArg>,
        to_day: Option<DayArg>,
        grain: Option<&str>,
    ) -> Result<DashboardQuery> {
        if let Some(n) = top.filter(|&n| n <= 0) {
            return Err(Error::BadArgument {
                function,
                parameter: "top",
                value: n.to_string(),
                problem: "must be a positive integer (the number of rows to keep)".into(),
            });
        }
        if let (Some(from), Some(to)) = (&from_day, &to_day) {
            if from.days > to.days {
                return Err(Error::BadArgument {
                    function,
                    parameter: "from_day",
                    value: from.text.clone(),
                    problem: format!(
                        "is after to_day '{}' (the window bounds order_day inclusively, from_day <= to_day)",
                        to.text
                    ),
                });
            }
        }
        let grain = grain.map(|g| Grain::parse(function, g)).transpose()?.unwrap_or_default();
        Ok(DashboardQuery { top, from_day: from_day.map(|d| d.days), to_day: to_day.map(|d| d.days), grain })
    }

    /// What serving_dashboard runs (and serving_explain shows): `mart_daily` only.
    pub fn dashboard_sql(&self) -> String {
        self.sql(Relation::Mart)
    }

    /// The same answer aggregated straight from the fact: serving_olap, the oracle.
    pub fn olap_sql(&self) -> String {
        self.sql(Relation::Fact)
    }

    /// The statement of this shape over `source`: `$1` is the company, then `from_day`, `to_day`
    /// and `top` as far as they are present (`parameters` gives them in that order). The window
    /// filters `order_day` itself, before any grouping, so the scan prunes by zone maps and a
    /// period cut by the window sums only its days inside it.
    pub fn sql(&self, source: Relation) -> String {
        self.sql_over(source, source.table())
    }

    /// `sql` with the layer's tables named at `place` (a `Rollup` is a temp table, unqualified):
    /// a same-named table elsewhere on the caller's search path never answers.
    pub fn sql_at(&self, source: Relation, place: &Place) -> String {
        match source {
            Relation::Rollup(table) => self.sql_over(source, table),
            _ => self.sql_over(source, &place.of(source.table())),
        }
    }

    fn sql_over(&self, source: Relation, table: &str) -> String {
        let mut filter = String::from("company = $1");
        let mut n = 1;
        for (present, op) in [(self.from_day.is_some(), ">="), (self.to_day.is_some(), "<=")] {
            if present {
                n += 1;
                // Bound as 'YYYY-MM-DD' text: duckdb-rs 1.4 cannot bind a DATE value, and the
                // cast of a bound constant folds to a DATE literal the scan prunes with.
                filter.push_str(&format!(" AND order_day {op} CAST(${n} AS DATE)"));
            }
        }
        let limit = self.top.map_or(String::new(), |_| format!(" LIMIT ${}", n + 1));
        let body = match (source, self.grain) {
            // The mart already holds one row per (company, day): a lookup, no aggregation.
            (Relation::Mart | Relation::Rollup(_), Grain::Day) => {
                format!("SELECT order_day, revenue FROM {table} WHERE {filter}")
            }
            (Relation::Fact, Grain::Day) => format!(
                "SELECT order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue FROM {table} WHERE {filter} \
                 GROUP BY order_day"
            ),
            (_, grain) => {
                // date_trunc gives a TIMESTAMP; the column stays a DATE. ORDER BY below names the
                // select list's `order_day`, the period, not the table's column.
                let period = format!("CAST(date_trunc('{}', order_day) AS DATE)", grain.name());
                format!(
                    "SELECT {period} AS order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue FROM {table} \
                     WHERE {filter} GROUP BY {period}"
                )
            }
        };
        format!("{body} ORDER BY revenue DESC, order_day ASC{limit}")
    }

    /// The values bound to the statement of this shape, in its parameter order.
    pub fn parameters(&self, company: &str) -> Vec<Value> {
        let mut values = vec![Value::Text(company.to_string())];
        values.extend(self.from_day.map(|d| Value::Text(iso_date(d))));
        values.extend(self.to_day.map(|d| Value::Text(iso_date(d))));
        values.extend(self.top.map(Value::BigInt));
        values
    }
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (proleptic Gregorian, the civil-from-days
/// algorithm: eras of 400 years, March-based years so that leap days fall at a year's end).
pub fn iso_date(days: i32) -> String {
    let z = i64::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = "serving_dashboard";

    fn day(days: i32, text: &str) -> Option<DayArg> {
        Some(DayArg { days, text: text.into() })
    }

    #[test]
    fn default_shape_is_the_original_statement() {
        // Existing plan tests and cached statements rely on this exact text.
        let q = DashboardQuery::default();
        assert_eq!(
            q.dashboard_sql(),
            "SELECT order_day, revenue FROM mart_daily WHERE company = $1 ORDER BY revenue DESC, order_day ASC"
        );
        assert_eq!(
            q.olap_sql(),
            "SELECT order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue FROM fct_orders WHERE company = $1 \
             GROUP BY order_day ORDER BY revenue DESC, order_day ASC"
        );
        assert_eq!(q.parameters("acme"), vec![Value::Text("acme".into())]);
        assert_eq!(DashboardQuery::parse(F, None, None, None, None).unwrap(), q);
    }

    #[test]
    fn parameters_are_numbered_by_shape() {
        let q = DashboardQuery { top: Some(10), from_day: Some(5), to_day: Some(9), grain: Grain::Month };
        let sql = q.dashboard_sql();
        assert_eq!(
            sql,
            "SELECT CAST(date_trunc('month', order_day) AS DATE) AS order_day, CAST(SUM(revenue) AS HUGEINT) AS \
             revenue FROM mart_daily WHERE company = $1 AND order_day >= CAST($2 AS DATE) AND order_day <= CAST($3 AS DATE) \
             GROUP BY CAST(date_trunc('month', order_day) AS DATE) ORDER BY revenue DESC, order_day ASC LIMIT $4"
        );
        assert_eq!(
            q.parameters("o'x"),
            vec![
                Value::Text("o'x".into()),
                Value::Text("1970-01-06".into()),
                Value::Text("1970-01-10".into()),
                Value::BigInt(10)
            ]
        );
        assert_eq!(q.olap_sql(), sql.replace("mart_daily", "fct_orders"));

        let to_only = DashboardQuery { to_day: Some(3), top: Some(2), ..Default::default() };
        assert_eq!(
            to_only.dashboard_sql(),
            "SELECT order_day, revenue FROM mart_daily WHERE company = $1 AND order_day <= CAST($2 AS DATE) \
             ORDER BY revenue DESC, order_day ASC LIMIT $3"
        );
        assert_eq!(
            to_only.parameters("a"),
            vec![Value::Text("a".into()), Value::Text("1970-01-04".into()), Value::BigInt(2)]
        );
        let from_only = DashboardQuery { from_day: Some(3), ..Default::default() };
        assert!(from_only
            .dashboard_sql()
            .ends_with("WHERE company = $1 AND order_day >= CAST($2 AS DATE) ORDER BY revenue DESC, order_day ASC"));
    }

    #[test]
    fn iso_dates_of_day_numbers() {
        for (days, want) in [
            (0, "1970-01-01"),
            (-1, "1969-12-31"),
            (59, "1970-03-01"),
            (11_016, "2000-02-29"),
            (19_723, "2024-01-01"),
            (19_782, "2024-02-29"),
            (-719_162, "0001-01-01"),
            (2_932_896, "9999-12-31"),
        ] {
            assert_eq!(iso_date(days), want, "{days}");
        }
    }

    #[test]
    fn the_text_depends_only_on_the_shape() {
        let a = DashboardQuery { top: Some(1), from_day: Some(1), to_day: None, grain: Grain::Week };
        let b = DashboardQuery { top: Some(99), from_day: Some(-400), to_day: None, grain: Grain::Week };
        assert_eq!(a.dashboard_sql(), b.dashboard_sql());
        assert_ne!(a.parameters("c"), b.parameters("c"));
        // every grain and presence combination is its own statement
        let mut seen = std::collections::HashSet::new();
        for grain in Grain::ALL {
            for mask in 0..8 {
                let q = DashboardQuery {
                    top: (mask & 1 != 0).then_some(1),
                    from_day: (mask & 2 != 0).then_some(0),
                    to_day: (mask & 4 != 0).then_some(0),
                    grain,
                };
                assert!(seen.insert(q.dashboard_sql()));
                let placeholders = q.dashboard_sql().matches('$').count();
                assert_eq!(placeholders, q.parameters("c").len(), "{}", q.dashboard_sql());
                assert!(!q.dashboard_sql().contains("fct_orders"));
            }
        }
    }

    #[test]
    fn grain_is_case_insensitive_and_named_when_unknown() {
        for (text, grain) in [
            ("DAY", Grain::Day),
            ("Week", Grain::Week),
            ("month", Grain::Month),
            ("QuArTeR", Grain::Quarter),
            ("year", Grain::Year),
        ] {
            assert_eq!(Grain::parse(F, text).unwrap(), grain);
        }
        let e = DashboardQuery::parse(F, None, None, None, Some("fortnight")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "serving_dashboard: parameter 'grain' = 'fortnight': not one of day, week, month, quarter, year (in any case)"
        );
        assert!(Grain::parse(F, " day").is_err() && Grain::parse(F, "").is_err() && Grain::parse(F, "days").is_err());
        for grain in Grain::ALL {
            let sql = DashboardQuery { grain, ..Default::default() }.dashboard_sql();
            assert_eq!(sql.contains("date_trunc"), grain != Grain::Day, "{sql}");
        }
    }

    #[test]
    fn top_must_be_positive() {
        for n in [0, -1, i64::MIN] {
            let e = DashboardQuery::parse("serving_olap", Some(n), None, None, None).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "serving_olap: parameter 'top' = '{n}': must be a positive integer (the number of rows to keep)"
                )
            );
        }
        assert_eq!(DashboardQuery::parse(F, Some(1), None, None, None).unwrap().top, Some(1));
    }

    #[test]
    fn window_must_not_be_reversed() {
        let e = DashboardQuery::parse(F, None, day(10, "1970-01-11"), day(9, "1970-01-10"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "serving_dashboard: parameter 'from_day' = '1970-01-11': is after to_day '1970-01-10' (the window \
             bounds order_day inclusively, from_day <= to_day)"
        );
        let q = DashboardQuery::parse(F, None, day(9, "1970-01-10"), day(9, "1970-01-10"), Some("Day")).unwrap();
        assert_eq!((q.from_day, q.to_day), (Some(9), Some(9)));
        let q = DashboardQuery::parse(F, None, None, day(-1, "1969-12-31"), None).unwrap();
        assert_eq!((q.from_day, q.to_day), (None, Some(-1)));
    }
}
