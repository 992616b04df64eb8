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
        refuse_non_scalar_calls(conn, "serving_build", "columns", expr)?;
    }
    let own: Vec<String> = describe(conn, raw, relation)?.into_iter().map(|(n, _)| n).collect();
    let wrapped = format!("(SELECT {} FROM {relation} AS __sh_source) AS __sh_mapped", map.select_list(&own));
    let described = conn
        .prepare(&format!("DESCRIBE SELECT * FROM {wrapped}"))
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .map_err(|e| Error::BadArgument {
            function: "serving_build",
            parameter: "columns",
            value: map.encode().map(|m| shown(&m)).unwrap_or_default(),
            problem: format!(
                "an expression is not valid over the source's columns ({}); the source has {}",
                clean_duckdb_message(&e),
                own.join(", ")
            ),
        })?;
    let columns = schema::match_columns(raw, &described).map_err(|e| hint_mapping(e, map))?;
    let tolerant = format!("(SELECT {} FROM {relation} AS __sh_source) AS __sh_mapped", map.tolerant_select_list(&own));
    Ok(Wrapped { relation: wrapped, tolerant, columns })
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

/// Refuses a `columns :=` expression that is not one scalar expression over the row:
/// `core::mapping`'s rules, then, by DuckDB's catalog, any call of a function that has no scalar
/// form (an aggregate, a table function). (`deleted :=` gets the same rules, its aggregates
/// refused by DuckDB's typing of it: `layer::boolean_expression`.)
pub fn refuse_non_scalar_calls(
    conn: &Connection,
    function: &'static str,
    parameter: &'static str,
    expr: &str,
) -> Result<()> {
    let bad = |problem: String| Error::BadArgument { function, parameter, value: shown(expr), problem };
    let calls = mapping::called_functions(expr).map_err(bad)?;
    for name in calls {
        let kinds: Vec<String> = conn
            .prepare_cached("SELECT DISTINCT function_type FROM duckdb_functions() WHERE lower(function_name) = ?")
            .and_then(|mut s| s.query_map([&name], |r| r.get::<_, String>(0))?.collect())
            .map_err(|e| Error::duckdb(format!("{function}: checking {parameter}"), &e))?;
        let scalar = kinds.iter().any(|k| k == "scalar" || k == "macro");
        if !kinds.is_empty() && !scalar {
            return Err(bad(format!(
                "it calls {name}(), which DuckDB lists as a function of kind {} (not a value of one row)",
                kinds.join("/")
            )));
        }
    }
    Ok(())
}
