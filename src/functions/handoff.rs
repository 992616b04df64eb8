//! `__streamhouse_handoff(id BIGINT, part VARCHAR)`: internal. Scans rows a refresh parked in
//! Rust memory (`crate::handoff`), so its final statements need no temp tables.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use duckdb::core::{DataChunkHandle, Inserter, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use crate::handoff::{self, Contents, Part};

const CHUNK: usize = 2048;

pub struct Handoff;

pub struct Bound {
    id: i64,
    part: Part,
}

pub struct Scan {
    contents: Arc<Contents>,
    part: Part,
    next: AtomicUsize,
}

fn refused(why: String) -> Box<dyn std::error::Error> {
    format!("{}: {why} (internal to streamhouse, not meant to be called directly)", handoff::FUNCTION).into()
}

impl VTab for Handoff {
    type BindData = Bound;
    type InitData = Scan;

    fn bind(bind: &BindInfo) -> Result<Bound, Box<dyn std::error::Error>> {
        let id = bind.get_parameter(0).to_int64();
        let name = bind.get_parameter(1).to_string();
        let part = Part::parse(&name).ok_or_else(|| refused(format!("unknown part '{name}'")))?;
        let columns: &[(&str, LogicalTypeId)] = match part {
            Part::Keys => &[("order_id", LogicalTypeId::Bigint)],
            Part::Mart => &[("company", LogicalTypeId::Varchar), ("order_day", LogicalTypeId::Date), ("revenue", LogicalTypeId::Hugeint)],
            Part::Counts => &[("company", LogicalTypeId::Varchar), ("order_day", LogicalTypeId::Date), ("orders", LogicalTypeId::Bigint)],
        };
        for (name, ty) in columns {
            bind.add_result_column(name, LogicalTypeHandle::from(*ty));
        }
        Ok(Bound { id, part })
    }

    fn init(init: &InitInfo) -> Result<Scan, Box<dyn std::error::Error>> {
        // SAFETY: DuckDB keeps the bind data alive until the scan ends.
        let bound = unsafe { &*init.get_bind_data::<Bound>() };
        let contents = handoff::open(bound.id).ok_or_else(|| refused(format!("no parcel {}", bound.id)))?;
        let fits = matches!((&*contents, bound.part), (Contents::Keys(_), Part::Keys) | (Contents::Mart(_), Part::Mart | Part::Counts));
        if !fits {
            return Err(refused(format!("parcel {} has no part '{}'", bound.id, bound.part.name())));
        }
        Ok(Scan { contents, part: bound.part, next: AtomicUsize::new(0) })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        let scan = func.get_init_data();
        let len = match &*scan.contents {
            Contents::Keys(k) => k.len(),
            Contents::Mart(m) => m.len(),
        };
        let start = scan.next.load(Ordering::Relaxed).min(len);
        let end = (start + CHUNK).min(len);
        scan.next.store(end, Ordering::Relaxed);
        let n = end - start;
        // SAFETY (all slices): `n <= CHUNK`, the vectors' capacity, and each column's Rust type
        // is the one bind declared for it (BIGINT i64, DATE i32, HUGEINT i128).
        match (&*scan.contents, scan.part) {
            (Contents::Keys(keys), _) => unsafe {
                output.flat_vector(0).as_mut_slice_with_len::<i64>(n).copy_from_slice(&keys[start..end]);
            },
            (Contents::Mart(mart), part) => {
                let company = output.flat_vector(0);
                for (i, g) in (start..end).enumerate() {
                    company.insert(i, mart.company(g));
                }
                let mut days = output.flat_vector(1);
                for (slot, day) in unsafe { days.as_mut_slice_with_len::<i32>(n) }.iter_mut().zip(mart.days(start..end)) {
                    *slot = day;
                }
                let mut values = output.flat_vector(2);
                if part == Part::Mart {
                    unsafe { values.as_mut_slice_with_len::<i128>(n) }.copy_from_slice(&mart.revenues()[start..end]);
                } else {
                    unsafe { values.as_mut_slice_with_len::<i64>(n) }.copy_from_slice(&mart.order_counts()[start..end]);
                }
            }
        }
        output.set_len(n);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Bigint), LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }
}
