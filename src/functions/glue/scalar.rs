//! Shared plumbing for our VARCHAR-returning scalars: read arguments row by row, NULL in any
//! argument gives NULL out (as DuckDB folds constant NULLs the same way), errors fail the query.

use duckdb::core::{DataChunkHandle, Inserter};
use duckdb::ffi::duckdb_string_t;
use duckdb::types::DuckString;
use duckdb::vtab::arrow::WritableVector;

use crate::core::error::Result;

/// `VScalar::invoke` mapping each row through `f` (see `map_rows`). duckdb-rs 1.4 declares
/// `invoke` unsafe and newer ones safe; the body is the same.
macro_rules! invoke_rows {
    ($f:expr) => {
        #[cfg(not(duckdb14))]
        fn invoke(
            _: &(),
            input: &mut DataChunkHandle,
            output: &mut dyn WritableVector,
        ) -> Result<(), Box<dyn std::error::Error>> {
            $crate::functions::glue::guarded(|| $crate::functions::glue::scalar::map_rows(input, output, $f))
        }

        #[cfg(duckdb14)]
        unsafe fn invoke(
            _: &(),
            input: &mut DataChunkHandle,
            output: &mut dyn WritableVector,
        ) -> Result<(), Box<dyn std::error::Error>> {
            $crate::functions::glue::guarded(|| $crate::functions::glue::scalar::map_rows(input, output, $f))
        }
    };
}
pub(crate) use invoke_rows;

/// Argument accessor for one row of a flat input chunk.
pub struct Args<'a> {
    input: &'a DataChunkHandle,
    row: usize,
}

impl Args<'_> {
    /// How many arguments the call has (a function with several signatures).
    pub fn count(&self) -> usize {
        self.input.num_columns()
    }

    fn is_null(&self, col: usize) -> bool {
        self.input.flat_vector(col).row_is_null(self.row as u64)
    }

    pub fn text(&self, col: usize) -> String {
        // SAFETY: the column is declared VARCHAR in the signature and `row < input.len()`.
        let mut s =
            unsafe { self.input.flat_vector(col).as_slice_with_len::<duckdb_string_t>(self.input.len())[self.row] };
        DuckString::new(&mut s).as_str().into_owned()
    }

    pub fn int(&self, col: usize) -> i32 {
        // SAFETY: the column is declared INTEGER in the signature and `row < input.len()`.
        unsafe { self.input.flat_vector(col).as_slice_with_len::<i32>(self.input.len())[self.row] }
    }
}

pub fn map_rows(
    input: &mut DataChunkHandle,
    output: &mut dyn WritableVector,
    f: impl Fn(&Args) -> Result<String>,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let mut out = output.flat_vector();
    for row in 0..input.len() {
        let args = Args { input, row };
        if (0..input.num_columns()).any(|c| args.is_null(c)) {
            out.set_null(row);
        } else {
            out.insert(row, f(&args)?.as_str());
        }
    }
    Ok(())
}
