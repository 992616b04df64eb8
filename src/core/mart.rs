//! The mart arithmetic of a refresh: per (company, order_day) group, retract the old versions
//! of changed orders, add their new versions, and fold that delta into the current mart.
//! Order counts travel with revenues because a SUM alone cannot tell "empty" from "sums to 0".
//!
//! The mart is held as sorted parallel columns with one integer key per group, so a fold is a
//! sort of the delta plus one linear merge, and its result is already in the order the table
//! is written in (by company, for zone-map pruning). Pure logic, unit-tested.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// One mart group: its revenue and how many orders it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group<'a> {
    pub company: &'a str,
    /// Days since 1970-01-01.
    pub day: i32,
    pub revenue: i128,
    pub orders: i64,
}

/// The mart with its counts, sorted by (company, day), no group without orders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mart {
    /// Distinct company names, sorted; a key's high half indexes this list.
    companies: Vec<String>,
    /// `company rank << 32 | day with its sign bit flipped`: sorts like (company, day).
    keys: Vec<u64>,
    revenue: Vec<i128>,
    orders: Vec<i64>,
}

/// The contributions of changed orders, in arrival order: (company, day, revenue, +1 or -1).
#[derive(Debug, Default, Clone)]
pub struct Delta<'a> {
    rows: Vec<(&'a str, i32, i64, i64)>,
}

/// Word-at-a-time multiplicative hash: company names are short, and SipHash's DoS resistance
/// buys nothing for a map of a few hundred names built per refresh.
#[derive(Default)]
struct Fx(u64);

impl Fx {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.mix(u64::from_le_bytes(tail));
    }
    fn write_u8(&mut self, b: u8) {
        self.mix(b as u64);
    }
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}

type Ranks<'a> = HashMap<&'a str, u32, BuildHasherDefault<Fx>>;

fn key(rank: u32, day: i32) -> u64 {
    ((rank as u64) << 32) | (day as u32 ^ 0x8000_0000) as u64
}

fn day_of(key: u64) -> i32 {
    (key as u32 ^ 0x8000_0000) as i32
}

/// Sorts by key (unless already sorted) and sums entries with equal keys. An entry is
/// `(key, revenue, orders)`; a negative `orders` means its revenue is retracted (so that
/// retracting i64::MIN needs no wider type before the sum).
fn coalesce(mut v: Vec<(u64, i64, i64)>) -> Vec<(u64, i128, i64)> {
    if !v.windows(2).all(|w| w[0].0 < w[1].0) {
        v.sort_unstable_by_key(|e| e.0);
    }
    let mut out: Vec<(u64, i128, i64)> = Vec::with_capacity(v.len());
    for (k, r, n) in v {
        let r = if n < 0 { -(r as i128) } else { r as i128 };
        match out.last_mut() {
            Some(last) if last.0 == k => {
                last.1 += r;
                last.2 += n;
            }
            _ => out.push((k, r, n)),
        }
    }
    out
}

fn ranks(companies: &[String]) -> Ranks<'_> {
    companies.iter().enumerate().map(|(i, c)| (c.as_str(), i as u32)).collect()
}

impl Mart {
    /// Builds the mart from groups in any order; entries of the same group add up (so the
    /// rows of mart_daily and of its counts table can simply be concatenated).
    pub fn from_groups(groups: &[Group<'_>]) -> Mart {
        let mut companies: Vec<String> = Vec::new();
        let mut seen: Ranks = HashMap::default();
        for g in groups {
            if seen.insert(g.company, 0).is_none() {
                companies.push(g.company.to_string());
            }
        }
        companies.sort_unstable();
        let ranks = ranks(&companies);
        let mut keyed: Vec<(u64, i128, i64)> =
            groups.iter().map(|g| (key(ranks[g.company], g.day), g.revenue, g.orders)).collect();
        keyed.sort_by_key(|e| e.0);
        drop(ranks);
        let mut mart = Mart { companies, ..Mart::default() };
        for (k, r, n) in keyed {
            match mart.keys.last() {
                Some(&last) if last == k => {
                    *mart.revenue.last_mut().expect("parallel") += r;
                    *mart.orders.last_mut().expect("parallel") += n;
                }
                _ => mart.push(k, r, n),
            }
        }
        mart
    }

    fn push(&mut self, key: u64, revenue: i128, orders: i64) {
        self.keys.push(key);
        self.revenue.push(revenue);
        self.orders.push(orders);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn group(&self, i: usize) -> Group<'_> {
        let k = self.keys[i];
        Group {
            company: &self.companies[(k >> 32) as usize],
            day: day_of(k),
            revenue: self.revenue[i],
            orders: self.orders[i],
        }
    }

    /// Company of group `i`.
    pub fn company(&self, i: usize) -> &str {
        &self.companies[(self.keys[i] >> 32) as usize]
    }

    /// Days since 1970-01-01 of the groups in `range`.
    pub fn days(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = i32> + '_ {
        self.keys[range].iter().map(|&k| day_of(k))
    }

    /// The groups of each company, as consecutive index ranges.
    pub fn company_runs(&self) -> Vec<std::ops::Range<usize>> {
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            match runs.last_mut() {
                Some(run) if self.keys[run.start] >> 32 == k >> 32 => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        runs
    }

    pub fn revenues(&self) -> &[i128] {
        &self.revenue
    }

    pub fn order_counts(&self) -> &[i64] {
        &self.orders
    }

    pub fn groups(&self) -> impl Iterator<Item = Group<'_>> + '_ {
        (0..self.len()).map(|i| self.group(i))
    }

    /// The mart after `delta`, and how many groups the delta changed. Groups left with no
    /// order disappear, new ones appear. Err(n): n groups would hold a negative number of
    /// orders, i.e. the serving tables were changed behind streamhouse's back and only a
    /// rebuild can be trusted.
    pub fn fold(&self, delta: &Delta<'_>) -> Result<(Mart, usize), usize> {
        // Company names the mart has not seen yet shift the ranks; the shift is monotone, so
        // the existing keys stay sorted.
        let mut fresh: Vec<&str> = {
            let known: Ranks = self.companies.iter().map(|c| (c.as_str(), 0)).collect();
            let mut fresh: Ranks = HashMap::default();
            delta.rows.iter().filter(|r| !known.contains_key(r.0)).for_each(|r| {
                fresh.insert(r.0, 0);
            });
            fresh.into_keys().collect()
        };
        let mut companies = self.companies.clone();
        let mut keys = self.keys.clone();
        if !fresh.is_empty() {
            fresh.sort_unstable();
            companies.extend(fresh.iter().map(|s| s.to_string()));
            companies.sort_unstable();
            let new_rank: Vec<u64> =
                self.companies.iter().map(|c| companies.binary_search(c).expect("kept") as u64).collect();
            for k in &mut keys {
                *k = (new_rank[(*k >> 32) as usize] << 32) | (*k & 0xffff_ffff);
            }
        }
        let ranks = ranks(&companies);
        let mut changes = coalesce(delta.rows.iter().map(|&(c, day, r, n)| (key(ranks[c], day), r, n)).collect());
        changes.retain(|&(_, r, n)| r != 0 || n != 0); // e.g. an order re-sent unchanged
        drop(ranks);
        let capacity = keys.len() + changes.len();
        let mut out = Mart {
            companies,
            keys: Vec::with_capacity(capacity),
            revenue: Vec::with_capacity(capacity),
            orders: Vec::with_capacity(capacity),
        };
        let (mut negative, mut i, mut j) = (0, 0, 0);
        while i < keys.len() || j < changes.len() {
            let (k, r, n) = match (keys.get(i), changes.get(j)) {
                (Some(&a), Some(&(b, dr, dn))) if a == b => {
                    i += 1;
                    j += 1;
                    (a, self.revenue[i - 1] + dr, self.orders[i - 1] + dn)
                }
                (Some(&a), Some(&(b, _, _))) if a < b => {
                    i += 1;
                    (a, self.revenue[i - 1], self.orders[i - 1])
                }
                (Some(&a), None) => {
                    i += 1;
                    (a, self.revenue[i - 1], self.orders[i - 1])
                }
                _ => {
                    j += 1;
                    changes[j - 1]
                }
            };
            negative += (n < 0) as usize;
            if n != 0 {
                out.push(k, r, n);
            }
        }
        if negative > 0 {
            return Err(negative);
        }
        // Names whose last group disappeared stay listed: harmless, they are never written.
        Ok((out, changes.len()))
    }
}

/// What turns one mart into another: the groups that are new or hold other values (as they
/// are now) and the groups that are gone (as they were).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes<'a> {
    pub upserts: Vec<Group<'a>>,
    pub deletes: Vec<Group<'a>>,
}

impl Changes<'_> {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty()
    }
}

impl Mart {
    /// The changes from `old` to `self`, by one merge of the two sorted marts (their company
    /// ranks differ, so groups are compared by name and day). Both in (company, day) order.
    pub fn changes_since<'a>(&'a self, old: &'a Mart) -> Changes<'a> {
        let mut out = Changes::default();
        let (mut i, mut j) = (0, 0);
        while i < self.len() || j < old.len() {
            let ord = match (i < self.len(), j < old.len()) {
                (true, true) => (self.company(i), day_of(self.keys[i])).cmp(&(old.company(j), day_of(old.keys[j]))),
                (true, false) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    out.upserts.push(self.group(i));
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.deletes.push(old.group(j));
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (now, was) = (self.group(i), old.group(j));
                    if (now.revenue, now.orders) != (was.revenue, was.orders) {
                        out.upserts.push(now);
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        out
    }
}

impl<'a> Delta<'a> {
    pub fn with_capacity(n: usize) -> Self {
        Delta { rows: Vec::with_capacity(n) }
    }

    /// The previous version of an order leaves its group.
    pub fn retract(&mut self, company: &'a str, day: i32, revenue: i64) {
        self.rows.push((company, day, revenue, -1));
    }

    /// The new version of an order joins its group.
    pub fn add(&mut self, company: &'a str, day: i32, revenue: i64) {
        self.rows.push((company, day, revenue, 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_since_names_new_moved_and_gone_groups_only() {
        let old = Mart::from_groups(&[g("a", 1, 10, 1), g("a", 2, 20, 2), g("b", 1, 5, 1), g("c", 9, 7, 1)]);
        // a/1 unchanged, a/2 moved (orders only), b/1 gone, c/9 unchanged, a/3 and bb/1 new.
        let new = Mart::from_groups(&[
            g("a", 1, 10, 1),
            g("a", 2, 20, 3),
            g("a", 3, 1, 1),
            g("bb", 1, 4, 1),
            g("c", 9, 7, 1),
        ]);
        let c = new.changes_since(&old);
        assert_eq!(c.upserts, vec![g("a", 2, 20, 3), g("a", 3, 1, 1), g("bb", 1, 4, 1)]);
        assert_eq!(c.deletes, vec![g("b", 1, 5, 1)]);
        assert!(new.changes_since(&new).is_empty());
        let empty = Mart::default();
        assert_eq!(new.changes_since(&empty).upserts.len(), new.len());
        assert_eq!(empty.changes_since(&new).deletes.len(), new.len());
    }

    #[test]
    fn changes_since_agrees_with_a_map_diff() {
        use std::collections::BTreeMap;
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as i64
        };
        let names = ["x", "y", "zz", "w"];
        for _ in 0..50 {
            let mut gen = || -> BTreeMap<(String, i32), (i128, i64)> {
                (0..40)
                    .map(|_| {
                        (
                            (names[(next() % 4) as usize].to_string(), (next() % 9) as i32 - 4),
                            ((next() % 3) as i128, 1 + next() % 2),
                        )
                    })
                    .collect()
            };
            let (a, b) = (gen(), gen());
            let mart = |m: &BTreeMap<(String, i32), (i128, i64)>| {
                Mart::from_groups(&m.iter().map(|((c, d), (r, n))| g(c, *d, *r, *n)).collect::<Vec<_>>())
            };
            let (ma, mb) = (mart(&a), mart(&b));
            let c = mb.changes_since(&ma);
            let want_up: Vec<_> = b
                .iter()
                .filter(|(k, v)| a.get(*k) != Some(*v))
                .map(|((c, d), (r, n))| (c.clone(), *d, *r, *n))
                .collect();
            let want_del: Vec<_> =
                a.iter().filter(|(k, _)| !b.contains_key(*k)).map(|((c, d), (r, n))| (c.clone(), *d, *r, *n)).collect();
            let got = |v: &[Group<'_>]| {
                v.iter().map(|x| (x.company.to_string(), x.day, x.revenue, x.orders)).collect::<Vec<_>>()
            };
            assert_eq!(got(&c.upserts), want_up);
            assert_eq!(got(&c.deletes), want_del);
        }
    }
    use std::collections::BTreeMap;

    fn g(company: &str, day: i32, revenue: i128, orders: i64) -> Group<'_> {
        Group { company, day, revenue, orders }
    }

    fn listed(m: &Mart) -> Vec<Group<'_>> {
        m.groups().collect()
    }

    #[test]
    fn moves_between_groups_and_drops_empty_ones() {
        let mart = Mart::from_groups(&[g("b", 1, 10, 1), g("a", 1, 5, 2), g("a", -3, 1, 1)]);
        assert_eq!(listed(&mart), vec![g("a", -3, 1, 1), g("a", 1, 5, 2), g("b", 1, 10, 1)]);
        let mut d = Delta::default();
        d.retract("b", 1, 10); // the only order of (b, 1) moves to a new company with revenue 0
        d.add("aa", 7, 0);
        d.retract("a", 1, 3); // a correction inside (a, 1)
        d.add("a", 1, -4);
        let (folded, touched) = mart.fold(&d).unwrap();
        assert_eq!(listed(&folded), vec![g("a", -3, 1, 1), g("a", 1, -2, 2), g("aa", 7, 0, 1)]);
        assert_eq!(folded.company_runs(), vec![0..2, 2..3]);
        assert_eq!(touched, 3);
    }

    #[test]
    fn unchanged_resend_touches_nothing_and_negative_counts_are_refused() {
        let mart = Mart::from_groups(&[g("a", 1, 5, 1)]);
        let mut d = Delta::default();
        d.retract("a", 1, 5);
        d.add("a", 1, 5);
        let (same, touched) = mart.fold(&d).unwrap();
        assert_eq!((&same, touched), (&mart, 0));
        let mut d = Delta::default();
        d.retract("z", 1, 5);
        assert_eq!(mart.fold(&d), Err(1));
    }

    /// Random orders moved around; the folded mart must equal a from-scratch aggregate.
    #[test]
    fn agrees_with_recomputation() {
        let mut x: u64 = 7;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let companies = ["a", "b", "c", "bb", "", "é"];
        for _case in 0..300 {
            let mut orders: BTreeMap<u64, (&str, i32, i64)> = BTreeMap::new();
            for id in 0..next(30) {
                orders.insert(id, (companies[next(3) as usize], next(4) as i32 - 2, next(100) as i64 - 50));
            }
            let aggregate = |orders: &BTreeMap<u64, (&'static str, i32, i64)>| {
                let mut m: BTreeMap<(&str, i32), (i128, i64)> = BTreeMap::new();
                for &(c, d, r) in orders.values() {
                    let e = m.entry((c, d)).or_default();
                    e.0 += r as i128;
                    e.1 += 1;
                }
                m.into_iter().map(|((c, d), (r, n))| g(c, d, r, n)).collect::<Vec<_>>()
            };
            let before = aggregate(&orders);
            // The mart and its counts as separate entries in reverse order build the same mart.
            let split: Vec<Group> =
                before.iter().rev().flat_map(|g| [Group { orders: 0, ..*g }, Group { revenue: 0, ..*g }]).collect();
            let mart = Mart::from_groups(&split);
            assert_eq!(listed(&mart), before);
            let mut delta = Delta::default();
            for _ in 0..next(20) {
                let id = next(40);
                if let Some((c, d, r)) = orders.remove(&id) {
                    delta.retract(c, d, r);
                }
                if next(4) > 0 {
                    let row =
                        (companies[next(companies.len() as u64) as usize], next(4) as i32 - 2, next(100) as i64 - 50);
                    delta.add(row.0, row.1, row.2);
                    orders.insert(id, row);
                }
            }
            assert_eq!(listed(&mart.fold(&delta).unwrap().0), aggregate(&orders));
        }
    }
}
