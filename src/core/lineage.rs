//! Whether the lake snapshot a layer reflects is still the table's history.
//!
//! A layer built or refreshed from a Paimon table records the snapshot it reflects (its id and
//! commit time). Operators rewrite that history: `rollback_to` removes the newest snapshots and
//! the next commits reuse their ids, a table dropped and created again at the same path starts
//! over at snapshot 1, and snapshot expiry removes old snapshots. An incremental apply from the
//! held snapshot is only exact while that snapshot is still the table's, with the commit time we
//! recorded: otherwise the changes "after" it are another history's and applying them (or
//! skipping ids we believe applied) serves a wrong layer. `judge` decides, from facts read off
//! the table, whether the held snapshot still stands; the caller rebuilds when it does not.
//! Pure: no I/O.

/// What the table says now about the snapshot a layer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// The table's newest snapshot (None: it has none).
    pub latest: Option<i64>,
    /// The commit time (ms) of the snapshot with the held id, None when that snapshot is gone.
    pub held_commit_millis: Option<i64>,
    /// The table's oldest snapshot (for the message only).
    pub earliest: Option<i64>,
}

/// Why the held snapshot no longer describes the table, in words for `serving_status`; None
/// while it does. `held` 0 means the layer was built while the table had no snapshot;
/// `recorded_millis` None means an older layer that did not record the commit time.
pub fn judge(held: i64, recorded_millis: Option<i64>, now: &Observed) -> Option<String> {
    let range = match (now.earliest, now.latest) {
        (Some(e), Some(l)) => format!("the table now has snapshots {e}..{l}"),
        (_, Some(l)) => format!("the table's latest snapshot is {l}"),
        _ => "the table now has no snapshot".to_string(),
    };
    if held == 0 {
        return None;
    }
    match now.latest {
        None => return Some(format!("snapshot {held} was served but {range} (the table was recreated or emptied)")),
        Some(l) if l < held => {
            return Some(format!("snapshot {held} was served but {range}: the table was rolled back or recreated"))
        }
        _ => {}
    }
    match (now.held_commit_millis, recorded_millis) {
        (None, _) => Some(format!(
            "snapshot {held} was served but no longer exists ({range}): it expired, or the table was rolled back \
             or recreated"
        )),
        (Some(now_ms), Some(then_ms)) if now_ms != then_ms => Some(format!(
            "snapshot {held} was served as committed at {then_ms} ms but the table's snapshot {held} was committed \
             at {now_ms} ms ({range}): the table was rolled back and written again, or recreated"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(latest: Option<i64>, held_ms: Option<i64>, earliest: Option<i64>) -> Observed {
        Observed { latest, held_commit_millis: held_ms, earliest }
    }

    #[test]
    fn intact_history_is_accepted() {
        assert_eq!(judge(4, Some(100), &seen(Some(9), Some(100), Some(1))), None);
        assert_eq!(judge(4, Some(100), &seen(Some(4), Some(100), Some(4))), None);
        // An older layer without a recorded time: existence is all we can check.
        assert_eq!(judge(4, None, &seen(Some(5), Some(7), Some(1))), None);
        // Built from an empty table: anything later is its future.
        assert_eq!(judge(0, None, &seen(Some(3), None, Some(1))), None);
    }

    #[test]
    fn rollback_below_the_held_id() {
        let why = judge(4, Some(100), &seen(Some(2), Some(50), Some(1))).unwrap();
        assert!(why.contains("snapshot 4") && why.contains("1..2") && why.contains("rolled back"), "{why}");
    }

    #[test]
    fn rollback_then_new_commits_reusing_the_id() {
        let why = judge(4, Some(100), &seen(Some(5), Some(180), Some(1))).unwrap();
        assert!(why.contains("committed at 100 ms") && why.contains("180 ms"), "{why}");
    }

    #[test]
    fn expired_or_recreated() {
        let why = judge(6, Some(100), &seen(Some(20), None, Some(12))).unwrap();
        assert!(why.contains("no longer exists") && why.contains("12..20"), "{why}");
        let why = judge(6, Some(100), &seen(None, None, None)).unwrap();
        assert!(why.contains("no snapshot"), "{why}");
    }
}
