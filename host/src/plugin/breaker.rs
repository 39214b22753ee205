//! A circuit breaker per plugin: a plugin that keeps trapping or running out of fuel is
//! quarantined, and its users take their fallback without calling it.
//!
//! Without it, a plugin that runs out of fuel on every event burns its whole fuel budget on
//! every batch (and the bisection of each failed batch), once per batch: a 60k-event run took
//! 70× as long. The breaker, one per [`PluginSlot`](super::PluginSlot) (so per plugin name,
//! shared by every tenant using it), counts consecutive failed calls:
//! - **Closed** (normal): a batch on which the plugin failed for every event it was tried on
//!   alone (the bisection's "keeps failing" cut-off: three events, no call of the batch
//!   succeeding) opens it at once; so do [`TRIP_FAILURES`] failed calls on a single event in a
//!   row (traps,
//!   fuel, memory limit; not guest errors or garbage answers, which cost no more than a good
//!   call), the first of them at most [`TRIP_WINDOW`] ago, open it. Any successful call resets
//!   the count. A failed call on a batch is not counted: it is bisected down to the events that
//!   fail alone, so one bad event in a batch of 256 fails the batch, its half, its quarter, …
//!   which says nothing about the other 255.
//! - **Open** (quarantined) for a backoff: calls are not made; callers apply the plugin's
//!   fallback policy (`builtin`, `drop`, `fail`) to every event, counted as fallbacks or drops
//!   (not as failures). The first backoff is [`INITIAL_BACKOFF`]; each time the plugin is
//!   quarantined again without a success in between, it doubles, up to [`MAX_BACKOFF`].
//! - **Half-open** when the backoff has passed: the next call is made. A success closes the
//!   breaker (and the backoff starts again from [`INITIAL_BACKOFF`]); a failure opens it again
//!   at once, with the doubled backoff.
//!
//! A new version swapped in by a hot reload closes the breaker and resets the backoff.
//! Each quarantine is logged once (a warning) and counted (`eventpipe_plugin_quarantines_total`;
//! `eventpipe_plugin_quarantined` is 1 while the plugin is quarantined).
//!
//! The defaults: an always-failing plugin is quarantined at the end of its first batch (what it
//! wastes is that batch's call and three single events); 5 single-event
//! failures for uses that call one event at a time (sinks), while a plugin failing on a few
//! events is interrupted by successes;
//! within 10 s, so that rare failures spread over a long run never add up; 1 s first backoff,
//! short enough that a plugin failing on one bad burst is back within a second; doubling to
//! 60 s, so a plugin failing for good costs one failed call a minute.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Consecutive failed calls that quarantine a plugin.
pub const TRIP_FAILURES: u32 = 5;
/// The failures must fall within this time (from the first of them).
pub const TRIP_WINDOW: Duration = Duration::from_secs(10);
/// The first quarantine's length.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest quarantine.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct State {
    /// Consecutive failures, and when the first of them happened.
    streak: u32,
    streak_started: Option<Instant>,
    /// While quarantined: until when.
    open_until: Option<Instant>,
    /// The next quarantine's length.
    backoff: Duration,
}

impl Default for State {
    fn default() -> Self {
        Self { streak: 0, streak_started: None, open_until: None, backoff: INITIAL_BACKOFF }
    }
}

/// One plugin's circuit breaker; see the module documentation.
#[derive(Debug, Default)]
pub struct Breaker {
    state: Mutex<State>,
    /// Whether it is open now (read without the lock on every call).
    open: AtomicBool,
    /// Whether a failure streak is being counted (so a success has something to reset).
    failing: AtomicBool,
    quarantines: AtomicU64,
}

/// What a failed call did to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tripped {
    /// Still closed (or already open).
    No,
    /// The plugin is quarantined from now on, for this long.
    For(Duration),
}

impl Breaker {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a call may be made now: `false` while quarantined. Once the backoff has passed,
    /// `true` (half-open: the call's outcome decides).
    pub fn allows(&self, now: Instant) -> bool {
        if !self.open.load(Ordering::Acquire) {
            return true;
        }
        let state = self.state();
        state.open_until.is_none_or(|until| now >= until)
    }

    /// Whether the plugin is quarantined now.
    pub fn is_quarantined(&self, now: Instant) -> bool {
        !self.allows(now)
    }

    /// Records a successful call: closes the breaker and resets the count and the backoff.
    pub fn succeeded(&self) {
        if !self.open.load(Ordering::Acquire) && !self.failing.load(Ordering::Acquire) {
            return;
        }
        self.reset();
    }

    /// Records a failed call (a trap, fuel or memory limit) at `now`, on one event (`single`)
    /// or on a batch (only counted when it is the trial call after a quarantine).
    pub fn failed(&self, now: Instant, single: bool) -> Tripped {
        let mut state = self.state();
        if let Some(until) = state.open_until {
            if now < until {
                return Tripped::No; // a call that started before the quarantine
            }
            // Half-open: the trial call failed.
            return self.open(&mut state, now);
        }
        if !single {
            return Tripped::No;
        }
        self.failing.store(true, Ordering::Release);
        match state.streak_started {
            Some(started) if now.duration_since(started) <= TRIP_WINDOW => state.streak += 1,
            _ => (state.streak, state.streak_started) = (1, Some(now)),
        }
        if state.streak >= TRIP_FAILURES { self.open(&mut state, now) } else { Tripped::No }
    }

    fn open(&self, state: &mut State, now: Instant) -> Tripped {
        let backoff = state.backoff;
        state.open_until = Some(now + backoff);
        state.backoff = (backoff * 2).min(MAX_BACKOFF);
        (state.streak, state.streak_started) = (0, None);
        self.open.store(true, Ordering::Release);
        self.quarantines.fetch_add(1, Ordering::Relaxed);
        Tripped::For(backoff)
    }

    /// Quarantines the plugin at once (the bisection of a batch found it failing on every event
    /// it tried, none succeeding); nothing if it is quarantined already.
    pub fn trip(&self, now: Instant) -> Tripped {
        let mut state = self.state();
        if state.open_until.is_some_and(|until| now < until) {
            return Tripped::No;
        }
        self.failing.store(true, Ordering::Release);
        self.open(&mut state, now)
    }

    /// Closes the breaker and forgets the backoff (a new version is serving).
    pub fn reset(&self) {
        let mut state = self.state();
        *state = State::default();
        self.open.store(false, Ordering::Release);
        self.failing.store(false, Ordering::Release);
    }

    /// Quarantines so far.
    pub fn quarantines(&self) -> u64 {
        self.quarantines.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_failures_within_the_window_quarantine_with_a_doubling_capped_backoff() {
        let breaker = Breaker::default();
        let t0 = Instant::now();
        for i in 0..TRIP_FAILURES - 1 {
            assert_eq!(breaker.failed(t0 + Duration::from_millis(i.into()), true), Tripped::No);
        }
        assert_eq!(breaker.failed(t0, false), Tripped::No, "a failed batch is not counted");
        breaker.succeeded(); // a success in between: the count starts again
        for _ in 0..TRIP_FAILURES - 1 {
            assert_eq!(breaker.failed(t0, true), Tripped::No);
        }
        assert_eq!(breaker.failed(t0, true), Tripped::For(INITIAL_BACKOFF));
        assert!(!breaker.allows(t0) && breaker.is_quarantined(t0 + INITIAL_BACKOFF / 2));
        // Half-open after the backoff; a failed trial opens it again for twice as long.
        let t1 = t0 + INITIAL_BACKOFF;
        assert!(breaker.allows(t1));
        assert_eq!(breaker.failed(t1, false), Tripped::For(INITIAL_BACKOFF * 2), "a failed trial, even a batch");
        let mut t = t1;
        let mut last = Duration::ZERO;
        for _ in 0..10 {
            t += MAX_BACKOFF;
            if let Tripped::For(backoff) = breaker.failed(t, true) {
                last = backoff;
            }
        }
        assert_eq!(last, MAX_BACKOFF, "capped");
        assert_eq!(breaker.quarantines(), 12);
        // A successful trial closes it and resets the backoff.
        breaker.succeeded();
        assert!(breaker.allows(t));
        for _ in 0..TRIP_FAILURES - 1 {
            breaker.failed(t, true);
        }
        assert_eq!(breaker.failed(t, true), Tripped::For(INITIAL_BACKOFF));
        breaker.reset();
        assert!(breaker.allows(t), "a new version lifts the quarantine");
        assert_eq!(breaker.trip(t), Tripped::For(INITIAL_BACKOFF), "a batch that failed for good trips it at once");
        assert_eq!(breaker.trip(t), Tripped::No, "already quarantined");
    }

    #[test]
    fn failures_spread_wider_than_the_window_do_not_trip() {
        let breaker = Breaker::default();
        let t0 = Instant::now();
        for i in 0..(TRIP_FAILURES * 3) {
            let at = t0 + (TRIP_WINDOW / (TRIP_FAILURES - 1)) * i + Duration::from_millis(i.into());
            assert_eq!(breaker.failed(at, true), Tripped::No, "failure {i}");
        }
    }
}
