//! Event matching: which tenant's rules apply to an event, which events a drop / keep /
//! spam-exemption rule ([`crate::tenant::rules`]) is about, and which correlated writes a route
//! ([`crate::tenant::routes`]) sends to its sinks.
//!
//! A tenant's `[tenants.match]` table, and each rule (see [`crate::config`]), becomes an
//! [`EventMatch`]: every
//! criterion given must hold (AND), and a list criterion holds when any of its entries matches
//! (OR). Patterns are globs (`*`, `?`, `[a-z]`, `{a,b}`, `\` escapes; `*` also matches `/`),
//! compiled once; [`EventMatch::matches`] allocates nothing. [`TenantRouter`] picks the first
//! matching tenant in file order, or `None` for the `[defaults]` rules.
//!
//! What each criterion reads from an event:
//!
//! | criterion           | field (fallback when empty)                                  | match            |
//! |---------------------|--------------------------------------------------------------|------------------|
//! | `namespaces`        | `metadata.namespace` (`involvedObject.namespace`)            | glob, any entry  |
//! | `kinds`             | `involvedObject.kind`                                        | exact, any entry |
//! | `reasons`           | `reason`                                                     | glob, any entry  |
//! | `types`             | `type` (`Normal`, `Warning`)                                 | exact, any entry |
//! | `message`           | `message`                                                    | regex (`regex` crate syntax, unanchored: `^…$` for the whole message) |
//! | `labels`            | `metadata.labels` (the Event's own, not its object's)        | value glob, all  |
//! | `source_components` | `source.component` (`reportingComponent`)                    | glob, any entry  |
//! | `source_hosts`      | `source.host` (`reportingInstance`)                          | glob, any entry  |
//! | `headers`           | HTTP ingest request headers (names case-insensitive)         | value glob, all  |
//!
//! An event that arrived without headers never matches a tenant that requires headers.

pub mod routes;
pub mod rules;

use std::collections::BTreeMap;

use globset::{Candidate, Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use crate::event::Event;

/// The name of the tenant whose rules are the config's `[defaults]` (or the command line's):
/// it gets every event no tenant matches, and labels the plugin calls made outside any tenant.
pub const DEFAULT_TENANT: &str = "default";

/// The criteria of one tenant as written in the configuration (patterns not yet compiled).
///
/// `None` means "criterion not given"; a given criterion must not be empty. Keys of `labels` are
/// exact label names; keys of `headers` are header names, compared case-insensitively. Values of
/// both, and the entries of `namespaces`, `source_components` and `source_hosts`, are globs;
/// `kinds` entries are exact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MatchSpec {
    /// Globs on the event's namespace; any may match.
    pub namespaces: Option<Vec<String>>,
    /// Exact `involvedObject.kind` values; any may match.
    pub kinds: Option<Vec<String>>,
    /// Globs on `reason`; any may match.
    pub reasons: Option<Vec<String>>,
    /// Exact `type` values (`Normal`, `Warning`); any may match.
    pub types: Option<Vec<String>>,
    /// A regular expression searched for in `message` (unanchored).
    pub message: Option<String>,
    /// Label name → value glob on the Event's `metadata.labels`; all must match.
    pub labels: Option<BTreeMap<String, String>>,
    /// Globs on the reporting component; any may match.
    pub source_components: Option<Vec<String>>,
    /// Globs on the reporting host; any may match.
    pub source_hosts: Option<Vec<String>>,
    /// Header name → value glob on the ingest request's headers; all must match.
    pub headers: Option<BTreeMap<String, String>>,
    /// Label name → value glob on the involved object's labels as enrichment attached them
    /// ([`crate::event::enrichment`]: the keys `[enrich] labels` selects); all must match. An
    /// event without enrichment matches none.
    pub object_labels: Option<BTreeMap<String, String>>,
    /// Exact kinds of the top owner enrichment attached (`Deployment`, `CronJob`); any may match.
    pub owner_kinds: Option<Vec<String>>,
    /// Globs on the name of the top owner enrichment attached; any may match.
    pub owner_names: Option<Vec<String>>,
}

/// The criteria as a TOML inline table, as a config writes them:
/// `{ namespaces = ["kube-*"], types = ["Warning"] }` (`config show`).
impl std::fmt::Display for MatchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let quoted = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let list = |l: &[String]| format!("[{}]", l.iter().map(|s| quoted(s)).collect::<Vec<_>>().join(", "));
        let table = |t: &BTreeMap<String, String>| {
            let entries: Vec<String> = t.iter().map(|(k, v)| format!("{} = {}", quoted(k), quoted(v))).collect();
            format!("{{ {} }}", entries.join(", "))
        };
        let mut parts = Vec::new();
        let lists = [
            ("namespaces", &self.namespaces),
            ("kinds", &self.kinds),
            ("reasons", &self.reasons),
            ("types", &self.types),
            ("source_components", &self.source_components),
            ("source_hosts", &self.source_hosts),
            ("owner_kinds", &self.owner_kinds),
            ("owner_names", &self.owner_names),
        ];
        for (key, value) in lists {
            if let Some(value) = value {
                parts.push(format!("{key} = {}", list(value)));
            }
        }
        if let Some(message) = &self.message {
            parts.push(format!("message = {}", quoted(message)));
        }
        for (key, value) in
            [("labels", &self.labels), ("headers", &self.headers), ("object_labels", &self.object_labels)]
        {
            if let Some(value) = value {
                parts.push(format!("{key} = {}", table(value)));
            }
        }
        write!(f, "{{ {} }}", parts.join(", "))
    }
}

/// Which entry of a criterion an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchEntry {
    /// The entry at this 0-based index of a list criterion.
    Index(usize),
    /// The entry with this key of a table criterion (`labels`, `headers`).
    Key(String),
}

/// Why a [`MatchSpec`] cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// No criterion was given: the tenant would match nothing.
    #[error("matches nothing; give at least one criterion")]
    NoCriteria,
    /// A criterion was given with no entries.
    #[error("`{criterion}` is empty and would match nothing; give at least one entry or remove it")]
    EmptyCriterion {
        /// The criterion's name (`"namespaces"`, …).
        criterion: &'static str,
    },
    /// The `message` pattern is not a valid regular expression.
    #[error("invalid regular expression {pattern:?}: {reason}")]
    Regex {
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A pattern is not a valid glob.
    #[error("invalid glob {pattern:?}: {reason}")]
    Glob {
        /// The criterion's name (`"namespaces"`, …).
        criterion: &'static str,
        /// The offending entry.
        entry: MatchEntry,
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl MatchError {
    /// The criterion the error is about and the offending entry, when there is one.
    pub fn location(&self) -> Option<(&'static str, Option<&MatchEntry>)> {
        match self {
            MatchError::NoCriteria => None,
            MatchError::EmptyCriterion { criterion } => Some((criterion, None)),
            MatchError::Regex { .. } => Some(("message", None)),
            MatchError::Glob { criterion, entry, .. } => Some((criterion, Some(entry))),
        }
    }
}

/// A tenant's compiled criteria. Cheap to clone; [`EventMatch::matches`] does not allocate.
///
/// Two matchers are equal when their [`MatchSpec`]s are.
#[derive(Debug, Clone)]
pub struct EventMatch {
    spec: MatchSpec,
    namespaces: Option<GlobSet>,
    kinds: Option<Vec<String>>,
    reasons: Option<GlobSet>,
    types: Option<Vec<String>>,
    message: Option<regex::Regex>,
    labels: Vec<(String, GlobMatcher)>,
    source_components: Option<GlobSet>,
    source_hosts: Option<GlobSet>,
    /// Header names lowercased.
    headers: Vec<(String, GlobMatcher)>,
    object_labels: Vec<(String, GlobMatcher)>,
    owner_kinds: Option<Vec<String>>,
    owner_names: Option<GlobSet>,
}

impl PartialEq for EventMatch {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl Eq for EventMatch {}

impl EventMatch {
    /// Compiles `spec`.
    ///
    /// # Errors
    /// [`MatchError::NoCriteria`] when no criterion is given, [`MatchError::EmptyCriterion`] for a
    /// criterion with no entries, [`MatchError::Glob`] for an invalid pattern (the first one).
    pub fn new(spec: MatchSpec) -> Result<Self, MatchError> {
        Self::compile(spec).map_err(|mut problems| problems.swap_remove(0))
    }

    /// As [`new`](Self::new), with every problem of every criterion and entry, in the order of
    /// [`MatchSpec`]'s criteria (what `validate` lists), rather than the first.
    pub fn compile(spec: MatchSpec) -> Result<Self, Vec<MatchError>> {
        let MatchSpec {
            namespaces,
            kinds,
            reasons,
            types,
            message,
            labels,
            source_components,
            source_hosts,
            headers,
            object_labels,
            owner_kinds,
            owner_names,
        } = &spec;
        if namespaces.is_none()
            && kinds.is_none()
            && reasons.is_none()
            && types.is_none()
            && message.is_none()
            && labels.is_none()
            && source_components.is_none()
            && source_hosts.is_none()
            && headers.is_none()
            && object_labels.is_none()
            && owner_kinds.is_none()
            && owner_names.is_none()
        {
            return Err(vec![MatchError::NoCriteria]);
        }
        let mut problems = Vec::new();
        let namespaces = namespaces.as_ref().and_then(|p| kept(glob_set(p, "namespaces"), &mut problems));
        let kinds = kinds.as_ref().and_then(|k| kept(non_empty(k, "kinds").map(<[_]>::to_vec), &mut problems));
        let reasons = reasons.as_ref().and_then(|p| kept(glob_set(p, "reasons"), &mut problems));
        let types = types.as_ref().and_then(|t| kept(non_empty(t, "types").map(<[_]>::to_vec), &mut problems));
        let message = message.as_ref().and_then(|pattern| {
            let regex = regex::Regex::new(pattern)
                .map_err(|e| MatchError::Regex { pattern: pattern.clone(), reason: e.to_string() });
            kept(regex, &mut problems)
        });
        let labels = labels.as_ref().and_then(|m| kept(glob_table(m, "labels", false), &mut problems));
        let source_components =
            source_components.as_ref().and_then(|p| kept(glob_set(p, "source_components"), &mut problems));
        let source_hosts = source_hosts.as_ref().and_then(|p| kept(glob_set(p, "source_hosts"), &mut problems));
        let headers = headers.as_ref().and_then(|m| kept(glob_table(m, "headers", true), &mut problems));
        let object_labels =
            object_labels.as_ref().and_then(|m| kept(glob_table(m, "object_labels", false), &mut problems));
        let owner_kinds =
            owner_kinds.as_ref().and_then(|k| kept(non_empty(k, "owner_kinds").map(<[_]>::to_vec), &mut problems));
        let owner_names = owner_names.as_ref().and_then(|p| kept(glob_set(p, "owner_names"), &mut problems));
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(EventMatch {
            spec,
            namespaces,
            kinds,
            reasons,
            types,
            message,
            labels: labels.unwrap_or_default(),
            source_components,
            source_hosts,
            headers: headers.unwrap_or_default(),
            object_labels: object_labels.unwrap_or_default(),
            owner_kinds,
            owner_names,
        })
    }

    /// The criteria as written.
    pub fn spec(&self) -> &MatchSpec {
        &self.spec
    }

    /// Whether `event` (with the ingest request's `headers`, `None` when it came without any)
    /// satisfies every criterion.
    pub fn matches(&self, event: &Event, headers: Option<&[(String, String)]>) -> bool {
        if let Some(kinds) = &self.kinds
            && !kinds.iter().any(|k| *k == event.involved_object.kind)
        {
            return false;
        }
        if let Some(types) = &self.types
            && !types.iter().any(|t| *t == event.type_)
        {
            return false;
        }
        if let Some(set) = &self.reasons
            && !is_match(set, &event.reason)
        {
            return false;
        }
        if let Some(message) = &self.message
            && !message.is_match(&event.message)
        {
            return false;
        }
        if let Some(set) = &self.namespaces
            && !is_match(set, or_else(&event.metadata.namespace, &event.involved_object.namespace))
        {
            return false;
        }
        if let Some(set) = &self.source_components
            && !is_match(set, or_else(&event.source.component, &event.reporting_component))
        {
            return false;
        }
        if let Some(set) = &self.source_hosts
            && !is_match(set, or_else(&event.source.host, &event.reporting_instance))
        {
            return false;
        }
        let labels = &event.metadata.labels;
        if !self.labels.iter().all(|(name, glob)| labels.get(name).is_some_and(|v| glob.is_match_candidate(&cand(v)))) {
            return false;
        }
        if !self.matches_enrichment(event) {
            return false;
        }
        if self.headers.is_empty() {
            return true;
        }
        let Some(given) = headers else { return false };
        self.headers.iter().all(|(name, glob)| {
            given.iter().any(|(n, v)| n.eq_ignore_ascii_case(name) && glob.is_match_candidate(&cand(v)))
        })
    }
}

impl EventMatch {
    /// The criteria on what enrichment attached: `object_labels`, `owner_kinds`, `owner_names`
    /// (none given: true).
    fn matches_enrichment(&self, event: &Event) -> bool {
        if self.object_labels.is_empty() && self.owner_kinds.is_none() && self.owner_names.is_none() {
            return true;
        }
        let Some(enrichment) = event.enrichment.get() else { return false };
        if !self.object_labels.is_empty() {
            let Some(labels) = &enrichment.labels else { return false };
            if !self.object_labels.iter().all(|(name, glob)| labels.get(name).is_some_and(|v| glob.is_match(v))) {
                return false;
            }
        }
        let owner = enrichment.owner.as_ref();
        if let Some(kinds) = &self.owner_kinds
            && !owner.is_some_and(|o| kinds.contains(&o.kind))
        {
            return false;
        }
        if let Some(names) = &self.owner_names
            && !owner.is_some_and(|o| is_match(names, &o.name))
        {
            return false;
        }
        true
    }
}

/// Picks the tenant of each event: the index of the first tenant (in file order) whose
/// [`EventMatch`] holds, or `None` for the `[defaults]` rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantRouter {
    matchers: Vec<EventMatch>,
}

impl TenantRouter {
    /// A router over the tenants' matchers, in file order (indices are positions in this list).
    pub fn new(matchers: Vec<EventMatch>) -> Self {
        TenantRouter { matchers }
    }

    /// The index into the tenants of the first one matching `event` and `headers`, or `None`
    /// when none does (the defaults apply).
    pub fn route(&self, event: &Event, headers: Option<&[(String, String)]>) -> Option<usize> {
        self.matchers.iter().position(|m| m.matches(event, headers))
    }

    /// Each tenant's matcher, in the order they are tried.
    pub fn matchers(&self) -> &[EventMatch] {
        &self.matchers
    }

    /// Number of tenants.
    pub fn len(&self) -> usize {
        self.matchers.len()
    }

    /// Whether there are no tenants (every event gets the defaults).
    pub fn is_empty(&self) -> bool {
        self.matchers.is_empty()
    }
}

fn or_else<'a>(primary: &'a str, fallback: &'a str) -> &'a str {
    if primary.is_empty() { fallback } else { primary }
}

fn cand(s: &str) -> Candidate<'_> {
    Candidate::from_bytes(s.as_bytes())
}

fn is_match(set: &GlobSet, s: &str) -> bool {
    set.is_match_candidate(&cand(s))
}

fn non_empty<'a, T>(list: &'a [T], criterion: &'static str) -> Result<&'a [T], MatchError> {
    if list.is_empty() { Err(MatchError::EmptyCriterion { criterion }) } else { Ok(list) }
}

/// One pattern, with the same options everywhere: case-sensitive, `*` crosses `/`, `\` escapes.
fn glob(pattern: &str, criterion: &'static str, entry: MatchEntry) -> Result<Glob, MatchError> {
    GlobBuilder::new(pattern).literal_separator(false).backslash_escape(true).build().map_err(|e| MatchError::Glob {
        criterion,
        entry,
        pattern: pattern.to_string(),
        reason: e.kind().to_string(),
    })
}

/// `result`'s value, or `None` with its problems added to `problems`.
fn kept<T>(result: Result<T, impl Into<Vec<MatchError>>>, problems: &mut Vec<MatchError>) -> Option<T> {
    result.map_err(|e| problems.extend(e.into())).ok()
}

impl From<MatchError> for Vec<MatchError> {
    fn from(e: MatchError) -> Self {
        vec![e]
    }
}

/// The patterns as one set; every bad pattern is a problem.
fn glob_set(patterns: &[String], criterion: &'static str) -> Result<GlobSet, Vec<MatchError>> {
    let mut builder = GlobSetBuilder::new();
    let mut problems = Vec::new();
    for (i, p) in non_empty(patterns, criterion)?.iter().enumerate() {
        match glob(p, criterion, MatchEntry::Index(i)) {
            Ok(glob) => {
                builder.add(glob);
            }
            Err(e) => problems.push(e),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    builder.build().map_err(|e| {
        vec![MatchError::Glob {
            criterion,
            entry: MatchEntry::Index(0),
            pattern: e.glob().unwrap_or_default().to_string(),
            reason: e.kind().to_string(),
        }]
    })
}

/// Key → value glob; every bad pattern is a problem.
fn glob_table(
    table: &BTreeMap<String, String>,
    criterion: &'static str,
    lowercase_keys: bool,
) -> Result<Vec<(String, GlobMatcher)>, Vec<MatchError>> {
    if table.is_empty() {
        return Err(vec![MatchError::EmptyCriterion { criterion }]);
    }
    let mut problems = Vec::new();
    let matchers = table
        .iter()
        .filter_map(|(key, pattern)| {
            let matcher = kept(glob(pattern, criterion, MatchEntry::Key(key.clone())), &mut problems)?;
            Some((if lowercase_keys { key.to_ascii_lowercase() } else { key.clone() }, matcher.compile_matcher()))
        })
        .collect();
    if problems.is_empty() { Ok(matchers) } else { Err(problems) }
}

#[cfg(test)]
mod tests {

    /// A match prints as the config's inline table would write it, criteria in one order.
    #[test]
    fn a_match_prints_as_a_toml_inline_table() {
        let spec = MatchSpec {
            namespaces: list(&["kube-*", "a\"b"]),
            message: Some("OOM|evict".into()),
            labels: table(&[("team", "pay*")]),
            ..Default::default()
        };
        assert_eq!(
            spec.to_string(),
            r#"{ namespaces = ["kube-*", "a\"b"], message = "OOM|evict", labels = { "team" = "pay*" } }"#
        );
    }

    use super::*;

    fn list(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| s.to_string()).collect())
    }

    fn table(items: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn event(namespace: &str, kind: &str) -> Event {
        let mut e = Event::default();
        e.metadata.namespace = namespace.into();
        e.involved_object.kind = kind.into();
        e.involved_object.namespace = namespace.into();
        e
    }

    #[test]
    fn reasons_types_and_message() {
        let m = matcher(MatchSpec {
            reasons: list(&["Pull*", "Created"]),
            types: list(&["Normal"]),
            message: Some(r"image \S+ (already|successfully)".into()),
            ..Default::default()
        });
        let mut e = event("ns", "Pod");
        (e.reason, e.type_, e.message) =
            ("Pulled".into(), "Normal".into(), "Container image nginx already present".into());
        assert!(m.matches(&e, None));
        e.type_ = "Warning".into();
        assert!(!m.matches(&e, None), "types is exact");
        e.type_ = "Normal".into();
        e.reason = "BackOff".into();
        assert!(!m.matches(&e, None), "reasons are globs");
        e.reason = "Created".into();
        e.message = "created container".into();
        assert!(!m.matches(&e, None), "the message must match the regex");
        let bad = EventMatch::new(MatchSpec { message: Some("(".into()), ..Default::default() }).unwrap_err();
        assert!(matches!(bad, MatchError::Regex { .. }), "{bad}");
        assert_eq!(bad.location(), Some(("message", None)));
    }

    fn matcher(spec: MatchSpec) -> EventMatch {
        EventMatch::new(spec).expect("valid spec")
    }

    fn headers(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn namespace_globs_any_entry() {
        let m = matcher(MatchSpec { namespaces: list(&["payments-*", "billing"]), ..Default::default() });
        assert!(m.matches(&event("payments-eu", "Pod"), None));
        assert!(m.matches(&event("billing", "Pod"), None));
        assert!(!m.matches(&event("billing-2", "Pod"), None));
        assert!(!m.matches(&event("payments", "Pod"), None));
        assert!(!m.matches(&event("", "Pod"), None));
    }

    #[test]
    fn glob_syntax() {
        let m =
            matcher(MatchSpec { namespaces: list(&["team-{a,b}", "ns-?", "x[0-9]", r"lit\*"]), ..Default::default() });
        for ns in ["team-a", "team-b", "ns-1", "x7", "lit*"] {
            assert!(m.matches(&event(ns, ""), None), "{ns}");
        }
        for ns in ["team-c", "ns-12", "xa", "litx", "Team-a"] {
            assert!(!m.matches(&event(ns, ""), None), "{ns}");
        }
        // `*` crosses `/` (header values, hosts).
        let m = matcher(MatchSpec { source_hosts: list(&["a*z"]), ..Default::default() });
        let mut e = Event::default();
        e.source.host = "a/b/z".into();
        assert!(m.matches(&e, None));
    }

    #[test]
    fn namespace_falls_back_to_involved_object() {
        let m = matcher(MatchSpec { namespaces: list(&["payments"]), ..Default::default() });
        let mut e = Event::default();
        e.involved_object.namespace = "payments".into();
        assert!(m.matches(&e, None), "empty metadata.namespace falls back");
        e.metadata.namespace = "other".into();
        assert!(!m.matches(&e, None), "a set metadata.namespace wins");
    }

    #[test]
    fn kinds_are_exact() {
        let m = matcher(MatchSpec { kinds: list(&["Pod", "Deployment"]), ..Default::default() });
        assert!(m.matches(&event("x", "Pod"), None));
        assert!(m.matches(&event("x", "Deployment"), None));
        assert!(!m.matches(&event("x", "pod"), None));
        assert!(!m.matches(&event("x", "Po*"), None));
        let m = matcher(MatchSpec { kinds: list(&["Po*"]), ..Default::default() });
        assert!(!m.matches(&event("x", "Pod"), None), "kinds are not globs");
    }

    #[test]
    fn labels_all_must_match() {
        let m = matcher(MatchSpec { labels: table(&[("team", "pay*"), ("tier", "gold")]), ..Default::default() });
        let mut e = event("x", "Pod");
        e.metadata.labels.insert("team".into(), "payments".into());
        assert!(!m.matches(&e, None), "tier missing");
        e.metadata.labels.insert("tier".into(), "gold".into());
        assert!(m.matches(&e, None));
        e.metadata.labels.insert("team".into(), "search".into());
        assert!(!m.matches(&e, None));
    }

    #[test]
    fn sources_fall_back_to_reporting_fields() {
        let m = matcher(MatchSpec {
            source_components: list(&["kubelet"]),
            source_hosts: list(&["node-*"]),
            ..Default::default()
        });
        let mut e =
            Event { reporting_component: "kubelet".into(), reporting_instance: "node-1".into(), ..Default::default() };
        assert!(m.matches(&e, None));
        e.source.component = "scheduler".into();
        assert!(!m.matches(&e, None), "a set source.component wins");
        e.source.component = "kubelet".into();
        e.source.host = "master".into();
        assert!(!m.matches(&e, None), "a set source.host wins");
    }

    #[test]
    fn criteria_are_anded() {
        let m = matcher(MatchSpec {
            namespaces: list(&["payments-*"]),
            kinds: list(&["Pod"]),
            source_components: list(&["kubelet"]),
            ..Default::default()
        });
        let mut e = event("payments-1", "Pod");
        e.source.component = "kubelet".into();
        assert!(m.matches(&e, None));
        assert!(!m.matches(&Event { involved_object: event("", "Node").involved_object, ..e.clone() }, None));
        let mut wrong_ns = e.clone();
        wrong_ns.metadata.namespace = "search".into();
        assert!(!m.matches(&wrong_ns, None));
        let mut wrong_source = e.clone();
        wrong_source.source.component = "kube-proxy".into();
        assert!(!m.matches(&wrong_source, None));
    }

    #[test]
    fn headers_case_insensitive_names_and_missing_headers() {
        let m = matcher(MatchSpec { headers: table(&[("X-EventPipe-Tenant", "pay*")]), ..Default::default() });
        let e = event("x", "Pod");
        assert!(m.matches(&e, Some(&headers(&[("x-eventpipe-tenant", "payments")]))));
        assert!(m.matches(&e, Some(&headers(&[("Host", "a"), ("X-EVENTPIPE-TENANT", "pay")]))));
        assert!(!m.matches(&e, Some(&headers(&[("x-eventpipe-tenant", "Payments")]))), "values are case-sensitive");
        assert!(!m.matches(&e, Some(&headers(&[("x-other", "payments")]))));
        assert!(!m.matches(&e, Some(&[])));
        assert!(!m.matches(&e, None), "no headers never match a tenant requiring headers");
        // A repeated header matches when any of its values does.
        assert!(m.matches(&e, Some(&headers(&[("x-eventpipe-tenant", "a"), ("x-eventpipe-tenant", "pay")]))));
        // A tenant without header criteria ignores headers.
        let m = matcher(MatchSpec { kinds: list(&["Pod"]), ..Default::default() });
        assert!(m.matches(&e, Some(&headers(&[("x", "y")]))));
        assert!(m.matches(&e, None));
    }

    /// `object_labels`, `owner_kinds` and `owner_names` read what enrichment attached; an event
    /// without enrichment matches none of them.
    #[test]
    fn enrichment_criteria_read_the_attached_enrichment() {
        use crate::event::enrichment::{Enriched, Enrichment, Owner};
        let plain = event("payments-1", "Pod");
        let mut e = plain.clone();
        e.enrichment = Enriched::new(std::sync::Arc::new(Enrichment {
            labels: Some([("team".to_string(), "payments".to_string())].into()),
            owner: Some(Owner { kind: "Deployment".into(), name: "checkout".into(), ..Owner::default() }),
            ..Enrichment::default()
        }));
        let m = matcher(MatchSpec { object_labels: table(&[("team", "pay*")]), ..Default::default() });
        assert!(m.matches(&e, None));
        assert!(!m.matches(&plain, None));
        let m = matcher(MatchSpec { object_labels: table(&[("team", "search")]), ..Default::default() });
        assert!(!m.matches(&e, None));
        let m = matcher(MatchSpec {
            owner_kinds: list(&["Deployment"]),
            owner_names: list(&["check*"]),
            ..Default::default()
        });
        assert!(m.matches(&e, None));
        assert!(!m.matches(&plain, None));
        let m = matcher(MatchSpec { owner_kinds: list(&["CronJob"]), ..Default::default() });
        assert!(!m.matches(&e, None));
        assert_eq!(
            EventMatch::new(MatchSpec { owner_kinds: Some(vec![]), ..Default::default() }).unwrap_err(),
            MatchError::EmptyCriterion { criterion: "owner_kinds" }
        );
    }

    #[test]
    fn spec_errors() {
        assert_eq!(EventMatch::new(MatchSpec::default()).unwrap_err(), MatchError::NoCriteria);
        assert_eq!(
            EventMatch::new(MatchSpec { kinds: Some(vec![]), ..Default::default() }).unwrap_err(),
            MatchError::EmptyCriterion { criterion: "kinds" }
        );
        assert_eq!(
            EventMatch::new(MatchSpec { labels: Some(BTreeMap::new()), ..Default::default() }).unwrap_err(),
            MatchError::EmptyCriterion { criterion: "labels" }
        );
        let err = EventMatch::new(MatchSpec { namespaces: list(&["ok", "bad[a"]), ..Default::default() }).unwrap_err();
        assert!(
            matches!(&err, MatchError::Glob { criterion: "namespaces", entry: MatchEntry::Index(1), pattern, .. } if pattern == "bad[a"),
            "{err:?}"
        );
        let err = EventMatch::new(MatchSpec { headers: table(&[("X-A", "{a")]), ..Default::default() }).unwrap_err();
        assert_eq!(err.location(), Some(("headers", Some(&MatchEntry::Key("X-A".into())))));
    }

    #[test]
    fn router_first_match_wins() {
        let tenants = [
            matcher(MatchSpec { kinds: list(&["Pod"]), ..Default::default() }),
            matcher(MatchSpec { namespaces: list(&["payments-*"]), ..Default::default() }),
            matcher(MatchSpec { namespaces: list(&["payments-*"]), ..Default::default() }),
        ];
        let router = TenantRouter::new(tenants.to_vec());
        assert_eq!(router.len(), 3);
        assert_eq!(router.route(&event("payments-1", "Pod"), None), Some(0));
        assert_eq!(router.route(&event("payments-1", "Deployment"), None), Some(1));
        assert_eq!(router.route(&event("search", "Deployment"), None), None);
        assert_eq!(TenantRouter::new(Vec::new()).route(&event("payments-1", "Pod"), None), None);
    }

    #[test]
    fn equality_follows_the_spec() {
        let spec = MatchSpec { namespaces: list(&["a*"]), ..Default::default() };
        assert_eq!(matcher(spec.clone()), matcher(spec.clone()));
        assert_ne!(matcher(spec), matcher(MatchSpec { namespaces: list(&["b*"]), ..Default::default() }));
    }
}
