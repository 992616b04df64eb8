//! The aggregation merge engine (`merge-engine = aggregation`) of the native merge: each value
//! column folds a key's versions, in sequence order, with its field function — `agg` for an
//! added version (`+I`/`+U`), `retract` for a retraction (`-U`/`-D`) — as Java Paimon 1.3's
//! `AggregateMergeFunction` and `FieldAggregator`s do; key columns take the latest version's.
//!
//! Invariants: a function's fold equals Java's for every version sequence (NULL inputs, the
//! first-value flags, wrapping integer sums, a decimal sum that leaves its precision is NULL);
//! a retraction a function cannot take is refused with Java's message unless the field sets
//! `ignore-retract`; any other function or aggregation option is not taken here (the table is
//! read by paimon-rust: [`Aggregation::from_options`] names what it met).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::{
    new_null_array, Array, ArrayRef, ArrowNativeTypeOp, ArrowPrimitiveType, BooleanArray, PrimitiveArray,
};
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;

/// A field function (Paimon's `fields.<column>.aggregate-function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Sum,
    Min,
    Max,
    LastValue,
    LastNonNullValue,
    FirstValue,
    FirstNonNullValue,
    BoolAnd,
    BoolOr,
}

impl Func {
    fn parse(name: &str) -> Option<Func> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "sum" => Func::Sum,
            "min" => Func::Min,
            "max" => Func::Max,
            "last_value" => Func::LastValue,
            "last_non_null_value" => Func::LastNonNullValue,
            "first_value" => Func::FirstValue,
            // Java's factory also answers to the older spelling.
            "first_non_null_value" | "first_not_null_value" => Func::FirstNonNullValue,
            "bool_and" => Func::BoolAnd,
            "bool_or" => Func::BoolOr,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Func::Sum => "sum",
            Func::Min => "min",
            Func::Max => "max",
            Func::LastValue => "last_value",
            Func::LastNonNullValue => "last_non_null_value",
            Func::FirstValue => "first_value",
            Func::FirstNonNullValue => "first_non_null_value",
            Func::BoolAnd => "bool_and",
            Func::BoolOr => "bool_or",
        }
    }
}

/// How one value column folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub func: Func,
    pub ignore_retract: bool,
}

/// A table's aggregation: the functions its options name, the default for the other columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregation {
    named: HashMap<String, Func>,
    ignore_retract: HashSet<String>,
    default: Func,
}

const FIELDS: &str = "fields.";
const FUNCTION: &str = ".aggregate-function";
const IGNORE_RETRACT: &str = ".ignore-retract";
const DEFAULT: &str = "fields.default-aggregate-function";

impl Aggregation {
    /// The aggregation of a table with these options, and the option keys it read; Err names
    /// a function this path does not implement.
    pub fn from_options(options: &HashMap<String, String>) -> Result<(Aggregation, Vec<String>), String> {
        let mut agg =
            Aggregation { named: HashMap::new(), ignore_retract: HashSet::new(), default: Func::LastNonNullValue };
        let mut read = Vec::new();
        let func =
            |key: &str, value: &str| Func::parse(value).ok_or_else(|| format!("aggregate function {value} ({key})"));
        for (key, value) in options {
            let lower = key.to_ascii_lowercase();
            if lower == DEFAULT {
                agg.default = func(key, value)?;
            } else if let Some(column) = field_option(key, FUNCTION) {
                agg.named.insert(column.to_string(), func(key, value)?);
            } else if let Some(column) = field_option(key, IGNORE_RETRACT) {
                if value.trim().eq_ignore_ascii_case("true") {
                    agg.ignore_retract.insert(column.to_string());
                }
            } else {
                continue;
            }
            read.push(key.clone());
        }
        Ok((agg, read))
    }

    /// How `column` folds: its own function, else the table's default.
    pub fn field(&self, column: &str) -> Field {
        Field {
            func: self.named.get(column).copied().unwrap_or(self.default),
            ignore_retract: self.ignore_retract.contains(column),
        }
    }
}

/// `fields.<column><suffix>` → the column (its case kept: Paimon's option keys are exact).
fn field_option<'a>(key: &'a str, suffix: &str) -> Option<&'a str> {
    let lower = key.to_ascii_lowercase();
    if !lower.starts_with(FIELDS) || !lower.ends_with(suffix) || key.len() <= FIELDS.len() + suffix.len() {
        return None;
    }
    Some(&key[FIELDS.len()..key.len() - suffix.len()])
}

/// One version of a key: (source, row, added).
pub type Version = (usize, usize, bool);

/// Column `name` folded per group of versions (each group in sequence order, one result row
/// each); `values` holds the column of every source.
pub fn fold(field: Field, name: &str, values: &[&dyn Array], groups: &[&[Version]]) -> Result<ArrayRef, String> {
    let t = values.first().map(|v| v.data_type().clone()).unwrap_or(DataType::Null);
    let unsupported = || format!("merge-engine aggregation: {} over column {name} of type {t}", field.func.name());
    match field.func {
        Func::Sum => match &t {
            DataType::Int8 => Ok(sum::<Int8Type>(field, values, groups, |_| true)),
            DataType::Int16 => Ok(sum::<Int16Type>(field, values, groups, |_| true)),
            DataType::Int32 => Ok(sum::<Int32Type>(field, values, groups, |_| true)),
            DataType::Int64 => Ok(sum::<Int64Type>(field, values, groups, |_| true)),
            DataType::Float32 => Ok(sum::<Float32Type>(field, values, groups, |_| true)),
            DataType::Float64 => Ok(sum::<Float64Type>(field, values, groups, |_| true)),
            DataType::Decimal128(p, s) => {
                let fits = decimal_fits(*p);
                let out = sum::<Decimal128Type>(field, values, groups, fits);
                out.as_primitive::<Decimal128Type>()
                    .clone()
                    .with_precision_and_scale(*p, *s)
                    .map(|a| Arc::new(a) as ArrayRef)
                    .map_err(|e| e.to_string())
            }
            _ => Err(unsupported()),
        }
        .and_then(|a| retract_check(field, name, groups).map(|()| a)),
        Func::BoolAnd | Func::BoolOr => {
            if t != DataType::Boolean {
                return Err(unsupported());
            }
            retract_check(field, name, groups)?;
            Ok(bools(field.func == Func::BoolAnd, values, groups))
        }
        _ => {
            let picks = select(field, name, values, groups)?;
            let nulls = new_null_array(&t, 1);
            let mut sources: Vec<&dyn Array> = values.to_vec();
            sources.push(nulls.as_ref());
            let at: Vec<(usize, usize)> = picks.into_iter().map(|p| p.unwrap_or((values.len(), 0))).collect();
            arrow_select::interleave::interleave(&sources, &at).map_err(|e| format!("folding column {name}: {e}"))
        }
    }
}

/// Java's refusal of a retraction by a function that has none.
fn retract_check(field: Field, name: &str, groups: &[&[Version]]) -> Result<(), String> {
    let takes = field.ignore_retract || matches!(field.func, Func::Sum | Func::LastValue | Func::LastNonNullValue);
    if takes || groups.iter().all(|g| g.iter().all(|v| v.2)) {
        return Ok(());
    }
    Err(format!(
        "Aggregate function '{}' does not support retraction, If you allow this function to ignore retraction \
         messages, you can configure 'fields.{name}.ignore-retract'='true'.",
        field.func.name()
    ))
}

/// Whether an unscaled decimal of precision `p` is a value Java keeps: a compact decimal
/// (p ≤ 18) any `long` (Java does not check its digits), a wider one fewer than `p` digits.
fn decimal_fits(p: u8) -> impl Fn(i128) -> bool {
    move |v: i128| {
        if p <= 18 {
            i64::try_from(v).is_ok()
        } else {
            10i128.checked_pow(u32::from(p)).is_none_or(|limit| v.unsigned_abs() < limit.unsigned_abs())
        }
    }
}

/// `sum`: NULLs skipped, a retraction subtracts (negates into an empty sum); integers wrap
/// like Java's; a result that does not `fit` is NULL, and a later version starts over from it.
fn sum<T: ArrowPrimitiveType>(
    field: Field,
    values: &[&dyn Array],
    groups: &[&[Version]],
    fits: impl Fn(T::Native) -> bool,
) -> ArrayRef
where
    T::Native: ArrowNativeTypeOp,
{
    let arrays: Vec<&PrimitiveArray<T>> = values.iter().map(|v| v.as_primitive::<T>()).collect();
    let out: PrimitiveArray<T> = groups
        .iter()
        .map(|group| {
            let mut acc: Option<T::Native> = None;
            for &(s, r, add) in group.iter() {
                let a = arrays[s];
                if a.is_null(r) || (!add && field.ignore_retract) {
                    continue;
                }
                let v = a.value(r);
                acc = match (acc, add) {
                    (None, true) => Some(v),
                    (None, false) => Some(v.neg_wrapping()),
                    (Some(x), true) => x.add_checked(v).ok().or(Some(x.add_wrapping(v))),
                    (Some(x), false) => x.sub_checked(v).ok().or(Some(x.sub_wrapping(v))),
                }
                .filter(|r| fits(*r));
            }
            acc
        })
        .collect();
    Arc::new(out)
}

/// `bool_and` / `bool_or`: NULLs skipped.
fn bools(and: bool, values: &[&dyn Array], groups: &[&[Version]]) -> ArrayRef {
    let arrays: Vec<&BooleanArray> = values.iter().map(|v| v.as_boolean()).collect();
    let out: BooleanArray = groups
        .iter()
        .map(|group| {
            let mut acc: Option<bool> = None;
            for &(s, r, add) in group.iter() {
                if !add || arrays[s].is_null(r) {
                    continue;
                }
                let v = arrays[s].value(r);
                acc = Some(match acc {
                    None => v,
                    Some(x) if and => x && v,
                    Some(x) => x || v,
                });
            }
            acc
        })
        .collect();
    Arc::new(out)
}

/// The functions whose result is one of the input cells or NULL: which cell, per group.
fn select(
    field: Field,
    name: &str,
    values: &[&dyn Array],
    groups: &[&[Version]],
) -> Result<Vec<Option<(usize, usize)>>, String> {
    retract_check(field, name, groups)?;
    // min / max compare cells of different sources through one row encoding.
    let rows = match field.func {
        Func::Min | Func::Max => {
            let t = values[0].data_type().clone();
            let converter = RowConverter::new(vec![SortField::new(t.clone())]).map_err(|e| {
                format!("merge-engine aggregation: {} over column {name} of type {t}: {e}", field.func.name())
            })?;
            let rows: Result<Vec<_>, _> =
                values.iter().map(|v| converter.convert_columns(&[arrow_array::make_array(v.to_data())])).collect();
            Some(rows.map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    let valid = |s: usize, r: usize| values[s].is_valid(r);
    let mut out = Vec::with_capacity(groups.len());
    for group in groups {
        let mut acc: Option<(usize, usize)> = None;
        let mut initialized = false;
        for &(s, r, add) in group.iter() {
            if !add {
                if field.ignore_retract {
                    continue;
                }
                match field.func {
                    Func::LastValue => acc = None,
                    Func::LastNonNullValue if valid(s, r) => acc = None,
                    _ => {}
                }
                continue;
            }
            let input = valid(s, r).then_some((s, r));
            acc = match field.func {
                Func::LastValue => Some((s, r)),
                Func::LastNonNullValue => input.or(acc),
                Func::FirstValue if !initialized => {
                    initialized = true;
                    Some((s, r))
                }
                Func::FirstNonNullValue if !initialized && input.is_some() => {
                    initialized = true;
                    input
                }
                Func::FirstValue | Func::FirstNonNullValue => acc,
                Func::Min | Func::Max => match (acc, input) {
                    (None, i) => i,
                    (a, None) => a,
                    (Some((as_, ar)), Some((is, ir))) => {
                        let rows = rows.as_ref().expect("min/max rows");
                        let acc_less = rows[as_].row(ar) < rows[is].row(ir);
                        // Java keeps the accumulator unless the input is strictly beyond it.
                        let keep = if field.func == Func::Max { !acc_less } else { acc_less };
                        if keep {
                            Some((as_, ar))
                        } else {
                            Some((is, ir))
                        }
                    }
                },
                Func::Sum | Func::BoolAnd | Func::BoolOr => unreachable!("folded elsewhere"),
            };
        }
        // A cell that is NULL is NULL whichever version holds it.
        out.push(acc.filter(|&(s, r)| valid(s, r)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use arrow_array::{Decimal128Array, Float64Array, Int32Array, Int64Array, StringArray};

    use super::*;

    fn field(func: &str, ignore_retract: bool) -> Field {
        Field { func: Func::parse(func).unwrap(), ignore_retract }
    }

    /// Folds one group over `cells` (one source), versions `(row, added)` in order.
    fn fold1(f: Field, cells: &dyn Array, versions: &[(usize, bool)]) -> Result<ArrayRef, String> {
        let group: Vec<Version> = versions.iter().map(|&(r, add)| (0, r, add)).collect();
        fold(f, "c", &[cells], &[&group])
    }

    fn int64(f: Field, cells: &[Option<i64>], versions: &[(usize, bool)]) -> Option<i64> {
        let a = fold1(f, &Int64Array::from(cells.to_vec()), versions).unwrap();
        let a = a.as_primitive::<Int64Type>();
        a.is_valid(0).then(|| a.value(0))
    }

    #[test]
    fn sum_skips_nulls_subtracts_retractions_and_wraps_like_java() {
        let cells = [Some(10), None, Some(5), Some(i64::MAX)];
        assert_eq!(int64(field("sum", false), &cells, &[(0, true), (1, true), (2, true)]), Some(15));
        assert_eq!(int64(field("sum", false), &cells, &[(0, true), (2, false)]), Some(5));
        // A retraction into an empty sum negates; an ignored one is skipped.
        assert_eq!(int64(field("sum", false), &cells, &[(2, false), (0, true)]), Some(5));
        assert_eq!(int64(field("sum", true), &cells, &[(2, false), (0, true)]), Some(10));
        assert_eq!(int64(field("sum", false), &cells, &[(1, true)]), None);
        assert_eq!(int64(field("sum", false), &cells, &[(3, true), (0, true)]), Some(i64::MIN + 9));
        let ints = Int32Array::from(vec![i32::MAX, 1]);
        let a = fold1(field("sum", false), &ints, &[(0, true), (1, true)]).unwrap();
        assert_eq!(a.as_primitive::<Int32Type>().value(0), i32::MIN);
        let doubles = Float64Array::from(vec![0.5, 0.25]);
        let a = fold1(field("sum", false), &doubles, &[(0, true), (1, false)]).unwrap();
        assert_eq!(a.as_primitive::<Float64Type>().value(0), 0.25);
    }

    #[test]
    fn a_decimal_sum_beyond_its_precision_is_null_as_in_java() {
        // DECIMAL(38, 0): Java's BigDecimal path gives NULL past 38 digits; the next version
        // starts over from it.
        let big = 10i128.pow(37) * 9;
        let cells = Decimal128Array::from(vec![big, big, 7]).with_precision_and_scale(38, 0).unwrap();
        let a = fold1(field("sum", false), &cells, &[(0, true), (1, true)]).unwrap();
        assert!(a.is_null(0));
        let a = fold1(field("sum", false), &cells, &[(0, true), (1, true), (2, true)]).unwrap();
        assert_eq!(a.as_primitive::<Decimal128Type>().value(0), 7);
        assert_eq!(a.data_type(), &DataType::Decimal128(38, 0));
        // DECIMAL(12, 2) is compact in Java: a long, whose digits it does not check.
        let cells = Decimal128Array::from(vec![999_999_999_999, 1]).with_precision_and_scale(12, 2).unwrap();
        let a = fold1(field("sum", false), &cells, &[(0, true), (1, true)]).unwrap();
        assert_eq!(a.as_primitive::<Decimal128Type>().value(0), 1_000_000_000_000);
    }

    #[test]
    fn the_selecting_functions_pick_like_java() {
        let cells = [Some(3), None, Some(9), Some(1)];
        let seq = [(0, true), (1, true), (2, true), (3, true)];
        assert_eq!(int64(field("max", false), &cells, &seq), Some(9));
        assert_eq!(int64(field("min", false), &cells, &seq), Some(1));
        assert_eq!(int64(field("last_value", false), &cells, &seq[..2]), None);
        assert_eq!(int64(field("last_non_null_value", false), &cells, &seq[..2]), Some(3));
        assert_eq!(int64(field("first_value", false), &cells, &seq[1..]), None);
        assert_eq!(int64(field("first_non_null_value", false), &cells, &seq[1..]), Some(9));
        assert_eq!(int64(field("first_not_null_value", false), &cells, &seq[1..]), Some(9));
        // Retractions: last_value clears; last_non_null_value clears on a non-NULL retraction.
        assert_eq!(int64(field("last_value", false), &cells, &[(0, true), (1, false)]), None);
        assert_eq!(int64(field("last_non_null_value", false), &cells, &[(0, true), (1, false)]), Some(3));
        assert_eq!(int64(field("last_non_null_value", false), &cells, &[(0, true), (2, false)]), None);
        assert_eq!(int64(field("last_non_null_value", true), &cells, &[(0, true), (2, false)]), Some(3));
        assert_eq!(int64(field("max", true), &cells, &[(0, true), (2, false)]), Some(3));
        let e = fold1(field("max", false), &Int64Array::from(vec![1, 2]), &[(0, true), (1, false)]).unwrap_err();
        assert!(e.contains("'max' does not support retraction") && e.contains("fields.c.ignore-retract"), "{e}");
        // Text compares by its bytes, as Java's BinaryString does.
        let text = StringArray::from(vec!["Zürich", "acme", "Z"]);
        let a = fold1(field("max", false), &text, &[(0, true), (1, true), (2, true)]).unwrap();
        assert_eq!(a.as_string::<i32>().value(0), "acme");
    }

    #[test]
    fn bool_and_or_skip_nulls() {
        let cells = BooleanArray::from(vec![Some(true), None, Some(false)]);
        let a = fold1(field("bool_and", false), &cells, &[(0, true), (1, true), (2, true)]).unwrap();
        assert!(!a.as_boolean().value(0));
        let a = fold1(field("bool_or", false), &cells, &[(1, true), (2, true)]).unwrap();
        assert!(a.is_valid(0) && !a.as_boolean().value(0));
        assert!(fold1(field("bool_or", false), &cells, &[(0, true), (2, false)]).is_err());
    }

    #[test]
    fn options_name_each_columns_function_and_refuse_others() {
        let opts = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let (agg, mut read) = Aggregation::from_options(&opts(&[
            ("fields.Revenue.aggregate-function", "sum"),
            ("fields.note.ignore-retract", "true"),
            ("fields.default-aggregate-function", "max"),
            ("bucket", "2"),
        ]))
        .unwrap();
        read.sort();
        assert_eq!(
            read,
            ["fields.Revenue.aggregate-function", "fields.default-aggregate-function", "fields.note.ignore-retract"]
        );
        assert_eq!(agg.field("Revenue"), Field { func: Func::Sum, ignore_retract: false });
        assert_eq!(agg.field("note"), Field { func: Func::Max, ignore_retract: true });
        let (plain, _) = Aggregation::from_options(&HashMap::new()).unwrap();
        assert_eq!(plain.field("x").func, Func::LastNonNullValue);
        let e = Aggregation::from_options(&opts(&[("fields.tags.aggregate-function", "listagg")])).unwrap_err();
        assert_eq!(e, "aggregate function listagg (fields.tags.aggregate-function)");
    }
}
