//! Declarative event rules: what a tenant drops, keeps and exempts from the spam filter without a
//! plugin build, evaluated natively (no Wasm call) before the tenant's filter plugins.
//!
//! In the config, `drop`, `keep` and `spam_exempt` are lists of matchers with the criteria of a
//! tenant's `match` ([`crate::tenant::EventMatch`]: namespaces, kinds, reasons, types, a message
//! regex, labels, source components and hosts, headers), each optionally named:
//!
//! ```toml
//! [defaults]
//! drop = [{ name = "pulls", namespaces = ["kube-system"], reasons = ["Pulled", "Created"] }]
//! keep = [{ types = ["Warning"] }, { reasons = ["Killing"] }]
//! spam_exempt = [{ reasons = ["NodeReady", "Started"] }]
//! ```
//!
//! - An event is **dropped** when it matches a `drop` rule, or when `keep` rules are given and it
//!   matches none of them. A drop is counted under the first `drop` rule it matched, else under
//!   [`NOT_KEPT`].
//! - An event matching a `spam_exempt` rule is never skipped by the spam filter (and takes no
//!   token from its bucket); it still counts for aggregation and the EventLogger's count.
//!
//! A rule without a `name` is called by its place: `drop[0]`, `spam_exempt[1]`.

use std::sync::{Arc, LazyLock};

use crate::event::Event;
use crate::tenant::EventMatch;

/// The rule name a drop is counted under when `keep` rules are given and none matched.
pub const NOT_KEPT: &str = "keep:no-match";

static NOT_KEPT_NAME: LazyLock<Arc<str>> = LazyLock::new(|| NOT_KEPT.into());

/// One named matcher.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRule {
    /// The rule's name (its `name`, else `LIST[INDEX]`): the label of its counters.
    pub name: Arc<str>,
    /// Which events it is about.
    pub matcher: EventMatch,
}

impl EventRule {
    fn matches(&self, event: &Event) -> bool {
        self.matcher.matches(event, event.ingest_headers.get())
    }
}

/// A tenant's declarative rules; the default has none (every event kept, none exempt).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventRules {
    /// Events matching any of these are dropped.
    pub drop: Vec<EventRule>,
    /// When given, events matching none of these are dropped.
    pub keep: Option<Vec<EventRule>>,
    /// Events matching any of these are never skipped by the spam filter.
    pub spam_exempt: Vec<EventRule>,
}

impl EventRules {
    /// Whether there is no rule at all.
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.keep.is_none() && self.spam_exempt.is_empty()
    }

    /// Whether `drop` / `keep` rules may drop anything.
    pub fn filters(&self) -> bool {
        !self.drop.is_empty() || self.keep.is_some()
    }

    /// The rule that drops `event` (the first matching `drop` rule, else [`NOT_KEPT`] when
    /// `keep` rules are given and none matches), or `None` when it is kept.
    pub fn dropped_by(&self, event: &Event) -> Option<Arc<str>> {
        if let Some(rule) = self.drop.iter().find(|r| r.matches(event)) {
            return Some(rule.name.clone());
        }
        match &self.keep {
            Some(keep) if !keep.iter().any(|r| r.matches(event)) => Some(NOT_KEPT_NAME.clone()),
            _ => None,
        }
    }

    /// Whether the spam filter must let `event` through.
    pub fn spam_exempt(&self, event: &Event) -> bool {
        self.spam_exempt.iter().any(|r| r.matches(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::MatchSpec;

    fn rule(name: &str, spec: MatchSpec) -> EventRule {
        EventRule { name: name.into(), matcher: EventMatch::new(spec).unwrap() }
    }

    fn event(namespace: &str, reason: &str, type_: &str) -> Event {
        let mut e = Event::default();
        (e.metadata.namespace, e.reason, e.type_) = (namespace.into(), reason.into(), type_.into());
        e
    }

    fn list(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn drop_rules_then_keep_rules() {
        let rules = EventRules {
            drop: vec![rule(
                "pulls",
                MatchSpec {
                    namespaces: list(&["kube-system"]),
                    reasons: list(&["Pulled", "Created"]),
                    ..MatchSpec::default()
                },
            )],
            keep: Some(vec![rule("keep[0]", MatchSpec { types: list(&["Warning"]), ..MatchSpec::default() })]),
            spam_exempt: Vec::new(),
        };
        assert_eq!(rules.dropped_by(&event("kube-system", "Pulled", "Warning")).as_deref(), Some("pulls"));
        assert_eq!(rules.dropped_by(&event("kube-system", "BackOff", "Warning")), None);
        assert_eq!(rules.dropped_by(&event("default", "Pulled", "Normal")).as_deref(), Some(NOT_KEPT));
        let no_keep = EventRules { keep: None, ..rules.clone() };
        assert_eq!(no_keep.dropped_by(&event("default", "Pulled", "Normal")), None, "no keep rules: kept");
        assert!(EventRules::default().is_empty() && !EventRules::default().filters());
    }

    #[test]
    fn spam_exemptions_match_like_any_rule() {
        let rules = EventRules {
            spam_exempt: vec![rule(
                "spam_exempt[0]",
                MatchSpec { reasons: list(&["NodeReady", "Started"]), ..MatchSpec::default() },
            )],
            ..EventRules::default()
        };
        assert!(rules.spam_exempt(&event("", "NodeReady", "Normal")));
        assert!(!rules.spam_exempt(&event("", "BackOff", "Warning")));
        assert!(!rules.filters(), "an exemption drops nothing");
    }
}
