//! Thin FFI layer: one file per SQL function, each saying what it computes; the DuckDB callback
//! glue is written once (`table`, `scalar`). `register_all` and `register_replacement_scan` are
//! all the entrypoint calls.

#[cfg(not(duckdb14))]
mod fluss_scan;
mod fluss_tier_ddl;
mod from_paimon;
mod glue;
mod paimon_changelog;
mod paimon_mart_ddl;
mod paimon_mart_ddl_lines;
mod paimon_mart_job;
mod paimon_mart_job_lines;
mod paimon_read_plan;
mod paimon_scan;
mod paimon_snapshots;
mod paimon_tier_ddl;
mod paimon_tier_ddl_lines;
mod paimon_tier_upsert;
mod serving_build;
mod serving_dashboard;
mod serving_explain;
mod serving_follow;
mod serving_layers;
mod serving_olap;
mod serving_publish;
mod serving_reconcile;
mod serving_refresh;
mod serving_status;
mod serving_unfollow;
mod streamhouse_handoff;

use duckdb::Connection;

use crate::serving::state::SharedDatabase;
use glue::table::{PerCompany, Table};

/// Registers `FROM 'paimon:<dir>'` (a replacement scan, see `from_paimon`) on `db`.
///
/// # Safety
/// `db` must be the live database handle of the LOAD in progress.
pub unsafe fn register_replacement_scan(db: duckdb::ffi::duckdb_database, session: &SharedDatabase) {
    // SAFETY: per this function's contract.
    unsafe { from_paimon::register(db, session) }
}

pub fn register_all(con: &Connection, session: &SharedDatabase) -> duckdb::Result<()> {
    con.register_table_function_with_extra_info::<Table<serving_build::ServingBuild>, _>("serving_build", session)?;
    con.register_table_function_with_extra_info::<PerCompany<serving_dashboard::ServingDashboard>, _>(
        "serving_dashboard",
        session,
    )?;
    con.register_table_function_with_extra_info::<PerCompany<serving_olap::ServingOlap>, _>("serving_olap", session)?;
    con.register_table_function_with_extra_info::<Table<serving_explain::ServingExplain>, _>(
        "serving_explain",
        session,
    )?;
    con.register_table_function_with_extra_info::<Table<serving_refresh::ServingRefresh>, _>(
        "serving_refresh",
        session,
    )?;
    con.register_table_function_with_extra_info::<Table<serving_reconcile::ServingReconcile>, _>(
        "serving_reconcile",
        session,
    )?;
    con.register_table_function_with_extra_info::<Table<serving_status::ServingStatus>, _>("serving_status", session)?;
    con.register_table_function_with_extra_info::<Table<serving_layers::ServingLayers>, _>("serving_layers", session)?;
    con.register_table_function_with_extra_info::<Table<serving_follow::ServingFollow>, _>("serving_follow", session)?;
    con.register_table_function_with_extra_info::<Table<serving_publish::ServingPublish>, _>(
        "serving_publish",
        session,
    )?;
    con.register_table_function_with_extra_info::<Table<serving_unfollow::ServingUnfollow>, _>(
        "serving_unfollow",
        session,
    )?;
    con.register_table_function_with_extra_info::<paimon_scan::PaimonScan, _>("paimon_scan", session)?;
    #[cfg(not(duckdb14))]
    con.register_table_function_with_extra_info::<fluss_scan::FlussScan, _>("fluss_scan", session)?;
    con.register_table_function::<streamhouse_handoff::Handoff>(crate::serving::handoff::FUNCTION)?;
    con.register_table_function_with_extra_info::<paimon_changelog::PaimonChangelog, _>("paimon_changelog", session)?;
    con.register_table_function_with_extra_info::<Table<paimon_snapshots::PaimonSnapshots>, _>(
        "paimon_snapshots",
        session,
    )?;
    con.register_table_function_with_extra_info::<Table<paimon_read_plan::PaimonReadPlan>, _>(
        "paimon_read_plan",
        session,
    )?;
    con.register_scalar_function::<paimon_tier_ddl::PaimonTierDdl>("paimon_tier_ddl")?;
    con.register_scalar_function::<fluss_tier_ddl::FlussTierDdl>("fluss_tier_ddl")?;
    con.register_table_function_with_extra_info::<Table<paimon_tier_ddl_lines::PaimonTierDdlLines>, _>(
        "paimon_tier_ddl",
        session,
    )?;
    con.register_scalar_function::<paimon_tier_upsert::PaimonTierUpsert>("paimon_tier_upsert")?;
    con.register_scalar_function::<paimon_mart_ddl::PaimonMartDdl>("paimon_mart_ddl")?;
    con.register_scalar_function::<paimon_mart_job::PaimonMartJob>("paimon_mart_job")?;
    con.register_table_function_with_extra_info::<Table<paimon_mart_ddl_lines::PaimonMartDdlLines>, _>(
        "paimon_mart_ddl",
        session,
    )?;
    con.register_table_function_with_extra_info::<Table<paimon_mart_job_lines::PaimonMartJobLines>, _>(
        "paimon_mart_job",
        session,
    )?;
    Ok(())
}
