//! Histograms of `/metrics` (Prometheus `_bucket{le}`, `_sum`, `_count`): [`Histogram`], lock-free
//! for values observed from many tasks (plugin calls, webhook batches, acknowledgements), and
//! [`Counts`], plain counts for one owner that publishes them (the tenant router's partitions)
//! and for what a scrape reads.
//!
//! Values are integers in the family's unit: nanoseconds for durations (exposed in seconds),
//! items for sizes. Observing is one binary search over ≤ 20 bounds and two relaxed atomic adds
//! (~5 ns); the count is the sum of the buckets, so a scrape never sees a count that disagrees
//! with its buckets (the sum may lag them by the observations made while it reads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket upper bounds (`le`) in the family's unit, ascending; the `+Inf` bucket is implied.
pub type Bounds = &'static [u64];

const MS: u64 = 1_000_000;

/// Sink writes and end-to-end latency, nanoseconds: 1 ms … 60 s.
pub const WRITE_BOUNDS: Bounds = &[
    MS,
    2 * MS + MS / 2,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1_000 * MS,
    2_500 * MS,
    5_000 * MS,
    10_000 * MS,
    30_000 * MS,
    60_000 * MS,
];

/// Plugin calls, nanoseconds: 10 µs … 1 s (a batch call of a compiled plugin takes tens of µs;
/// an interpreted one, ms).
pub const PLUGIN_CALL_BOUNDS: Bounds = &[
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    MS,
    2 * MS + MS / 2,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    1_000 * MS,
];

/// Batch sizes, items: 1 … 5,000.
pub const BATCH_BOUNDS: Bounds = &[1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000];

/// The bucket of `value`: the first bound ≥ it, or `+Inf` (`bounds.len()`).
fn bucket(bounds: Bounds, value: u64) -> usize {
    bounds.partition_point(|&b| b < value)
}

/// Nanoseconds of `d`, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A lock-free histogram: observe from any thread through `&self`.
#[derive(Debug)]
pub struct Histogram {
    bounds: Bounds,
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    /// An empty histogram with `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        Self { bounds, buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum: AtomicU64::new(0) }
    }

    /// Counts one `value` (in the bounds' unit).
    pub fn observe(&self, value: u64) {
        self.buckets[bucket(self.bounds, value)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// Counts one duration (bounds in nanoseconds).
    pub fn observe_duration(&self, d: Duration) {
        self.observe(nanos(d));
    }

    /// A copy of the counts now.
    pub fn counts(&self) -> Counts {
        Counts {
            bounds: self.bounds,
            buckets: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// Names bounds as a type, so that a histogram in a struct of counters can be `Default`
/// ([`HistogramOf`]).
pub trait Buckets {
    /// The bounds.
    const BOUNDS: Bounds;
}

/// [`PLUGIN_CALL_BOUNDS`] (nanoseconds).
#[derive(Debug)]
pub struct PluginCalls;

impl Buckets for PluginCalls {
    const BOUNDS: Bounds = PLUGIN_CALL_BOUNDS;
}

/// [`WRITE_BOUNDS`] (nanoseconds).
#[derive(Debug)]
pub struct Writes;

impl Buckets for Writes {
    const BOUNDS: Bounds = WRITE_BOUNDS;
}

/// [`BATCH_BOUNDS`] (items).
#[derive(Debug)]
pub struct Batches;

impl Buckets for Batches {
    const BOUNDS: Bounds = BATCH_BOUNDS;
}

/// A [`Histogram`] with the bounds of `B`, empty by default.
#[derive(Debug)]
pub struct HistogramOf<B>(Histogram, std::marker::PhantomData<B>);

impl<B: Buckets> Default for HistogramOf<B> {
    fn default() -> Self {
        Self(Histogram::new(B::BOUNDS), std::marker::PhantomData)
    }
}

impl<B> std::ops::Deref for HistogramOf<B> {
    type Target = Histogram;

    fn deref(&self) -> &Histogram {
        &self.0
    }
}

/// Plain histogram counts: per bucket (not cumulative; the last is `+Inf`) and their sum. The
/// default is empty and takes the bounds of the first counts added to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    bounds: Bounds,
    buckets: Vec<u64>,
    sum: u64,
}

impl Counts {
    /// Empty counts with `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        Self { bounds, buckets: vec![0; bounds.len() + 1], sum: 0 }
    }

    /// Counts one `value` (in the bounds' unit).
    pub fn observe(&mut self, value: u64) {
        self.buckets[bucket(self.bounds, value)] += 1;
        self.sum += value;
    }

    /// Counts one duration (bounds in nanoseconds).
    pub fn observe_duration(&mut self, d: Duration) {
        self.observe(nanos(d));
    }

    /// Adds `other`'s counts (of the same bounds; empty counts take `other`'s).
    pub fn add(&mut self, other: &Counts) {
        if self.buckets.is_empty() {
            *self = other.clone();
            return;
        }
        debug_assert_eq!(self.bounds, other.bounds, "histograms of one series share their bounds");
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.sum += other.sum;
    }

    /// Observations counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The sum of the observed values, in the bounds' unit.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Whether nothing was observed.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// `(upper bound, observations in that bucket)` with bounds times `scale` (1e-9: seconds
    /// from nanoseconds), the last bound `+Inf`; not cumulative.
    pub fn buckets(&self, scale: f64) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .map(|&b| b as f64 * scale)
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_falls_in_the_first_bucket_whose_bound_is_not_below_it() {
        let h = Histogram::new(&[10, 20]);
        for v in [0, 10, 11, 20, 21, 1_000] {
            h.observe(v);
        }
        let c = h.counts();
        assert_eq!(c.buckets(1.0), vec![(10.0, 2), (20.0, 2), (f64::INFINITY, 2)]);
        assert_eq!((c.count(), c.sum()), (6, 1_062));
    }

    #[test]
    fn counts_add_up_and_empty_counts_take_the_bounds_of_the_first_added() {
        let mut a = Counts::new(BATCH_BOUNDS);
        a.observe(3);
        let mut total = Counts::default();
        total.add(&a);
        total.add(&a);
        assert_eq!((total.count(), total.sum()), (2, 6));
        assert_eq!(total.buckets(1.0)[2], (5.0, 2));
        let seconds = Counts::new(WRITE_BOUNDS).buckets(1e-9);
        assert_eq!(seconds[0].0, 0.001);
    }
}
