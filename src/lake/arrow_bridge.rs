//! The one crossing between the two Arrow versions in play: paimon-rust speaks Arrow 58
//! (`arrow_array`), DuckDB's Rust binding Arrow 60 (`duckdb::arrow`). A batch crosses, in
//! either direction, through the Arrow C Data Interface: exported by one arrow-rs, imported by
//! the other, no buffer copied. Reads cross 58 → 60 ([`to_arrow60`]), writes 60 → 58
//! ([`to_arrow58`]).

/// A batch of one arrow-rs as a batch of the other: `$from` and `$to` name each side's
/// `array` module (`RecordBatch`, `StructArray`, `Array`) and its `ffi` module.
macro_rules! bridge {
    ($(#[$doc:meta])* $name:ident: $($from:ident)::+, $($from_ffi:ident)::+ => $($to:ident)::+, $($to_ffi:ident)::+) => {
        $(#[$doc])*
        pub fn $name(batch: &$($from)::+::RecordBatch) -> std::result::Result<$($to)::+::RecordBatch, String> {
            use $($from)::+::Array as _;
            let rows = batch.num_rows();
            let as_struct: $($from)::+::StructArray = batch.clone().into();
            let (array, schema) = $($from_ffi)::+::to_ffi(&as_struct.to_data()).map_err(|e| e.to_string())?;
            // SAFETY: FFI_ArrowArray / FFI_ArrowSchema are the #[repr(C)] structs the Arrow C Data
            // Interface specifies; both arrow-rs versions define exactly that layout, so moving them
            // bitwise hands ownership (and the release callback) from one to the other.
            let (array, schema) = unsafe {
                (
                    std::mem::transmute::<$($from_ffi)::+::FFI_ArrowArray, $($to_ffi)::+::FFI_ArrowArray>(array),
                    std::mem::transmute::<$($from_ffi)::+::FFI_ArrowSchema, $($to_ffi)::+::FFI_ArrowSchema>(schema),
                )
            };
            // SAFETY: `array` and `schema` were just exported by arrow-rs and are valid and unshared.
            let data = unsafe { $($to_ffi)::+::from_ffi(array, &schema) }.map_err(|e| e.to_string())?;
            let batch: $($to)::+::RecordBatch = $($to)::+::StructArray::from(data).into();
            debug_assert_eq!(batch.num_rows(), rows);
            Ok(batch)
        }
    };
}

bridge!(
    /// Arrow 58 (paimon) → Arrow 60 (DuckDB): what a read hands on.
    to_arrow60: arrow_array, arrow_array::ffi => duckdb::arrow::array, duckdb::arrow::ffi
);

bridge!(
    /// Arrow 60 (DuckDB) → Arrow 58 (paimon): what a write hands to paimon-rust's writer.
    to_arrow58: duckdb::arrow::array, duckdb::arrow::ffi => arrow_array, arrow_array::ffi
);
