//! A source read through a column map (`core::mapping`): the relation wrapped in the map's
//! projection, checked by DuckDB's binder against the source's own columns, and matched
//! against the serving contract like any source (so a wrong type names the DuckDB type and the
//! cast to write).

use duckdb::Connection;

use crate::core::error::{clean_duckdb_message, shown, Error, Result};
use crate::core::mapping::{self, ColumnMap};
use crate::core::schema::{self, SourceColumns};
use crate::serving::source::describe;

/// A relation seen through a column map.
pub struct Wrapped {
    pub relation: String,
    /// The same under `on_bad_rows := 'quarantine'`: every expression tried
    /// (`ColumnMap::tolerant_select_list`).
    pub tolerant: String,
    pub columns: SourceColumns,
}

impl Wrapped {
    /// (relation, Some(tolerant), columns), as a `ResolvedSource` takes them.
    pub fn into_parts(self) -> (String, Option<String>, SourceColumns) {
        (self.relation, Some(self.tolerant), self.columns)
    }
}

/// The relation `relation` seen through `map`, and its serving columns.
pub fn wrap(conn: &Connection, raw: &str, relation: &str, map: &ColumnMap) -> Result<Wrapped> {
    for expr in map.exprs.iter().flatten() {
        gate_expression(conn, "serving_build", "columns", expr)?;
    }
    let own: Vec<String> = describe(conn, raw, relation)?.into_iter().map(|(n, _)| n).collect();
    let wrapped = format!("(SELECT {} FROM {relation} AS __sh_source) AS __sh_mapped", map.select_list(&own));
    let described = conn
        .prepare(&format!("DESCRIBE SELECT * FROM {wrapped}"))
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .map_err(|e| invalid_map(map, &own, &clean_duckdb_message(&e)))?;
    let columns = schema::match_columns(raw, &described).map_err(|e| hint_mapping(e, map))?;
    let tolerant = format!("(SELECT {} FROM {relation} AS __sh_source) AS __sh_mapped", map.tolerant_select_list(&own));
    Ok(Wrapped { relation: wrapped, tolerant, columns })
}

/// What a map DuckDB's binder refused over a source whose columns are `columns` gets: a serving
/// column the map leaves out is the source's column of that name, so one the source lacks (and
/// the binder names, in a riddle about the select list) is named as not mapped; anything else is
/// the binder's words with the source's full column list.
fn invalid_map(map: &ColumnMap, columns: &[String], message: &str) -> Error {
    let unmapped = mapping::SERVING.iter().enumerate().find(|(i, serving)| {
        map.exprs[*i].is_none()
            && !columns.iter().any(|c| c.eq_ignore_ascii_case(serving))
            && message.contains(&format!("\"{serving}\""))
    });
    let problem = match unmapped {
        Some((_, serving)) => format!(
            "{serving} is not mapped, and the source has no column {serving}: map it to a column or an expression \
             of the source's ('{serving}': '...'); the source has {}",
            columns.join(", ")
        ),
        None => format!(
            "an expression is not valid over the source's columns ({message}); the source has {}",
            columns.join(", ")
        ),
    };
    Error::BadArgument {
        function: "serving_build",
        parameter: "columns",
        value: map.encode().map(|m| shown(&m)).unwrap_or_default(),
        problem,
    }
}

/// Checks a map against a table's full column list (`columns`) before a read decodes only the
/// columns the map uses (whose list would otherwise be all an error could show): each column an
/// untyped NULL here, so only a missing name is reported; every other problem is left to the
/// read's own check.
pub fn refuse_unknown_names(conn: &Connection, map: &ColumnMap, columns: &[String]) -> Result<()> {
    let nulls: Vec<String> = columns.iter().map(|c| format!("NULL AS {}", crate::core::quote::ident(c))).collect();
    let probe =
        format!("DESCRIBE SELECT {} FROM (SELECT {}) AS __sh_source", map.select_list(columns), nulls.join(", "));
    match conn.prepare(&probe) {
        Err(e) if clean_duckdb_message(&e).contains("not found") || clean_duckdb_message(&e).contains("defined") => {
            Err(invalid_map(map, columns, &clean_duckdb_message(&e)))
        }
        _ => Ok(()),
    }
}

/// A type error of a mapped column also shows the expression that produced it.
fn hint_mapping(e: Error, map: &ColumnMap) -> Error {
    match e {
        Error::WrongType { source, column, found, expected } => {
            let at = mapping::SERVING.iter().position(|c| *c == column);
            match at.and_then(|i| map.exprs[i].clone()) {
                Some(expr) => Error::WrongType {
                    source: format!("{source} (columns := {column}: {expr})"),
                    column,
                    found,
                    expected,
                },
                None => Error::WrongType { source, column, found, expected },
            }
        }
        other => other,
    }
}

/// The second gate of an expression (`columns :=` and `deleted :=` alike), after
/// `core::mapping`'s by name: an allow-list by DuckDB's own catalog. Every function it calls —
/// found as DuckDB finds it, any case, quoted or not, in any schema — must be a scalar function
/// DuckDB classes as CONSISTENT (`duckdb_functions().stability`: the same arguments give the same
/// value, so a rebuild gives the rows it gave before), or a macro whose body passes both gates.
/// A name with several entries (overloads, schemas) must pass for each of them: the check does
/// not guess which one the binder picks.
pub fn gate_expression(conn: &Connection, function: &'static str, parameter: &'static str, expr: &str) -> Result<()> {
    let bad = |problem: String| Error::BadArgument { function, parameter, value: shown(expr), problem };
    match first_refusal(conn, expr, &mut Vec::new()) {
        Ok(None) => Ok(()),
        Ok(Some(problem)) => Err(bad(problem)),
        Err(e) => Err(Error::duckdb(format!("{function}: checking {parameter}"), &e)),
    }
}

/// How deep macros may call macros before the gate stops looking (and refuses).
const MACRO_DEPTH: usize = 8;

/// Why `expr` is refused (None: it passes), `inside` the macros being expanded.
fn first_refusal(conn: &Connection, expr: &str, inside: &mut Vec<String>) -> duckdb::Result<Option<String>> {
    let calls = match mapping::called_functions(expr) {
        Ok(calls) => calls,
        Err(problem) => return Ok(Some(problem)),
    };
    for name in calls {
        if inside.contains(&name) {
            continue;
        }
        let entries: Vec<(String, Option<String>, Option<String>)> = conn
            .prepare_cached(
                "SELECT function_type, stability, macro_definition FROM duckdb_functions() \
                 WHERE lower(function_name) = ?",
            )?
            .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<duckdb::Result<_>>()?;
        if entries.is_empty() {
            return Ok(Some(format!(
                "it calls {name}(), which is not a function DuckDB has (misspelled, or of an extension that is not \
                 loaded)"
            )));
        }
        let callable: Vec<_> = entries.iter().filter(|(kind, ..)| kind == "scalar" || kind == "macro").collect();
        if callable.is_empty() {
            let mut kinds: Vec<&str> = entries.iter().map(|(kind, ..)| kind.as_str()).collect();
            kinds.dedup();
            return Ok(Some(format!(
                "it calls {name}(), which DuckDB lists as a function of kind {} (not a value of one row)",
                kinds.join("/")
            )));
        }
        for (kind, stability, body) in callable {
            if kind == "scalar" && stability.as_deref() != Some("CONSISTENT") {
                return Ok(Some(format!(
                    "it calls {name}(), which DuckDB classes as {} (only CONSISTENT functions are allowed: a \
                     mapping must give the same row every time it is read)",
                    stability.as_deref().unwrap_or("of unknown stability")
                )));
            }
            if kind == "macro" {
                let Some(body) = body.as_deref().filter(|_| inside.len() < MACRO_DEPTH) else {
                    return Ok(Some(format!("it calls {name}(), a macro whose body streamhouse cannot check")));
                };
                inside.push(name.clone());
                let refused = first_refusal(conn, body, inside)?;
                inside.pop();
                if let Some(problem) = refused {
                    return Ok(Some(format!("it calls {name}(), a macro whose body is refused: {problem}")));
                }
            }
        }
    }
    Ok(None)
}
