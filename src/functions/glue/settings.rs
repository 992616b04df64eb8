//! What the calling DuckDB tells a bind about its settings: the caller's `search_path`, the file
//! sandbox and `threads`, read as they stand for the statement being bound.
//!
//! DuckDB ≥ 1.5 hands them over through the caller's client context. DuckDB 1.4's C API has no
//! call for that (`cfg(duckdb14)`, the 1.4 LTS artifact, compat/duckdb-1.4): there the global
//! settings (the sandbox, `threads`) are read on one of our own connections — global, so the
//! same value the caller sees — and the caller's `search_path` cannot be seen at all, so the
//! serving layer lives in the database's default schema (README, "Supported DuckDB versions").

use duckdb::vtab::BindInfo;

use crate::host::sandbox::Sandbox;

#[cfg(not(duckdb14))]
mod imp {
    use super::*;

    pub fn search_path(bind: &BindInfo) -> String {
        bind.get_config_option("search_path").map(|v| v.to_string()).unwrap_or_default()
    }

    pub fn sandbox(bind: &BindInfo) -> Sandbox {
        let texts = |name: &str| -> Option<Vec<String>> {
            bind.get_config_option(name)
                .and_then(|v| v.to_list())
                .map(|items| items.iter().map(|v| v.to_string()).collect())
        };
        // A sandbox that cannot be read counts as locked down, never as open.
        let Some(external) = bind.get_config_option("enable_external_access") else {
            return Sandbox::locked();
        };
        Sandbox {
            external_access: !external.is_null() && external.to_bool(),
            allowed_directories: texts("allowed_directories").unwrap_or_default(),
            allowed_paths: texts("allowed_paths").unwrap_or_default(),
        }
    }

    pub fn threads(bind: &BindInfo) -> Option<i64> {
        bind.get_config_option("threads").map(|v| v.to_int64())
    }

    pub fn check_source_name(
        _: &BindInfo,
        _: &'static str,
        _: &'static str,
        _: &str,
    ) -> crate::core::error::Result<()> {
        Ok(())
    }
}

#[cfg(duckdb14)]
mod imp {
    use super::*;
    use crate::core::error::{Error, Result};
    use crate::serving::state::SharedDatabase;

    /// Runs `f` on a reader connection of the session the function was registered with.
    fn on_reader<R>(bind: &BindInfo, f: impl FnOnce(&duckdb::Connection) -> Result<R>) -> Option<R> {
        let info = bind.get_extra_info::<SharedDatabase>();
        if info.is_null() {
            return None;
        }
        // SAFETY: every table function is registered with a `SharedDatabase` as extra info
        // (functions::register_all), which DuckDB keeps alive as long as the function exists.
        let db: &SharedDatabase = unsafe { &*info };
        db.session.read("", f).ok()
    }

    pub fn search_path(_bind: &BindInfo) -> String {
        String::new()
    }

    /// Without the caller's search_path, an unqualified table name that exists in more than one
    /// schema could mean another table than the caller's own `SELECT * FROM name`: refuse it.
    pub fn check_source_name(
        bind: &BindInfo,
        function: &'static str,
        parameter: &'static str,
        source: &str,
    ) -> Result<()> {
        let parts = match crate::core::source::Source::parse(source) {
            Ok(crate::core::source::Source::Table(parts)) if parts.len() == 1 => parts,
            _ => return Ok(()),
        };
        let places = on_reader(bind, |conn| {
            let failed = |e: duckdb::Error| Error::duckdb("streamhouse: resolving the source name", &e);
            let mut stmt = conn
                .prepare(
                    "SELECT DISTINCT database_name || '.' || schema_name AS place FROM \
                     (SELECT database_name, schema_name, table_name AS name FROM duckdb_tables() WHERE NOT internal \
                      UNION ALL SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE NOT internal) \
                     WHERE lower(name) = lower(?) ORDER BY place",
                )
                .map_err(failed)?;
            let rows = stmt.query_map([&parts[0]], |r| r.get::<_, String>(0)).map_err(failed)?;
            rows.collect::<std::result::Result<Vec<_>, _>>().map_err(failed)
        })
        .unwrap_or_default();
        if places.len() < 2 {
            return Ok(());
        }
        Err(Error::BadArgument {
            function,
            parameter,
            value: source.to_string(),
            problem: format!(
                "DuckDB 1.4 does not tell extensions the caller's search_path, and a table or view of \
                 that name exists in more than one schema ({}): qualify it, e.g. '{}.{}'",
                places.join(", "),
                places[places.len() - 1],
                parts[0]
            ),
        })
    }

    /// A sandbox that cannot be read counts as locked down, never as open.
    pub fn sandbox(bind: &BindInfo) -> Sandbox {
        on_reader(bind, crate::host::settings::sandbox).unwrap_or_else(Sandbox::locked)
    }

    pub fn threads(bind: &BindInfo) -> Option<i64> {
        on_reader(bind, crate::host::settings::threads)
    }
}

/// The caller's `search_path` ("" when it cannot be seen: our connection's default then applies).
pub fn search_path(bind: &BindInfo) -> String {
    imp::search_path(bind)
}

/// Refuses a `source` argument that would resolve differently for us than for the caller
/// (only possible where the caller's search_path cannot be seen: DuckDB 1.4).
pub fn check_source_name(
    bind: &BindInfo,
    function: &'static str,
    parameter: &'static str,
    source: &str,
) -> crate::core::error::Result<()> {
    imp::check_source_name(bind, function, parameter, source)
}

/// DuckDB's file sandbox as it stands for the caller's statement (these options are global,
/// so a `SET` after LOAD counts). An option that cannot be read counts as locked down.
pub fn sandbox(bind: &BindInfo) -> Sandbox {
    imp::sandbox(bind)
}

/// DuckDB's `threads` setting: how many lake splits are read at once.
pub fn threads(bind: &BindInfo) -> usize {
    imp::threads(bind).filter(|&n| n > 0).map_or(1, |n| n as usize)
}

/// `Value::is_null`, which duckdb-rs 1.4 lacks; on newer duckdb-rs the inherent method is used.
#[cfg(duckdb14)]
pub trait ValueExt {
    fn is_null(&self) -> bool;
}

#[cfg(duckdb14)]
impl ValueExt for duckdb::vtab::Value {
    fn is_null(&self) -> bool {
        let raw = super::value::raw_value(self);
        // SAFETY: `raw` is live while `self` is borrowed.
        raw.is_null() || unsafe { duckdb::ffi::duckdb_is_null_value(raw) }
    }
}
