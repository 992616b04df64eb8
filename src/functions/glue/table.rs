//! The one VTab adapter our table functions share. Each SQL function only says its name, its
//! optional VARCHAR parameter, its named parameters, its columns and how to compute its rows on
//! the extension's connection; bind (no side effects: it also runs under EXPLAIN/PREPARE), init (does the
//! work) and func (streams the rows out) are written once here.

use std::marker::PhantomData;

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};
use duckdb::Connection;

use super::dashboard_args;
use super::lake_batches::{self, TableArg};
use super::rows::{self, Call, Cell, Ctx, DayRevenueRows, Rows};
#[cfg(duckdb14)]
use super::settings::ValueExt;
use crate::core::dashboard::DashboardQuery;
use crate::core::error::{Error, Result};
use crate::host::session::Role;
use crate::host::transaction::Transaction;
use crate::serving::read::DayRevenue;
use crate::serving::state::SharedDatabase;

/// A table function returning materialized rows.
pub trait RowsFunction {
    const NAME: &'static str;
    /// Name of the first VARCHAR parameter, if the function takes one.
    const PARAM: Option<&'static str>;
    /// Names of further positional VARCHAR parameters after `PARAM` (non-NULL, in `Call::more`).
    const MORE_PARAMS: &'static [&'static str] = &[];
    const COLUMNS: &'static [(&'static str, LogicalTypeId)];
    /// Readers run beside builds and refreshes; writers take turns.
    const ROLE: Role;
    /// Named parameters; bind keeps each as DuckDB's text form of the value (or None).
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[];
    /// Whether the function reads Paimon tables and so takes `options := MAP {...}`.
    const LAKE_OPTIONS: bool = false;
    /// The named parameters (of `NAMED`) that name a table the options may be for; `PARAM`,
    /// when there is one, always does.
    const LAKE_NAMED: &'static [&'static str] = &[];
    /// The parameters (`PARAM` or of `NAMED`) naming a Paimon table opened at bind
    /// (`open_table_arg`).
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[];
    /// More checks of the arguments at bind (none by default).
    fn bind_more(bind: &BindInfo) -> Result<()> {
        let _ = bind;
        Ok(())
    }
    /// Whether the function reads a source and so takes `columns := MAP {...}`.
    const COLUMN_MAP: bool = false;
    /// Whether the function asks the dashboard's question and so takes its named parameters
    /// (`top`, `from_day`, `to_day`, `grain`: `dashboard_args`), checked into `Call::dashboard`.
    const DASHBOARD: bool = false;
    /// A reader's rows (`ROLE` = Reader).
    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let _ = ctx;
        Err(Error::internal(Self::NAME, "has no reader body"))
    }
    /// A writer's rows (`ROLE` = Writer): its changes made in `tx` and left open there, committed
    /// when DuckDB first pulls the rows (rolled back if it never does).
    fn write(ctx: &Ctx, tx: &mut Transaction) -> Result<Vec<Vec<Cell>>> {
        let _ = (ctx, tx);
        Err(Error::internal(Self::NAME, "has no writer body"))
    }
}

/// A per-company (order_day, revenue) function, emitted column-wise (the dashboard hot path).
/// It takes the dashboard's named parameters.
pub trait CompanyFunction {
    const NAME: &'static str;
    /// Whether it also takes `fact := VARCHAR` (a Paimon fact table) and `options := MAP`.
    const LAKE_FACT: bool = false;
    fn query(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue>;
    /// The rows for one call (`query` unless the function looks at more of the call).
    fn query_call(ctx: &Ctx) -> Result<DayRevenue> {
        Self::query(ctx.conn, &ctx.call.arg, &ctx.call.dashboard)
    }
}

/// The named parameter of a `LAKE_FACT` function.
const FACT: &str = "fact";

/// Every writer's named parameter: how long it waits for a running writer (`core::wait`).
const WAIT: &str = "wait";

/// `wait := INTERVAL`, checked, if given (NULL is refused: leaving it out asks for the default).
fn wait_param(bind: &BindInfo, function: &'static str) -> Result<Option<std::time::Duration>> {
    let Some(v) = bind.get_named_parameter(WAIT) else { return Ok(None) };
    if v.is_null() {
        return Err(Error::NullArgument { function, parameter: WAIT });
    }
    let (months, days, micros) = super::value::interval_arg(&v);
    crate::core::wait::writer_wait(function, months, days, micros, &v.to_string()).map(Some)
}

/// Opens (and drops) the Paimon table an argument names, at bind (`lake_batches::table_arg_path`),
/// with the options the call gives or those remembered for that table.
fn open_table_arg(bind: &BindInfo, call: &Call, function: &'static str, arg: TableArg, raw: &str) -> Result<()> {
    let Some(path) = lake_batches::table_arg_path(function, arg, raw, &call.access.sandbox)? else { return Ok(()) };
    // SAFETY: every table function is registered with a `SharedDatabase` as extra info
    // (functions::register_all), which DuckDB keeps alive as long as the function exists.
    let db = unsafe { &*bind.get_extra_info::<SharedDatabase>() };
    let access = db.remembered_access(&call.access, Some(&path));
    crate::lake::LakeTable::open(function, &path, &access).map(drop)
}

pub struct Table<F>(PhantomData<F>);
pub struct PerCompany<F>(PhantomData<F>);

fn varchar_param(param: Option<&'static str>) -> Option<Vec<LogicalTypeHandle>> {
    Some(param.map(|_| vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)]).unwrap_or_default())
}

impl<F: RowsFunction> VTab for Table<F> {
    type BindData = Call;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> std::result::Result<Call, Box<dyn std::error::Error>> {
        super::guarded(|| {
            rows::declare(bind, F::COLUMNS);
            let mut call = rows::bind_call(bind, F::NAME, F::PARAM)?;
            call.more = rows::more_params(bind, F::NAME, F::MORE_PARAMS)?;
            call.named = F::NAMED
                .iter()
                .map(|&(name, _)| {
                    (name, bind.get_named_parameter(name).filter(|v| !v.is_null()).map(|v| v.to_string()))
                })
                .collect();
            if F::LAKE_OPTIONS {
                let tables: Vec<&str> = (F::PARAM.map(|_| call.arg.as_str()).into_iter())
                    .chain(F::LAKE_NAMED.iter().filter_map(|name| call.named_arg(name)))
                    .collect();
                call.access.options = lake_batches::options_param(bind, F::NAME, &tables)?;
            }
            for &(name, arg) in F::TABLE_ARGS {
                let value = if F::PARAM == Some(name) { Some(call.arg.as_str()) } else { call.named_arg(name) };
                if let Some(raw) = value {
                    open_table_arg(bind, &call, F::NAME, arg, raw)?;
                }
            }
            F::bind_more(bind)?;
            if F::COLUMN_MAP {
                call.columns = lake_batches::columns_param(bind, F::NAME)?;
            }
            if F::DASHBOARD {
                call.dashboard = dashboard_args::bind(bind, F::NAME)?;
            }
            if F::ROLE == Role::Writer {
                if let Some(wait) = wait_param(bind, F::NAME)? {
                    call.wait = wait;
                }
            }
            Ok(call)
        })
    }

    fn init(init: &InitInfo) -> std::result::Result<Rows, Box<dyn std::error::Error>> {
        super::guarded(|| match F::ROLE {
            Role::Reader => Ok(Rows::new(rows::run(init, F::NAME, F::rows)?)),
            Role::Writer => {
                let (rows, lease) = rows::run_writer(init, F::NAME, F::write)?;
                Ok(Rows::with_lease(rows, lease))
            }
        })
    }

    fn func(
        func: &TableFunctionInfo<Self>,
        output: &mut DataChunkHandle,
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        super::guarded(|| {
            let data = func.get_init_data();
            data.commit()?;
            data.emit(output);
            Ok(())
        })
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        let mut params = varchar_param(F::PARAM).unwrap_or_default();
        params.extend(F::MORE_PARAMS.iter().map(|_| LogicalTypeHandle::from(LogicalTypeId::Varchar)));
        Some(params)
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        let mut named: Vec<_> = F::NAMED.iter().map(|(n, t)| (n.to_string(), rows::type_handle(t))).collect();
        if F::LAKE_OPTIONS {
            named.push((lake_batches::OPTIONS.to_string(), lake_batches::options_type()));
        }
        if F::COLUMN_MAP {
            named.push((lake_batches::COLUMNS.to_string(), lake_batches::options_type()));
        }
        if F::DASHBOARD {
            named.extend(dashboard_args::declare());
        }
        if F::ROLE == Role::Writer {
            named.push((WAIT.to_string(), rows::type_handle(&LogicalTypeId::Interval)));
        }
        Some(named)
    }
}

impl<F: CompanyFunction> VTab for PerCompany<F> {
    type BindData = Call;
    type InitData = DayRevenueRows;

    fn bind(bind: &BindInfo) -> std::result::Result<Call, Box<dyn std::error::Error>> {
        super::guarded(|| {
            rows::declare(bind, &rows::DAY_REVENUE);
            // Only a function reading a Paimon fact table needs the caller's sandbox.
            let mut call = match F::LAKE_FACT {
                true => rows::bind_call(bind, F::NAME, Some("company"))?,
                false => rows::bind_call_without_sandbox(bind, F::NAME, Some("company"))?,
            };
            call.dashboard = dashboard_args::bind(bind, F::NAME)?;
            if F::LAKE_FACT {
                call.named =
                    vec![(FACT, bind.get_named_parameter(FACT).filter(|v| !v.is_null()).map(|v| v.to_string()))];
                let fact: Vec<String> = call.named_arg(FACT).map(str::to_string).into_iter().collect();
                let tables: Vec<&str> = fact.iter().map(String::as_str).collect();
                call.access.options = lake_batches::options_param(bind, F::NAME, &tables)?;
                if let Some(raw) = fact.first() {
                    open_table_arg(bind, &call, F::NAME, TableArg::Fact, raw)?;
                }
            }
            Ok(call)
        })
    }

    fn init(init: &InitInfo) -> std::result::Result<DayRevenueRows, Box<dyn std::error::Error>> {
        super::guarded(|| Ok(DayRevenueRows::new(rows::run(init, F::NAME, F::query_call)?)))
    }

    fn func(
        func: &TableFunctionInfo<Self>,
        output: &mut DataChunkHandle,
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        super::guarded(|| {
            func.get_init_data().emit(output);
            Ok(())
        })
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        varchar_param(Some("company"))
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        let mut named = dashboard_args::declare();
        if F::LAKE_FACT {
            named.push((FACT.to_string(), rows::type_handle(&LogicalTypeId::Varchar)));
            named.push((lake_batches::OPTIONS.to_string(), lake_batches::options_type()));
        }
        Some(named)
    }
}
