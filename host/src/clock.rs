//! Injected time: the only place in eventpipe that reads the system clock.
//!
//! client-go threads a `clock.PassiveClock` (`Now()` only) through the EventCorrelator and the
//! EventRecorder so that tests can drive time. eventpipe does the same with [`Clock`]:
//! [`SystemClock`] for live pipelines, [`ManualClock`] for replay and tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

/// A source of "now", as client-go's `clock.PassiveClock`.
///
/// Implementations must be cheap: the EventCorrelator reads it twice per event (once in the
/// EventAggregator, once in the SpamFilter), exactly as client-go does.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant, UTC, nanosecond precision.
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock (`chrono::Utc::now()`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to: set it from a replay line, or step it in a test.
///
/// Shared freely (`Arc<ManualClock>`); reads and writes are lock-free. The representable range is
/// that of nanoseconds since the Unix epoch in an `i64` (years 1677..2262).
#[derive(Debug)]
pub struct ManualClock {
    unix_nanos: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Arc<Self> {
        Arc::new(Self { unix_nanos: AtomicI64::new(to_unix_nanos(start)) })
    }

    /// Moves the clock to `t` (backwards is allowed: replays may do it).
    pub fn set(&self, t: DateTime<Utc>) {
        self.unix_nanos.store(to_unix_nanos(t), Ordering::Release);
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: std::time::Duration) {
        let step = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        let _ = self.unix_nanos.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_add(step)));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_nanos(self.unix_nanos.load(Ordering::Acquire))
    }
}

/// Nanoseconds since the Unix epoch, saturating outside the `i64` range (years 1677 to 2262):
/// what a [`ManualClock`] stores and plugins receive. Event names use [`go_unix_nano`].
pub fn to_unix_nanos(t: DateTime<Utc>) -> i64 {
    t.timestamp_nanos_opt().unwrap_or(if t.timestamp() < 0 { i64::MIN } else { i64::MAX })
}

/// Go's `Time.UnixNano` exactly: seconds × 10⁹ + nanoseconds in wrapping `int64` arithmetic, so
/// an instant outside years 1677 to 2262 gives the value Go computes (its docs call it
/// undefined; its code wraps). What event names are made of.
pub fn go_unix_nano(t: DateTime<Utc>) -> i64 {
    t.timestamp().wrapping_mul(1_000_000_000).wrapping_add(i64::from(t.timestamp_subsec_nanos()))
}

/// A shared clock handle, as stored by the correlator and the recorder.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_sets_and_advances() {
        let t0: DateTime<Utc> = "2025-01-01T00:00:00Z".parse().unwrap();
        let c = ManualClock::new(t0);
        assert_eq!(c.now(), t0);
        c.advance(std::time::Duration::from_millis(1500));
        assert_eq!(c.now().to_rfc3339(), "2025-01-01T00:00:01.500+00:00");
        c.set(t0);
        assert_eq!(c.now(), t0);
    }

    /// Go's `UnixNano` in wrapping `int64` arithmetic (values computed as Go's
    /// `unixSec*1e9 + nsec` wraps), where [`to_unix_nanos`] saturates.
    #[test]
    fn go_unix_nano_wraps_as_go_where_to_unix_nanos_saturates() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let t = at("2025-01-01T00:00:00.000000123Z");
        assert_eq!(go_unix_nano(t), 1_735_689_600_000_000_123);
        assert_eq!(go_unix_nano(t), to_unix_nanos(t), "inside the int64 range both agree");
        assert_eq!(go_unix_nano(at("1969-12-31T23:59:59.5Z")), -500_000_000);
        assert_eq!(go_unix_nano(at("0001-01-01T00:00:00Z")), -6_795_364_578_871_345_152, "Go's zero time");
        assert_eq!(go_unix_nano(at("3000-01-01T00:00:00.000000005Z")), -4_389_808_147_419_103_227);
        assert_eq!(to_unix_nanos(at("0001-01-01T00:00:00Z")), i64::MIN);
        assert_eq!(to_unix_nanos(at("3000-01-01T00:00:00Z")), i64::MAX);
    }
}
