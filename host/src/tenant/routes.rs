//! Routes: which correlated writes go to sinks besides the tenant's own, decided after
//! correlation (a route never changes what the tenant's EventCorrelator does).
//!
//! A route is a `match` (the criteria of a tenant's, [`crate::tenant::EventMatch`]; none: every
//! write), a `min_count`, an optional `rate` and its sinks:
//!
//! ```toml
//! [[routes]]                     # every tenant's writes (top level)
//! name = "slack-prod"            # default `route-<index>`
//! match = { types = ["Warning"], namespaces = ["prod-*"] }
//! min_count = 3                  # only writes whose event count reached 3
//! rate = "10/min"                # at most 10 writes a minute (N/s, N/min or N/h)
//! sinks = ["webhook:https://hooks.slack.com/services/…,preset=slack"]
//! ```
//!
//! A route's [`RouteGate`] decides each write ([`RouteGate::admit`]), in this order:
//! 1. A write whose event the route's `match` does not select is not the route's
//!    ([`Admission::Unmatched`]).
//! 2. A write whose event `count` is below `min_count` is held back
//!    ([`HoldReason::MinCount`]); the first write whose count reached it is sent as it is,
//!    verb included (so a route's sinks may get a `patch` of an event they never got a
//!    `create` of: a chat message per write, not a copy of the Event).
//! 3. With a `rate` of N per period, a token bucket of N tokens, full at first, refilled at N
//!    per period, takes one token per write sent; a write that finds no token is held back
//!    ([`HoldReason::Rate`]) and counted. The next write sent carries that count
//!    ([`Admission::Send`]'s `held_back`: "N more like this"), which the pipeline writes into the
//!    event's [`HELD_BACK_ANNOTATION`] annotation.
//!
//! Time is the caller's (the correlator's clock: the events' own time or the processing
//! time), so a replayed stream gets the same decisions.

use std::sync::Arc;
use std::time::Duration;

use crate::event::{Event, Time};
use crate::tenant::EventMatch;

/// The annotation a route's write carries when the route's `rate` held writes back since it
/// last sent one: their number, in decimal (`eventpipe.io/held-back: "12"`).
pub const HELD_BACK_ANNOTATION: &str = "eventpipe.io/held-back";

/// The default name of the route at `index` of a list (`route-0`, …).
pub fn default_name(index: usize) -> String {
    format!("route-{index}")
}

/// A route's `rate`: at most `events` writes per `period`, as a token bucket of `events` tokens
/// refilled at `events` per `period`. Written `N/s`, `N/min` or `N/h`, N from 1 to 1,000,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Writes per period (the bucket's size), ≥ 1.
    pub events: u32,
    /// The period: 1 s, 60 s or 3600 s.
    pub period: Duration,
}

/// The largest N of a [`Rate`].
pub const MAX_RATE_EVENTS: u32 = 1_000_000;

/// Why a `rate` does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// Not `N/UNIT`.
    #[error("expected N/s, N/min or N/h (e.g. \"10/min\"), got {0:?}")]
    Syntax(String),
    /// N is not a whole number from 1 to [`MAX_RATE_EVENTS`].
    #[error("the number of {0:?} must be a whole number from 1 to {MAX_RATE_EVENTS}")]
    Events(String),
    /// The unit is not `s`, `min` or `h`.
    #[error("unknown unit {0:?}: expected s, min or h")]
    Unit(String),
}

impl std::str::FromStr for Rate {
    type Err = RateError;

    /// `N/s`, `N/min` or `N/h` (spaces around the parts allowed).
    fn from_str(s: &str) -> Result<Self, RateError> {
        let (events, unit) = s.split_once('/').ok_or_else(|| RateError::Syntax(s.to_string()))?;
        let (events, unit) = (events.trim(), unit.trim());
        let period = match unit {
            "s" => Duration::from_secs(1),
            "min" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "" => return Err(RateError::Syntax(s.to_string())),
            other => return Err(RateError::Unit(other.to_string())),
        };
        let events = events
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_RATE_EVENTS).contains(n))
            .ok_or_else(|| RateError::Events(s.to_string()))?;
        Ok(Rate { events, period })
    }
}

/// As written: `10/min`.
impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.period.as_secs() {
            1 => "s",
            60 => "min",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.events)
    }
}

impl Rate {
    /// Tokens per second.
    fn per_second(self) -> f64 {
        f64::from(self.events) / self.period.as_secs_f64()
    }
}

/// One route as the config gives it (sinks as spec strings, opened by the plan).
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Its name: the label of its counters (`eventpipe_route_sent_total{route}`).
    pub name: Arc<str>,
    /// Which writes it selects, on the correlated event; `None`: every write.
    pub matcher: Option<EventMatch>,
    /// The event count a write needs to be sent (1: every write).
    pub min_count: i32,
    /// At most this many writes per period; `None`: no limit.
    pub rate: Option<Rate>,
    /// Sink specs, as `--sink` takes them; never empty.
    pub sinks: Vec<String>,
}

impl Route {
    /// Whether the route's `match` selects `event` (every event without one).
    pub fn matches(&self, event: &Event) -> bool {
        self.matcher.as_ref().is_none_or(|m| m.matches(event, event.ingest_headers.get()))
    }

    /// What the route selects, in one line as `config show` prints it (its sinks apart):
    /// `match = { types = ["Warning"] }, min_count = 3, rate = "10/min"`.
    pub fn describe(&self) -> String {
        let mut parts = vec![match &self.matcher {
            Some(m) => format!("match = {}", m.spec()),
            None => "match = every event".to_string(),
        }];
        parts.push(format!("min_count = {}", self.min_count));
        if let Some(rate) = self.rate {
            parts.push(format!("rate = \"{rate}\""));
        }
        parts.join(", ")
    }
}

/// Why a route held a write back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// Its event's count is below the route's `min_count`.
    MinCount,
    /// The route's `rate` had no token left.
    Rate,
}

impl HoldReason {
    /// The label value of `eventpipe_route_held_back_total{reason}`: `min_count` or `rate`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::MinCount => "min_count",
            HoldReason::Rate => "rate",
        }
    }
}

/// What a route does with one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The route's `match` does not select the event.
    Unmatched,
    /// Selected, but held back.
    HeldBack(HoldReason),
    /// Sent to the route's sinks.
    Send {
        /// Writes the route's `rate` held back since it last sent one (0: none).
        held_back: u64,
    },
}

/// A route's state: its token bucket and the writes its `rate` held back since it last sent
/// one. One per route, shared by every tenant and partition the route serves.
#[derive(Debug, Clone, Default)]
pub struct RouteGate {
    /// Tokens spent (0: full), as of `last`.
    spent: f64,
    /// When `spent` was last brought up to date; `None` before the first write.
    last: Option<Time>,
    /// Writes held back by the rate since the last one sent.
    held: u64,
}

impl RouteGate {
    /// Decides `event`'s write for `route` at `now` (the correlator's clock; an instant earlier
    /// than the last one refills nothing). See the [module docs](self) for the order.
    pub fn admit(&mut self, route: &Route, event: &Event, now: Time) -> Admission {
        if !route.matches(event) {
            return Admission::Unmatched;
        }
        if event.count < route.min_count {
            return Admission::HeldBack(HoldReason::MinCount);
        }
        if let Some(rate) = route.rate {
            if let Some(last) = self.last {
                let elapsed = (now - last).to_std().unwrap_or_default().as_secs_f64();
                self.spent = (self.spent - elapsed * rate.per_second()).max(0.0);
            }
            if self.last.is_none_or(|last| now > last) {
                self.last = Some(now);
            }
            if self.spent + 1.0 > f64::from(rate.events) {
                self.held += 1;
                return Admission::HeldBack(HoldReason::Rate);
            }
            self.spent += 1.0;
        }
        Admission::Send { held_back: std::mem::take(&mut self.held) }
    }

    /// Writes held back by the rate since the last one sent (they ride on the next).
    pub fn held(&self) -> u64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::MatchSpec;

    fn at(seconds: i64) -> Time {
        chrono::DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap()
    }

    fn event(type_: &str, count: i32) -> Event {
        let mut e = Event::default();
        (e.type_, e.count) = (type_.into(), count);
        e
    }

    fn route(min_count: i32, rate: Option<&str>) -> Route {
        Route {
            name: "r".into(),
            matcher: Some(
                EventMatch::new(MatchSpec { types: Some(vec!["Warning".into()]), ..MatchSpec::default() }).unwrap(),
            ),
            min_count,
            rate: rate.map(|r| r.parse().unwrap()),
            sinks: vec!["jsonl:-".into()],
        }
    }

    #[test]
    fn rates_parse_and_print_as_written() {
        for (text, events, seconds) in [("10/min", 10, 60), ("5/s", 5, 1), ("1/h", 1, 3600), (" 2 / min ", 2, 60)] {
            let rate: Rate = text.parse().unwrap();
            assert_eq!((rate.events, rate.period.as_secs()), (events, seconds), "{text}");
            assert_eq!(rate.to_string().parse::<Rate>().unwrap(), rate);
        }
        assert_eq!("10/min".parse::<Rate>().unwrap().to_string(), "10/min");
        assert!(matches!("10".parse::<Rate>(), Err(RateError::Syntax(_))));
        assert!(matches!("10/".parse::<Rate>(), Err(RateError::Syntax(_))));
        assert!(matches!("10/day".parse::<Rate>(), Err(RateError::Unit(u)) if u == "day"));
        for bad in ["0/s", "-1/s", "1.5/s", "x/min", "1000001/s"] {
            assert!(matches!(bad.parse::<Rate>(), Err(RateError::Events(_))), "{bad}");
        }
    }

    /// `min_count`: a write is sent exactly when its event's count reached N, whatever came
    /// before; unmatched events are not the route's at all.
    #[test]
    fn min_count_sends_exactly_the_writes_whose_count_reached_it() {
        let route = route(3, None);
        let mut gate = RouteGate::default();
        let decisions: Vec<Admission> =
            (1..=5).map(|count| gate.admit(&route, &event("Warning", count), at(0))).collect();
        assert_eq!(
            decisions,
            [
                Admission::HeldBack(HoldReason::MinCount),
                Admission::HeldBack(HoldReason::MinCount),
                Admission::Send { held_back: 0 },
                Admission::Send { held_back: 0 },
                Admission::Send { held_back: 0 },
            ]
        );
        assert_eq!(gate.admit(&route, &event("Normal", 9), at(0)), Admission::Unmatched);
        let every = Route { matcher: None, min_count: 1, ..route };
        assert_eq!(gate.admit(&every, &event("Normal", 1), at(0)), Admission::Send { held_back: 0 });
    }

    /// `rate`: N at once, then one per period / N; what was held back rides on the next write
    /// sent, and a write below `min_count` takes no token.
    #[test]
    fn rate_holds_back_and_the_next_write_carries_the_count() {
        let route = route(2, Some("2/min"));
        let mut gate = RouteGate::default();
        let send = |gate: &mut RouteGate, count, t| gate.admit(&route, &event("Warning", count), at(t));
        assert_eq!(send(&mut gate, 1, 0), Admission::HeldBack(HoldReason::MinCount));
        assert_eq!(send(&mut gate, 2, 0), Admission::Send { held_back: 0 });
        assert_eq!(send(&mut gate, 3, 1), Admission::Send { held_back: 0 });
        for t in 2..5 {
            assert_eq!(send(&mut gate, 4, t), Admission::HeldBack(HoldReason::Rate));
        }
        assert_eq!(gate.held(), 3);
        assert_eq!(send(&mut gate, 1, 10), Admission::HeldBack(HoldReason::MinCount), "takes no token");
        assert_eq!(gate.held(), 3, "min_count holds are not summarised");
        // 2/min: one token back 30 s after the bucket emptied (at 1 s).
        assert_eq!(send(&mut gate, 5, 20), Admission::HeldBack(HoldReason::Rate));
        assert_eq!(send(&mut gate, 6, 31), Admission::Send { held_back: 4 });
        assert_eq!(gate.held(), 0);
        assert_eq!(send(&mut gate, 7, 32), Admission::HeldBack(HoldReason::Rate));
        // A clock that went back refills nothing and keeps the later instant.
        assert_eq!(send(&mut gate, 7, 0), Admission::HeldBack(HoldReason::Rate));
        assert_eq!(send(&mut gate, 8, 62), Admission::Send { held_back: 2 });
    }
}
