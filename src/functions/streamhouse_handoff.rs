//! `__streamhouse_handoff(id BIGINT, part VARCHAR)`: internal. Scans rows a refresh parked in
//! Rust memory (`crate::serving::handoff`), so its final statements need no temp tables, or a
//! build's planned Paimon read (part `lake`), decoded on DuckDB's threads as the load pulls it.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use duckdb::arrow::array::{Array, Date32Array, Int64Array, StringArray};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::core::{DataChunkHandle, Inserter, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::glue::lake_batches::{self, Batches};
use crate::core::VECTOR_SIZE;
use crate::lake::Scan;
use crate::serving::handoff::{self, Contents, Part};

pub struct Handoff;

pub struct Bound {
    id: i64,
    part: Part,
    /// DuckDB's `threads` as bound: how many threads may read a Lake parcel.
    threads: usize,
}

pub struct HandoffScan {
    contents: Arc<Contents>,
    part: Part,
    /// For Part::Counts: the groups of each company (one output row each).
    runs: Vec<Range<usize>>,
    next: AtomicUsize,
    /// For Part::Lake: the parcel's read, pulled by DuckDB's threads.
    lake: Option<Batches>,
}

fn refused(why: String) -> Box<dyn std::error::Error> {
    format!("{}: {why} (internal to streamhouse, not meant to be called directly)", handoff::FUNCTION).into()
}

impl VTab for Handoff {
    type BindData = Bound;
    type InitData = HandoffScan;

    fn bind(bind: &BindInfo) -> Result<Bound, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            let id = bind.get_parameter(0).to_int64();
            let name = bind.get_parameter(1).to_string();
            let part = Part::parse(&name).ok_or_else(|| refused(format!("unknown part '{name}'")))?;
            let threads = super::glue::settings::threads(bind);
            let ty = LogicalTypeHandle::from;
            let columns = match part {
                Part::Lake => {
                    let contents = handoff::open(id).ok_or_else(|| refused(format!("no parcel {id}")))?;
                    let Contents::Lake { schema, .. } = &*contents else {
                        return Err(refused(format!("parcel {id} has no part 'lake'")));
                    };
                    lake_batches::declare(bind, handoff::FUNCTION, "the Paimon table read", schema)?;
                    return Ok(Bound { id, part, threads });
                }
                Part::Keys => vec![("order_id", ty(LogicalTypeId::Bigint))],
                Part::Mart => vec![
                    ("company", ty(LogicalTypeId::Varchar)),
                    ("order_day", ty(LogicalTypeId::Date)),
                    ("revenue", ty(LogicalTypeId::Hugeint)),
                ],
                Part::Rows => vec![
                    ("order_id", ty(LogicalTypeId::Bigint)),
                    ("company", ty(LogicalTypeId::Varchar)),
                    ("order_day", ty(LogicalTypeId::Date)),
                    ("revenue", ty(LogicalTypeId::Bigint)),
                ],
                Part::Counts => vec![
                    ("company", ty(LogicalTypeId::Varchar)),
                    ("order_days", LogicalTypeHandle::list(&ty(LogicalTypeId::Date))),
                    ("orders", LogicalTypeHandle::list(&ty(LogicalTypeId::Bigint))),
                ],
            };
            for (name, ty) in columns {
                bind.add_result_column(name, ty);
            }
            Ok(Bound { id, part, threads })
        })
    }

    fn init(init: &InitInfo) -> Result<HandoffScan, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            // SAFETY: DuckDB keeps the bind data alive until the scan ends.
            let bound = unsafe { &*init.get_bind_data::<Bound>() };
            let contents = handoff::open(bound.id).ok_or_else(|| refused(format!("no parcel {}", bound.id)))?;
            let fits = matches!(
                (&*contents, bound.part),
                (Contents::Keys(_), Part::Keys)
                    | (Contents::Mart(_), Part::Mart | Part::Counts)
                    | (Contents::Rows(_), Part::Rows)
                    | (Contents::Lake { .. }, Part::Lake)
            );
            if !fits {
                return Err(refused(format!("parcel {} has no part '{}'", bound.id, bound.part.name())));
            }
            let runs = match (&*contents, bound.part) {
                (Contents::Mart(m), Part::Counts) => m.company_runs(),
                _ => Vec::new(),
            };
            let lake = match &*contents {
                Contents::Lake { scan, .. } => {
                    // Planned once, read anew by each scan (a failed load's probes read it again).
                    let units = Arc::new(Scan::clone(scan).into_units()?);
                    init.set_max_threads(bound.threads.max(1) as u64);
                    Some(Batches::pulled(move || units.next()))
                }
                _ => None,
            };
            Ok(HandoffScan { contents, part: bound.part, runs, next: AtomicUsize::new(0), lake })
        })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            let scan = func.get_init_data();
            // The next rows of a parcel held in memory, at most a vector's worth.
            let take = |len: usize| {
                let start = scan.next.load(Ordering::Relaxed).min(len);
                let end = (start + VECTOR_SIZE).min(len);
                scan.next.store(end, Ordering::Relaxed);
                start..end
            };
            // SAFETY (all slices): at most VECTOR_SIZE rows, the vectors' capacity (list children
            // are reserved for `total` values first), and each column's Rust type is the one bind
            // declared for it (BIGINT i64, DATE i32, HUGEINT i128).
            let n = match (&*scan.contents, scan.part) {
                (Contents::Lake { .. }, _) => {
                    let lake = scan.lake.as_ref().ok_or_else(|| refused("a lake parcel without its read".into()))?;
                    return lake.emit(output);
                }
                (Contents::Rows(batches), _) => return emit_rows(batches, &scan.next, output),
                (Contents::Keys(keys), _) => {
                    let at = take(keys.len());
                    // SAFETY: see above (BIGINT keys, at most VECTOR_SIZE).
                    unsafe {
                        output.flat_vector(0).as_mut_slice_with_len::<i64>(at.len()).copy_from_slice(&keys[at.clone()])
                    };
                    at.len()
                }
                (Contents::Mart(mart), Part::Counts) => {
                    let runs = &scan.runs[take(scan.runs.len())];
                    let total: usize = runs.iter().map(|r| r.len()).sum();
                    let company = output.flat_vector(0);
                    let (mut days, mut orders) = (output.list_vector(1), output.list_vector(2));
                    let mut day_values = days.child(total);
                    let mut order_values = orders.child(total);
                    // SAFETY: the child was reserved for `total` DATE values just above.
                    let day_slots = unsafe { day_values.as_mut_slice_with_len::<i32>(total) };
                    // SAFETY: the child was reserved for `total` BIGINT values just above.
                    let order_slots = unsafe { order_values.as_mut_slice_with_len::<i64>(total) };
                    let mut offset = 0;
                    for (i, run) in runs.iter().enumerate() {
                        company.insert(i, mart.company(run.start));
                        for (slot, day) in day_slots[offset..offset + run.len()].iter_mut().zip(mart.days(run.clone()))
                        {
                            *slot = day;
                        }
                        order_slots[offset..offset + run.len()].copy_from_slice(&mart.order_counts()[run.clone()]);
                        days.set_entry(i, offset, run.len());
                        orders.set_entry(i, offset, run.len());
                        offset += run.len();
                    }
                    days.set_len(total);
                    orders.set_len(total);
                    runs.len()
                }
                (Contents::Mart(mart), _) => {
                    let at = take(mart.len());
                    let n = at.len();
                    let company = output.flat_vector(0);
                    for (i, g) in at.clone().enumerate() {
                        company.insert(i, mart.company(g));
                    }
                    let mut days = output.flat_vector(1);
                    // SAFETY: a DATE column, at most VECTOR_SIZE.
                    let day_slots = unsafe { days.as_mut_slice_with_len::<i32>(n) };
                    for (slot, day) in day_slots.iter_mut().zip(mart.days(at.clone())) {
                        *slot = day;
                    }
                    let mut revenue = output.flat_vector(2);
                    // SAFETY: a HUGEINT column, at most VECTOR_SIZE.
                    let revenue_slots = unsafe { revenue.as_mut_slice_with_len::<i128>(n) };
                    revenue_slots.copy_from_slice(&mart.revenues()[at]);
                    n
                }
            };
            output.set_len(n);
            Ok(())
        })
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Bigint), LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }
}

/// One parcel batch per output chunk (each is at most a vector long); `next` counts batches.
fn emit_rows(
    batches: &[RecordBatch],
    next: &AtomicUsize,
    output: &mut DataChunkHandle,
) -> Result<(), Box<dyn std::error::Error>> {
    let Some(batch) = batches.get(next.fetch_add(1, Ordering::Relaxed)) else {
        output.set_len(0);
        return Ok(());
    };
    let n = batch.num_rows();
    if n > VECTOR_SIZE {
        return Err(refused(format!("a batch of {n} rows exceeds a vector")));
    }
    let int64 = |i: usize| {
        batch
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| refused(format!("column {i} is not BIGINT")))
    };
    let (ids, revenue) = (int64(0)?, int64(3)?);
    let company = batch
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| refused("column 1 is not VARCHAR".into()))?;
    let day =
        batch.column(2).as_any().downcast_ref::<Date32Array>().ok_or_else(|| refused("column 2 is not DATE".into()))?;
    // SAFETY: `n <= VECTOR_SIZE`, the vectors' capacity; BIGINT is i64 and DATE is i32 in DuckDB.
    unsafe {
        output.flat_vector(0).as_mut_slice_with_len::<i64>(n).copy_from_slice(ids.values());
        output.flat_vector(2).as_mut_slice_with_len::<i32>(n).copy_from_slice(day.values());
        output.flat_vector(3).as_mut_slice_with_len::<i64>(n).copy_from_slice(revenue.values());
    }
    let companies = output.flat_vector(1);
    for i in 0..n {
        companies.insert(i, company.value(i));
    }
    output.set_len(n);
    Ok(())
}
