//! How many requests a sink keeps in flight: a fixed number, or a limit that adapts to the
//! endpoint as Vector's Adaptive Request Concurrency does (AIMD on the observed round-trip time,
//! with back-pressure from `429` / `503` answers).
//!
//! # The adaptive controller
//! The limit starts at 1 and is enforced by a [`Semaphore`] whose permits the controller adds
//! and forgets. Round-trip times (RTT) of acknowledged requests are averaged over a window as
//! long as the mean RTT seen so far; when a window ends:
//! - after a back-pressure answer (`429`, `503`) or a failure (transport error, timeout, another
//!   `5xx`) in the window, the limit is multiplied by [`AdaptiveSettings::decrease_ratio`]
//!   (0.9, rounded down, at least 1 less and never below 1);
//! - else, when the window's mean RTT rose above the past mean by more than
//!   [`AdaptiveSettings::rtt_deviation_scale`] (2.5) × the past deviation (and at least 5 % of
//!   the past mean), the same decrease;
//! - else, when the limit was reached in the window (a request waited for a permit or took
//!   the last one), the limit grows by 1, up to [`AdaptiveSettings::max`] (200).
//!
//! The past mean and deviation are exponentially weighted moving averages
//! ([`AdaptiveSettings::ewma_alpha`], 0.4) of the windows' mean RTTs. The defaults are Vector's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Largest limit of the adaptive controller by default (Vector's too).
pub const DEFAULT_MAX_CONCURRENCY: usize = 200;

/// A `concurrency=` value that is neither `adaptive` nor a positive number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("concurrency {0:?}: expected `adaptive` or a number of requests ≥ 1")]
pub struct ConcurrencyError(String);

/// How many requests may be in flight at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// A limit the [`Controller`] adapts (from 1 up to [`DEFAULT_MAX_CONCURRENCY`]); see the
    /// [module docs](self).
    #[default]
    Adaptive,
    /// Exactly this many (≥ 1).
    Fixed(usize),
}

impl std::fmt::Display for Concurrency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Concurrency::Adaptive => f.write_str("adaptive"),
            Concurrency::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// `adaptive` or a number ≥ 1.
impl std::str::FromStr for Concurrency {
    type Err = ConcurrencyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "adaptive" => Ok(Concurrency::Adaptive),
            n => match n.parse::<usize>() {
                Ok(n) if (1..=Semaphore::MAX_PERMITS).contains(&n) => Ok(Concurrency::Fixed(n)),
                _ => Err(ConcurrencyError(s.into())),
            },
        }
    }
}

/// The adaptive controller's tuning (defaults: Vector's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveSettings {
    /// Factor applied to the limit on a decrease (default 0.9).
    pub decrease_ratio: f64,
    /// Weight of the newest window in the RTT averages (default 0.4).
    pub ewma_alpha: f64,
    /// How many deviations above the past mean RTT count as a rise (default 2.5).
    pub rtt_deviation_scale: f64,
    /// Largest limit (default [`DEFAULT_MAX_CONCURRENCY`]).
    pub max: usize,
}

impl Default for AdaptiveSettings {
    fn default() -> Self {
        Self { decrease_ratio: 0.9, ewma_alpha: 0.4, rtt_deviation_scale: 2.5, max: DEFAULT_MAX_CONCURRENCY }
    }
}

/// How a request ended, for the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// Answered `2xx` (or a permanent status: the endpoint answered in time).
    Answered,
    /// `429` or `503`: the endpoint asks for less.
    BackPressure,
    /// Transport error, timeout, another `5xx`.
    Failed,
}

#[derive(Debug, Clone, Copy)]
struct Ewma {
    mean: f64,
    deviation: f64,
}

#[derive(Debug)]
struct State {
    limit: usize,
    /// Permits to forget as they come back (a decrease below the permits held).
    to_forget: usize,
    past: Option<Ewma>,
    window_start: Instant,
    window_rtt_sum: f64,
    window_rtt_count: u32,
    reached_limit: bool,
    back_pressure: bool,
}

/// Hands out request permits under the current limit and, when adaptive, adapts it; see the
/// [module docs](self).
#[derive(Debug)]
pub struct Controller {
    semaphore: Arc<Semaphore>,
    adaptive: Option<AdaptiveSettings>,
    state: Mutex<State>,
    in_flight: AtomicUsize,
}

impl Controller {
    /// A controller for `concurrency`, with `settings` when adaptive.
    pub fn new(concurrency: Concurrency, settings: AdaptiveSettings) -> Arc<Self> {
        let (limit, adaptive) = match concurrency {
            Concurrency::Adaptive => (1, Some(AdaptiveSettings { max: settings.max.max(1), ..settings })),
            Concurrency::Fixed(n) => (n.clamp(1, Semaphore::MAX_PERMITS), None),
        };
        Arc::new(Self {
            semaphore: Arc::new(Semaphore::new(limit)),
            adaptive,
            state: Mutex::new(State {
                limit,
                to_forget: 0,
                past: None,
                window_start: Instant::now(),
                window_rtt_sum: 0.0,
                window_rtt_count: 0,
                reached_limit: false,
                back_pressure: false,
            }),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// The limit now, requests.
    pub fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Requests holding a permit now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a permit (permits are handed out in the order they were asked for).
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        let waited = self.semaphore.available_permits() == 0;
        let permit = self.semaphore.clone().acquire_owned().await.expect("the controller never closes its semaphore");
        let in_flight = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut state = self.lock();
            if waited || in_flight >= state.limit {
                state.reached_limit = true;
            }
        }
        Permit { permit: Some(permit), controller: self.clone(), start: Instant::now() }
    }

    fn observe(&self, rtt: Duration, response: Response) {
        let Some(settings) = self.adaptive else { return };
        let now = Instant::now();
        let mut state = self.lock();
        match response {
            Response::Answered => {
                state.window_rtt_sum += rtt.as_secs_f64();
                state.window_rtt_count += 1;
            }
            Response::BackPressure | Response::Failed => state.back_pressure = true,
        }
        let window = state.past.map_or(rtt.as_secs_f64(), |p| p.mean);
        if now.duration_since(state.window_start).as_secs_f64() < window {
            return;
        }
        let current = (state.window_rtt_count > 0).then(|| state.window_rtt_sum / f64::from(state.window_rtt_count));
        let rose = match (state.past, current) {
            (Some(past), Some(current)) => {
                let threshold = (past.deviation * settings.rtt_deviation_scale).max(past.mean * 0.05);
                current > past.mean + threshold
            }
            _ => false,
        };
        if state.back_pressure || rose {
            let target = ((state.limit as f64 * settings.decrease_ratio).floor() as usize).min(state.limit - 1).max(1);
            self.shrink(&mut state, target);
        } else if state.reached_limit && current.is_some() && state.past.is_some() && state.limit < settings.max {
            state.limit += 1;
            if state.to_forget > 0 {
                state.to_forget -= 1;
            } else {
                self.semaphore.add_permits(1);
            }
        }
        if let Some(current) = current {
            let a = settings.ewma_alpha;
            state.past = Some(match state.past {
                None => Ewma { mean: current, deviation: 0.0 },
                Some(p) => Ewma {
                    deviation: (1.0 - a) * p.deviation + a * (current - p.mean).abs(),
                    mean: (1.0 - a) * p.mean + a * current,
                },
            });
        }
        state.window_start = now;
        state.window_rtt_sum = 0.0;
        state.window_rtt_count = 0;
        state.reached_limit = false;
        state.back_pressure = false;
    }

    fn shrink(&self, state: &mut State, target: usize) {
        let cut = state.limit.saturating_sub(target);
        if cut == 0 {
            return;
        }
        state.limit = target;
        let forgotten = self.semaphore.forget_permits(cut);
        state.to_forget += cut - forgotten;
    }
}

/// Leave to send one request; give it back with [`Permit::done`] (or drop it: no measurement).
#[derive(Debug)]
pub struct Permit {
    permit: Option<OwnedSemaphorePermit>,
    controller: Arc<Controller>,
    start: Instant,
}

impl Permit {
    /// Restarts the round-trip clock (the request starts now).
    pub fn start(&mut self) {
        self.start = Instant::now();
    }

    /// Reports how the request ended (its round trip is the time since the permit was taken
    /// or [`start`](Self::start)ed) and gives the permit back.
    pub fn done(self, response: Response) {
        self.controller.observe(self.start.elapsed(), response);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.controller.in_flight.fetch_sub(1, Ordering::Relaxed);
        let Some(permit) = self.permit.take() else { return };
        let mut state = self.controller.lock();
        if state.to_forget > 0 {
            state.to_forget -= 1;
            permit.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_adaptive_or_a_positive_number() {
        assert_eq!("adaptive".parse(), Ok(Concurrency::Adaptive));
        assert_eq!("8".parse(), Ok(Concurrency::Fixed(8)));
        for bad in ["0", "-1", "many", ""] {
            assert!(bad.parse::<Concurrency>().is_err(), "{bad}");
        }
        assert_eq!(Concurrency::Fixed(3).to_string(), "3");
    }

    /// Runs `rounds` windows of `limit` requests each taking `rtt`, answered as `response(round)`.
    async fn rounds(
        c: &Arc<Controller>,
        n: usize,
        rtt: impl Fn(usize) -> Duration,
        response: impl Fn(usize) -> Response,
    ) {
        for round in 0..n {
            let permits: Vec<Permit> = futures_util::future::join_all((0..c.limit()).map(|_| c.acquire())).await;
            tokio::time::sleep(rtt(round)).await;
            for p in permits {
                p.done(response(round));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_grows_by_one_per_window_while_the_rtt_holds_and_is_capped() {
        let settings = AdaptiveSettings { max: 12, ..AdaptiveSettings::default() };
        let c = Controller::new(Concurrency::Adaptive, settings);
        assert_eq!(c.limit(), 1);
        rounds(&c, 6, |_| Duration::from_millis(200), |_| Response::Answered).await;
        // The first window sets the mean; each later one adds 1.
        assert_eq!(c.limit(), 6);
        rounds(&c, 20, |_| Duration::from_millis(200), |_| Response::Answered).await;
        assert_eq!(c.limit(), 12, "capped at max");
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn back_pressure_and_rising_rtt_decrease_it_multiplicatively() {
        let c = Controller::new(Concurrency::Adaptive, AdaptiveSettings::default());
        rounds(&c, 21, |_| Duration::from_millis(100), |_| Response::Answered).await;
        assert_eq!(c.limit(), 21);
        rounds(&c, 1, |_| Duration::from_millis(100), |_| Response::BackPressure).await;
        assert_eq!(c.limit(), 18, "21 × 0.9 = 18.9, rounded down");
        rounds(&c, 1, |_| Duration::from_millis(400), |_| Response::Answered).await;
        assert_eq!(c.limit(), 16, "an RTT far above its mean: 18 × 0.9");
        rounds(&c, 30, |_| Duration::from_millis(300), |_| Response::Failed).await;
        assert_eq!(c.limit(), 1, "never below 1");
        // The semaphore follows the limit: exactly `limit` permits can be held.
        let held = c.acquire().await;
        assert!(c.semaphore.available_permits() == 0 && c.in_flight() == 1);
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_decrease_below_the_permits_held_takes_effect_as_they_come_back() {
        let c = Controller::new(Concurrency::Adaptive, AdaptiveSettings::default());
        rounds(&c, 11, |_| Duration::from_millis(100), |_| Response::Answered).await;
        assert_eq!(c.limit(), 11);
        let mut held: Vec<Permit> = futures_util::future::join_all((0..11).map(|_| c.acquire())).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.pop().unwrap().done(Response::BackPressure);
        assert_eq!(c.limit(), 9);
        drop(held); // 10 permits come back, one of them is forgotten
        assert_eq!(c.semaphore.available_permits(), 9);
    }

    #[tokio::test]
    async fn a_fixed_concurrency_never_moves() {
        let c = Controller::new(Concurrency::Fixed(3), AdaptiveSettings::default());
        rounds(&c, 3, |_| Duration::from_millis(1), |_| Response::BackPressure).await;
        assert_eq!((c.limit(), c.semaphore.available_permits()), (3, 3));
    }
}
