//! How long a writer waits for the running one. Writers take turns on the database's one writer
//! connection; a second one waits at most `WRITER_WAIT`, or what its `wait := INTERVAL` says,
//! then fails with `Error::Busy`. The bound exists for a call that would otherwise wait forever
//! (a source view that itself calls serving_build waits for its own caller). Here: the default,
//! the check of a `wait` interval (never negative, never longer than `MAX_WAIT`: a wait must end)
//! and how a wait is written in a message.

use std::time::Duration;

use crate::core::error::{shown_wait, Error, Result};

/// The writer wait when the call does not say (`wait :=` left out).
pub const WRITER_WAIT: Duration = Duration::from_secs(120);

/// The longest `wait :=` taken: a writer must not be able to block its caller for ever.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

const MICROS_PER_DAY: i128 = 86_400_000_000;

/// `wait := INTERVAL` of `function` as DuckDB hands it over (months, days, microseconds; `text`
/// is its text form, for the message), checked. A month counts 30 days, as DuckDB's `epoch()`
/// counts it.
pub fn writer_wait(function: &'static str, months: i32, days: i32, micros: i64, text: &str) -> Result<Duration> {
    let total = (i128::from(months) * 30 + i128::from(days)) * MICROS_PER_DAY + i128::from(micros);
    if !(0..=MAX_WAIT.as_micros() as i128).contains(&total) {
        return Err(Error::BadArgument {
            function,
            parameter: "wait",
            value: text.to_string(),
            problem: format!(
                "must be an INTERVAL from 0 seconds to {} (how long to wait for a running build or refresh \
                 of this database)",
                shown_wait(MAX_WAIT)
            ),
        });
    }
    Ok(Duration::from_micros(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_checked_and_counted_in_microseconds() {
        assert_eq!(writer_wait("f", 0, 0, 250_000, "00:00:00.25").unwrap(), Duration::from_millis(250));
        assert_eq!(writer_wait("f", 0, 0, 0, "00:00:00").unwrap(), Duration::ZERO);
        // '1 day -23:30:00' is half an hour: the parts are summed before the check.
        assert_eq!(writer_wait("f", 0, 1, -84_600_000_000, "1 day -23:30:00").unwrap(), Duration::from_secs(1800));
        assert_eq!(writer_wait("f", 0, 0, 3_600_000_000, "01:00:00").unwrap(), MAX_WAIT);
        for (months, days, micros, text) in [
            (0, 0, -1, "-00:00:00.000001"),
            (0, 0, 3_600_000_001, "01:00:00.000001"),
            (1, 0, 0, "1 month"),
            (i32::MAX, i32::MAX, i64::MAX, "max"),
            (i32::MIN, i32::MIN, i64::MIN, "min"),
        ] {
            let e = writer_wait("serving_build", months, days, micros, text).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "serving_build: parameter 'wait' = '{text}': must be an INTERVAL from 0 seconds to 1 hour \
                     (how long to wait for a running build or refresh of this database)"
                )
            );
        }
    }

    #[test]
    fn a_wait_is_shown_in_seconds() {
        assert_eq!(shown_wait(WRITER_WAIT), "120 s");
        assert_eq!(shown_wait(Duration::from_millis(250)), "0.25 s");
        assert_eq!(shown_wait(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(shown_wait(Duration::ZERO), "0 s");
        assert_eq!(shown_wait(MAX_WAIT), "1 hour");
    }
}
