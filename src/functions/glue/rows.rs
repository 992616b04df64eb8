//! Materialized result rows of a table function and their emission into DuckDB data chunks.
//! Our results are small (a summary row, one company's days), so they are computed in `init`
//! and streamed out in vector-sized chunks by `func`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use duckdb::core::{DataChunkHandle, Inserter, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo};
use duckdb::Connection;

#[cfg(duckdb14)]
use super::settings::ValueExt;
use super::value::text_arg;
use crate::core::dashboard::DashboardQuery;
use crate::core::error::{Error, Result};
use crate::host::session::Lease;
use crate::host::transaction::Transaction;
use crate::lake::Access;
use crate::serving::state::SharedDatabase;

use crate::core::VECTOR_SIZE as CHUNK;

#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    BigInt(i64),
    HugeInt(i128),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 00:00:00 (TIMESTAMP).
    Timestamp(i64),
    Double(f64),
    Bool(bool),
    Text(String),
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Cell {
        v.map_or(Cell::Null, Into::into)
    }
}
impl From<i64> for Cell {
    fn from(v: i64) -> Cell {
        Cell::BigInt(v)
    }
}
impl From<i128> for Cell {
    fn from(v: i128) -> Cell {
        Cell::HugeInt(v)
    }
}
impl From<f64> for Cell {
    fn from(v: f64) -> Cell {
        Cell::Double(v)
    }
}
impl From<bool> for Cell {
    fn from(v: bool) -> Cell {
        Cell::Bool(v)
    }
}
impl From<String> for Cell {
    fn from(v: String) -> Cell {
        Cell::Text(v)
    }
}

/// A handle for a declared column type.
pub fn type_handle(ty: &LogicalTypeId) -> LogicalTypeHandle {
    #[cfg(not(duckdb14))]
    let id = *ty;
    // SAFETY: `LogicalTypeId` is a fieldless enum without Drop; duckdb-rs 1.4 only lacks the
    // `Copy` derive, so a bitwise copy is a plain copy.
    #[cfg(duckdb14)]
    let id = unsafe { std::ptr::read(ty) };
    LogicalTypeHandle::from(id)
}

/// Declares result columns at bind time.
pub fn declare(bind: &BindInfo, columns: &[(&str, LogicalTypeId)]) {
    for (name, ty) in columns {
        bind.add_result_column(name, type_handle(ty));
    }
}

/// What bind captures for init: the function's VARCHAR argument (if it takes one) and the
/// caller's search_path, which our connection then uses to resolve unqualified names.
pub struct Call {
    pub arg: String,
    /// Further positional VARCHAR arguments (`RowsFunction::MORE_PARAMS`), in order.
    pub more: Vec<String>,
    pub search_path: String,
    /// The caller's sandbox and, for functions that read the lake, the storage options.
    pub access: Access,
    /// Named parameters as the function declares them, each with DuckDB's text form of its
    /// value (None: not given, or NULL); read by name (`named_arg`).
    pub named: Vec<(&'static str, Option<String>)>,
    /// For the dashboard functions: their checked named parameters (`dashboard_args`).
    pub dashboard: DashboardQuery,
    /// For the functions that read a source: `columns := MAP {...}`, checked (`core::mapping`).
    pub columns: Option<crate::core::mapping::ColumnMap>,
    /// For writers: how long to wait for a running writer (`wait := INTERVAL`, `core::wait`).
    pub wait: std::time::Duration,
}

/// Reads the single VARCHAR parameter `name` of `function` (refusing NULL) and the caller's
/// search_path. Bind must not have side effects: it also runs under EXPLAIN and PREPARE.
pub fn bind_call(bind: &BindInfo, function: &'static str, name: Option<&'static str>) -> Result<Call> {
    let mut call = bind_call_without_sandbox(bind, function, name)?;
    call.access.sandbox = super::settings::sandbox(bind);
    Ok(call)
}

/// `bind_call` for a function that reads no file and no network (the dashboard's hot path): the
/// caller's sandbox is not read (three settings asked of DuckDB per call, or a query on the 1.4
/// artifact) and counts as locked down, so nothing can read past it by mistake.
pub fn bind_call_without_sandbox(bind: &BindInfo, function: &'static str, name: Option<&'static str>) -> Result<Call> {
    let arg = match name {
        Some(parameter) => {
            let v = bind.get_parameter(0);
            if v.is_null() {
                return Err(Error::NullArgument { function, parameter });
            }
            let arg = text_arg(&v, function, parameter)?;
            if matches!(parameter, "source" | "changes") {
                super::settings::check_source_name(bind, function, parameter, &arg)?;
            }
            arg
        }
        None => String::new(),
    };
    Ok(Call {
        arg,
        more: Vec::new(),
        search_path: super::settings::search_path(bind),
        access: Access { sandbox: crate::host::sandbox::Sandbox::locked(), options: Default::default() },
        named: Vec::new(),
        dashboard: DashboardQuery::default(),
        columns: None,
        wait: crate::core::wait::WRITER_WAIT,
    })
}

impl Call {
    /// The text of the named parameter `name` (None: not given, or NULL).
    pub fn named_arg(&self, name: &str) -> Option<&str> {
        self.named.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.as_deref())
    }
}

/// The positional VARCHAR parameters after the first, named `names` (each refused when NULL).
pub fn more_params(bind: &BindInfo, function: &'static str, names: &[&'static str]) -> Result<Vec<String>> {
    (1..)
        .zip(names)
        .map(|(i, &parameter)| {
            let v = bind.get_parameter(i);
            if v.is_null() {
                return Err(Error::NullArgument { function, parameter });
            }
            text_arg(&v, function, parameter)
        })
        .collect()
}

/// Rows `(line, text)` of a rendered text, one per line, numbered from 1: the table form of a
/// function that renders SQL, readable in the CLI's box mode (the scalar form is one text).
pub fn text_lines(text: &str) -> Vec<Vec<Cell>> {
    text.lines().zip(1..).map(|(line, n)| vec![Cell::BigInt(n), Cell::Text(line.into())]).collect()
}

/// `on_bad_rows := 'fail' | 'quarantine'` of `function`, checked (None when not given).
pub fn on_bad_rows(ctx: &Ctx, function: &'static str) -> Result<Option<crate::core::quarantine::OnBadRows>> {
    ctx.call.named_arg("on_bad_rows").map(|v| crate::core::quarantine::OnBadRows::parse(function, v)).transpose()
}

/// What a table function's body gets: a connection for its role, what bind captured, and the
/// database's state (for work that outlives the call, such as a follower).
pub struct Ctx<'a> {
    pub conn: &'a Connection,
    pub call: &'a Call,
    pub db: &'a SharedDatabase,
}

/// The database a function was registered with.
fn database(init: &InitInfo) -> SharedDatabase {
    // SAFETY: every table function is registered with a `SharedDatabase` as extra info
    // (functions::register_all), which DuckDB keeps alive as long as the function exists.
    unsafe { (*init.get_extra_info::<SharedDatabase>()).clone() }
}

/// Runs a reader's `f` on one of the extension's reader connections.
pub fn run<R>(init: &InitInfo, name: &str, f: impl FnOnce(&Ctx) -> Result<R>) -> Result<R> {
    let call = bind_data::<Call>(init);
    let db = database(init);
    db.session.read(&call.search_path, |conn| f(&Ctx { conn, call, db: &db })).map_err(|e| e.in_function(name))
}

/// Runs a writer's `f` on the writer connection, in a transaction it leaves open: the lease
/// that holds it goes into the init data and commits on the first `func` call (see
/// `Session::write`).
pub fn run_writer<R>(
    init: &InitInfo,
    name: &str,
    f: impl FnOnce(&Ctx, &mut Transaction) -> Result<R>,
) -> Result<(R, Option<Lease>)> {
    let call = bind_data::<Call>(init);
    let db = database(init);
    db.session
        .write(name, &call.search_path, call.wait, |conn, tx| f(&Ctx { conn, call, db: &db }, tx))
        .map_err(|e| e.in_function(name))
}

/// The bind data of a function whose `BindData` is `T`.
fn bind_data<T>(init: &InitInfo) -> &T {
    // SAFETY: the vtab glue stores a boxed `T` as bind data before init runs and frees it only
    // after the function's execution ends, which outlives this borrow.
    unsafe { &*init.get_bind_data::<T>() }
}

pub struct Rows {
    rows: Vec<Vec<Cell>>,
    next: AtomicUsize,
    /// A writer's pending transaction: committed when the rows are first pulled, rolled back
    /// (by the lease's Drop) if they never are.
    lease: Mutex<Option<Lease>>,
}

impl Rows {
    pub fn new(rows: Vec<Vec<Cell>>) -> Self {
        Self::with_lease(rows, None)
    }

    pub fn with_lease(rows: Vec<Vec<Cell>>, lease: Option<Lease>) -> Self {
        Rows { rows, next: AtomicUsize::new(0), lease: Mutex::new(lease) }
    }

    /// Commits a pending transaction, once: the caller's statement has come to read the result.
    pub fn commit(&self) -> Result<()> {
        let lease = self.lease.lock().unwrap_or_else(|p| p.into_inner()).take();
        lease.map_or(Ok(()), Lease::commit)
    }

    /// Writes the next chunk of rows into `output` (zero rows once exhausted).
    pub fn emit(&self, output: &mut DataChunkHandle) {
        let start = self.next.load(Ordering::Relaxed).min(self.rows.len());
        let end = (start + CHUNK).min(self.rows.len());
        self.next.store(end, Ordering::Relaxed);
        let batch = &self.rows[start..end];
        for col in 0..output.num_columns() {
            let mut vector = output.flat_vector(col);
            for (i, row) in batch.iter().enumerate() {
                // `i < batch.len() <= CHUNK`, and each variant is the column type declared for it
                // at bind time (see `put`).
                match &row[col] {
                    Cell::Null => vector.set_null(i),
                    Cell::BigInt(v) | Cell::Timestamp(v) => put::<i64>(&mut vector, i, *v),
                    Cell::HugeInt(v) => put::<i128>(&mut vector, i, *v),
                    Cell::Date(v) => put::<i32>(&mut vector, i, *v),
                    Cell::Double(v) => put::<f64>(&mut vector, i, *v),
                    Cell::Bool(v) => put::<bool>(&mut vector, i, *v),
                    Cell::Text(s) => vector.insert(i, s.as_str()),
                }
            }
        }
        output.set_len(batch.len());
    }
}

/// Dashboard-shaped rows: (order_day DATE, revenue HUGEINT), copied column-wise.
pub struct DayRevenueRows {
    data: crate::serving::read::DayRevenue,
    next: AtomicUsize,
}

impl DayRevenueRows {
    pub fn new(data: crate::serving::read::DayRevenue) -> Self {
        DayRevenueRows { data, next: AtomicUsize::new(0) }
    }

    pub fn emit(&self, output: &mut DataChunkHandle) {
        let start = self.next.load(Ordering::Relaxed).min(self.data.days.len());
        let end = (start + CHUNK).min(self.data.days.len());
        self.next.store(end, Ordering::Relaxed);
        let n = end - start;
        // SAFETY: `n <= CHUNK`, the vectors' capacity; column 0 is DATE (i32), 1 is HUGEINT (i128).
        unsafe {
            output.flat_vector(0).as_mut_slice_with_len::<i32>(n).copy_from_slice(&self.data.days[start..end]);
            output.flat_vector(1).as_mut_slice_with_len::<i128>(n).copy_from_slice(&self.data.revenue[start..end]);
        }
        output.set_len(n);
    }
}

pub const DAY_REVENUE: [(&str, LogicalTypeId); 2] =
    [("order_day", LogicalTypeId::Date), ("revenue", LogicalTypeId::Hugeint)];

/// Writes `v` into row `i` of a flat vector whose declared column type is `T` (the caller's
/// invariant: `emit` passes each cell's own type, the one bind declared for its column).
fn put<T: Copy>(vector: &mut duckdb::core::FlatVector, i: usize, v: T) {
    assert!(i < CHUNK, "row {i} beyond a vector");
    // SAFETY: a flat vector holds CHUNK values of its column type, which is `T` (see above), and
    // `i < CHUNK`.
    unsafe { vector.as_mut_slice_with_len::<T>(CHUNK)[i] = v };
}
