//! SpamFilter: a token bucket per spam key (client-go `EventSourceObjectSpamFilter`, spec §3.6).
//!
//! Each bucket is golang.org/x/time/rate's `Limiter` as client-go v0.26.15 makes it
//! (`flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(qps, burst, clock)`, asked with
//! `TryAccept`, i.e. `AllowN(now, 1)`), computed as x/time/rate **v0.3.0** does, the version
//! that client-go pins: a float64 token count and the instant of the last accepted event,
//! refilled by `elapsed.Seconds() × qps` when asked. So every decision is client-go's, to the
//! nanosecond and the float rounding, also when the clock runs backwards (an accepted event at
//! an earlier instant moves the bucket's clock back, as in Go).
//!
//! Where v0.3.0 differs from later x/time releases, eventpipe does what v0.3.0 does:
//! - A new limiter holds **no** tokens (later: `burst`). Its `last` is Go's zero time, so the
//!   first refill, for ~292 years (Go's longest `Duration`), fills it, unless `qps × 292
//!   years < burst`: with `qps < 0` a bucket never holds a token and every event is refused;
//!   with `qps = 1e-9` it starts with 9.
//! - A wait too long for an `int64` of nanoseconds (`qps` below ~1e-10) is converted as amd64
//!   converts an out-of-range float, to the smallest `int64`, which counts as no wait: such a
//!   bucket accepts every event once it is empty (later releases refuse them; on arm64 Go
//!   saturates and refuses them too).

use super::keys::Key;
use super::lru_cache::KeyedLru;
use crate::event::Time;

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) as nanoseconds since the Unix epoch: a new
/// limiter's `last`, so that its first refill saturates.
const GO_ZERO_TIME_NANOS: i128 = -62_135_596_800 * NANOS_PER_SEC as i128;

/// Nanoseconds per second (Go `time.Second`).
const NANOS_PER_SEC: i64 = 1_000_000_000;

/// `t` as nanoseconds since the Unix epoch, exactly for every `Time` (Go's zero time included).
fn unix_nanos(t: Time) -> i128 {
    i128::from(t.timestamp()) * i128::from(NANOS_PER_SEC) + i128::from(t.timestamp_subsec_nanos())
}

/// One source+object's bucket: x/time/rate's `Limiter` state.
#[derive(Debug, Clone, Copy)]
struct TokenBucket {
    /// Tokens left after the last accepted event (`Limiter.tokens`; 0 at first). For a limit
    /// of exactly 0, the tokens of `burst` spent so far instead (see [`try_accept`]).
    tokens: f64,
    /// When the last event was accepted (`Limiter.last`; Go's zero time at first), nanoseconds
    /// since the Unix epoch.
    last: i128,
}

impl TokenBucket {
    /// A new bucket, as x/time/rate v0.3.0's `NewLimiter(qps, burst)`: no tokens, its last
    /// event at Go's zero time.
    const NEW: Self = TokenBucket { tokens: 0.0, last: GO_ZERO_TIME_NANOS };
}

/// x/time/rate v0.3.0 `Limiter.reserveN(t, 1, 0).ok` for a bucket of `burst` tokens refilled
/// at `limit` tokens per second: refills the bucket for the time since its last accepted event
/// (none if `t` is earlier), takes one token, and accepts if the deficit converts to no wait
/// (less than one nanosecond of refill, or an out-of-range one, see the module docs). An
/// accepted event stores `t` and the tokens left; a rejected one changes nothing.
///
/// A limit of exactly 0 (not reachable through client-go's options, where 0 means the
/// default) is v0.3.0's special case: `burst` itself is spent, one per event, never refilled.
fn try_accept(bucket: &mut TokenBucket, t: i128, limit: f64, burst: i64) -> bool {
    if limit == 0.0 {
        let ok = burst as f64 - bucket.tokens >= 1.0;
        if ok {
            bucket.tokens += 1.0;
        }
        return ok;
    }
    // advance: `last` is at most `t`; elapsed is Go's `t.Sub(last)`, saturating.
    let elapsed = i64::try_from(t - bucket.last.min(t)).unwrap_or(i64::MAX);
    let mut tokens = bucket.tokens + tokens_from_duration(limit, elapsed);
    if tokens > burst as f64 {
        tokens = burst as f64;
    }
    tokens -= 1.0;
    let wait = if tokens < 0.0 { duration_from_tokens(limit, -tokens) } else { 0 };
    let ok = 1 <= burst && wait <= 0;
    if ok {
        *bucket = TokenBucket { tokens, last: t };
    }
    ok
}

/// x/time/rate `Limit.tokensFromDuration`: `d.Seconds() × limit`, 0 for a limit ≤ 0.
fn tokens_from_duration(limit: f64, nanos: i64) -> f64 {
    if limit <= 0.0 {
        return 0.0;
    }
    // Go `Duration.Seconds`: whole seconds plus the remainder, each converted apart.
    let seconds = (nanos / NANOS_PER_SEC) as f64 + (nanos % NANOS_PER_SEC) as f64 / 1e9;
    seconds * limit
}

/// x/time/rate v0.3.0 `Limit.durationFromTokens`, nanoseconds: Go's longest `Duration` for a
/// limit ≤ 0, else `time.Duration(1e9 × (tokens / limit))`, converted as Go on amd64 converts
/// a float to an `int64` ([`go_int64_on_amd64`]).
fn duration_from_tokens(limit: f64, tokens: f64) -> i64 {
    if limit <= 0.0 {
        return i64::MAX;
    }
    go_int64_on_amd64(1e9 * (tokens / limit))
}

/// Go's `int64(x)` for a float64 on amd64 (`CVTTSD2SQ`): truncated toward zero when it fits,
/// else (out of range, or NaN) the smallest `int64`.
fn go_int64_on_amd64(x: f64) -> i64 {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    // A NaN is in no range.
    if (-TWO_POW_63..TWO_POW_63).contains(&x) { x as i64 } else { i64::MIN }
}

/// The SpamFilter: an LRU of token buckets keyed by spam key.
///
/// Default parameters (client-go): burst 25, qps 1/300 — 25 consecutive events per key pass,
/// then about one every 300 s.
#[doc(alias = "EventSourceObjectSpamFilter")]
pub struct SpamFilter {
    cache: KeyedLru<TokenBucket>,
    /// The refill rate, tokens per second, as client-go's `float32`; widened to a float64 where
    /// it is used, as `rate.Limit(qps)` does.
    qps: f32,
    /// Tokens a bucket holds at most.
    burst: i64,
}

impl std::fmt::Debug for SpamFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpamFilter")
            .field("buckets", &self.cache.len())
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish()
    }
}

impl SpamFilter {
    /// A filter with an LRU of `cache_size` buckets (0: keeps none, every event finds a new
    /// bucket, as client-go with a negative `LRUCacheSize`), each of `burst` tokens refilled at
    /// `qps` tokens per second (Go `float32`). `burst < 1` filters everything; `qps < 0` too (a
    /// new bucket holds no tokens and is never refilled); `qps = 0` lets `burst` events through
    /// per key, never refilled (x/time/rate v0.3.0; see the module docs).
    pub fn new(cache_size: usize, qps: f32, burst: i64) -> Self {
        Self { cache: KeyedLru::new(cache_size), qps, burst }
    }

    /// Every bucket, least recently used first (what a snapshot stores): its key, the tokens
    /// left after its last accepted event, and when that was (Go's zero time if never).
    pub fn entries(&self) -> impl Iterator<Item = (Key, f64, Time)> + '_ {
        self.cache.iter_oldest_first().map(|(k, b)| {
            let (secs, nanos) = (b.last.div_euclid(NANOS_PER_SEC.into()), b.last.rem_euclid(NANOS_PER_SEC.into()));
            let last = i64::try_from(secs)
                .ok()
                .and_then(|secs| chrono::DateTime::from_timestamp(secs, nanos as u32))
                .expect("a bucket's last instant was a Time");
            (k, b.tokens, last)
        })
    }

    /// Puts a bucket back as the most recently used (restored in order, least recent first,
    /// the cache's recency order comes back) with `tokens` left after its last accepted event
    /// at `last`: it decides as the one snapshotted.
    pub fn restore(&mut self, key: Key, tokens: f64, last: Time) {
        self.cache.put(key, TokenBucket { tokens, last: unix_nanos(last) });
    }

    /// The cache's capacity, the refill rate (Go `float32`, its bits) and the burst: the
    /// numbers a snapshot must have been taken under.
    pub fn settings(&self) -> (usize, u32, i64) {
        (self.cache.cap(), self.qps.to_bits(), self.burst)
    }

    /// client-go `Filter`: `true` means skip (spam). Creates the key's bucket if needed, takes a
    /// token at `now`, and refreshes the key's recency.
    pub fn filter(&mut self, key: Key, now: Time) -> bool {
        let (limit, burst) = (f64::from(self.qps), self.burst);
        let bucket = self.cache.get_or_insert_mut(key, || TokenBucket::NEW);
        !try_accept(bucket, unix_nanos(now), limit, burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> Time {
        chrono::DateTime::from_timestamp_nanos(1_700_000_000_000_000_000 + (secs * 1e9) as i64)
    }

    fn filter(burst: i64, qps: f32) -> SpamFilter {
        SpamFilter::new(16, qps, burst)
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

    /// x/time/rate lets the clock run backwards: an event at an earlier instant is refilled
    /// for no time, and if accepted moves the bucket's clock back to it, so the next event is
    /// refilled for the time since that earlier instant.
    #[test]
    fn a_backwards_clock_moves_the_bucket_back() {
        let mut f = filter(2, 0.1);
        assert!(!f.filter(Key::of("k"), at(100.0)), "one token left");
        assert!(!f.filter(Key::of("k"), at(50.0)), "earlier: no refill, the last token");
        assert!(f.filter(Key::of("k"), at(59.0)), "9 s after 50 s: 0.9 of a token");
        assert!(!f.filter(Key::of("k"), at(60.0)), "10 s after 50 s, not after 100 s: a whole token");
        assert!(f.filter(Key::of("k"), at(60.0)));
    }

    /// The float arithmetic of x/time/rate, not a period in whole nanoseconds: at 3 tokens/s
    /// an event every 333,333,333 ns leaves a deficit of ~1e-9 token each time (accepted: it
    /// is less than a nanosecond of wait), until by the fifth event the deficit is a whole
    /// nanosecond's and the event waits, so it is refused; the sixth finds the bucket refilled.
    #[test]
    fn float_tokens_fall_behind_an_exact_period_as_in_go() {
        let mut f = filter(1, 3.0);
        let start = at(0.0);
        let decisions: Vec<bool> =
            (0..11).map(|i| !f.filter(Key::of("k"), start + chrono::Duration::nanoseconds(333_333_333 * i))).collect();
        let expected = [true, true, true, true, false, true, true, true, true, false, true];
        assert_eq!(decisions, expected);
    }

    /// One token at qps = float32(1/300) takes 1 / 0.0033333334140479565 s = 299,999,992,735.68
    /// ns; a deficit worth less than one nanosecond of wait is accepted (Go truncates the wait
    /// to whole nanoseconds), so the first accepted instant is 299,999,992,735 ns after.
    #[test]
    fn a_refill_is_accepted_to_the_nanosecond_go_accepts_it() {
        let mut f = filter(1, 1.0 / 300.0);
        let start = at(0.0);
        assert!(!f.filter(Key::of("k"), start));
        assert!(f.filter(Key::of("k"), start + chrono::Duration::nanoseconds(299_999_992_734)));
        assert!(!f.filter(Key::of("k"), start + chrono::Duration::nanoseconds(299_999_992_735)));
    }

    /// x/time/rate v0.3.0: a new bucket holds no tokens; with a negative limit it is never
    /// refilled, so nothing passes (later releases start it full).
    #[test]
    fn a_negative_qps_refuses_everything() {
        let mut f = filter(25, -5.0);
        for t in [0.0, 1.0, 1e6] {
            assert!(f.filter(Key::of("k"), at(t)), "at {t} s");
        }
    }

    /// A new bucket is filled by its first refill, from Go's zero time: at most ~292 years
    /// (Go's longest `Duration`, 9,223,372,036.854775807 s) of `qps`. At float32(1e-9) that is
    /// 9.22 tokens, so 9 of a burst of 25 pass.
    #[test]
    fn a_tiny_qps_starts_with_what_292_years_refill() {
        let mut f = filter(25, 1e-9);
        let passed = (0..25).filter(|&i| !f.filter(Key::of("k"), at(f64::from(i)))).count();
        assert_eq!(passed, 9);
    }

    /// Below ~1e-10 tokens/s the wait for a token no longer fits an `int64` of nanoseconds;
    /// Go on amd64 converts it to the smallest `int64`, no wait, so every event passes.
    #[test]
    fn a_wait_past_the_int64_range_is_no_wait_as_on_amd64() {
        let mut f = filter(1, 1e-12);
        assert!((0..100).all(|i| !f.filter(Key::of("k"), at(f64::from(i)))));
        assert_eq!(go_int64_on_amd64(9.3e18), i64::MIN);
        assert_eq!(go_int64_on_amd64(f64::NAN), i64::MIN);
        assert_eq!(go_int64_on_amd64(9_223_372_036_854_774_784.0), 9_223_372_036_854_774_784);
        assert_eq!(go_int64_on_amd64(-2.7), -2);
    }

    /// A snapshot's bucket decides as the one it was taken from.
    #[test]
    fn a_restored_bucket_keeps_its_tokens_and_last_instant() {
        let mut f = filter(2, 0.1);
        assert!(!f.filter(Key::of("k"), at(100.0)));
        let (key, tokens, last) = f.entries().next().unwrap();
        assert_eq!((tokens, last), (1.0, at(100.0)));
        let mut restored = filter(2, 0.1);
        restored.restore(key, tokens, last);
        for t in [105.0, 106.0, 110.0] {
            assert_eq!(restored.filter(Key::of("k"), at(t)), f.filter(Key::of("k"), at(t)), "at {t} s");
        }
    }

    #[test]
    fn lru_eviction_forgets_a_bucket() {
        let mut f = SpamFilter::new(1, 1.0 / 300.0, 1);
        assert!(!f.filter(Key::of("a"), at(0.0)));
        assert!(!f.filter(Key::of("b"), at(0.0)), "evicts a");
        assert!(!f.filter(Key::of("a"), at(0.0)), "a starts full again");
    }
}
