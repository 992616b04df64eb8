//! Exact duplicate-key detection over a column of order ids, cheaper than a SQL GROUP BY.
//!
//! A serving build must refuse a source with a repeated order_id (it would silently double
//! revenue), but a 3M-group hash aggregate costs more than the whole build. Keys from a
//! merged primary-key table are usually increasing or dense, so: one pass proves "strictly
//! increasing" (no duplicates); otherwise a bitmap over [min, max] when the range is dense;
//! otherwise an in-place sort. All three are exact. Pure logic, unit-tested.

/// A bitmap is used when the key range is at most this many times the number of keys.
pub const DENSE_FACTOR: u128 = 64;

/// The smallest duplicated key and how often it occurs, or None when all keys are distinct.
pub fn first_duplicate(mut ids: Vec<i64>) -> Option<(i64, usize)> {
    if ids.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    let (min, max) = ids.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let range = (max as i128 - min as i128) as u128 + 1;
    let smallest = if range <= DENSE_FACTOR * ids.len() as u128 {
        let mut seen = vec![0u64; (range as usize).div_ceil(64)];
        let mut smallest: Option<i64> = None;
        for &v in &ids {
            let off = (v as i128 - min as i128) as usize;
            let (word, bit) = (off / 64, 1u64 << (off % 64));
            if seen[word] & bit != 0 {
                smallest = Some(smallest.map_or(v, |s| s.min(v)));
            }
            seen[word] |= bit;
        }
        smallest
    } else {
        ids.sort_unstable();
        ids.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
    }?;
    Some((smallest, ids.iter().filter(|&&v| v == smallest).count()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference answer by brute force.
    fn oracle(ids: &[i64]) -> Option<(i64, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        for &v in ids {
            *counts.entry(v).or_insert(0usize) += 1;
        }
        counts.into_iter().find(|&(_, n)| n > 1)
    }

    #[test]
    fn agrees_with_brute_force() {
        // Small deterministic LCG so the test needs no crates.
        let mut x: u64 = 42;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 11
        };
        for case in 0..300 {
            let n = (next() % 200) as usize;
            let spread = [1u64, 10, 1000, u64::MAX >> 12][case % 4];
            let ids: Vec<i64> = (0..n).map(|_| (next() % spread) as i64 - (spread / 2) as i64).collect();
            assert_eq!(first_duplicate(ids.clone()), oracle(&ids), "case {case}: {ids:?}");
        }
    }

    #[test]
    fn edge_cases() {
        assert_eq!(first_duplicate(vec![]), None);
        assert_eq!(first_duplicate(vec![5]), None);
        assert_eq!(first_duplicate((0..1000).collect()), None);
        assert_eq!(first_duplicate(vec![i64::MIN, i64::MAX, i64::MIN]), Some((i64::MIN, 2)));
        assert_eq!(first_duplicate(vec![3, 1, 2, 3, 1, 1]), Some((1, 3)));
    }
}
