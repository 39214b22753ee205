//! SpamFilter: a token bucket per spam key (client-go `EventSourceObjectSpamFilter`, spec §3.6).

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{NotKeyed, StateStore};
use governor::{Quota, RateLimiter};

use super::keys::Key;
use super::lru_cache::KeyedLru;
use crate::clock::to_unix_nanos;
use crate::event::Time;

/// The instant the SpamFilter is deciding at, shared with every bucket's limiter: governor reads
/// time through a clock, and the correlator's clock is read once per event and stored here.
#[derive(Debug, Clone, Default)]
struct DecisionInstant(Arc<AtomicU64>);

impl GovernorClock for DecisionInstant {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::new(self.0.load(Ordering::Relaxed))
    }
}

type Limiter = RateLimiter<NotKeyed, SharedTat, DecisionInstant, NoOpMiddleware<Nanos>>;

/// A bucket's GCRA state — its theoretical arrival time, nanoseconds after the bucket's start;
/// 0: never used (full) — kept where a snapshot can read and restore it. Governor's
/// `InMemoryState` does the same compare-and-swap but keeps the value private.
#[derive(Debug, Clone, Default)]
struct SharedTat(Arc<AtomicU64>);

impl StateStore for SharedTat {
    type Key = NotKeyed;

    fn measure_and_replace<T, F, E>(&self, _key: &NotKeyed, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        // One owner per bucket (the correlator's task): a plain load and store suffice.
        let prev = self.0.load(Ordering::Acquire);
        let (result, next) = f((prev != 0).then(|| Nanos::new(prev)))?;
        self.0.store(next.as_u64(), Ordering::Release);
        Ok(result)
    }
}

/// One source+object's bucket.
enum TokenBucket {
    /// The usual case: governor's GCRA, which is exactly a token bucket that starts full.
    /// `start` is the decision instant (unix nanoseconds) the limiter was made at: governor
    /// measures every time from it.
    Refilling { limiter: Limiter, tat: SharedTat, start: u64 },
    /// `qps <= 0`: `burst` tokens, never refilled (x/time/rate adds no tokens for a rate ≤ 0).
    NoRefill { remaining: u32 },
    /// `burst < 1`: never accepts (x/time/rate rejects any n > burst).
    Never,
}

/// The bucket parameters, as client-go's `NewTokenBucketPassiveRateLimiterWithClock(qps, burst)`.
#[derive(Debug, Clone, Copy)]
struct BucketSpec {
    qps: f32,
    burst: i64,
}

impl BucketSpec {
    fn new_bucket(&self, clock: &DecisionInstant) -> TokenBucket {
        let Some(burst) = u32::try_from(self.burst).ok().and_then(NonZeroU32::new) else {
            return TokenBucket::Never;
        };
        if self.qps <= 0.0 || self.qps.is_nan() {
            return TokenBucket::NoRefill { remaining: burst.get() };
        }
        // One token per 1/qps seconds, the float32 rate widened to float64 as Go does; capped so
        // that governor's tolerance (period × (burst − 1)) fits in u64 nanoseconds.
        let max_period = u64::MAX / u64::from(burst.get());
        let period_nanos = (1e9 / f64::from(self.qps)).min(max_period as f64).max(1.0) as u64;
        let quota = Quota::with_period(Duration::from_nanos(period_nanos)).expect("period ≥ 1 ns").allow_burst(burst);
        let tat = SharedTat::default();
        let start = clock.0.load(Ordering::Relaxed);
        TokenBucket::Refilling { limiter: RateLimiter::new(quota, tat.clone(), clock.clone()), tat, start }
    }

    /// A bucket as a snapshot described it: a refilling one made at `start` (its limiter
    /// measures from there) with its theoretical arrival time; `clock` is set to `start` while
    /// the limiter is made.
    fn restored(&self, clock: &DecisionInstant, state: BucketState) -> TokenBucket {
        match state {
            BucketState::Never => TokenBucket::Never,
            BucketState::NoRefill { remaining } => TokenBucket::NoRefill { remaining },
            BucketState::Refilling { start, tat } => {
                let now = clock.0.swap(start, Ordering::Relaxed);
                let mut bucket = self.new_bucket(clock);
                clock.0.store(now, Ordering::Relaxed);
                if let TokenBucket::Refilling { tat: shared, .. } = &mut bucket {
                    shared.0.store(tat, Ordering::Relaxed);
                }
                bucket
            }
        }
    }
}

/// A token bucket's state as a snapshot keeps it ([`super::snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BucketState {
    /// A refilling bucket: the decision instant it was made at (unix nanoseconds, clamped at
    /// 0) and its GCRA theoretical arrival time in nanoseconds after that (0: full, never used).
    Refilling {
        /// Unix nanoseconds.
        start: u64,
        /// Nanoseconds after `start`.
        tat: u64,
    },
    /// A bucket that never refills (`qps <= 0`), with its tokens left.
    NoRefill {
        /// Tokens left.
        remaining: u32,
    },
    /// A bucket that accepts nothing (`burst < 1`).
    Never,
}

impl TokenBucket {
    /// client-go `TryAccept`: take a token if one is available now; a rejection changes nothing.
    fn try_accept(&mut self) -> bool {
        match self {
            TokenBucket::Refilling { limiter, .. } => limiter.check().is_ok(),
            TokenBucket::NoRefill { remaining } => {
                let ok = *remaining > 0;
                *remaining = remaining.saturating_sub(u32::from(ok));
                ok
            }
            TokenBucket::Never => false,
        }
    }
}

/// The SpamFilter: an LRU of token buckets keyed by spam key.
///
/// Default parameters (client-go): burst 25, qps 1/300 — 25 consecutive events per key pass,
/// then about one every 300 s.
///
/// # Divergence
/// client-go's `x/time/rate` keeps a float token count and lets a bucket's clock run backwards
/// (an accepted event at an earlier instant moves its `last` back). governor's GCRA works in
/// integer nanoseconds and treats an earlier instant as "no time passed". Outcomes differ only
/// when instants sit within nanoseconds of a refill boundary or the clock goes backwards.
#[doc(alias = "EventSourceObjectSpamFilter")]
pub struct SpamFilter {
    cache: KeyedLru<TokenBucket>,
    spec: BucketSpec,
    clock: DecisionInstant,
}

impl std::fmt::Debug for SpamFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpamFilter").field("buckets", &self.cache.len()).field("spec", &self.spec).finish()
    }
}

impl SpamFilter {
    /// A filter with an LRU of `cache_size` buckets, each of `burst` tokens refilled at `qps`
    /// tokens per second (Go `float32`). `burst < 1` filters everything; `qps <= 0` never refills.
    pub fn new(cache_size: NonZeroUsize, qps: f32, burst: i64) -> Self {
        Self { cache: KeyedLru::new(cache_size), spec: BucketSpec { qps, burst }, clock: DecisionInstant::default() }
    }

    /// Every bucket, least recently used first (what a snapshot stores).
    pub fn entries(&self) -> impl Iterator<Item = (Key, BucketState)> + '_ {
        self.cache.iter_oldest_first().map(|(k, b)| {
            let state = match b {
                TokenBucket::Refilling { tat, start, .. } => {
                    BucketState::Refilling { start: *start, tat: tat.0.load(Ordering::Relaxed) }
                }
                TokenBucket::NoRefill { remaining } => BucketState::NoRefill { remaining: *remaining },
                TokenBucket::Never => BucketState::Never,
            };
            (k, state)
        })
    }

    /// Puts a bucket back as the most recently used (restored in order, least recent first,
    /// the cache's recency order comes back). The bucket behaves exactly as the one
    /// snapshotted: same start, same theoretical arrival time, this filter's rate and burst.
    pub fn restore(&mut self, key: Key, state: BucketState) {
        let bucket = self.spec.restored(&self.clock, state);
        self.cache.put(key, bucket);
    }

    /// The cache's capacity, the refill rate (Go `float32`, its bits) and the burst: the
    /// numbers a snapshot must have been taken under.
    pub fn settings(&self) -> (usize, u32, i64) {
        (self.cache.cap().get(), self.spec.qps.to_bits(), self.spec.burst)
    }

    /// client-go `Filter`: `true` means skip (spam). Creates the key's bucket if needed, takes a
    /// token at `now`, and refreshes the key's recency.
    pub fn filter(&mut self, key: Key, now: Time) -> bool {
        self.clock.0.store(to_unix_nanos(now).max(0) as u64, Ordering::Relaxed);
        let spec = self.spec;
        let clock = &self.clock;
        let bucket = self.cache.get_or_insert_mut(key, || spec.new_bucket(clock));
        !bucket.try_accept()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> Time {
        chrono::DateTime::from_timestamp_nanos(1_700_000_000_000_000_000 + (secs * 1e9) as i64)
    }

    fn filter(burst: i64, qps: f32) -> SpamFilter {
        SpamFilter::new(NonZeroUsize::new(16).unwrap(), qps, burst)
    }

    #[test]
    fn starts_full_then_refills_one_token_per_period() {
        let mut f = filter(25, 1.0 / 300.0);
        for i in 0..25 {
            assert!(!f.filter(Key::of("k"), at(i as f64)), "event {i} is within burst");
        }
        assert!(f.filter(Key::of("k"), at(25.0)), "26th is spam");
        // 25 tokens spent by t=24 s while 24/300 of a token came back: the next whole token is
        // there at t=300 s (25 spent = 24 + 300·(refill since t=0)).
        assert!(f.filter(Key::of("k"), at(299.9)));
        assert!(!f.filter(Key::of("k"), at(300.0)));
        assert!(f.filter(Key::of("k"), at(301.0)));
        assert!(!f.filter(Key::of("k"), at(600.0)));
    }

    #[test]
    fn keys_have_independent_buckets() {
        let mut f = filter(1, 1.0 / 300.0);
        assert!(!f.filter(Key::of("a"), at(0.0)));
        assert!(!f.filter(Key::of("b"), at(0.0)));
        assert!(f.filter(Key::of("a"), at(1.0)));
    }

    #[test]
    fn burst_below_one_filters_everything_and_zero_qps_never_refills() {
        let mut never = filter(-1, 1.0);
        assert!(never.filter(Key::of("k"), at(0.0)));
        let mut no_refill = filter(2, 0.0);
        assert!(!no_refill.filter(Key::of("k"), at(0.0)));
        assert!(!no_refill.filter(Key::of("k"), at(1.0)));
        assert!(no_refill.filter(Key::of("k"), at(1e6)));
    }

    #[test]
    fn lru_eviction_forgets_a_bucket() {
        let mut f = SpamFilter::new(NonZeroUsize::new(1).unwrap(), 1.0 / 300.0, 1);
        assert!(!f.filter(Key::of("a"), at(0.0)));
        assert!(!f.filter(Key::of("b"), at(0.0)), "evicts a");
        assert!(!f.filter(Key::of("a"), at(0.0)), "a starts full again");
    }
}
