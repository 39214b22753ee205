//! `fieldSelector` and `labelSelector` of the read API, as the apiserver parses and applies them
//! to core/v1 Events (apimachinery `fields.ParseSelector`, `labels.Parse`; the selectable fields
//! of `pkg/registry/core/event/strategy.go` `ToSelectableFields`).
//!
//! - **Field selectors**: comma-separated terms `FIELD=VALUE`, `FIELD==VALUE` or `FIELD!=VALUE`,
//!   all of which must hold; `\` escapes `,`, `=`, `!` and `\` in a value. The fields are the
//!   apiserver's for events: `metadata.name`, `metadata.namespace`, `involvedObject.kind`,
//!   `involvedObject.namespace`, `involvedObject.name`, `involvedObject.uid`,
//!   `involvedObject.apiVersion`, `involvedObject.resourceVersion`, `involvedObject.fieldPath`,
//!   `reason`, `reportingComponent`, `source` (`source.component`) and `type`. Any other field
//!   is refused ("field label not supported"), as the apiserver refuses it.
//! - **Label selectors** (on the Event's own `metadata.labels`): comma-separated requirements
//!   `KEY`, `!KEY`, `KEY=V`, `KEY==V`, `KEY!=V`, `KEY in (V1,V2)`, `KEY notin (V1,V2)`,
//!   `KEY>N`, `KEY<N`, all of which must hold. `!=` and `notin` also hold when the label is
//!   absent, as in apimachinery. *Differs from the apiserver:* keys and values are not checked
//!   against the label syntax (a selector that could never match simply matches nothing).

use std::collections::BTreeMap;

use crate::event::Event;

/// A selector that cannot be parsed: the apiserver answers it `400 BadRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// One field-selector term: `field = value` (`equal`) or `field != value`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: Field,
    value: String,
    equal: bool,
}

/// The selectable fields of a core/v1 Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
    InvolvedKind,
    InvolvedNamespace,
    InvolvedName,
    InvolvedUid,
    InvolvedApiVersion,
    InvolvedResourceVersion,
    InvolvedFieldPath,
    Reason,
    ReportingComponent,
    Source,
    Type,
}

impl Field {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "metadata.name" => Self::Name,
            "metadata.namespace" => Self::Namespace,
            "involvedObject.kind" => Self::InvolvedKind,
            "involvedObject.namespace" => Self::InvolvedNamespace,
            "involvedObject.name" => Self::InvolvedName,
            "involvedObject.uid" => Self::InvolvedUid,
            "involvedObject.apiVersion" => Self::InvolvedApiVersion,
            "involvedObject.resourceVersion" => Self::InvolvedResourceVersion,
            "involvedObject.fieldPath" => Self::InvolvedFieldPath,
            "reason" => Self::Reason,
            "reportingComponent" => Self::ReportingComponent,
            "source" => Self::Source,
            "type" => Self::Type,
            _ => return None,
        })
    }

    fn of(self, e: &Event) -> &str {
        fn s(v: &impl AsRef<str>) -> &str {
            v.as_ref()
        }
        match self {
            Self::Name => s(&e.metadata.name),
            Self::Namespace => s(&e.metadata.namespace),
            Self::InvolvedKind => s(&e.involved_object.kind),
            Self::InvolvedNamespace => s(&e.involved_object.namespace),
            Self::InvolvedName => s(&e.involved_object.name),
            Self::InvolvedUid => s(&e.involved_object.uid),
            Self::InvolvedApiVersion => s(&e.involved_object.api_version),
            Self::InvolvedResourceVersion => s(&e.involved_object.resource_version),
            Self::InvolvedFieldPath => s(&e.involved_object.field_path),
            Self::Reason => s(&e.reason),
            Self::ReportingComponent => s(&e.reporting_component),
            Self::Source => s(&e.source.component),
            Self::Type => s(&e.type_),
        }
    }
}

/// A parsed `fieldSelector` (see the module docs); the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldTerm>);

impl FieldSelector {
    /// Parses `text` as apimachinery's `fields.ParseSelector` does, keeping only the fields an
    /// Event has.
    ///
    /// # Errors
    /// [`SelectorError`] for a term without an operator, a bad escape, or a field events do not
    /// have (`field label not supported: F`).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for term in split_unescaped(text, ',')? {
            if term.is_empty() {
                continue;
            }
            let (field, value, equal) = split_operator(&term)
                .ok_or_else(|| SelectorError(format!("invalid selector: '{text}'; can't understand '{term}'")))?;
            let field = Field::parse(field.trim())
                .ok_or_else(|| SelectorError(format!("field label not supported: {}", field.trim())))?;
            terms.push(FieldTerm { field, value: unescape(value)?, equal });
        }
        Ok(Self(terms))
    }

    /// Whether every term holds for `event`.
    pub fn matches(&self, event: &Event) -> bool {
        self.0.iter().all(|t| (t.field.of(event) == t.value) == t.equal)
    }

    /// Whether it has no term (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The namespace a `metadata.namespace=NS` term pins the selector to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.0.iter().find(|t| t.field == Field::Namespace && t.equal).map(|t| t.value.as_str())
    }
}

/// Splits on `sep` where it is not escaped with `\`; escapes are kept for [`unescape`].
fn split_unescaped(text: &str, sep: char) -> Result<Vec<String>, SelectorError> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let next = chars.next().ok_or_else(|| SelectorError(format!("invalid selector: '{text}'")))?;
                let last = parts.last_mut().expect("one part at least");
                last.push('\\');
                last.push(next);
            }
            c if c == sep => parts.push(String::new()),
            c => parts.last_mut().expect("one part at least").push(c),
        }
    }
    Ok(parts)
}

/// `(field, value, equal)` of one term: the first unescaped `!=`, `==` or `=`.
fn split_operator(term: &str) -> Option<(&str, &str, bool)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => return Some((&term[..i], &term[i + 2..], false)),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return Some((&term[..i], &term[i + 2..], true)),
            b'=' => return Some((&term[..i], &term[i + 1..], true)),
            _ => i += 1,
        }
    }
    None
}

/// Removes the escapes of a field-selector value (`\,` `\=` `\!` `\\`); any other escape is an
/// error, as in apimachinery's `UnescapeFieldSelectorValue`.
fn unescape(value: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ (',' | '=' | '!' | '\\')) => out.push(e),
                _ => return Err(SelectorError(format!("invalid field selector value: '{value}'"))),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Exists(k) => labels.contains_key(k),
            Self::NotExists(k) => !labels.contains_key(k),
            Self::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Self::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Self::GreaterThan(k, n) => labels.get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Self::LessThan(k, n) => labels.get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        }
    }
}

/// A parsed `labelSelector` (see the module docs); the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `text` as apimachinery's `labels.Parse` does (without validating the syntax of
    /// keys and values).
    ///
    /// # Errors
    /// [`SelectorError`] for a requirement that is not one of the forms, an unclosed set, or a
    /// `>` / `<` bound that is not an integer.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let bad = |why: &str| SelectorError(format!("unable to parse requirement: {why} in '{text}'"));
        let mut requirements = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            // One requirement: up to the next comma that is not inside parentheses.
            let mut depth = 0usize;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth = depth.saturating_sub(1),
                        ',' if depth == 0 => return true,
                        _ => {}
                    }
                    false
                })
                .map_or(rest.len(), |(i, _)| i);
            let req = rest[..end].trim();
            rest = rest.get(end + 1..).unwrap_or("").trim_start();
            if req.is_empty() {
                return Err(bad("empty requirement"));
            }
            requirements.push(Self::requirement(req).ok_or_else(|| bad(&format!("'{req}'")))?);
        }
        Ok(Self(requirements))
    }

    fn requirement(req: &str) -> Option<Requirement> {
        let key_ok = |k: &str| !k.is_empty() && !k.contains(|c: char| c.is_whitespace() || "=!()<>,".contains(c));
        if let Some(key) = req.strip_prefix('!') {
            let key = key.trim();
            return key_ok(key).then(|| Requirement::NotExists(key.into()));
        }
        for (op, f) in [
            ("!=", (|k, v| Requirement::NotIn(k, vec![v])) as fn(String, String) -> Requirement),
            ("==", |k, v| Requirement::In(k, vec![v])),
            ("=", |k, v| Requirement::In(k, vec![v])),
        ] {
            if let Some((k, v)) = req.split_once(op) {
                let (k, v) = (k.trim(), v.trim());
                return (key_ok(k) && !v.contains(|c: char| c.is_whitespace() || "=!(),".contains(c)))
                    .then(|| f(k.into(), v.into()));
            }
        }
        for (op, gt) in [(">", true), ("<", false)] {
            if let Some((k, v)) = req.split_once(op) {
                let (k, n) = (k.trim(), v.trim().parse::<i64>().ok()?);
                return key_ok(k).then(|| {
                    if gt { Requirement::GreaterThan(k.into(), n) } else { Requirement::LessThan(k.into(), n) }
                });
            }
        }
        let mut words = req.splitn(2, char::is_whitespace);
        let key = words.next()?.trim();
        let Some(set) = words.next().map(str::trim) else {
            return key_ok(key).then(|| Requirement::Exists(key.into()));
        };
        let (notin, set) =
            if let Some(s) = set.strip_prefix("notin") { (true, s) } else { (false, set.strip_prefix("in")?) };
        let values = set.trim().strip_prefix('(')?.strip_suffix(')')?;
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
        if !key_ok(key) || values.iter().any(|v| v.contains(char::is_whitespace)) {
            return None;
        }
        Some(if notin { Requirement::NotIn(key.into(), values) } else { Requirement::In(key.into(), values) })
    }

    /// Whether every requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }

    /// Whether it has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What one watcher or list keeps: a namespace (from the path; `None`: all), a field selector
/// and a label selector (the apiserver's `storage.SelectionPredicate`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Predicate {
    /// Only events of this namespace (`/api/v1/namespaces/{ns}/events`).
    pub namespace: Option<String>,
    /// The `fieldSelector`.
    pub fields: FieldSelector,
    /// The `labelSelector`.
    pub labels: LabelSelector,
}

impl Predicate {
    /// Whether `event` is selected.
    pub fn matches(&self, event: &Event) -> bool {
        self.namespace.as_deref().is_none_or(|ns| AsRef::<str>::as_ref(&event.metadata.namespace) == ns)
            && self.fields.matches(event)
            && self.labels.matches(&event.metadata.labels)
    }

    /// Whether it selects every event.
    pub fn is_everything(&self) -> bool {
        self.namespace.is_none() && self.fields.is_empty() && self.labels.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        let mut e = Event::default();
        e.metadata.name = "web-0.1".into();
        e.metadata.namespace = "shop".into();
        e.metadata.labels =
            [("team".to_string(), "pay".to_string()), ("tier".into(), "3".into())].into_iter().collect();
        e.involved_object.kind = "Pod".into();
        e.involved_object.namespace = "shop".into();
        e.reason = "BackOff".into();
        e.type_ = "Warning".into();
        e.source.component = "kubelet".into();
        e
    }

    #[test]
    fn field_selectors_hold_on_the_apiservers_event_fields() {
        let e = event();
        for (text, matches) in [
            ("", true),
            ("involvedObject.kind=Pod", true),
            ("involvedObject.kind==Pod,reason=BackOff", true),
            ("involvedObject.kind=Pod,reason!=BackOff", false),
            ("type=Normal", false),
            ("source=kubelet,involvedObject.namespace=shop", true),
            ("metadata.namespace=shop,metadata.name=web-0.1", true),
            ("reason=Back\\,Off", false),
        ] {
            assert_eq!(FieldSelector::parse(text).unwrap().matches(&e), matches, "{text}");
        }
        let mut odd = event();
        odd.reason = "a,b=c".into();
        assert!(FieldSelector::parse("reason=a\\,b\\=c").unwrap().matches(&odd));
        let err = FieldSelector::parse("spec.nodeName=x").unwrap_err();
        assert_eq!(err.0, "field label not supported: spec.nodeName");
        assert!(FieldSelector::parse("reason").is_err());
        assert_eq!(FieldSelector::parse("metadata.namespace=a").unwrap().namespace(), Some("a"));
    }

    #[test]
    fn label_selectors_follow_apimachinery() {
        let e = event();
        for (text, matches) in [
            ("", true),
            ("team", true),
            ("!team", false),
            ("!owner", true),
            ("team=pay", true),
            ("team==pay,tier=3", true),
            ("team!=pay", false),
            ("owner!=x", true),
            ("team in (pay, ops)", true),
            ("team notin (pay)", false),
            ("owner notin (a,b)", true),
            ("tier>2", true),
            ("tier<3", false),
            ("team in (ops),tier", false),
        ] {
            assert_eq!(LabelSelector::parse(text).unwrap().matches(&e.metadata.labels), matches, "{text}");
        }
        for bad in ["team in pay", "a b c", "tier>x", "=x", "a,,b"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_predicate_combines_namespace_fields_and_labels() {
        let e = event();
        let p = Predicate {
            namespace: Some("shop".into()),
            fields: FieldSelector::parse("type=Warning").unwrap(),
            labels: LabelSelector::parse("team=pay").unwrap(),
        };
        assert!(p.matches(&e));
        assert!(!Predicate { namespace: Some("other".into()), ..p.clone() }.matches(&e));
        assert!(Predicate::default().is_everything() && !p.is_everything());
    }
}
