//! Queries of ours whose result DuckDB streams as its own data chunks, on connections made at
//! LOAD with the raw C API (duckdb-rs gives no chunk-level result). The lake's plain data
//! files are decoded this way by DuckDB's own Parquet reader (`functions::glue::lake_batches`):
//! a fetched chunk's vectors are referenced into a table function's output, never copied.
//!
//! Invariants: a connection is used by one thread at a time (it moves with its `ChunkStream`);
//! a stream's result is destroyed before its connection goes back to the pool; once the
//! session is let go of, or the process is exiting, a connection coming back is forgotten
//! rather than closed (no DuckDB code may run then, see `session`).

use duckdb::ffi;
use std::ffi::{CStr, CString};

use super::session::SharedSession;

/// A connection of ours opened with the raw C API, closed when dropped.
pub struct RawConnection(ffi::duckdb_connection);

// SAFETY: a DuckDB connection may be used from any thread, one at a time; a `RawConnection`
// is owned by one slot or one stream at a time.
unsafe impl Send for RawConnection {}

impl RawConnection {
    /// A new connection to `db`, or None if DuckDB refused one.
    ///
    /// # Safety
    /// `db` must be the live database handle of an extension's LOAD (valid only during it).
    pub unsafe fn connect(db: ffi::duckdb_database) -> Option<RawConnection> {
        let mut conn: ffi::duckdb_connection = std::ptr::null_mut();
        // SAFETY: `db` is live (the caller's contract); `conn` receives a new handle.
        let state = unsafe { ffi::duckdb_connect(db, &mut conn) };
        (state == ffi::duckdb_state_DuckDBSuccess && !conn.is_null()).then_some(RawConnection(conn))
    }
}

impl Drop for RawConnection {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and closed exactly once.
        unsafe { ffi::duckdb_disconnect(&mut self.0) };
    }
}

/// One of the session's stream connections, taken out of its slot until dropped.
pub struct StreamConnection {
    session: SharedSession,
    slot: usize,
    conn: Option<RawConnection>,
}

impl StreamConnection {
    pub(super) fn new(session: SharedSession, slot: usize, conn: RawConnection) -> Self {
        StreamConnection { session, slot, conn: Some(conn) }
    }

    fn raw(&self) -> ffi::duckdb_connection {
        self.conn.as_ref().map_or(std::ptr::null_mut(), |c| c.0)
    }

    /// Runs `sql`, its result streamed (DuckDB executes it as chunks are fetched, on the
    /// fetching thread). An error names what DuckDB said.
    pub fn stream(self, sql: &str) -> Result<ChunkStream, String> {
        let text = CString::new(sql).map_err(|_| "the query holds a NUL character".to_string())?;
        let mut stream = ChunkStream {
            // SAFETY: an all-zero `duckdb_result` is the C API's "no result yet" state.
            result: unsafe { std::mem::zeroed() },
            executed: false,
            prepared: std::ptr::null_mut(),
            conn: self,
        };
        // SAFETY: the connection is live and ours alone; `prepared` receives a new handle that
        // `ChunkStream::drop` destroys.
        let state = unsafe { ffi::duckdb_prepare(stream.conn.raw(), text.as_ptr(), &mut stream.prepared) };
        if state != ffi::duckdb_state_DuckDBSuccess {
            // SAFETY: the error text lives as long as the prepared statement.
            return Err(text_of(unsafe { ffi::duckdb_prepare_error(stream.prepared) }));
        }
        // SAFETY: `prepared` is live; `result` is filled (and destroyed by `drop`) either way.
        let state = unsafe { ffi::duckdb_execute_prepared_streaming(stream.prepared, &mut stream.result) };
        stream.executed = true;
        if state != ffi::duckdb_state_DuckDBSuccess {
            return Err(stream.error().unwrap_or_else(|| "the query failed".into()));
        }
        Ok(stream)
    }
}

impl Drop for StreamConnection {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.session.give_back_stream(self.slot, conn);
        }
    }
}

fn text_of(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return "DuckDB gave no reason".into();
    }
    // SAFETY: a non-null error pointer of the C API is a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A column's type as far as referencing a vector goes: its type id and, for DECIMAL, width and
/// scale. None for a type whose vectors are not compared here (nested, enum, ...).
pub type ColumnType = (u32, u8, u8);

/// The [`ColumnType`] of a type with id `id` (width and scale: a DECIMAL's, else ignored).
pub fn column_type(id: u32, width: u8, scale: u8) -> Option<ColumnType> {
    use ffi::*;
    const PLAIN: [u32; 17] = [
        DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN,
        DUCKDB_TYPE_DUCKDB_TYPE_TINYINT,
        DUCKDB_TYPE_DUCKDB_TYPE_SMALLINT,
        DUCKDB_TYPE_DUCKDB_TYPE_INTEGER,
        DUCKDB_TYPE_DUCKDB_TYPE_BIGINT,
        DUCKDB_TYPE_DUCKDB_TYPE_HUGEINT,
        DUCKDB_TYPE_DUCKDB_TYPE_FLOAT,
        DUCKDB_TYPE_DUCKDB_TYPE_DOUBLE,
        DUCKDB_TYPE_DUCKDB_TYPE_DATE,
        DUCKDB_TYPE_DUCKDB_TYPE_TIME,
        DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP,
        DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_TZ,
        DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_S,
        DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_MS,
        DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_NS,
        DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR,
        DUCKDB_TYPE_DUCKDB_TYPE_BLOB,
    ];
    if id == DUCKDB_TYPE_DUCKDB_TYPE_DECIMAL {
        Some((id, width, scale))
    } else {
        PLAIN.contains(&id).then_some((id, 0, 0))
    }
}

/// A streamed query result: its chunks, fetched one at a time by whichever thread holds it.
pub struct ChunkStream {
    result: ffi::duckdb_result,
    /// Whether `result` was filled (and so must be destroyed).
    executed: bool,
    prepared: ffi::duckdb_prepared_statement,
    conn: StreamConnection,
}

// SAFETY: the result, statement and connection are used by one thread at a time (whoever owns
// the stream) and belong to no other object.
unsafe impl Send for ChunkStream {}

impl ChunkStream {
    fn error(&mut self) -> Option<String> {
        // SAFETY: `result` was filled by the execution; the text lives as long as it does.
        let p = unsafe { ffi::duckdb_result_error(&mut self.result) };
        (!p.is_null()).then(|| text_of(p))
    }

    /// Each result column's type (None where [`column_type`] does not compare it).
    pub fn column_types(&mut self) -> Vec<Option<ColumnType>> {
        // SAFETY: `result` holds a successful execution.
        let n = unsafe { ffi::duckdb_column_count(&mut self.result) };
        (0..n)
            .map(|i| {
                // SAFETY: `i < n`; the returned handle is new, read, then destroyed once.
                unsafe {
                    let mut ty = ffi::duckdb_column_logical_type(&mut self.result, i);
                    let (id, width, scale) =
                        (ffi::duckdb_get_type_id(ty), ffi::duckdb_decimal_width(ty), ffi::duckdb_decimal_scale(ty));
                    ffi::duckdb_destroy_logical_type(&mut ty);
                    column_type(id, width, scale)
                }
            })
            .collect()
    }

    /// The next non-empty chunk, None at the end; Err with DuckDB's message if the query failed.
    pub fn next_chunk(&mut self) -> Result<Option<FetchedChunk>, String> {
        loop {
            // SAFETY: `result` holds a successful execution; the chunk returned is ours.
            let chunk = unsafe { ffi::duckdb_fetch_chunk(self.result) };
            if chunk.is_null() {
                return match self.error() {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            }
            let chunk = FetchedChunk(chunk);
            if !chunk.is_empty() {
                return Ok(Some(chunk));
            }
        }
    }
}

impl Drop for ChunkStream {
    fn drop(&mut self) {
        if self.conn.session.may_run_duckdb() {
            // SAFETY: each handle is ours and destroyed once, the result before its statement,
            // both before the connection goes back (the field drops after this body).
            unsafe {
                if self.executed {
                    ffi::duckdb_destroy_result(&mut self.result);
                }
                if !self.prepared.is_null() {
                    ffi::duckdb_destroy_prepare(&mut self.prepared);
                }
            }
        }
    }
}

/// A chunk fetched from a [`ChunkStream`], destroyed when dropped (vectors referenced from it
/// keep their buffers alive on their own).
pub struct FetchedChunk(ffi::duckdb_data_chunk);

// SAFETY: the chunk is an independent DataChunk owned by this value alone.
unsafe impl Send for FetchedChunk {}

impl FetchedChunk {
    pub fn len(&self) -> usize {
        // SAFETY: the chunk is live.
        unsafe { ffi::duckdb_data_chunk_get_size(self.0) as usize }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes each vector of `output` reference this chunk's vector of the same position (the
    /// caller checked the types match) and sets its size.
    ///
    /// # Safety
    /// `output` must be a live chunk with as many columns as this one, of the same types.
    pub unsafe fn reference_into(&self, output: ffi::duckdb_data_chunk) {
        // SAFETY: both chunks are live and, by the caller's contract, alike column by column.
        unsafe {
            let n = ffi::duckdb_data_chunk_get_column_count(self.0);
            for i in 0..n {
                let from = ffi::duckdb_data_chunk_get_vector(self.0, i);
                let to = ffi::duckdb_data_chunk_get_vector(output, i);
                ffi::duckdb_vector_reference_vector(to, from);
            }
            ffi::duckdb_data_chunk_set_size(output, ffi::duckdb_data_chunk_get_size(self.0));
        }
    }
}

impl Drop for FetchedChunk {
    fn drop(&mut self) {
        // SAFETY: the chunk is ours and destroyed once.
        unsafe { ffi::duckdb_destroy_data_chunk(&mut self.0) };
    }
}
