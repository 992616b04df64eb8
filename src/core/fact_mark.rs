//! Which fact state a published mart reflects, carried by the mart commit itself.
//!
//! A mart table is written by publishers (`serving_publish`, a following publisher,
//! `streamhouse.ray.build_mart`), each commit making the table equal to the mart of one state of
//! the fact. A replica serving that table must know which state, to say how fresh it is and to
//! check itself against the fact as of that state. The natural place, a Paimon snapshot's
//! `properties`, cannot be written through paimon-rust 0.4.0 (its commit builds the snapshot
//! without them), so the mark travels in the one free-text field every writer sets and every
//! engine shows — the snapshot's **commit user** (`$snapshots.commit_user` in Flink, Spark, Java
//! and pypaimon):
//!
//! `streamhouse.<publisher>[.fact_snapshot=<id>][.fact_commit_ms=<ms>]`
//!
//! - `publisher`: which publisher committed (`serving_publish`, `serving_follow`,
//!   `ray_build_mart`, ...), `[a-z_]` only.
//! - `fact_snapshot`: the Paimon fact snapshot the mart is the mart of; absent when the fact is
//!   not a Paimon snapshot (a DuckDB table, files, a Fluss table's log positions).
//! - `fact_commit_ms`: when that fact state was committed, in milliseconds since the epoch: the
//!   fact snapshot's commit time, or, for a fact without snapshots, when the publishing layer
//!   last read its source.
//!
//! Why the commit user and not the commit identifier: the identifier must increase per commit
//! user, a fact rollback lowers the fact's snapshot id, and paimon-rust's only way to give an
//! OVERWRITE commit an identifier filters it against the history (skipping it when the same
//! user committed an identifier as high, scanning the whole history for a new user). So every
//! commit stays a batch commit (identifier Long.MAX_VALUE, never filtered, as Spark's, Java's
//! and pypaimon's batch writes are) and the user names what it reflects; a user is only ever
//! reused for the same fact state. Unknown keys are ignored when read (newer writers may add
//! some); a commit user of any other shape (a UUID, a Flink job's) carries no mark.
//! Pure: no I/O.

/// What a mart commit says of the fact state it reflects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FactMark {
    pub snapshot: Option<i64>,
    pub commit_millis: Option<i64>,
}

const PREFIX: &str = "streamhouse";
const SNAPSHOT: &str = "fact_snapshot";
const COMMIT_MS: &str = "fact_commit_ms";

/// The commit user a publisher commits with (a valid Paimon commit user: a safe file-name
/// segment). A publisher name outside `[a-z_]` is an internal error, so it is cleaned, not
/// trusted.
pub fn commit_user(publisher: &str, mark: &FactMark) -> String {
    let name: String = publisher.chars().filter(|c| c.is_ascii_lowercase() || *c == '_').collect();
    let mut user = format!("{PREFIX}.{name}");
    if let Some(id) = mark.snapshot {
        user.push_str(&format!(".{SNAPSHOT}={id}"));
    }
    if let Some(ms) = mark.commit_millis {
        user.push_str(&format!(".{COMMIT_MS}={ms}"));
    }
    user
}

/// The publisher and mark a commit user carries; None when it is not a streamhouse publisher's.
pub fn read(commit_user: &str) -> Option<(String, FactMark)> {
    let mut parts = commit_user.split('.');
    if parts.next() != Some(PREFIX) {
        return None;
    }
    let publisher = parts.next().filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c == '_'))?;
    let mut mark = FactMark::default();
    for part in parts {
        let (key, value) = part.split_once('=')?;
        let number = value.parse::<i64>().ok().filter(|v| *v >= 0);
        match key {
            SNAPSHOT => mark.snapshot = Some(number?),
            COMMIT_MS => mark.commit_millis = Some(number?),
            _ => {}
        }
    }
    Some((publisher.to_string(), mark))
}

/// Whether a table whose latest snapshot carries `old` (None: no mark, another writer's
/// commit) should be told `new` although its groups are already right: only when `new` is a
/// later fact state (a later commit time; for the same time, a higher snapshot), never to make
/// it claim an older one, and never with nothing to say.
pub fn supersedes(new: &FactMark, old: Option<&FactMark>) -> bool {
    match old {
        None => *new != FactMark::default(),
        Some(old) => (new.commit_millis, new.snapshot) > (old.commit_millis, old.snapshot),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_later_fact_state_is_restated() {
        let at = |snapshot, ms| FactMark { snapshot, commit_millis: ms };
        assert!(supersedes(&at(Some(7), Some(200)), Some(&at(Some(6), Some(100)))));
        // A rollback lowers the id but the new snapshot is committed later.
        assert!(supersedes(&at(Some(3), Some(300)), Some(&at(Some(6), Some(100)))));
        assert!(!supersedes(&at(Some(6), Some(100)), Some(&at(Some(6), Some(100)))));
        assert!(!supersedes(&at(Some(5), Some(90)), Some(&at(Some(6), Some(100)))));
        // Two fact commits within one millisecond.
        assert!(supersedes(&at(Some(7), Some(100)), Some(&at(Some(6), Some(100)))));
        assert!(supersedes(&at(None, Some(5)), None));
        assert!(!supersedes(&FactMark::default(), None));
        assert!(!supersedes(&FactMark::default(), Some(&at(Some(1), Some(1)))));
    }

    #[test]
    fn round_trip() {
        let mark = FactMark { snapshot: Some(6), commit_millis: Some(1_764_844_800_123) };
        let user = commit_user("serving_follow", &mark);
        assert_eq!(user, "streamhouse.serving_follow.fact_snapshot=6.fact_commit_ms=1764844800123");
        assert_eq!(read(&user), Some(("serving_follow".to_string(), mark)));
        let time_only = FactMark { snapshot: None, commit_millis: Some(5) };
        assert_eq!(read(&commit_user("serving_publish", &time_only)).unwrap().1, time_only);
        assert_eq!(read("streamhouse.ray_build_mart"), Some(("ray_build_mart".to_string(), FactMark::default())));
    }

    #[test]
    fn a_valid_paimon_commit_user() {
        // paimon-rust's rule: non-empty, no '/', '\\', control characters or outer spaces.
        let user = commit_user("serving/publish x", &FactMark { snapshot: Some(1), commit_millis: None });
        assert!(!user.contains(['/', '\\', ' ']), "{user}");
        assert_eq!(read(&user).unwrap().0, "servingpublishx");
    }

    #[test]
    fn other_writers_carry_nothing() {
        assert_eq!(read("abbaac9e-4a17-43e3-b135-2269da263e3a"), None);
        assert_eq!(read("streamhouse"), None);
        assert_eq!(read("streamhouse."), None);
        assert_eq!(read("streamhousex.serving_publish"), None);
        assert_eq!(read("streamhouse.Serving-Publish"), None);
        // A malformed number is no mark rather than a wrong one.
        assert_eq!(read("streamhouse.serving_publish.fact_snapshot=x"), None);
        assert_eq!(read("streamhouse.serving_publish.fact_snapshot=-1"), None);
        assert_eq!(read("streamhouse.serving_publish.fact_snapshot"), None);
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let (_, mark) = read("streamhouse.serving_publish.fact_snapshot=3.fluss_offsets=12.fact_commit_ms=9").unwrap();
        assert_eq!(mark, FactMark { snapshot: Some(3), commit_millis: Some(9) });
    }
}
