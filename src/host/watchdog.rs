//! The watchdog's decisions as a pure state machine: one `Watch` value (kept under one lock by
//! the session) and `Watch::step`, which turns one look at the instance into the next action.
//! No DuckDB, no clock of its own: the session passes `now` and what it saw, and carries the
//! action out. The lifecycle this implements is told in `session`'s module doc.
//!
//! | what a look sees                                  | action                                |
//! |---------------------------------------------------|---------------------------------------|
//! | released, or the process exiting                  | `Stop`                                |
//! | a call of ours running (a slot or the lease busy) | `Wait`                                |
//! | the connection count cannot be read               | `Retire`                              |
//! | a user connected, the WAL holding writes (ours or the user's), quiet for `SETTLE_QUIET` since our last call, the WAL's last change and the last try, no other instance on the file | `Settle` (then `settled(ok)`) |
//! | a user connected, otherwise                       | `Wait` (alone-since cleared)          |
//! | ours alone, not yet for `QUIET` with no call since | `Wait` (alone-since set when unset or a call came) |
//! | ours alone for `QUIET`, no call since, the file open in another instance | `Retire`       |
//! | ours alone for `QUIET`, no call since             | `Release`                             |

use std::time::{Duration, Instant};

/// How long our connections must have been the instance's only ones, with no call of ours
/// since, before the watchdog lets go: a same-process reopen through DuckDB's instance cache
/// (Python's `duckdb.connect`) takes the instance back within that time and keeps it, and one
/// as a new instance is seen first (`Action::Retire`).
pub const QUIET: Duration = Duration::from_millis(20);

/// How long after our last call, the WAL's last change (and the last attempt) the watchdog
/// waits before it checkpoints what the WAL holds, while the user is connected. A script closes
/// and reopens within milliseconds of its last statement; a checkpoint running across that
/// instant would write under the new instance.
pub const SETTLE_QUIET: Duration = Duration::from_millis(250);

/// How often the watchdog looks: often soon after a call (a close is likely to follow) or while
/// something is pending, rarely when idle. It bounds how long a closed database stays open.
pub const WATCH_BUSY: Duration = Duration::from_millis(2);
pub const WATCH_IDLE: Duration = Duration::from_millis(25);
/// How long after a call the watchdog keeps looking often.
pub const BUSY_FOR: Duration = Duration::from_secs(2);

/// What one look at the instance saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A call of ours holds a connection (or the writer is lent out): someone is being served.
    Busy,
    /// DuckDB could not say how many connections the instance has.
    CountFailed,
    /// The instance's connections, ours included.
    Connections(u64),
}

/// What the session does after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing now; look again after `Watch::interval`.
    Wait,
    /// Checkpoint what our writes left in the WAL, then report with `Watch::settled`.
    Settle,
    /// Turn DuckDB's shutdown checkpoint off and drop our connections (retire instead if that
    /// fails): the instance is destroyed writing nothing.
    Release,
    /// Let go without destroying the instance; never use it again.
    Retire,
    /// Already released or exiting: the watchdog ends.
    Stop,
}

/// The watchdog's whole state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// When a call of ours last used a connection (start and end of each call).
    pub last_used: Instant,
    /// When a look found our connections alone, if no look since found them in company.
    pub alone_since: Option<Instant>,
    /// The WAL holds something: a write of ours committed, or a look saw the WAL non-empty.
    pub unsettled: bool,
    /// The WAL's size at the last look (every file database's, summed) and when it last changed:
    /// the user's own writes show there (we see no statement of theirs).
    pub wal_bytes: u64,
    pub wal_changed: Instant,
    /// When the last settle was tried.
    pub settle_tried: Option<Instant>,
    /// Let go of (released or retired): every later call gets `Error::Closed`.
    pub released: bool,
}

impl Watch {
    pub fn new(now: Instant) -> Watch {
        Watch {
            last_used: now,
            alone_since: None,
            unsettled: false,
            wal_bytes: 0,
            wal_changed: now,
            settle_tried: None,
            released: false,
        }
    }

    /// A look found the WAL at `bytes`: a change counts as a write (the quiet period before a
    /// settle restarts), and a WAL holding anything is to be settled.
    pub fn wal_seen(&mut self, now: Instant, bytes: u64) {
        if bytes != self.wal_bytes {
            self.wal_bytes = bytes;
            self.wal_changed = now;
        }
        self.unsettled |= bytes > 0;
    }

    /// A call of ours ran until `now`: the quiet periods count from here.
    pub fn touch(&mut self, now: Instant) {
        self.last_used = now;
    }

    /// One look. `ours` is how many of the instance's connections are ours; `another_instance`
    /// (asked only before a settle or a release: it scans the process's descriptors) says
    /// whether another instance of this process has the database file open.
    pub fn step(
        &mut self,
        now: Instant,
        seen: Seen,
        ours: u64,
        exiting: bool,
        another_instance: impl FnOnce() -> bool,
    ) -> Action {
        if exiting || self.released {
            return Action::Stop;
        }
        match seen {
            Seen::Busy => Action::Wait,
            // Cannot tell who is connected: never destroy it, and write nothing through it again.
            Seen::CountFailed => self.let_go(Action::Retire),
            Seen::Connections(n) if n > ours => {
                self.alone_since = None;
                let quiet = |t: Instant| now.saturating_duration_since(t) >= SETTLE_QUIET;
                if !self.unsettled
                    || !quiet(self.last_used)
                    || !quiet(self.wal_changed)
                    || self.settle_tried.is_some_and(|t| !quiet(t))
                {
                    return Action::Wait;
                }
                self.settle_tried = Some(now);
                // Never into a file another instance has opened since: it would rewrite it under it.
                if another_instance() {
                    Action::Wait
                } else {
                    Action::Settle
                }
            }
            // Alone is not enough: a same-process reopen may be between taking this instance from
            // DuckDB's instance cache and creating its connection; one as a new instance must be
            // seen before this one is destroyed. Let go only after `QUIET` alone with no call since.
            Seen::Connections(_) => {
                let confirmed = self.alone_since.filter(|&t| self.last_used < t);
                match confirmed {
                    Some(t) if now.saturating_duration_since(t) >= QUIET => {
                        if another_instance() {
                            self.let_go(Action::Retire)
                        } else {
                            self.let_go(Action::Release)
                        }
                    }
                    Some(_) => Action::Wait,
                    None => {
                        self.alone_since = Some(now);
                        Action::Wait
                    }
                }
            }
        }
    }

    fn let_go(&mut self, action: Action) -> Action {
        self.released = true;
        action
    }

    /// The outcome of an `Action::Settle`.
    pub fn settled(&mut self, ok: bool) {
        if ok {
            self.unsettled = false;
        }
    }

    /// How long to sleep before the next look: often soon after a call of ours or while a
    /// release is being confirmed; a settle waits `SETTLE_QUIET` anyway, so idle looks serve it
    /// (a user writing all day keeps the WAL unsettled, and must not keep us looking every 2 ms).
    pub fn interval(&self, now: Instant) -> Duration {
        let idle = now.saturating_duration_since(self.last_used) > BUSY_FOR;
        if idle && self.alone_since.is_none() {
            WATCH_IDLE
        } else {
            WATCH_BUSY
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: u64 = 9;
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn no() -> bool {
        false
    }

    fn yes() -> bool {
        true
    }

    #[test]
    fn released_or_exiting_stops() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        assert_eq!(w.step(t0, Seen::Connections(OURS), OURS, true, no), Action::Stop);
        w.released = true;
        assert_eq!(w.step(t0, Seen::Connections(OURS), OURS, false, no), Action::Stop);
    }

    #[test]
    fn busy_waits_and_changes_nothing() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.alone_since = Some(t0);
        let before = w.clone();
        assert_eq!(w.step(t0 + ms(100), Seen::Busy, OURS, false, yes), Action::Wait);
        assert_eq!(w, before);
    }

    #[test]
    fn unreadable_count_retires() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        assert_eq!(w.step(t0, Seen::CountFailed, OURS, false, no), Action::Retire);
        assert!(w.released);
        assert_eq!(w.step(t0, Seen::Connections(OURS), OURS, false, no), Action::Stop);
    }

    #[test]
    fn alone_releases_only_after_quiet_with_no_call_since() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        let t1 = t0 + ms(1);
        // first look alone: starts the clock
        assert_eq!(w.step(t1, Seen::Connections(OURS), OURS, false, no), Action::Wait);
        assert_eq!(w.alone_since, Some(t1));
        // still within QUIET
        assert_eq!(w.step(t1 + QUIET - ms(1), Seen::Connections(OURS), OURS, false, no), Action::Wait);
        assert_eq!(w.alone_since, Some(t1), "the clock is not restarted by a look");
        // QUIET alone, no call since: release
        assert_eq!(w.step(t1 + QUIET, Seen::Connections(OURS), OURS, false, no), Action::Release);
        assert!(w.released);
    }

    #[test]
    fn a_call_while_alone_restarts_the_clock() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        let t1 = t0 + ms(1);
        w.step(t1, Seen::Connections(OURS), OURS, false, no);
        w.touch(t1 + ms(5)); // a close, reopen, call, close in between
        let t2 = t1 + QUIET + ms(1);
        assert_eq!(w.step(t2, Seen::Connections(OURS), OURS, false, no), Action::Wait);
        assert_eq!(w.alone_since, Some(t2));
        assert_eq!(w.step(t2 + QUIET, Seen::Connections(OURS), OURS, false, no), Action::Release);
    }

    #[test]
    fn company_clears_alone_since() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.step(t0 + ms(1), Seen::Connections(OURS), OURS, false, no);
        assert_eq!(w.step(t0 + ms(2), Seen::Connections(OURS + 1), OURS, false, no), Action::Wait);
        assert_eq!(w.alone_since, None);
        // alone again: the clock starts over
        let t3 = t0 + ms(3) + QUIET;
        assert_eq!(w.step(t3, Seen::Connections(OURS), OURS, false, no), Action::Wait);
        assert_eq!(w.step(t3 + QUIET, Seen::Connections(OURS), OURS, false, no), Action::Release);
    }

    #[test]
    fn another_instance_on_the_file_retires_instead_of_releasing() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.step(t0 + ms(1), Seen::Connections(OURS), OURS, false, yes);
        assert_eq!(w.step(t0 + ms(1) + QUIET, Seen::Connections(OURS), OURS, false, yes), Action::Retire);
        assert!(w.released);
    }

    #[test]
    fn settles_while_connected_once_quiet() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.unsettled = true;
        let user = Seen::Connections(OURS + 1);
        assert_eq!(w.step(t0 + SETTLE_QUIET - ms(1), user, OURS, false, no), Action::Wait, "too soon after our call");
        assert_eq!(w.settle_tried, None);
        let t1 = t0 + SETTLE_QUIET;
        assert_eq!(w.step(t1, user, OURS, false, no), Action::Settle);
        assert_eq!(w.settle_tried, Some(t1));
        w.settled(false); // failed: a user's transaction was running
        assert!(w.unsettled);
        assert_eq!(w.step(t1 + ms(10), user, OURS, false, no), Action::Wait, "tries again only after SETTLE_QUIET");
        assert_eq!(w.step(t1 + SETTLE_QUIET, user, OURS, false, no), Action::Settle);
        w.settled(true);
        assert!(!w.unsettled);
        assert_eq!(w.step(t1 + SETTLE_QUIET * 3, user, OURS, false, no), Action::Wait, "nothing left to settle");
    }

    #[test]
    fn never_settles_alone_or_into_another_instances_file() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.unsettled = true;
        assert_eq!(w.step(t0 + SETTLE_QUIET, Seen::Connections(OURS + 1), OURS, false, yes), Action::Wait);
        assert!(w.unsettled);
        // alone: the release path, never a settle (the user left: write nothing)
        let mut w = Watch::new(t0);
        w.unsettled = true;
        assert_eq!(w.step(t0 + SETTLE_QUIET, Seen::Connections(OURS), OURS, false, no), Action::Wait);
        assert_eq!(w.step(t0 + SETTLE_QUIET + QUIET, Seen::Connections(OURS), OURS, false, no), Action::Release);
    }

    #[test]
    fn looks_often_when_something_is_pending() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        assert_eq!(w.interval(t0 + ms(10)), WATCH_BUSY, "just used");
        assert_eq!(w.interval(t0 + BUSY_FOR + ms(1)), WATCH_IDLE, "idle");
        w.unsettled = true;
        assert_eq!(w.interval(t0 + BUSY_FOR + ms(1)), WATCH_IDLE, "a settle waits SETTLE_QUIET: idle looks serve it");
        w.unsettled = false;
        w.alone_since = Some(t0 + BUSY_FOR);
        assert_eq!(w.interval(t0 + BUSY_FOR + ms(1)), WATCH_BUSY, "confirming a release");
    }

    #[test]
    fn the_users_own_writes_are_settled_once_the_wal_is_quiet() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        let user = Seen::Connections(OURS + 1);
        // LOAD, no call of ours: the user writes; the WAL grows at t1 and t2.
        let t1 = t0 + SETTLE_QUIET * 2;
        w.wal_seen(t1, 4096);
        assert!(w.unsettled, "a WAL holding anything is to be settled");
        let t2 = t1 + ms(100);
        w.wal_seen(t2, 8192);
        assert_eq!(
            w.step(t2 + SETTLE_QUIET - ms(1), user, OURS, false, no),
            Action::Wait,
            "the WAL changed too recently"
        );
        w.wal_seen(t2 + SETTLE_QUIET, 8192); // unchanged: the quiet period runs from t2
        assert_eq!(w.step(t2 + SETTLE_QUIET, user, OURS, false, no), Action::Settle);
        w.settled(true);
        w.wal_seen(t2 + SETTLE_QUIET + ms(25), 0); // the checkpoint emptied it
        assert!(!w.unsettled);
        assert_eq!(w.step(t2 + SETTLE_QUIET * 4, user, OURS, false, no), Action::Wait, "nothing left to settle");
        // alone, the user's writes are never settled: the release writes nothing
        let mut w = Watch::new(t0);
        w.wal_seen(t0, 4096);
        assert_eq!(w.step(t0 + SETTLE_QUIET, Seen::Connections(OURS), OURS, false, no), Action::Wait);
        assert_eq!(w.step(t0 + SETTLE_QUIET + QUIET, Seen::Connections(OURS), OURS, false, no), Action::Release);
    }
}
