//! Column mapping: how a source with its own column names and types feeds the serving columns.
//!
//! `columns := MAP {'order_id': 'id', 'company': 'customer', 'order_day': 'CAST(order_ts AS
//! DATE)', 'revenue': 'CAST(round(amount * 100) AS BIGINT)'}` gives, per serving column, a
//! column of the source or an expression over the source's own columns. The source is then read
//! through one projection (`select_list`) that names the serving columns, and everything
//! downstream (the contract check, the load, a refresh) sees the serving shape. A serving column
//! the map does not name is the source's column of that name.
//!
//! Invariant: an expression is one scalar expression over the row it is evaluated on — no
//! statement separator, no subquery or other relation, no function that reads files, other
//! tables, the environment, the clock or settings (`called_functions`). The same rules apply to
//! `deleted :=`. This module is the first gate, by name, with no DuckDB at hand (it also runs at
//! bind); the second is an allow-list by DuckDB's own catalog (`serving::mapped::gate_expression`:
//! every call a CONSISTENT scalar function or a macro whose body passes both gates). The binder
//! later checks that it names only source columns. Pure: no DuckDB, no I/O.

use crate::core::error::{shown, Error, Result};
use crate::core::quote;

/// The serving columns, in `fct_orders`' order.
pub const SERVING: [&str; 4] = ["order_id", "company", "order_day", "revenue"];
/// The columns of `ColumnMap::tolerant_select_list` that say why a mapped value is missing
/// (`__sh_problem_company`, ...).
pub const PROBLEM_PREFIX: &str = "__sh_problem_";

/// Words that start a query or name a relation: a mapping is an expression over the row.
const RELATION_WORDS: [&str; 9] =
    ["select", "from", "with", "table", "values", "pivot", "unpivot", "summarize", "describe"];

/// Calls refused by name (compared lowercased, as DuckDB resolves a name quoted or not): they
/// read files, other tables, the environment or the clock, change state, or give a different
/// answer each time (a rebuild must give the layer it gave before). Some of them DuckDB classes
/// as CONSISTENT (`current_setting`, `getenv`, `getvariable`, `current_localtimestamp`,
/// `version`), which is why the catalog's allow-list alone is not enough.
const REFUSED_CALLS: [&str; 30] = [
    "getenv",
    "current_setting",
    "current_localtime",
    "current_localtimestamp",
    "version",
    "now",
    "today",
    "get_current_timestamp",
    "nextval",
    "currval",
    "setseed",
    "random",
    "uuid",
    "gen_random_uuid",
    "uuidv4",
    "uuidv7",
    "glob",
    "query",
    "query_table",
    "read_blob",
    "read_text",
    "sniff_csv",
    "load",
    "install",
    "sql_auto_complete",
    "write_log",
    "enable_logging",
    "set_variable",
    "getvariable",
    "checkpoint",
];
/// SQL's niladic clock words, calls without parentheses (`current_date`): a mapping must give
/// the same row twice.
const CLOCK_WORDS: [&str; 5] = ["current_date", "current_time", "current_timestamp", "localtime", "localtimestamp"];

/// Unquoted words that precede a `(` without being a call: operators and constructs of SQL's
/// grammar (`x IN (1, 2)`, `CAST(...)`, `CASE WHEN (...)`), checked by the binder, not the catalog.
const GRAMMAR_WORDS: [&str; 24] = [
    "cast", "try_cast", "try", "coalesce", "and", "or", "not", "in", "is", "between", "like", "ilike", "similar",
    "when", "then", "else", "case", "as", "any", "all", "some", "distinct", "interval", "collate",
];

/// Type names that take parameters (`CAST(x AS DECIMAL(10, 2))`, `x::VARCHAR(10)`): not calls.
const TYPE_WORDS: [&str; 10] =
    ["decimal", "numeric", "varchar", "char", "struct", "union", "enum", "map", "timestamp", "bit"];

/// Families of table functions (files, other databases, lake readers, our own functions).
const REFUSED_PREFIXES: [&str; 12] = [
    "read_",
    "parquet_",
    "iceberg_",
    "delta_",
    "paimon_",
    "fluss_",
    "serving_",
    "duckdb_",
    "pragma_",
    "sqlite_",
    "postgres_",
    "mysql_",
];

/// One token of an expression, as far as the checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An identifier, unquoted (lowercased) or quoted (as written).
    Ident {
        name: String,
        quoted: bool,
    },
    Punct(char),
    Literal,
}

fn tokens(expr: &str) -> std::result::Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' || c == '"' {
            // A string literal or quoted identifier; a doubled quote is one quote inside.
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("an unterminated {c}...{c}")),
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        text.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&q) => {
                        text.push(q);
                        i += 1;
                    }
                }
            }
            out.push(if c == '"' { Token::Ident { name: text, quoted: true } } else { Token::Literal });
        } else if c == '-' && chars.get(i + 1) == Some(&'-') || c == '/' && chars.get(i + 1) == Some(&'*') {
            return Err("a comment (give the expression alone)".into());
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                i += 1;
            }
            out.push(Token::Ident { name: chars[start..i].iter().collect::<String>().to_lowercase(), quoted: false });
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Literal);
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    Ok(out)
}

/// The names of the functions `expr` calls (lowercased), after checking it is one scalar
/// expression over the row: `Err(problem)` otherwise.
pub fn called_functions(expr: &str) -> std::result::Result<Vec<String>, String> {
    if expr.trim().is_empty() {
        return Err("it is empty (give a column name or an expression over the source's columns)".into());
    }
    let toks = tokens(expr)?;
    let mut calls = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t {
            Token::Punct(';') => {
                return Err("a ';' is not part of an expression (give one expression, no statements)".into())
            }
            Token::Punct('$' | '?') => return Err("a parameter placeholder is not a value of the row".into()),
            Token::Ident { name, quoted: false } if RELATION_WORDS.contains(&name.as_str()) => {
                return Err(format!(
                    "'{}' reads another relation (a subquery or table); an expression may use only the source's own \
                     columns",
                    name.to_uppercase()
                ))
            }
            Token::Ident { name, quoted: false } if name == "over" => {
                return Err("a window function (OVER) is not a value of one row".into())
            }
            Token::Ident { name, quoted: false } if CLOCK_WORDS.contains(&name.as_str()) => {
                return Err(format!(
                    "it reads the clock ({name}); a mapping must give the same row every time it is read"
                ))
            }
            Token::Ident { name, quoted: false }
                if GRAMMAR_WORDS.contains(&name.as_str())
                    || TYPE_WORDS.contains(&name.as_str()) && is_type_position(&toks, i) => {}
            Token::Ident { name, .. } if toks.get(i + 1) == Some(&Token::Punct('(')) => {
                // DuckDB resolves a function's name in any case, quoted or not.
                let name = name.to_lowercase();
                let refused =
                    REFUSED_CALLS.contains(&name.as_str()) || REFUSED_PREFIXES.iter().any(|p| name.starts_with(p));
                if refused {
                    return Err(format!(
                        "it calls {name}(), which reads outside the row (files, tables, the environment, the \
                         clock or settings) or is not deterministic; an expression may use only the source's own \
                         columns"
                    ));
                }
                if !calls.contains(&name) {
                    calls.push(name);
                }
            }
            _ => {}
        }
    }
    Ok(calls)
}

/// Whether the word at `i` names a type: it follows `AS` (a CAST), `::` or another type's `(`/`,`
/// (a nested type such as `STRUCT(a DECIMAL(10, 2))`: conservative, a call there is still a
/// call when the catalog is asked, since the word is then not in `TYPE_WORDS`).
fn is_type_position(toks: &[Token], i: usize) -> bool {
    match i.checked_sub(1).and_then(|p| toks.get(p)) {
        Some(Token::Ident { name, quoted: false }) => {
            name == "as" || toks.get(i.wrapping_sub(2)) == Some(&Token::Punct('('))
        }
        Some(Token::Punct(':')) => true,
        _ => false,
    }
}

/// The identifiers `expr` mentions that are among `columns` (compared as DuckDB does:
/// case-insensitively), in `columns`' order: the source columns a lake read must decode.
pub fn referenced<'a>(expr: &str, columns: &'a [String]) -> Vec<&'a String> {
    let Ok(toks) = tokens(expr) else { return Vec::new() };
    columns
        .iter()
        .filter(|c| toks.iter().any(|t| matches!(t, Token::Ident { name, .. } if name.eq_ignore_ascii_case(c))))
        .collect()
}

/// A checked column map: per serving column, the SQL that gives it (None: the source's column
/// of that name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ColumnMap {
    pub exprs: [Option<String>; 4],
}

impl ColumnMap {
    /// From `columns := MAP {...}`'s pairs: every key a serving column (once), every value an
    /// expression `called_functions` accepts.
    pub fn parse(function: &'static str, pairs: &[(String, String)]) -> Result<ColumnMap> {
        let bad = |value: &str, problem: String| Error::BadArgument {
            function,
            parameter: "columns",
            value: shown(value),
            problem,
        };
        let mut map = ColumnMap::default();
        for (key, value) in pairs {
            let Some(at) = SERVING.iter().position(|s| s.eq_ignore_ascii_case(key.trim())) else {
                return Err(bad(
                    key,
                    format!("'{}' is not a serving column; the keys are {}", shown(key), SERVING.join(", ")),
                ));
            };
            if map.exprs[at].is_some() {
                return Err(bad(key, format!("'{}' is mapped twice", SERVING[at])));
            }
            called_functions(value).map_err(|p| bad(value, format!("the expression for {}: {p}", SERVING[at])))?;
            map.exprs[at] = Some(value.trim().to_string());
        }
        Ok(map)
    }

    pub fn is_empty(&self) -> bool {
        self.exprs.iter().all(Option::is_none)
    }

    /// The SQL giving serving column `i`.
    fn sql(&self, i: usize) -> String {
        self.exprs[i].clone().unwrap_or_else(|| quote::ident(SERVING[i]))
    }

    /// A projection of `relation` (whose columns are `columns`) that names the serving columns
    /// and keeps every other column (a change set's delete flag, say) under its own name.
    pub fn select_list(&self, columns: &[String]) -> String {
        let mut list: Vec<String> = (0..4).map(|i| format!("{} AS {}", self.sql(i), SERVING[i])).collect();
        list.extend(
            columns.iter().filter(|c| !SERVING.iter().any(|s| s.eq_ignore_ascii_case(c))).map(|c| quote::ident(c)),
        );
        list.join(", ")
    }

    /// `select_list` for `on_bad_rows := 'quarantine'` (`core::quarantine`): each mapped
    /// expression under TRY, so a row it fails on reads NULL instead of failing the statement,
    /// and beside each serving column `PROBLEM_PREFIX<column>`, which says (when the value is
    /// NULL) the expression and the source values it was given. TRY(e) appears twice, never e
    /// alone in another expression: DuckDB before 2.0.1 lifts a subexpression shared by two
    /// expressions out of their TRY (then its error escapes), a whole TRY(e) is lifted intact.
    pub fn tolerant_select_list(&self, columns: &[String]) -> String {
        let mut list: Vec<String> = (0..4).map(|i| format!("TRY({}) AS {}", self.sql(i), SERVING[i])).collect();
        list.extend(
            columns.iter().filter(|c| !SERVING.iter().any(|s| s.eq_ignore_ascii_case(c))).map(|c| quote::ident(c)),
        );
        for (i, expr) in self.exprs.iter().enumerate() {
            let problem = match expr {
                None => "CAST(NULL AS VARCHAR)".to_string(),
                Some(e) => {
                    let said = quote::literal(&format!("{} := {} is NULL or fails", SERVING[i], shown(e)));
                    let inputs: Vec<String> = referenced(e, columns)
                        .into_iter()
                        .map(|c| {
                            format!(
                                "{} || coalesce({q} || left(CAST({} AS VARCHAR), 100) || {q}, 'NULL')",
                                quote::literal(&format!("{c} = ")),
                                quote::ident(c),
                                q = quote::literal("'"),
                            )
                        })
                        .collect();
                    let given = match inputs.is_empty() {
                        true => String::new(),
                        false => format!(" || ' for ' || concat_ws(', ', {})", inputs.join(", ")),
                    };
                    format!("CASE WHEN TRY({e}) IS NULL THEN {said}{given} END")
                }
            };
            list.push(format!("{problem} AS {PROBLEM_PREFIX}{}", SERVING[i]));
        }
        list.join(", ")
    }

    /// The source column order_id is, when the map names it as a plain column (a lake table's
    /// key must be read as such to find changed orders).
    pub fn key_column<'a>(&self, columns: &'a [String]) -> Option<&'a String> {
        let sql = self.sql(0);
        let toks = tokens(&sql).ok()?;
        match toks.as_slice() {
            [Token::Ident { name, .. }] => columns.iter().find(|c| c.eq_ignore_ascii_case(name)),
            _ => None,
        }
    }

    /// The source columns the map reads (the unmapped serving columns by their own names).
    pub fn inputs<'a>(&self, columns: &'a [String]) -> Vec<&'a String> {
        let all: Vec<String> = (0..4).map(|i| self.sql(i)).collect();
        columns.iter().filter(|c| all.iter().any(|e| referenced(e, std::slice::from_ref(*c)).len() == 1)).collect()
    }

    /// The map as recorded with the layer (`serving_meta.columns`): one `key: expression` per
    /// mapped column, `; `-separated with `;` inside an expression impossible (refused).
    pub fn encode(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let parts: Vec<String> =
            (0..4).filter_map(|i| self.exprs[i].as_ref().map(|e| format!("{}: {e}", SERVING[i]))).collect();
        Some(parts.join("; "))
    }

    /// The map `encode` recorded (an unreadable record is no map: the caller reports it).
    pub fn decode(text: &str) -> Option<ColumnMap> {
        let pairs: Option<Vec<(String, String)>> =
            text.split("; ").map(|p| p.split_once(": ").map(|(k, v)| (k.to_string(), v.to_string()))).collect();
        ColumnMap::parse("serving", &pairs?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Result<ColumnMap> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        ColumnMap::parse("serving_build", &pairs)
    }

    #[test]
    fn fluss_shaped_map_is_accepted_and_round_trips() {
        let m = map(&[
            ("order_id", "id"),
            ("company", "customer"),
            ("order_day", "CAST(order_ts AS DATE)"),
            ("revenue", "CAST(round(amount * 100) AS BIGINT)"),
        ])
        .unwrap();
        assert_eq!(ColumnMap::decode(&m.encode().unwrap()), Some(m.clone()));
        let cols: Vec<String> = ["id", "customer", "order_ts", "amount", "note"].map(String::from).to_vec();
        assert_eq!(m.key_column(&cols), Some(&cols[0]));
        assert_eq!(m.inputs(&cols), vec![&cols[0], &cols[1], &cols[2], &cols[3]]);
        let list = m.select_list(&cols);
        assert!(list.starts_with("id AS order_id, customer AS company, CAST(order_ts AS DATE) AS order_day"), "{list}");
        assert!(list.ends_with("\"note\"") || list.ends_with("note"), "{list}");
    }

    #[test]
    fn tolerant_select_list_tries_each_expression_and_says_what_it_was_given() {
        let m = map(&[("order_id", "id"), ("order_day", "CAST(ts AS DATE)")]).unwrap();
        let cols: Vec<String> = ["id", "company", "ts", "revenue", "op"].map(String::from).to_vec();
        let list = m.tolerant_select_list(&cols);
        assert!(
            list.starts_with("TRY(id) AS order_id, TRY(\"company\") AS company, TRY(CAST(ts AS DATE)) AS order_day")
        );
        assert!(list.contains("\"op\", "), "{list}");
        assert!(
            list.contains(
                "CASE WHEN TRY(CAST(ts AS DATE)) IS NULL THEN 'order_day := CAST(ts AS DATE) is NULL or fails' || ' for ' \
                 || concat_ws(', ', 'ts = ' || coalesce('''' || left(CAST(\"ts\" AS VARCHAR), 100) || '''', 'NULL')) \
                 END AS __sh_problem_order_day"
            ),
            "{list}"
        );
        // An unmapped column is the source's own: nothing to try, no problem of its own.
        assert!(list.contains("CAST(NULL AS VARCHAR) AS __sh_problem_company"), "{list}");
    }

    #[test]
    fn unmapped_columns_keep_their_names() {
        let m = map(&[("revenue", "cents / 100")]).unwrap();
        let cols: Vec<String> = ["order_id", "company", "order_day", "cents"].map(String::from).to_vec();
        assert_eq!(m.key_column(&cols), Some(&cols[0]));
        assert_eq!(m.inputs(&cols).len(), 4);
        // An unmapped serving column is the source's column of that name, quoted.
        assert!(m.select_list(&cols).starts_with("\"order_id\" AS order_id"), "{}", m.select_list(&cols));
    }

    #[test]
    fn expressions_reading_outside_the_row_are_refused_by_name() {
        for (expr, word) in [
            ("(SELECT count(*) FROM victim)", "SELECT"),
            ("getenv('HOME')", "getenv"),
            ("read_csv('x.csv')", "read_csv"),
            ("amount; DROP TABLE t", "';'"),
            ("sum(amount) OVER ()", "OVER"),
            ("random()", "random"),
            ("amount -- c", "comment"),
            ("", "empty"),
        ] {
            let e = map(&[("revenue", expr)]).unwrap_err().to_string();
            assert!(e.contains(word) && e.contains("revenue"), "{expr}: {e}");
        }
    }

    #[test]
    fn refused_calls_are_found_in_any_case_quoted_or_not() {
        for expr in [
            "\"CURRENT_SETTING\"('s3_secret_access_key')",
            "\"RANDOM\"()",
            "\"Uuid\"()",
            "GETENV('HOME')",
            "main.\"getenv\"('HOME')",
            "now()",
            "CAST(current_date AS VARCHAR)",
            "coalesce(x, \"Read_Text\"('f'))",
        ] {
            let e = map(&[("company", expr)]).unwrap_err().to_string();
            assert!(e.contains("company") && (e.contains("reads") || e.contains("not deterministic")), "{expr}: {e}");
        }
    }

    #[test]
    fn grammar_and_type_words_are_not_calls() {
        let calls = called_functions(
            "CASE WHEN (a IN (1, 2)) THEN CAST(round(b) AS DECIMAL(10, 2)) ELSE TRY_CAST(c AS VARCHAR(3)) END",
        )
        .unwrap();
        assert_eq!(calls, vec!["round".to_string()]);
        // The same word in call position is a call, checked against DuckDB's catalog later.
        assert_eq!(called_functions("\"Upper\"(x) || upper(y)").unwrap(), vec!["upper".to_string()]);
    }

    #[test]
    fn literals_and_quoted_names_are_not_mistaken_for_words() {
        assert!(map(&[("company", "CASE WHEN \"from\" = 'select' THEN 'x' ELSE customer END")]).is_ok());
        let e = map(&[("cost", "x")]).unwrap_err().to_string();
        assert!(e.contains("not a serving column"), "{e}");
        let e = map(&[("revenue", "a"), ("REVENUE", "b")]).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
    }
}
