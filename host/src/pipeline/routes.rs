//! Routes in the tenant pipeline ([`crate::tenant::routes`]): after a tenant's EventCorrelator
//! decided a write, each route of the tenant (the top-level `[[routes]]`, then the tenant's
//! own) decides whether its sinks get the write too. The tenant's own sinks and correlator are
//! untouched: a route's writes do not update the correlator's state, and count per sink and
//! per route, not in the tenant's write counts.
//!
//! Each route's gate (`min_count`, the `rate` bucket, what the bucket held back) is one for the
//! whole run: shared by every tenant and partition it serves, and kept across a config reload
//! that leaves the route unchanged ([`PlannedRoute::keep_state_of`]).

use std::sync::{Arc, Mutex};

use crate::config::RouteConfig;
use crate::correlator::EventCorrelateResult;
use crate::event::{Event, Time};
use crate::tenant::routes::{Admission, HELD_BACK_ANNOTATION, HoldReason, Route, RouteGate};

/// One route of a plan: what it selects, where it is written, and its gate.
#[derive(Debug)]
pub struct PlannedRoute {
    /// The route.
    pub route: Route,
    /// Its key path in the config (`routes[0]`, `tenants[1].rules.routes[0]`).
    pub key: String,
    /// Where it is written: `FILE:LINE` of its table.
    pub at: String,
    gate: Arc<Mutex<RouteGate>>,
}

impl PlannedRoute {
    /// A route of the config file `file`, with a fresh gate (a full bucket, nothing held back).
    pub fn new(config: &RouteConfig, file: &str) -> Self {
        Self {
            route: config.route.clone(),
            key: config.key.clone(),
            at: format!("{file}:{}", config.line),
            gate: Arc::default(),
        }
    }

    /// Decides `event`'s write at `now` ([`RouteGate::admit`]).
    pub fn admit(&self, event: &Event, now: Time) -> Admission {
        self.gate.lock().unwrap_or_else(|p| p.into_inner()).admit(&self.route, event, now)
    }

    /// Takes over `previous`'s gate (its bucket and the writes it held back) when it is the
    /// same route (name, match, `min_count`, `rate` and sinks); else keeps a fresh one.
    pub fn keep_state_of(&mut self, previous: &PlannedRoute) {
        if previous.route == self.route {
            self.gate = previous.gate.clone();
        }
    }
}

/// What one route did, in total over the tenants it serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouteStats {
    /// Writes sent to the route's sinks (once per write, however many sinks).
    pub sent: u64,
    /// Writes held back because their event's count was below `min_count`.
    pub held_back_min_count: u64,
    /// Writes held back by the route's `rate`.
    pub held_back_rate: u64,
}

impl RouteStats {
    /// Counts one decision (an unmatched write counts nowhere).
    pub fn count(&mut self, admission: Admission) {
        match admission {
            Admission::Unmatched => {}
            Admission::HeldBack(HoldReason::MinCount) => self.held_back_min_count += 1,
            Admission::HeldBack(HoldReason::Rate) => self.held_back_rate += 1,
            Admission::Send { .. } => self.sent += 1,
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &RouteStats) {
        self.sent += other.sent;
        self.held_back_min_count += other.held_back_min_count;
        self.held_back_rate += other.held_back_rate;
    }
}

/// `result` as a route sends it: as it is, or, when the route's rate held `held_back` writes
/// back since it last sent one, with the event annotated `eventpipe.io/held-back: "N"`
/// ([`HELD_BACK_ANNOTATION`]; a `patch` carries it in its event, not in the patch itself).
pub fn routed(result: &EventCorrelateResult, held_back: u64) -> EventCorrelateResult {
    let mut result = result.clone();
    if held_back > 0
        && let Some(event) = &mut result.event
    {
        event.metadata.annotations.insert(HELD_BACK_ANNOTATION.to_string(), held_back.to_string());
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_after_held_back_ones_carries_their_number() {
        let result = EventCorrelateResult { skip: false, event: Some(Box::default()), patch: None };
        let plain = routed(&result, 0);
        assert!(plain.event.as_ref().unwrap().metadata.annotations.is_empty());
        let summarised = routed(&result, 7);
        let annotations = &summarised.event.as_ref().unwrap().metadata.annotations;
        assert_eq!(annotations.get(HELD_BACK_ANNOTATION).map(String::as_str), Some("7"));
        assert!(result.event.as_ref().unwrap().metadata.annotations.is_empty(), "the tenant's copy is untouched");
    }

    /// `/metrics` shows each route's writes sent and held back, by reason.
    #[test]
    fn routes_are_on_metrics() {
        use crate::metrics::{ROUTE_HELD_BACK, ROUTE_SENT, Snapshot};
        let mut stats = crate::pipeline::router::RouterStats::default();
        stats.routes.insert("slack".into(), RouteStats { sent: 4, held_back_min_count: 2, held_back_rate: 3 });
        let mut snapshot = Snapshot::default();
        snapshot.add_router(&stats);
        assert_eq!(snapshot.get(&ROUTE_SENT, &[("route", "slack")]), Some(4));
        assert_eq!(snapshot.get(&ROUTE_HELD_BACK, &[("route", "slack"), ("reason", "min_count")]), Some(2));
        assert_eq!(snapshot.get(&ROUTE_HELD_BACK, &[("route", "slack"), ("reason", "rate")]), Some(3));
    }

    #[test]
    fn stats_count_each_decision() {
        let mut stats = RouteStats::default();
        for a in [
            Admission::Unmatched,
            Admission::HeldBack(HoldReason::MinCount),
            Admission::HeldBack(HoldReason::Rate),
            Admission::Send { held_back: 1 },
        ] {
            stats.count(a);
        }
        assert_eq!(stats, RouteStats { sent: 1, held_back_min_count: 1, held_back_rate: 1 });
    }
}
