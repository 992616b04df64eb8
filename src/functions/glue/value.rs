//! Arguments as DuckDB hands them over: a borrowed `Value` read through the C API's typed
//! getters. The one place that relies on `Value`'s layout (`raw_value`).

use duckdb::vtab::Value;

use crate::core::error::{Error, Result};

/// The `duckdb_value` a borrowed `Value` wraps, for the C API's typed getters (duckdb-rs 1.4
/// has none, and none for dates, maps or a value's SQL text at all). The one place that relies
/// on `Value`'s layout; the handle stays owned (and freed) by `v`.
pub fn raw_value(v: &Value) -> duckdb::ffi::duckdb_value {
    const _: () = assert!(size_of::<Value>() == size_of::<duckdb::ffi::duckdb_value>());
    // SAFETY: `Value` is a wrapper around exactly one `duckdb_value` pointer (asserted above);
    // the pointer is copied, not taken: `v` still owns and frees it.
    unsafe { *(v as *const Value as *const duckdb::ffi::duckdb_value) }
}

/// A non-NULL integer argument (DuckDB has already cast it to the declared integer type).
pub fn int_arg(v: &Value) -> i64 {
    // SAFETY: `raw_value` is a live value for as long as `v` is borrowed.
    unsafe { duckdb::ffi::duckdb_get_int64(raw_value(v)) }
}

/// A non-NULL DATE argument as days since 1970-01-01.
pub fn date_arg(v: &Value) -> i32 {
    // SAFETY: as in `int_arg`.
    unsafe { duckdb::ffi::duckdb_get_date(raw_value(v)).days }
}

/// A non-NULL INTERVAL argument as DuckDB keeps it: (months, days, microseconds).
pub fn interval_arg(v: &Value) -> (i32, i32, i64) {
    // SAFETY: as in `int_arg`.
    let i = unsafe { duckdb::ffi::duckdb_get_interval(raw_value(v)) };
    (i.months, i.days, i.micros)
}

/// The text of a VARCHAR argument. DuckDB's C API hands strings over NUL-terminated, so a NUL
/// inside one would silently cut it (a company 'a\0b' answered as 'a', a path with junk after a
/// NUL read as the path before it): such an argument is refused instead. The value's SQL form
/// (`'...'` with quotes doubled) is cut by the NUL too, and so no longer ends its literal.
pub fn text_arg(v: &Value, function: &'static str, parameter: &'static str) -> Result<String> {
    let text = v.to_string();
    let raw = raw_value(v);
    // SAFETY: `raw` is live while `v` is borrowed; the returned string is ours to free.
    let sql = unsafe {
        let p = duckdb::ffi::duckdb_value_to_string(raw);
        if p.is_null() {
            return Ok(text);
        }
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        duckdb::ffi::duckdb_free(p.cast());
        s
    };
    let expected = format!("'{}'", text.replace('\'', "''"));
    if sql.len() < expected.len() || (sql != expected && !sql.starts_with(&expected)) {
        // DuckDB hands over only the text before the NUL: shown as such (`\0…`), never as if whole.
        return Err(Error::BadArgument {
            function,
            parameter,
            value: format!("{text}\\0…"),
            problem: "it contains a NUL character, which DuckDB cannot pass to an extension intact (only the text \
                      before it, shown up to \\0, reaches streamhouse)"
                .into(),
        });
    }
    Ok(text)
}
