//! `fluss_scan(table VARCHAR [, lake := VARCHAR] [, options := MAP])`: the current state of a
//! Fluss primary-key table (`fluss://host:port/database.table`) by the union read a build does —
//! the lake snapshot Fluss tiered plus the changelog after it, up to the end offsets taken when
//! the scan starts — with the table's own columns and Fluss's types. Also what
//! `FROM 'fluss://...'` reads. Bind asks the cluster for the columns only; init reads.

use duckdb::arrow::datatypes::SchemaRef;
use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::glue::lake_batches::{self, Batches};
use super::glue::settings::sandbox;
use crate::core::error::Error;
use crate::fluss::{table, Site};
use crate::lake::Access;

const NAME: &str = "fluss_scan";

pub struct FlussScan;

pub struct Bind {
    site: Site,
    lake: Option<String>,
    access: Access,
    threads: usize,
    schema: SchemaRef,
}

impl VTab for FlussScan {
    type BindData = Bind;
    type InitData = Batches;

    fn bind(bind: &BindInfo) -> Result<Bind, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            let raw = lake_batches::path_param(bind, NAME)?;
            let address = crate::core::stream::parse(&raw).map_err(|problem| Error::BadArgument {
                function: NAME,
                parameter: "table",
                value: crate::core::stream::redacted(&raw),
                problem,
            })?;
            let access = Access { sandbox: sandbox(bind), options: lake_batches::options_param(bind, NAME, &[&raw])? };
            let site = Site::new(NAME, address, &access.sandbox)?;
            let schema = table::schema(&site)?;
            lake_batches::declare(
                bind,
                NAME,
                &format!("Fluss table '{}'", crate::core::error::shown(&crate::core::stream::redacted(&raw))),
                &schema,
            )?;
            let lake = bind.get_named_parameter("lake").filter(|v| !v.is_null()).map(|v| v.to_string());
            Ok(Bind { site, lake, access, threads: super::glue::settings::threads(bind), schema })
        })
    }

    fn init(init: &InitInfo) -> Result<Batches, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            // SAFETY: bind stored a boxed `Bind` before init runs; DuckDB frees it after execution.
            let bind = unsafe { &*init.get_bind_data::<Bind>() };
            let (schema, batches) = crate::serving::stream_source::scan::current_state(
                &bind.site,
                bind.lake.as_deref(),
                &bind.access,
                bind.threads,
            )?;
            if schema.fields() != bind.schema.fields() {
                return Err(bind
                    .site
                    .err("the table's columns changed between bind and read; run the query again")
                    .into());
            }
            Ok(Batches::new(batches.into_iter().map(Ok)).in_statement(init))
        })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        super::glue::guarded(|| func.get_init_data().emit(output))
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![
            ("lake".into(), LogicalTypeHandle::from(LogicalTypeId::Varchar)),
            (lake_batches::OPTIONS.into(), lake_batches::options_type()),
        ])
    }
}
