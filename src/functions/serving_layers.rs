//! `serving_layers()`: every serving layer of the database's attached catalogs, one row each
//! (where `serving_status` describes only the one its search path finds): catalog, schema,
//! source, when built and refreshed, refreshes, lake snapshot, fct rows.

use duckdb::core::LogicalTypeId;

use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::{Error, Result};
use crate::core::schema::{Place, META};
use crate::host::session::Role;

pub struct ServingLayers;

impl RowsFunction for ServingLayers {
    const NAME: &'static str = "serving_layers";
    const PARAM: Option<&'static str> = None;
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("catalog", LogicalTypeId::Varchar),
        ("schema", LogicalTypeId::Varchar),
        ("source", LogicalTypeId::Varchar),
        ("built_at", LogicalTypeId::Timestamp),
        ("refreshed_at", LogicalTypeId::Timestamp),
        ("refreshes", LogicalTypeId::Bigint),
        ("lake_snapshot", LogicalTypeId::Bigint),
        ("fct_rows", LogicalTypeId::Bigint),
    ];
    const ROLE: Role = Role::Reader;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let failed = |e: duckdb::Error| Error::duckdb(Self::NAME, &e);
        let mut stmt = ctx
            .conn
            .prepare(
                "SELECT DISTINCT database_name, schema_name FROM duckdb_tables() WHERE table_name = ? AND NOT temporary \
                 ORDER BY ALL",
            )
            .map_err(failed)?;
        let places: Vec<Place> = stmt
            .query_map([META], |r| Ok(Place { catalog: r.get(0)?, schema: r.get(1)? }))
            .map_err(failed)?
            .collect::<std::result::Result<_, _>>()
            .map_err(failed)?;
        let ts = |v: Option<i64>| v.map_or(Cell::Null, Cell::Timestamp);
        let mut out = Vec::new();
        for place in places {
            // A table of that name that is not a layer's (other columns) is skipped, not an error.
            let row = ctx.conn.query_row(
                &format!(
                    "SELECT source, epoch_us(built_at), epoch_us(refreshed_at), refreshes, lake_snapshot, fct_rows \
                     FROM {}",
                    place.of(META)
                ),
                [],
                |r| {
                    Ok(vec![
                        Cell::Text(place.catalog.clone()),
                        Cell::Text(place.schema.clone()),
                        r.get::<_, Option<String>>(0)?.into(),
                        ts(r.get(1)?),
                        ts(r.get(2)?),
                        r.get::<_, Option<i64>>(3)?.into(),
                        r.get::<_, Option<i64>>(4)?.into(),
                        r.get::<_, Option<i64>>(5)?.into(),
                    ])
                },
            );
            if let Ok(row) = row {
                out.push(row);
            }
        }
        Ok(out)
    }
}
